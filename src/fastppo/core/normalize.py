"""Running statistics for observation normalisation and reward scaling.

Both are single estimates shared by all sub-environments of a vector env (one statistic, not one
per env), kept as tensors so they save with a checkpoint and can be frozen for evaluation.
"""

from __future__ import annotations

import torch
from torch import Tensor


class RunningMeanStd:
    """Mean and variance of a stream of batches, merged with Chan et al.'s parallel formula."""

    def __init__(self, shape: tuple[int, ...] = (), device: torch.device | str = "cpu", epsilon: float = 1e-4):
        # float64: the count grows to millions and float32 merges would drift.
        self.mean = torch.zeros(shape, dtype=torch.float64, device=device)
        self.var = torch.ones(shape, dtype=torch.float64, device=device)
        self.count = torch.tensor(epsilon, dtype=torch.float64, device=device)

    def update(self, batch: Tensor) -> None:
        """Fold a [B, *shape] batch into the statistics."""
        batch = batch.to(torch.float64)
        batch_mean = batch.mean(dim=0)
        batch_var = batch.var(dim=0, unbiased=False)
        batch_count = batch.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta.square() * self.count * batch_count / total
        self.var = m2 / total
        self.count = total

    def normalize(self, x: Tensor, clip: float, epsilon: float = 1e-8) -> Tensor:
        """(x - mean) / sqrt(var + eps), clipped to [-clip, clip], in x's dtype."""
        out = (x - self.mean.to(x.dtype)) / torch.sqrt(self.var.to(x.dtype) + epsilon)
        return out.clamp(-clip, clip)

    def state_dict(self) -> dict[str, Tensor]:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.mean = state["mean"].to(self.mean)
        self.var = state["var"].to(self.var)
        self.count = state["count"].to(self.count)


class RewardScaler:
    """Divides rewards by the running std of the discounted return (Engstrom et al. 2020,
    "Implementation Matters"), as gymnasium's NormalizeReward does, then clips them."""

    def __init__(self, num_envs: int, gamma: float, clip: float, device: torch.device | str = "cpu", epsilon: float = 1e-8):
        self.gamma = gamma
        self.clip = clip
        self.epsilon = epsilon
        self.return_rms = RunningMeanStd((), device)
        self.discounted_return = torch.zeros(num_envs, dtype=torch.float64, device=device)

    def __call__(self, rewards: Tensor, done: Tensor, update: bool = True) -> Tensor:
        """Scale a [N] batch of rewards; ``done`` [N] marks the steps that end an episode."""
        if update:
            self.discounted_return = self.discounted_return * self.gamma + rewards.to(torch.float64)
            self.return_rms.update(self.discounted_return)
            self.discounted_return = self.discounted_return * (~done.bool())
        scaled = rewards / torch.sqrt(self.return_rms.var.to(rewards.dtype) + self.epsilon)
        return scaled.clamp(-self.clip, self.clip)

    def state_dict(self) -> dict[str, Tensor]:
        return {**{f"return_rms.{k}": v for k, v in self.return_rms.state_dict().items()}, "discounted_return": self.discounted_return}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.return_rms.load_state_dict({k.split(".", 1)[1]: v for k, v in state.items() if k.startswith("return_rms.")})
        self.discounted_return = state["discounted_return"].to(self.discounted_return)

"""Running statistics for observation normalisation and reward scaling.

Both are single estimates shared by all sub-environments of a vector env (one statistic, not one
per env), kept as tensors so they save with a checkpoint and can be frozen for evaluation.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


class RunningMeanStd:
    """Mean and variance of a stream of batches, merged with Chan et al.'s parallel formula.

    The rollout updates it every env step, so ``update`` works in place with the count as a
    Python float, and keeps the float32 ``mean`` and ``1/std`` that ``normalize`` needs ready.
    """

    def __init__(
        self,
        shape: tuple[int, ...] = (),
        device: torch.device | str = "cpu",
        epsilon: float = 1e-4,
        norm_epsilon: float = 1e-8,
        groups: int | None = None,
    ):
        """``groups``: one statistic per group of rows (a stack of seeds, fastppo.training.seed_stack): a
        batch's rows are ``groups`` equal blocks, block g feeding statistic g only."""
        self.groups = groups
        full = shape if groups is None else (groups, *shape)
        # float64: the count grows to millions and float32 merges would drift.
        self.mean = torch.zeros(full, dtype=torch.float64, device=device)
        self.var = torch.ones(full, dtype=torch.float64, device=device)
        self.count = (
            float(epsilon)
            if groups is None
            else torch.full((groups,), float(epsilon), dtype=torch.float64, device=device)
        )
        self.norm_epsilon = norm_epsilon
        self._refresh()

    def _refresh(self) -> None:
        self.mean32 = self.mean.float()
        self.inv_std32 = torch.rsqrt(self.var + self.norm_epsilon).float()

    def _extra_columns(self, x: Tensor) -> int:
        """How many trailing columns of ``x`` lie past the statistics (0 for a matching shape):
        rows may end in columns kept raw (the agent-id one-hots of fastppo.envs.layout.ObservationLayout)."""
        return (
            x.shape[-1] - self.mean.shape[-1]
            if self.mean.dim() - (self.groups is not None) == 1 and x.dim() == 2
            else 0
        )

    def update(self, batch: Tensor, mask: Tensor | None = None) -> None:
        """Fold a [B, *shape] batch into the statistics; with a bool ``mask`` [B], only its true
        rows. Columns past ``shape`` (see ``_extra_columns``) are ignored."""
        if self._extra_columns(batch):
            batch = batch[:, : self.mean.shape[-1]]
        if mask is not None and batch.device.type == "cpu" and not isinstance(self.count, Tensor):
            # On the CPU, picking the rows needs no device sync: the float-count path below serves
            # (~2x cheaper than the masked merge, whose tensor count exists to spare a GPU the sync).
            if batch.shape[0] == 1:  # one env: its flag says all (a boolean index costs ~4x more)
                if not mask[0]:
                    return
            else:
                batch = batch[mask]
                if batch.shape[0] == 0:
                    return
            mask = None
        if mask is not None or isinstance(self.count, Tensor):
            self._update_masked(batch, mask)
            return
        n = batch.shape[0]
        total = self.count + n
        # var' = (var*count + batch_var*n + delta^2*count*n/total) / total, term by term in place.
        if n == 1:  # one env (MuJoCo): the row is the mean and its variance 0, so no var_mean (55 -> 48 us a step)
            delta = batch[0].to(torch.float64) - self.mean
            self.var.mul_(self.count / total)
        else:
            batch_var, batch_mean = torch.var_mean(batch.to(torch.float64), dim=0, correction=0)
            delta = batch_mean - self.mean
            self.var.mul_(self.count / total).add_(batch_var, alpha=n / total)
        self.var.add_(delta.square(), alpha=self.count * n / total**2)
        self.mean.add_(delta, alpha=n / total)
        self.count = total
        self._refresh()

    def _update_masked(self, batch: Tensor, mask: Tensor | None) -> None:
        # The same merge with the row count as a 0-dim tensor, so that counting the rows needs no
        # host sync; the count then stays a tensor (the unmasked path above keeps a Python float
        # because the rollout calls it every step and tensor arithmetic on it costs more).
        x = batch.to(torch.float64)
        # A float count (fresh, or loaded from a checkpoint) would make count / total a Tensor's
        # __rdiv__, reciprocal then multiply, a bit off: a resumed run would drift from its one-go twin.
        count = torch.as_tensor(self.count, dtype=torch.float64, device=x.device)
        weights = (
            torch.ones(x.shape[0], dtype=torch.float64, device=x.device) if mask is None else mask.to(torch.float64)
        )
        if self.groups is not None:  # [groups, rows, ...], each group's statistics over its rows
            x, weights = x.unflatten(0, (self.groups, -1)), weights.unflatten(0, (self.groups, -1))
            count = count.reshape(self.groups, *([1] * (x.dim() - 2)))
        axis = 0 if self.groups is None else 1
        weights = weights.reshape(*weights.shape, *([1] * (x.dim() - weights.dim())))
        n = weights.sum(axis) if self.groups is not None else weights.sum()
        batch_mean = (x * weights).sum(axis) / n.clamp(min=1.0)
        batch_var = ((x - batch_mean.unsqueeze(axis)).square() * weights).sum(axis) / n.clamp(min=1.0)
        delta = batch_mean - self.mean
        total = count + n
        self.var.mul_(count / total).add_(batch_var * (n / total)).add_(delta.square() * (count * n / total**2))
        self.mean.add_(delta * (n / total))
        self.count = total if self.groups is None else total.reshape(self.groups)
        self._refresh()

    def by_group(self, x: Tensor, apply: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Tensor:
        """``apply(rows, mean32, inv_std32)`` on ``x``'s rows; grouped statistics broadcast over the
        rows of their block (viewed ``[groups, rows, ...]``, no per-row copy of the statistics)."""
        if self.groups is None:
            return apply(x, self.mean32, self.inv_std32)
        return apply(x.unflatten(0, (self.groups, -1)), self.mean32.unsqueeze(1), self.inv_std32.unsqueeze(1)).flatten(
            0, 1
        )

    def normalize(self, x: Tensor, clip: float) -> Tensor:
        """(x - mean) / sqrt(var + eps), clipped to [-clip, clip], in float32; columns past the
        statistics' shape (see ``_extra_columns``) pass through as they are."""
        extra = self._extra_columns(x)
        if extra:
            return torch.cat([self.normalize(x[:, :-extra], clip), x[:, -extra:].float()], dim=1)
        return self.by_group(x.float(), lambda rows, mean, inv_std: ((rows - mean) * inv_std).clamp(-clip, clip))

    def snapshot(self) -> tuple[Tensor, Tensor, Tensor]:
        """(count, mean, var), copied: a base for ``moments_since``."""
        return (
            torch.as_tensor(self.count, dtype=torch.float64, device=self.mean.device).clone(),
            self.mean.clone(),
            self.var.clone(),
        )

    def moments_since(self, base: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        """What the batches folded in since ``base`` (a ``snapshot``) add up to, recovered from the
        statistics alone: ``[n, sum(x - m0)..., sum((x - m0)^2)...]`` with m0 the base's mean, as one
        float64 vector. Sums of these over processes that all started from ``base`` fold back in
        with ``fold_moments`` (data-parallel ranks: fastppo.training.distributed.SyncedStatistics)."""
        count0, mean0, var0 = base
        count = torch.as_tensor(self.count, dtype=torch.float64, device=self.mean.device)
        shift = self.mean - mean0
        # Shifted by m0, the base's own data add nothing to the first sum and count0 * var0 to the second.
        first = count * shift
        second = count * (self.var + shift.square()) - count0 * var0
        return torch.cat([(count - count0).reshape(1), first.reshape(-1), second.reshape(-1)])

    def fold_moments(self, base: tuple[Tensor, Tensor, Tensor], moments: Tensor) -> None:
        """Become ``base`` merged with data of these ``moments_since`` sums (Chan et al.'s merge)."""
        count0, mean0, var0 = base
        size = mean0.numel()
        n, first, second = moments[0], moments[1 : 1 + size].view_as(mean0), moments[1 + size :].view_as(mean0)
        count = count0 + n
        shift = first / count
        self.mean = mean0 + shift
        self.var = (count0 * var0 + second) / count - shift.square()
        self.count = count if isinstance(self.count, Tensor) else float(count)  # keep update()'s fast path
        self._refresh()

    def keep_groups(self, indices: list[int]) -> None:
        """Keep only the statistics of the groups at ``indices`` (a stack dropping seeds)."""
        assert isinstance(self.count, Tensor), "only grouped statistics (a tensor count per group) keep groups"
        self.mean, self.var, self.count = self.mean[indices], self.var[indices], self.count[indices]
        self.groups = len(indices)
        self._refresh()

    def state_dict(self) -> dict[str, Tensor]:
        return {"mean": self.mean, "var": self.var, "count": torch.as_tensor(self.count, dtype=torch.float64)}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.mean = state["mean"].to(self.mean).clone()
        self.var = state["var"].to(self.var).clone()
        self.count = float(state["count"]) if self.groups is None else state["count"].to(self.mean).clone()
        self._refresh()


class RewardScaler:
    """Divides rewards by the running std of the discounted return (Engstrom et al. 2020,
    "Implementation Matters"), as gymnasium's NormalizeReward does, then clips them."""

    def __init__(
        self,
        num_envs: int,
        gamma: float,
        clip: float,
        device: torch.device | str = "cpu",
        epsilon: float = 1e-8,
        groups: int | None = None,
    ):
        """``groups``: one return statistic per equal block of envs (a stack of seeds)."""
        self.gamma = gamma
        self.clip = clip
        self.return_rms = RunningMeanStd((), device, norm_epsilon=epsilon, groups=groups)
        self.discounted_return = torch.zeros(num_envs, dtype=torch.float64, device=device)

    def __call__(
        self,
        rewards: Tensor,
        done: Tensor,
        update: bool = True,
        valid: Tensor | None = None,
        rows: slice = slice(None),
    ) -> Tensor:
        """Scale a [N] batch of rewards; ``done`` [N] marks the steps that end an episode and
        ``valid`` [N] the real transitions: NEXT_STEP reset rows (false) carry no reward and stay
        out of the return statistics, as they stay out of GAE and the loss. ``rows``: the envs the
        batch is of, when they step in parts (all by default)."""
        if update:
            # A reset row follows a done step, so its discounted return is 0 + 0: only the
            # statistics need the mask.
            returns = self.discounted_return[rows]  # a view: updated in place
            returns.mul_(self.gamma).add_(rewards)
            self.return_rms.update(returns, valid)
            returns.masked_fill_(done, 0.0)
        return self.return_rms.by_group(
            rewards, lambda rows, mean, inv_std: (rows * inv_std).clamp(-self.clip, self.clip)
        )

    def keep_groups(self, indices: list[int]) -> None:
        """Keep only the groups at ``indices`` and their envs' returns (a stack dropping seeds)."""
        self.discounted_return = self.discounted_return.unflatten(0, (self.return_rms.groups, -1))[indices].flatten()
        self.return_rms.keep_groups(indices)

    def state_dict(self) -> dict[str, Tensor]:
        return {
            **{f"return_rms.{k}": v for k, v in self.return_rms.state_dict().items()},
            "discounted_return": self.discounted_return,
        }

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.return_rms.load_state_dict(
            {k.split(".", 1)[1]: v for k, v in state.items() if k.startswith("return_rms.")}
        )
        self.discounted_return = state["discounted_return"].to(self.discounted_return).clone()

"""The PPO update: epochs of shuffled minibatches over one flattened rollout."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from fastppo.config import PPOConfig
from fastppo.core import normalize_advantages, ppo_loss
from fastppo.policies import ActorCritic


@dataclass
class UpdateCoefficients:
    """This iteration's values of the scheduled/adapted coefficients."""

    clip_coef: float
    ent_coef: float
    kl_beta: float


def ppo_update(
    policy: ActorCritic,
    optimizer: torch.optim.Optimizer,
    batch: dict[str, Tensor],
    cfg: PPOConfig,
    minibatch_size: int,
    coefs: UpdateCoefficients,
) -> dict[str, float]:
    """Run ``cfg.update_epochs`` epochs; return the mean of each loss metric over the minibatches
    that ran, plus ``epochs`` (fewer than asked when target_kl stopped early)."""
    batch_size = batch["obs"].shape[0]
    sums: dict[str, Tensor] = {}
    minibatches = 0
    epochs_run = 0
    for _ in range(cfg.update_epochs):
        epochs_run += 1
        perm = torch.randperm(batch_size, device=batch["obs"].device)
        for start in range(0, batch_size, minibatch_size):
            mb = perm[start : start + minibatch_size]
            mask = batch["valid"][mb]
            action_mask = batch["action_masks"][mb] if "action_masks" in batch else None
            newlogprob, entropy, newvalue = policy.evaluate(batch["obs"][mb], batch["actions"][mb], action_mask)
            mb_advantages = batch["advantages"][mb]
            if cfg.norm_adv:
                mb_advantages = normalize_advantages(mb_advantages, mask)
            loss, metrics = ppo_loss(
                newlogprob,
                batch["logprobs"][mb],
                mb_advantages,
                entropy,
                newvalue,
                batch["values"][mb],
                batch["returns"][mb],
                clip_coef=coefs.clip_coef,
                ent_coef=coefs.ent_coef,
                vf_coef=cfg.vf_coef,
                clip_vloss=cfg.clip_vloss,
                mask=mask,
                objective=cfg.objective,
                kl_beta=coefs.kl_beta,
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            metrics["grad_norm"] = nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
            optimizer.step()
            for name, value in metrics.items():
                sums[name] = sums[name] + value if name in sums else value.clone()
            minibatches += 1
        # One host sync per epoch, for the early stop only (CleanRL checks the last minibatch).
        if cfg.target_kl is not None and metrics["approx_kl"].item() > cfg.target_kl:
            break
    means = {name: value.item() / minibatches for name, value in sums.items()}
    means["epochs"] = float(epochs_run)
    return means

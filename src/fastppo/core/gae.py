"""Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438)."""

from __future__ import annotations

import torch
from torch import Tensor


def compute_gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """Advantages and returns over a [T, N] rollout by the backward recursion

        delta_t = r_t + gamma * (1 - terminated_t) * V(s_{t+1}) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   done_t = terminated_t | truncated_t
        R_t     = A_t + V(s_t)

    Termination and truncation are kept apart: a truncated step still bootstraps from the value
    of its real final observation (``next_values[t]``); a terminated one does not. Either ends the
    recursion, so no credit flows across an episode boundary.

    Args:
        rewards, values, terminated, truncated: [T, N]. ``terminated``/``truncated`` are bool or 0/1
            and describe the transition taken at step t.
        next_values: [T, N], V(s_{t+1}) for the observation that step t produced (the final
            observation where the episode ended). With gymnasium's NEXT_STEP autoreset this is just
            ``cat(values[1:], last_value)``: see :func:`shift_values`.
    Returns:
        ``(advantages, returns)``, both [T, N], without gradient.
    """
    with torch.no_grad():
        not_terminated = 1.0 - terminated.to(values.dtype)
        not_done = 1.0 - (terminated.bool() | truncated.bool()).to(values.dtype)
        deltas = rewards + gamma * not_terminated * next_values - values
        discounts = gamma * gae_lambda * not_done
        advantages = torch.empty_like(values)
        # Rows as views taken once, and one fused op per step writing straight into its row:
        # the loop is per-op overhead on small [N] rows, ~4x cheaper than index-then-assign.
        delta_rows, discount_rows, advantage_rows = deltas.unbind(0), discounts.unbind(0), advantages.unbind(0)
        lastgaelam = torch.zeros_like(values[0])
        for t in range(values.shape[0] - 1, -1, -1):
            # A_t = delta_t + discount_t * A_{t+1}
            lastgaelam = torch.addcmul(delta_rows[t], discount_rows[t], lastgaelam, out=advantage_rows[t])
        return advantages, advantages + values


def shift_values(values: Tensor, last_value: Tensor) -> Tensor:
    """V(s_{t+1}) for every t of a [T, N] rollout whose rows are consecutive observations."""
    return torch.cat((values[1:], last_value.unsqueeze(0)), dim=0)

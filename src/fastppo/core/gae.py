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


def compute_decision_gae(
    rewards: Tensor,
    values: Tensor,
    next_values: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    decisions: Tensor,
    gamma: float,
    gae_lambda: float,
    at_turn: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """GAE over each column's own decisions, for turn-based games: a column is one seat of one
    game copy, and ``decisions[t]`` says whether the seat chose an action at step t (its turn);
    at the other steps the opponents move. A decision's transition runs until the seat's next
    decision, so

        r_k     = the rewards of every step from decision k up to (not including) decision k+1,
                  or up to and including the step that ends the episode
        delta_k = r_k + gamma * (1 - terminated_k) * V(next) - V_k
        A_k     = delta_k + gamma * lambda * (1 - done_k) * A_{k+1}

    with V(next) the value at decision k+1, or ``next_values`` at the step that ended the episode
    (a truncation bootstraps from it, a termination does not), or at the rollout's last step. The
    result the opponent's last move brings (a loss, arriving on a step that is not the seat's
    turn) so belongs to the seat's last action, and gamma discounts per decision, not per step
    of the copy. Where every step is a decision this is ``compute_gae``. Non-decision rows get 0.

    A seat bootstraps only from its own value at its own turn: ``at_turn[t]`` says whether the
    observation after step t (the final one where the episode ended) is the column's turn. A
    transition that runs past the rollout's end, or ends in a truncation, where it is not (the
    opponent is to move) has no target here (``open_decisions``): its decision gets 0, and the
    decision before it bootstraps from its value, with no lambda-tail beyond it. (The trainer
    carries a decision left open at the rollout's end into the next rollout, where its next
    turn comes: ``fastppo.training.rollout``.) Without ``at_turn`` every such value is the
    column's own.

    Args: as ``compute_gae``, plus ``decisions`` [T, N] bool and ``at_turn`` [T, N] bool.
    """
    with torch.no_grad():
        advantages = torch.zeros_like(values)
        zeros = torch.zeros_like(values[0])
        ahead_reward = zeros.clone()  # rewards after this step up to the next decision or the end
        ahead_value = next_values[-1].clone()  # what the next decision (or the end) bootstraps from
        ahead_bootstrap = torch.ones_like(zeros)  # 0 once the transition terminated
        ahead_advantage, ahead_continues = zeros.clone(), zeros.clone()
        done = terminated.bool() | truncated.bool()
        unresolved = (
            torch.zeros_like(done) if at_turn is None else open_decisions(decisions, terminated, truncated, at_turn)
        )
        for t in range(values.shape[0] - 1, -1, -1):
            ended = done[t]
            # A step that ends the episode cuts what lies beyond it (the next episode's rows).
            ahead_reward = torch.where(ended, rewards[t], rewards[t] + ahead_reward)
            ahead_value = torch.where(ended, next_values[t], ahead_value)
            ahead_bootstrap = torch.where(ended, 1.0 - terminated[t].to(values.dtype), ahead_bootstrap)
            ahead_continues = torch.where(ended, zeros, ahead_continues)
            decided = decisions[t].bool()
            delta = ahead_reward + gamma * ahead_bootstrap * ahead_value - values[t]
            advantage = delta + gamma * gae_lambda * ahead_continues * ahead_advantage
            has_target = decided & ~unresolved[t]
            advantages[t] = torch.where(has_target, advantage, zeros)
            # Seen from the step before, a decision here is the next decision (an open one: its
            # value alone, as at a rollout's end).
            ahead_advantage = torch.where(decided, torch.where(has_target, advantage, zeros), ahead_advantage)
            ahead_value = torch.where(decided, values[t], ahead_value)
            ahead_reward = torch.where(decided, zeros, ahead_reward)
            ahead_bootstrap = torch.where(decided, torch.ones_like(zeros), ahead_bootstrap)
            ahead_continues = torch.where(decided, torch.ones_like(zeros), ahead_continues)
        return advantages, advantages + values


def open_decisions(decisions: Tensor, terminated: Tensor, truncated: Tensor, at_turn: Tensor) -> Tensor:
    """[T, N] bool: the decisions (``compute_decision_gae``) whose transition has no target in
    this rollout, because it ends where the column is not at its turn (``at_turn`` false): past
    the rollout's end (the column's last decision, with no ending after it, and the rollout
    ends on another seat's turn) or at a truncation on another seat's turn. A termination needs
    no bootstrap: its transition always has its target."""
    with torch.no_grad():
        unresolved = torch.zeros_like(decisions, dtype=torch.bool)
        pending = ~at_turn[-1].bool()  # the transition running ahead ends off the column's turn
        done = terminated.bool() | truncated.bool()
        for t in range(decisions.shape[0] - 1, -1, -1):
            pending = torch.where(done[t], truncated[t].bool() & ~terminated[t].bool() & ~at_turn[t].bool(), pending)
            decided = decisions[t].bool()
            unresolved[t] = decided & pending
            pending = pending & ~decided
        return unresolved

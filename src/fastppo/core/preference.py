"""Losses on preference pairs (a chosen and a rejected completion of the same prompt), as pure
functions of [B] tensors that return ``(loss, metrics)`` like the PPO losses.

- :func:`dpo_loss`: DPO (Rafailov et al. 2023, arXiv:2305.18290) and its conservative (cDPO,
  Mitchell 2023, "A note on DPO with noisy preferences") and IPO (Azar et al. 2023,
  arXiv:2310.12036) variants, on log-probs of the policy and of a frozen reference.
- :func:`bradley_terry_loss`: reward-model training on scalar scores (Bradley & Terry 1952;
  Ouyang et al. 2022, eq. 1).
"""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from torch import Tensor

PreferenceLoss = Literal["sigmoid", "ipo", "cdpo"]


def dpo_loss(
    chosen_logps: Tensor,
    rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float,
    loss: PreferenceLoss = "sigmoid",
    label_smoothing: float = 0.0,
    lengths: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Mean over pairs of a loss on h = (log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l)):

    - ``sigmoid`` (DPO):  -log sigmoid(beta h)
    - ``cdpo``:           -(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h), eps = ``label_smoothing``:
      DPO's loss if each label is flipped with probability eps; its optimum keeps a finite margin.
    - ``ipo``:            (h - 1 / (2 beta))^2: regresses the margin to a fixed target instead of
      pushing it to infinity (Azar et al. eq. 17, beta = tau).

    Inputs are [B] log-probs of whole completions, summed over their tokens. IPO takes h on the
    per-token means instead (as TRL does, so that its fixed target does not depend on the
    lengths): ``lengths``, the (chosen, rejected) token counts, turn the sums into means (without
    them the inputs are taken as means already). The implicit rewards beta (log pi - log ref) and
    their margin are logged on the sums whatever the loss, so they compare across losses; IPO's
    per-token margin is logged apart as ``margin_per_token``."""
    chosen_rewards = beta * (chosen_logps - ref_chosen_logps)
    rejected_rewards = beta * (rejected_logps - ref_rejected_logps)
    margin = chosen_rewards - rejected_rewards  # beta * h
    extra = {}
    if loss == "sigmoid":
        losses = -F.logsigmoid(margin)
    elif loss == "cdpo":
        losses = -(1.0 - label_smoothing) * F.logsigmoid(margin) - label_smoothing * F.logsigmoid(-margin)
    elif loss == "ipo":
        per_token = margin if lengths is None else chosen_rewards / lengths[0] - rejected_rewards / lengths[1]
        losses = (per_token / beta - 1.0 / (2.0 * beta)).square()
        extra["margin_per_token"] = per_token.detach().mean()
    else:
        raise ValueError(f"unknown preference loss {loss!r}: choose sigmoid, ipo or cdpo")
    mean_loss = losses.mean()
    metrics = {
        "loss": mean_loss.detach(),
        "rewards_chosen": chosen_rewards.detach().mean(),
        "rewards_rejected": rejected_rewards.detach().mean(),
        "margin": margin.detach().mean(),
        "accuracy": (margin > 0).float().mean(),
        **extra,
    }
    return mean_loss, metrics


def bradley_terry_loss(chosen_scores: Tensor, rejected_scores: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    """L = -mean log sigmoid(r(y_w) - r(y_l)) over [B] scalar scores: the negative log-likelihood of
    the preferences under the Bradley-Terry model P(y_w > y_l) = sigmoid(r_w - r_l). Accuracy is the
    share of pairs the scores already order correctly."""
    margin = chosen_scores - rejected_scores
    loss = -F.logsigmoid(margin).mean()
    return loss, {"loss": loss.detach(), "accuracy": (margin > 0).float().mean(), "margin": margin.detach().mean()}

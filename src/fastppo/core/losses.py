"""PPO objectives (Schulman et al. 2017, arXiv:1707.06347) as pure functions.

Each takes tensors of any common shape ([B] for gymnasium minibatches, [B, L] for LM tokens) and
an optional validity mask, and returns ``(loss, metrics)``; metrics are detached tensors so that a
trainer can sum them without a host sync per minibatch. With ``dim`` the means run along that axis
only: a stack of seeds (fastppo.training.seed_stack) gets one loss and one metric per seed.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from fastppo.core.kl import kl_estimate
from fastppo.core.masked import LossAggregation, aggregate_loss, masked_mean, masked_var

PolicyObjective = Literal["clip", "kl"]


def policy_loss(
    newlogprob: Tensor,
    oldlogprob: Tensor,
    advantages: Tensor,
    clip_coef: float,
    mask: Tensor | None = None,
    objective: PolicyObjective = "clip",
    kl_beta: float | Tensor = 0.0,
    dim: int | None = None,
    aggregation: LossAggregation = "token",
    max_length: int | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Policy-gradient loss, to be minimised.

    ``objective="clip"``: L = -mean(min(r A, clip(r, 1-eps, 1+eps) A)), r = exp(newlogprob - oldlogprob).
    ``objective="kl"``:   L = -mean(r A) + beta * mean(KL_k3(old || new)), the adaptive-penalty variant.
    ``clip_coef = inf`` gives the unclipped surrogate (and a clip fraction of 0). With ``dim``,
    ``kl_beta`` may be a tensor of one beta per mean taken (a stack's seeds). For [B, L] tokens
    of B sequences, ``aggregation`` picks how the loss's mean weighs them (:func:`aggregate_loss`;
    the metrics stay means over tokens).
    """

    def mean(x: Tensor) -> Tensor:
        return masked_mean(x, mask, dim) if aggregation == "token" else aggregate_loss(x, mask, aggregation, max_length)

    logratio = newlogprob - oldlogprob
    ratio = logratio.exp()
    if objective == "clip":
        clipped_ratio = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
        pg_loss = -mean(torch.min(ratio * advantages, clipped_ratio * advantages))
    elif objective == "kl":
        pg_loss = -mean(ratio * advantages) + kl_beta * mean(kl_estimate(oldlogprob, newlogprob, "k3"))
        with torch.no_grad():
            clipped_ratio = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    else:
        raise ValueError(f"unknown policy objective {objective!r}: choose clip or kl")
    with torch.no_grad():
        approx_kl_per_sample = kl_estimate(oldlogprob, newlogprob.detach(), "k3")
        # |ratio - 1| > clip_coef, read off the clamp (never true for clip_coef = inf).
        clipped = (clipped_ratio != ratio).to(ratio.dtype)
        metrics = {
            "pg_loss": pg_loss.detach(),
            "approx_kl": masked_mean(approx_kl_per_sample, mask, dim),
            "old_approx_kl": masked_mean(-logratio, mask, dim),
            "clipfrac": masked_mean(clipped, mask, dim),
            "ratio_mean": masked_mean(ratio, mask, dim),
            "ratio_std": masked_var(ratio, mask, dim).sqrt(),
        }
    return pg_loss, metrics


def value_loss(
    newvalue: Tensor,
    returns: Tensor,
    oldvalue: Tensor | None = None,
    clip_coef: float | None = None,
    mask: Tensor | None = None,
    dim: int | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """0.5 * MSE to the returns; with ``clip_coef`` the pessimistic max of the plain error and the
    error of the prediction clipped to ``oldvalue +- clip_coef`` (OpenAI baselines' value clipping)."""
    v_loss_unclipped = (newvalue - returns).square()
    if clip_coef is not None and oldvalue is not None:
        v_clipped = oldvalue + torch.clamp(newvalue - oldvalue, -clip_coef, clip_coef)
        v_loss_unclipped = torch.max(v_loss_unclipped, (v_clipped - returns).square())
    v_loss = 0.5 * masked_mean(v_loss_unclipped, mask, dim)
    return v_loss, {"v_loss": v_loss.detach()}


def reference_kl_penalty(
    newlogprob: Tensor,
    ref_logprob: Tensor,
    kl_coef: float,
    mask: Tensor | None = None,
    aggregation: LossAggregation = "token",
    max_length: int | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """KL to a frozen reference as a loss term (GRPO: Shao et al. 2024, arXiv:2402.03300, eq. 3-4; TRL's GRPOTrainer):

        L_KL = kl_coef * mean_t KL_t,   KL_t = pi_ref/pi - log(pi_ref/pi) - 1   (k3 of KL(pi || pi_ref))

    over the sampled tokens, with gradient through ``newlogprob`` only. Kept out of the reward, so
    the advantages (GRPO's group normalisation in particular) see the scores alone. The loss's mean
    is taken as ``aggregation`` says, as the policy loss's (the logged ``ref_kl`` is over tokens).
    """
    if mask is not None:
        # a masked token's log-ratio is 0: exp of a padding token's garbage would make its (discarded) gradient NaN
        ref_logprob = torch.where(mask.bool(), ref_logprob, newlogprob)
    per_token = kl_estimate(newlogprob, ref_logprob, "k3")
    ref_kl = masked_mean(per_token, mask)
    loss = ref_kl if aggregation == "token" else aggregate_loss(per_token, mask, aggregation, max_length)
    return kl_coef * loss, {"ref_kl": ref_kl.detach()}


def ppo_loss(
    newlogprob: Tensor,
    oldlogprob: Tensor,
    advantages: Tensor,
    entropy: Tensor,
    newvalue: Tensor,
    oldvalue: Tensor,
    returns: Tensor,
    *,
    clip_coef: float,
    ent_coef: float,
    vf_coef: float,
    clip_vloss: bool = True,
    mask: Tensor | None = None,
    objective: PolicyObjective = "clip",
    kl_beta: float | Tensor = 0.0,
    dim: int | None = None,
    aggregation: LossAggregation = "token",
    max_length: int | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Total loss L = pg_loss - ent_coef * entropy + vf_coef * v_loss, with all their metrics
    (``aggregation`` applies to pg_loss; entropy and value loss are means over tokens)."""
    pg_loss, metrics = policy_loss(
        newlogprob, oldlogprob, advantages, clip_coef, mask, objective, kl_beta, dim, aggregation, max_length
    )
    v_loss, v_metrics = value_loss(newvalue, returns, oldvalue, clip_coef if clip_vloss else None, mask, dim)
    entropy_mean = masked_mean(entropy, mask, dim)
    loss = pg_loss + vf_coef * v_loss
    if ent_coef != 0.0:  # a zero coefficient keeps entropy's backward out of the graph
        loss = loss - ent_coef * entropy_mean
    metrics.update(v_metrics)
    metrics["entropy"] = entropy_mean.detach()
    metrics["loss"] = loss.detach()
    return loss, metrics

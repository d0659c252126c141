"""KL estimators and KL-coefficient controllers shared by the PPO-KL objective and RLHF.

Estimators follow J. Schulman, "Approximating KL Divergence" (2020): for samples x ~ p and
log_ratio = log q(x) - log p(x), each k is an estimate of KL(p || q):
    k1 = -log_ratio                      unbiased, high variance, can be negative
    k2 = log_ratio**2 / 2                biased (low), low variance, >= 0
    k3 = (exp(log_ratio) - 1) - log_ratio   unbiased, low variance, >= 0
PPO's ``approx_kl`` is k3 with p = the old policy and q = the new one. Where both whole
distributions are at hand (a categorical's log-probabilities of every action), ``categorical_kl``
is the exact KL instead.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

KLEstimator = Literal["k1", "k2", "k3"]


def kl_estimate(logp: Tensor, logq: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """Per-sample estimate of KL(p || q) from log-probabilities of samples drawn from p."""
    log_ratio = logq - logp
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        return torch.expm1(log_ratio) - log_ratio
    raise ValueError(f"unknown KL estimator {estimator!r}: choose k1, k2 or k3")


def categorical_kl(logp: Tensor, logq: Tensor, mask: Tensor | None = None) -> Tensor:
    """Exact KL(p || q) = sum_a p(a) (log p(a) - log q(a)) per row, for categoricals given by their
    normalised log-probabilities ``[..., K]``; ``mask`` (bool, ``[..., K]``) leaves out the actions
    a row may not take (where p is 0, and a masked log-probability may be any number)."""
    terms = logp.exp() * (logp - logq)
    return (terms if mask is None else torch.where(mask, terms, 0.0)).sum(-1)  # where: 0 * a masked inf is nan


def adaptive_kl_beta(beta: float, kl: float, target: float) -> float:
    """PPO paper's penalty rule (Schulman et al. 2017, sec. 4): halve beta when the measured KL
    is below target/1.5, double it above target*1.5, keep it otherwise."""
    if kl < target / 1.5:
        return beta / 2.0
    if kl > target * 1.5:
        return beta * 2.0
    return beta


def proportional_kl_beta(beta: float, kl: float, target: float, n_steps: int, horizon: int) -> float:
    """RLHF's proportional controller (Ziegler et al. 2019, eq. 2): move beta toward the value
    that holds the KL at target, by at most 20% of the error per ``horizon`` samples."""
    error = min(max(kl / target - 1.0, -0.2), 0.2)
    return beta * (1.0 + error * n_steps / horizon)

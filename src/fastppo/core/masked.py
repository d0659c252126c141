"""Means and statistics over the valid entries of a batch.

One mask serves every caller: gymnasium reset rows (NEXT_STEP autoreset), padded recurrent
sequences and the prompt/padding/post-EOS tokens of a language-model rollout.
"""

from __future__ import annotations

from torch import Tensor


def masked_mean(x: Tensor, mask: Tensor | None = None) -> Tensor:
    """Mean of ``x`` over entries where ``mask`` is true (plain mean when ``mask`` is None)."""
    if mask is None:
        return x.mean()
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp_min(1.0)


def masked_var(x: Tensor, mask: Tensor | None = None) -> Tensor:
    """Unbiased variance of ``x`` over the valid entries (like ``Tensor.var``)."""
    if mask is None:
        return x.var()
    m = mask.to(x.dtype)
    n = m.sum()
    mean = (x * m).sum() / n.clamp_min(1.0)
    return (((x - mean) ** 2) * m).sum() / (n - 1.0).clamp_min(1.0)


def normalize_advantages(advantages: Tensor, mask: Tensor | None = None, eps: float = 1e-8) -> Tensor:
    """(A - mean) / (std + eps) over the valid entries: mean 0 and std 1 on them."""
    mean = masked_mean(advantages, mask)
    std = masked_var(advantages, mask).sqrt()
    return (advantages - mean) / (std + eps)


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor | None = None) -> float:
    """1 - Var[R - V] / Var[R]: 1 is a perfect critic, 0 no better than a constant, < 0 worse."""
    var_returns = masked_var(returns, mask)
    if var_returns.item() == 0.0:
        return float("nan")
    return float(1.0 - masked_var(returns - values, mask) / var_returns)

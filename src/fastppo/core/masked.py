"""Means and statistics over the valid entries of a batch.

One mask serves every caller: gymnasium reset rows (NEXT_STEP autoreset), padded recurrent
sequences and the prompt/padding/post-EOS tokens of a language-model rollout. ``dim`` reduces
along one axis instead of over everything: seeds trained as one stack (fastppo.training.seed_stack) keep one
statistic per seed, rows ``[seeds, rows]`` reduced along ``dim=-1``.
"""

from __future__ import annotations

from typing import Literal, overload

import torch
from torch import Tensor

LossAggregation = Literal["token", "sequence", "constant"]


def masked_mean(x: Tensor, mask: Tensor | None = None, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over entries where ``mask`` is true (plain mean when ``mask`` is None), over
    everything or along ``dim``."""
    if mask is None:
        return x.mean(dim)
    # where, not x * mask: an inf in a masked entry (e.g. exp of a padding token's log-ratio)
    # would otherwise turn the mean into NaN.
    mask = mask.bool()
    return torch.where(mask, x, 0.0).sum(dim) / mask.sum(dim).clamp_min(1)


def aggregate_loss(
    x: Tensor, mask: Tensor | None, aggregation: LossAggregation = "token", max_length: int | None = None
) -> Tensor:
    """One loss from per-token losses ``x`` [B, L] of B sequences (valid where ``mask``; every token
    when ``mask`` is None, as in ``masked_mean``):

    - ``token``: mean over every valid token of the batch, so a sequence weighs by its length
      (TRL's GRPO "bnpo"/"dapo"; DAPO, Yu et al. 2025);
    - ``sequence``: mean over sequences of each one's mean over its tokens, so every sequence weighs
      the same and a token of a long one less (DeepSeekMath's GRPO objective, Shao et al. 2024, eq. 3);
    - ``constant``: sum over valid tokens / (B * ``max_length``), a normaliser that depends on
      neither the lengths nor the batch's content (Dr. GRPO, Liu et al. 2025).
    """
    if aggregation == "token":
        return masked_mean(x, mask)
    if aggregation == "sequence":
        return masked_mean(x, mask, dim=-1).mean()
    if aggregation == "constant":
        if max_length is None:
            raise ValueError("constant loss aggregation needs max_length, the longest a sequence may be")
        valid = x if mask is None else torch.where(mask.bool(), x, 0.0)
        return valid.sum() / (x.shape[0] * max_length)
    raise ValueError(f"unknown loss aggregation {aggregation!r}: choose token, sequence or constant")


def masked_var(x: Tensor, mask: Tensor | None = None, dim: int | None = None) -> Tensor:
    """Unbiased variance of ``x`` over the valid entries (like ``Tensor.var``), over everything or along ``dim``."""
    if mask is None:
        return x.var(dim)
    mask = mask.bool()
    mean = masked_mean(x, mask, dim)
    mean = mean if dim is None else mean.unsqueeze(dim)
    return torch.where(mask, (x - mean) ** 2, 0.0).sum(dim) / (mask.sum(dim) - 1).clamp_min(1)


def normalize_advantages(
    advantages: Tensor,
    mask: Tensor | None = None,
    eps: float = 1e-8,
    moments: Tensor | None = None,
    dim: int | None = None,
) -> Tensor:
    """(A - mean) / (std + eps) over the valid entries: mean 0 and std 1 on them (along ``dim``:
    on each slice).

    ``moments``, the (count, sum, sum of squares) of entries not all held here (each rank of a
    data-parallel run holds part of the minibatch), gives the mean and std instead (``mean_std``).
    """
    if moments is not None:
        mean, std = (value.to(advantages.dtype) for value in mean_std(moments))
    elif dim is not None:
        mean, std = (
            masked_mean(advantages, mask, dim).unsqueeze(dim),
            masked_var(advantages, mask, dim).sqrt().unsqueeze(dim),
        )
    elif mask is None:
        if advantages.numel() < 2:  # one advantage has no spread to scale by (its std is NaN): centred, 0
            return advantages - advantages
        std, mean = torch.std_mean(advantages)  # one op for both on the common unmasked path
    else:
        mean, std = masked_mean(advantages, mask), masked_var(advantages, mask).sqrt()
    return (advantages - mean) / (std + eps)


def mean_std(moments: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and unbiased std (as ``Tensor.std``) from the (count, sum, sum of squares) of some
    values, which sum over the parts of a split batch (float64 keeps the squares from cancelling)."""
    count, total, squares = moments.double()
    mean = total / count.clamp_min(1)
    return mean, ((squares - total * mean) / (count - 1).clamp_min(1)).clamp_min(0).sqrt()


@overload
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor | None = None, dim: None = None) -> float: ...


@overload
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor | None = None, *, dim: int) -> list[float]: ...


def explained_variance(
    values: Tensor, returns: Tensor, mask: Tensor | None = None, dim: int | None = None
) -> float | list[float]:
    """1 - Var[R - V] / Var[R]: 1 is a perfect critic, 0 no better than a constant, < 0 worse;
    NaN where the returns do not vary. Along ``dim``, one per slice (a stack's seeds), as a list:
    one host sync for them all."""
    var_returns = masked_var(returns, mask, dim)
    explained = torch.where(
        var_returns == 0.0, float("nan"), 1.0 - masked_var(returns - values, mask, dim) / var_returns
    )
    return float(explained) if dim is None else explained.tolist()

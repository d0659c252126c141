"""Log-probability and entropy of categorical distributions given by logits.

One implementation for every categorical fastppo scores: the discrete action heads of the
gymnasium policies (one per MultiDiscrete dimension) and the next-token distributions of a
language model in RLHF.
"""

from __future__ import annotations

import torch
from torch import Tensor

FEW_CATEGORIES = 8
"""Up to this many categories, ``log_softmax`` reduces across the rows' layout (below)."""


def log_softmax(logits: Tensor) -> Tensor:
    """``torch.log_softmax(logits, dim=-1)``. With a few categories on the CPU it runs over the
    categories as the leading dim: torch's kernel then vectorises along the rows instead of along
    a last dim of two or three, with the same values but for a rare last-bit rounding: 65 536 rows
    of 2, 1.5 -> 0.8 ms (3.7 -> 2.8 ms with the backward, logprob and entropy), a 1 024-env rollout
    step's 25 -> 12 us; from 16 categories on, the last dim fills the vectors itself and is faster."""
    if logits.is_cpu and logits.dim() > 1 and logits.shape[-1] <= FEW_CATEGORIES:
        # contiguous: a draw shaped like it (empty_like keeps strides) must fill the same elements
        return torch.log_softmax(logits.movedim(-1, 0), dim=0).movedim(0, -1).contiguous()
    return torch.log_softmax(logits, dim=-1)


def categorical_logprob_entropy(logits: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
    """``(log pi(a), H[pi])`` for logits ``[..., K]`` and integer ``actions`` ``[...]``.

    One ``log_softmax`` serves both; a logit at the most negative float (a masked action) has
    probability exactly 0 and contributes exactly 0 to the entropy.
    """
    logp_all = log_softmax(logits)
    logprob = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logprob, entropy

"""Log-probability and entropy of categorical distributions given by logits.

One implementation for every categorical fastppo scores: the discrete action heads of the
gymnasium policies (one per MultiDiscrete dimension) and the next-token distributions of a
language model in RLHF.
"""

from __future__ import annotations

import torch
from torch import Tensor


def categorical_logprob_entropy(logits: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
    """``(log pi(a), H[pi])`` for logits ``[..., K]`` and integer ``actions`` ``[...]``.

    One ``log_softmax`` serves both; a logit at the most negative float (a masked action) has
    probability exactly 0 and contributes exactly 0 to the entropy.
    """
    logp_all = torch.log_softmax(logits, dim=-1)
    logprob = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logprob, entropy

"""Token layout shared by PPO and DPO, and the forward pass that scores response tokens.

A batch is ``[query | response]``: the prompt left-padded (so every prompt ends at column P, where
generation starts) and the response right-padded. ``response_mask`` marks a response's real tokens,
up to and including its first EOS; padding and anything after EOS are masked out of every loss and
statistic. Position ids are explicit so left padding does not shift the positions of real tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from fastppo.core import categorical_logprob_entropy
from fastppo.rlhf.models import Critic


def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: list[str], max_length: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """[B, P] prompt ids, left-padded (and left-truncated to ``max_length``), with their attention mask."""
    enc = tokenizer(prompts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def encode_completions(tokenizer: PreTrainedTokenizerBase, completions: list[str], max_length: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """[B, R] completion ids ending in EOS, right-padded, with their validity mask (for DPO data)."""
    rows = [
        torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"][: max_length - 1] + [tokenizer.eos_token_id])
        for text in completions
    ]
    ids = pad_sequence(rows, batch_first=True, padding_value=tokenizer.pad_token_id)
    mask = pad_sequence([torch.ones(len(r), dtype=torch.bool) for r in rows], batch_first=True, padding_value=False)
    return ids.to(device), mask.to(device)


def positions(attention_mask: Tensor) -> Tensor:
    """Position ids that count real tokens only: with left padding, a text's first token is at 0
    whatever the padding before it (models with learned position embeddings depend on it)."""
    return (attention_mask.cumsum(dim=1) - 1).clamp_min(0)


def mask_after_eos(response: Tensor, eos_token_id: int) -> Tensor:
    """[B, R] bool: true up to and including the first EOS, false after it. Position-based, so the
    mask is right even if a tokenizer pads with its EOS token."""
    is_eos = response == eos_token_id
    return (is_eos.cumsum(dim=1) - is_eos.long()) == 0


def decode_completions(tokenizer: PreTrainedTokenizerBase, response: Tensor, response_mask: Tensor) -> list[str]:
    """The text of each completion: its valid tokens, without EOS or other special tokens."""
    return [tokenizer.decode(row[mask].tolist(), skip_special_tokens=True) for row, mask in zip(response, response_mask)]


@dataclass
class TokenOutputs:
    """Per response token, [B, R]: log-prob of the token, entropy of the distribution it was drawn from, and V."""

    logprobs: Tensor
    entropy: Tensor
    values: Tensor | None


def forward_tokens(
    policy: PreTrainedModel,
    critic: Critic | None,
    query: Tensor,
    query_mask: Tensor,
    response: Tensor,
    response_mask: Tensor,
    temperature: float = 1.0,
) -> TokenOutputs:
    """Score the response tokens in one forward pass of the policy (and of the critic's own trunk).

    The logits at column P-1+t predict response token t; they are divided by the sampling
    temperature so the log-probs are those of the distribution the tokens were sampled from.
    V for token t is read at the same column: the value of the state before emitting it.
    """
    input_ids = torch.cat((query, response), dim=1)
    attention_mask = torch.cat((query_mask.long(), response_mask.long()), dim=1)
    position_ids = positions(attention_mask)
    start = query.shape[1] - 1
    shared_trunk = critic is not None and critic.trunk is None
    out = policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, output_hidden_states=shared_trunk, use_cache=False)
    logits = out.logits[:, start:-1].float() / temperature
    logprobs, entropy = categorical_logprob_entropy(logits, response)
    values = None
    if critic is not None:
        if shared_trunk:
            hidden = out.hidden_states[-1]
        else:
            hidden = critic.trunk(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False).last_hidden_state
        values = critic.head(hidden[:, start:-1]).squeeze(-1).float()
    return TokenOutputs(logprobs, entropy, values)

"""Token layout shared by PPO and DPO, and the forward pass that scores response tokens.

A batch is ``[query | response]``: the prompt left-padded (so every prompt ends at column P, where
generation starts) and the response right-padded. ``response_mask`` marks a response's real tokens,
up to and including its first EOS; padding and anything after EOS are masked out of every loss and
statistic; ``--stop`` strings end a response like EOS (:class:`Stops`). Position ids are explicit
so left padding does not shift the positions of real tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from transformers import PreTrainedTokenizerBase

from fastppo.core import categorical_logprob_entropy
from fastppo.rlhf.models import CausalLM, Critic


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: list[str], max_length: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """[B, P] prompt ids, left-padded (and left-truncated to ``max_length``), with their attention mask."""
    enc = tokenizer(prompts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def encode_completions(
    tokenizer: PreTrainedTokenizerBase, completions: list[str], max_length: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """[B, R] completion ids ending in EOS, right-padded, with their validity mask (for DPO data).

    A text that holds EOS already ends at it, as a sampled completion does (:func:`mask_after_eos`):
    a chat template's answer whose end token is the EOS (Qwen's ``...<|im_end|>\n``) gets no second
    one, and what the template writes after it is not trained. Any other text gets EOS appended."""
    rows = []
    for text in completions:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][:max_length]
        eos = tokenizer.eos_token_id
        rows.append(torch.tensor(ids[: ids.index(eos) + 1] if eos in ids else ids[: max_length - 1] + [eos]))
    ids = pad_sequence(rows, batch_first=True, padding_value=tokenizer.pad_token_id)
    mask = pad_sequence([torch.ones(len(r), dtype=torch.bool) for r in rows], batch_first=True, padding_value=False)
    return ids.to(device), mask.to(device)


def positions(attention_mask: Tensor) -> Tensor:
    """Position ids that count real tokens only: with left padding, a text's first token is at 0
    whatever the padding before it (models with learned position embeddings depend on it)."""
    return (attention_mask.cumsum(dim=1) - 1).clamp_min(0)


def mask_after_eos(response: Tensor, eos_token_id: int | Sequence[int]) -> Tensor:
    """[B, R] bool: true up to and including the first EOS (any of the ids given), false after it.
    Position-based, so the mask is right even if a tokenizer pads with its EOS token."""
    is_eos = torch.isin(response, torch.as_tensor(eos_token_id, device=response.device))
    return (is_eos.cumsum(dim=1) - is_eos.long()) == 0


@dataclass(frozen=True)
class Stops:
    """Where a completion ends: at the first of ``token_ids`` (EOS, and stop strings that are special
    tokens, e.g. ``<|im_end|>``, which decoding drops from the text), or at the token that completes
    one of ``strings`` in the decoded text. Either way that token is the response's last real one,
    as EOS is: it gets the score, and its log-prob trains the policy to stop there."""

    token_ids: tuple[int, ...]
    strings: tuple[str, ...] = ()

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase, stop: Sequence[str] = ()) -> Stops:
        special = {token.content: i for i, token in tokenizer.added_tokens_decoder.items() if token.special}
        ids = [tokenizer.eos_token_id] + [special[s] for s in stop if s in special]
        return cls(tuple(dict.fromkeys(ids)), tuple(s for s in stop if s not in special))

    def mask(self, tokenizer: PreTrainedTokenizerBase, response: Tensor) -> tuple[Tensor, Tensor]:
        """``(mask, stopped)``: [B, R] true up to and including each row's stop token, and [B] whether
        the row stopped (rather than running into max_new_tokens)."""
        is_stop = torch.isin(response, torch.as_tensor(self.token_ids, device=response.device))
        if self.strings:
            ends = (~is_stop).long().cumprod(dim=1).sum(dim=1).tolist()  # tokens before the first stop token
            for row, end in enumerate(ends):
                last = self._completing_token(tokenizer, response[row, :end].tolist())
                if last is not None:
                    is_stop[row, last] = True
        return (is_stop.cumsum(dim=1) - is_stop.long()) == 0, is_stop.any(dim=1)

    def _completing_token(self, tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> int | None:
        """Index of the token whose decoding first contains a stop string, by bisection on prefixes:
        a token's text depends on its neighbours (byte-level BPE, sentencepiece spaces), so the
        prefixes are decoded as a whole rather than token by token."""

        def stops(n: int) -> bool:
            text = tokenizer.decode(ids[:n], skip_special_tokens=True)
            return any(s in text for s in self.strings)

        if not stops(len(ids)):
            return None
        low, high = 1, len(ids)  # the shortest stopping prefix has `high` tokens
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if stops(middle) else (middle + 1, high)
        return high - 1

    def cut(self, text: str) -> str:
        """The completion's text without its stop string (and whatever its last token added after it)."""
        return text[: min((i for i in (text.find(s) for s in self.strings) if i >= 0), default=len(text))]


def decode_completions(
    tokenizer: PreTrainedTokenizerBase, response: Tensor, response_mask: Tensor, stops: Stops | None = None
) -> list[str]:
    """The text of each completion: its valid tokens, without EOS, other special tokens or stop strings."""
    # one row of ids decodes to one str (transformers annotates the batched form too)
    texts = [
        cast(str, tokenizer.decode(row[mask].tolist(), skip_special_tokens=True))
        for row, mask in zip(response, response_mask)
    ]
    return [stops.cut(text) for text in texts] if stops is not None else texts


@dataclass
class TokenOutputs:
    """Per response token, [B, R]: log-prob of the token, entropy of the distribution it was drawn from, and V."""

    logprobs: Tensor
    entropy: Tensor
    values: Tensor | None


def forward_tokens(
    policy: CausalLM,
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
    out = policy(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        output_hidden_states=shared_trunk,
        use_cache=False,
    )
    logits = out.logits[:, start:-1].float() / temperature
    logprobs, entropy = categorical_logprob_entropy(logits, response)
    values = None
    if critic is not None:
        if critic.trunk is None:  # shared_trunk
            hidden = out.hidden_states[-1]
        else:
            hidden = critic.trunk(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            ).last_hidden_state
        values = critic.head(hidden[:, start:-1]).squeeze(-1).float()
    return TokenOutputs(logprobs, entropy, values)

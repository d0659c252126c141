"""The RLHF rollout: sample completions for a batch of prompts and score their tokens."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from fastppo.rlhf.config import SamplingConfig
from fastppo.rlhf.generation import Autocast, Generator, HFGenerator
from fastppo.rlhf.models import CausalLM, Critic, Models, reference_model
from fastppo.rlhf.tokens import Stops, TokenOutputs, decode_completions, encode_prompts, forward_tokens


@dataclass
class Rollout:
    """Sampled completions, one row each; samples of the same prompt are consecutive rows."""

    prompts: list[str]
    completions: list[str]
    query: Tensor  # [B, P] left-padded prompt ids
    query_mask: Tensor  # [B, P]
    response: Tensor  # [B, R] sampled ids, padding after EOS
    response_mask: Tensor  # [B, R] bool, real tokens up to and including the first EOS
    # [B, R] log-probs under the policy that sampled them; None until the update fills them
    # (PPOConfig.old_logprobs_from_update)
    logprobs: Tensor | None
    ref_logprobs: Tensor  # [B, R] log-probs under the frozen reference
    values: Tensor | None  # [B, R] critic values, None for critic-free estimators
    has_eos: Tensor  # [B] bool: the completion ended with EOS or a stop string rather than at max_new_tokens


def score_tokens(
    model: CausalLM,
    critic: Critic | None,
    query: Tensor,
    query_mask: Tensor,
    response: Tensor,
    response_mask: Tensor,
    temperature: float,
    micro_batch_size: int,
) -> TokenOutputs:
    """forward_tokens without gradient, in micro-batches of the update's size (same numerics)."""
    chunks = []
    with torch.no_grad():
        for i in range(0, query.shape[0], micro_batch_size):
            s = slice(i, i + micro_batch_size)
            chunks.append(
                forward_tokens(model, critic, query[s], query_mask[s], response[s], response_mask[s], temperature)
            )
    values = torch.cat([c.values for c in chunks if c.values is not None]) if critic is not None else None
    return TokenOutputs(torch.cat([c.logprobs for c in chunks]), torch.cat([c.entropy for c in chunks]), values)


def collect_rollout(
    models: Models,
    prompts: list[str],
    num_generations: int,
    sampling: SamplingConfig,
    micro_batch_size: int,
    autocast: Autocast,
    generator: Generator | None = None,
    old_logprobs: bool = True,
) -> Rollout:
    """Generate ``num_generations`` completions per prompt (with ``generator``, by default the
    policy's own generate()), then recompute their old log-probs, reference log-probs and values
    with the same forward pass the update uses, so the first PPO ratio is exactly 1 (generate()'s
    own scores go through a different code path). ``old_logprobs=False`` skips the policy's pass
    (no critic): the update's first pass supplies the old log-probs (``ppo_update``)."""
    tokenizer, policy = models.tokenizer, models.policy
    device = next(policy.parameters()).device
    query, query_mask = encode_prompts(tokenizer, prompts, sampling.max_prompt_length, device)
    query = query.repeat_interleave(num_generations, dim=0)
    query_mask = query_mask.repeat_interleave(num_generations, dim=0)
    response = (generator or HFGenerator(models, sampling, autocast)).generate(query, query_mask)
    stops = Stops.of(tokenizer, sampling.stop)
    response_mask, stopped = stops.mask(tokenizer, response)
    response = response.masked_fill(~response_mask, tokenizer.pad_token_id)
    with autocast():
        new = (
            score_tokens(
                policy,
                models.critic,
                query,
                query_mask,
                response,
                response_mask,
                sampling.temperature,
                micro_batch_size,
            )
            if old_logprobs
            else None
        )
        with reference_model(models) as reference:
            ref = score_tokens(
                reference, None, query, query_mask, response, response_mask, sampling.temperature, micro_batch_size
            )

    # Scores of masked tokens are meaningless; zero them so no statistic can pick them up.
    def valid(x: Tensor) -> Tensor:
        return x.masked_fill(~response_mask, 0.0)

    return Rollout(
        prompts=[p for p in prompts for _ in range(num_generations)],
        completions=decode_completions(tokenizer, response, response_mask, stops),
        query=query,
        query_mask=query_mask,
        response=response,
        response_mask=response_mask,
        logprobs=None if new is None else valid(new.logprobs),
        ref_logprobs=valid(ref.logprobs),
        values=None if new is None or new.values is None else valid(new.values),
        has_eos=stopped,
    )

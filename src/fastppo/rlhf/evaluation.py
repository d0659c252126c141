"""What a run shows of its completions: sample tables and greedy scores on held-out prompts."""

from __future__ import annotations

import torch
from torch import Tensor

from fastppo.rlhf.config import SamplingConfig
from fastppo.rlhf.generation import Generator
from fastppo.rlhf.models import Models
from fastppo.rlhf.rewards import RewardFn, compute_scores
from fastppo.rlhf.tokens import Stops, decode_completions, encode_prompts


def sample_rows(
    prompts: list[str], completions: list[str], rewards: Tensor, limit: int
) -> list[dict[str, str | float]]:
    """The first ``limit`` (prompt, completion, reward) rows, for RunLogger.log_samples."""
    return [
        {"prompt": p, "completion": c, "reward": float(r)}
        for p, c, r in zip(prompts[:limit], completions[:limit], rewards[:limit])
    ]


def evaluate(
    models: Models,
    generator: Generator,
    prompts: list[str],
    reward_fn: RewardFn,
    sampling: SamplingConfig,
    batch_size: int,
) -> tuple[dict[str, float], list[dict[str, str | float]]]:
    """Greedy completions of every prompt, scored by ``reward_fn`` (raw scores: no EOS penalty or
    clipping, comparable across runs); generated ``batch_size`` prompts at a time. Returns the
    ``eval/`` metrics and one sample row per prompt."""
    tokenizer = models.tokenizer
    device = next(models.policy.parameters()).device
    stops = Stops.of(tokenizer, sampling.stop)
    completions, lengths, eos = [], [], []
    for start in range(0, len(prompts), batch_size):
        query, query_mask = encode_prompts(
            tokenizer, prompts[start : start + batch_size], sampling.max_prompt_length, device
        )
        response = generator.generate(query, query_mask, greedy=True)
        mask, stopped = stops.mask(tokenizer, response)
        completions += decode_completions(tokenizer, response, mask, stops)
        lengths.append(mask.sum(dim=1))
        eos.append(stopped)
    scores = compute_scores(reward_fn, prompts, completions, device)
    metrics = {
        "eval/reward_mean": float(scores.mean()),
        "eval/reward_std": float(scores.std()) if scores.numel() > 1 else 0.0,
        "eval/response_length": float(torch.cat(lengths).float().mean()),
        "eval/eos_fraction": float(torch.cat(eos).float().mean()),
    }
    return metrics, sample_rows(prompts, completions, scores, len(prompts))

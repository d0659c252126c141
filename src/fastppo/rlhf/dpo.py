"""Direct Preference Optimization (Rafailov et al. 2023, arXiv:2305.18290) and its IPO and cDPO
variants (``--loss``; the losses are in :mod:`fastppo.core.preference`).

Same model loading, reference handling (separate frozen copy, or LoRA with adapters disabled),
token layout, logging and checkpoints as the PPO trainer; no rollout and no reward.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor

from fastppo.core.preference import dpo_loss
from fastppo.devices import resolve_device
from fastppo.errors import FastPPOError
from fastppo.rlhf.checkpoint import resume_point
from fastppo.rlhf.config import DPOConfig, DPOTrainerConfig, validate_dpo, validate_run
from fastppo.rlhf.data import PreferencePair
from fastppo.rlhf.generation import Autocast
from fastppo.rlhf.models import CausalLM, Models, Precision, load_models, reference_model, start_run
from fastppo.rlhf.pair_training import PairSteps, train_on_pairs
from fastppo.rlhf.parallel import Ranks
from fastppo.rlhf.tokens import encode_completions, encode_prompts, forward_tokens
from fastppo.training.distributed import joined, rank_device


def completion_logps(
    model: CausalLM, query: Tensor, query_mask: Tensor, response: Tensor, response_mask: Tensor
) -> Tensor:
    """[B] log-probability of each whole completion (its valid tokens, EOS included)."""
    out = forward_tokens(model, None, query, query_mask, response, response_mask)
    return (out.logprobs * response_mask).sum(dim=1)


def _encode_pairs(models: Models, pairs: list[PreferencePair], dpo: DPOConfig) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(query, query_mask, response, response_mask) of 2B rows: each prompt with its chosen
    completion, then with its rejected one, on the policy's device."""
    device = next(models.policy.parameters()).device
    query, query_mask = encode_prompts(models.tokenizer, [p.prompt for p in pairs] * 2, dpo.max_prompt_length, device)
    response, response_mask = encode_completions(
        models.tokenizer, [p.chosen for p in pairs] + [p.rejected for p in pairs], dpo.max_completion_length, device
    )
    return query, query_mask, response, response_mask


@torch.no_grad()
def reference_logps(
    models: Models, pairs: list[PreferencePair], dpo: DPOConfig, micro_batch_size: int, autocast: Autocast
) -> Tensor:
    """[N, 2] reference log-probs (chosen, rejected) of every pair: one pass over the data. The
    reference is frozen, so these are the values each step would compute, and training then runs
    the policy alone."""
    rows = []
    with autocast(), reference_model(models) as reference:
        for start in range(0, len(pairs), micro_batch_size):
            batch = pairs[start : start + micro_batch_size]
            rows.append(completion_logps(reference, *_encode_pairs(models, batch, dpo)).view(2, len(batch)).T)
    return torch.cat(rows)


def dpo_step_loss(
    models: Models, pairs: list[PreferencePair], dpo: DPOConfig, autocast: Autocast, ref_logps: Tensor | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """DPO loss of a micro-batch; ``ref_logps`` [B, 2] are the pairs' precomputed reference
    log-probs, else the reference scores them here."""
    n = len(pairs)
    tokens = _encode_pairs(models, pairs, dpo)  # once for the policy and the reference
    with autocast():
        logps = completion_logps(models.policy, *tokens)
        if ref_logps is None:
            with torch.no_grad(), reference_model(models) as reference:
                ref_logps = completion_logps(reference, *tokens).view(2, n).T
    lengths = tokens[3].sum(dim=1)  # IPO's per-token means
    return dpo_loss(
        logps[:n],
        logps[n:],
        ref_logps[:, 0],
        ref_logps[:, 1],
        dpo.beta,
        dpo.loss,
        dpo.label_smoothing,
        (lengths[:n], lengths[n:]),
    )


def train_dpo(cfg: DPOTrainerConfig, pairs: list[PreferencePair]) -> list[dict[str, float]]:
    """Fine-tune ``cfg.model.model`` on preference pairs; returns the metrics of every optimizer step.

    Under torchrun, one rank of a data-parallel run (:mod:`fastppo.rlhf.parallel`): ``--batch-size``
    is per rank, and a step trains on every rank's pairs."""
    with joined(rank_device(resolve_device(cfg.model.device))) as world:
        return _train_dpo(cfg, pairs, Ranks(world, cfg.model.fsdp))


def _train_dpo(cfg: DPOTrainerConfig, pairs: list[PreferencePair], ranks: Ranks) -> list[dict[str, float]]:
    model_cfg, dpo, run = cfg.model, cfg.dpo, cfg.run
    validate_dpo(model_cfg, dpo)
    if not pairs:
        raise FastPPOError("no preference pairs to train on: give at least one (prompt, chosen, rejected)")
    total_steps = math.ceil(dpo.epochs * len(pairs) / (ranks.size * dpo.batch_size))
    validate_run(run, cfg.schedule, total_steps=total_steps)
    output_dir = Path(run.output_dir)
    resume_from = resume_point(output_dir, run.resume, "dpo")
    start_run(run)
    models = load_models(ranks.load_config(model_cfg), critic=None, resume_from=resume_from)
    ranks.prepare(models)
    precision = Precision(model_cfg.dtype, next(models.policy.parameters()).device)
    steps = PairSteps(
        run, cfg.schedule, dpo.learning_rate, dpo.batch_size, dpo.gradient_accumulation_steps, dpo.max_grad_norm, "dpo"
    )
    ref_logps = (
        reference_logps(models, pairs, dpo, steps.micro_batch_size, precision.autocast)
        if dpo.precompute_ref_logps
        else None
    )

    def micro_loss(indices: list[int]) -> tuple[Tensor, dict[str, Tensor]]:
        return dpo_step_loss(
            models,
            [pairs[i] for i in indices],
            dpo,
            precision.autocast,
            None if ref_logps is None else ref_logps[indices],
        )

    summary = (("loss", "dpo/loss", ".4f"), ("margin", "dpo/margin", ".3f"))
    return train_on_pairs(
        steps, len(pairs), micro_loss, models, precision, ranks, resume_from, total_steps, asdict(cfg), summary
    )

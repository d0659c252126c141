"""Reward models from preference pairs (Ouyang et al. 2022, sec. 3.5): a sequence classifier with
one output, trained so that sigmoid(r(prompt + chosen) - r(prompt + rejected)) is the probability
of the preference (Bradley-Terry; the loss is :func:`fastppo.core.preference.bradley_terry_loss`).

Texts are scored by :func:`fastppo.rlhf.rewards.score_texts`, the function ``fastppo rlhf
--reward`` scores with, and the model and tokenizer are saved in ``output_dir`` for it. Same
precision, logging and checkpoints as the DPO trainer.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from fastppo.core.preference import bradley_terry_loss
from fastppo.devices import resolve_device
from fastppo.errors import FastPPOError
from fastppo.rlhf.checkpoint import resume_point
from fastppo.rlhf.config import RewardModelTrainerConfig, validate_reward_model, validate_run
from fastppo.rlhf.data import PreferencePair
from fastppo.rlhf.generation import Autocast
from fastppo.rlhf.models import POLICY_DIR, Models, Precision, load_reward_model, start_run
from fastppo.rlhf.pair_training import PairSteps, train_on_pairs
from fastppo.rlhf.parallel import ONE_PROCESS
from fastppo.rlhf.rewards import score_texts


def split_pairs(
    pairs: list[PreferencePair], eval_split: float, seed: int
) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(training, held-out) pairs, split by prompt: a seeded shuffle of the distinct prompts, the
    last ``eval_split`` share of them held out with all their pairs. A prompt on both sides would
    let the held-out accuracy reward memorising prompts."""
    prompts = list(dict.fromkeys(p.prompt for p in pairs))
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(seed)).tolist()
    held_out = {prompts[i] for i in order[len(prompts) - math.floor(eval_split * len(prompts)) :]}
    return [p for p in pairs if p.prompt not in held_out], [p for p in pairs if p.prompt in held_out]


def pair_loss(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, pairs: list[PreferencePair], device: torch.device
) -> tuple[Tensor, dict[str, Tensor]]:
    """Bradley-Terry loss of a micro-batch, chosen and rejected texts scored in one batch of 2B."""
    scores = score_texts(
        model, tokenizer, [p.prompt + p.chosen for p in pairs] + [p.prompt + p.rejected for p in pairs], device
    )
    return bradley_terry_loss(scores[: len(pairs)], scores[len(pairs) :])


@torch.no_grad()
def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: list[PreferencePair],
    batch_size: int,
    device: torch.device,
    autocast: Autocast,
) -> dict[str, float]:
    """Loss and accuracy over all held-out pairs (each micro-batch weighted by its size)."""
    model.eval()
    totals: dict[str, float] = {}
    with autocast():
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start : start + batch_size]
            _, metrics = pair_loss(model, tokenizer, batch, device)
            for key in ("loss", "accuracy"):
                totals[key] = totals.get(key, 0.0) + float(metrics[key]) * len(batch)
    model.train()
    return {f"reward_model/eval_{key}": value / len(pairs) for key, value in totals.items()}


def train_reward_model(cfg: RewardModelTrainerConfig, pairs: list[PreferencePair]) -> list[dict[str, float]]:
    """Train a reward model from ``cfg.model.model`` on preference pairs and save it (with its
    tokenizer) in ``cfg.run.output_dir``; returns the metrics logged at every step."""
    model_cfg, rm, run = cfg.model, cfg.reward_model, cfg.run
    validate_reward_model(model_cfg, rm)
    train_pairs, eval_pairs = split_pairs(pairs, rm.eval_split, run.seed)
    if not train_pairs:
        raise FastPPOError(
            f"no preference pairs to train on ({len(pairs)} given, {len(eval_pairs)} held out): give more pairs "
            "or a smaller --eval-split"
        )
    total_steps = math.ceil(rm.epochs * len(train_pairs) / rm.batch_size)
    validate_run(run, cfg.schedule, total_steps=total_steps)
    output_dir = Path(run.output_dir)
    resume_from = resume_point(output_dir, run.resume, "reward-model")
    start_run(run)
    device = resolve_device(model_cfg.device)
    model, tokenizer = load_reward_model(
        str(resume_from / POLICY_DIR) if resume_from else model_cfg.model, device, trainable=True
    )
    # Keep the end of long texts, where the completions differ; saved with the tokenizer, so
    # --reward truncates as training did.
    tokenizer.truncation_side, tokenizer.model_max_length = "left", rm.max_length
    models = Models(tokenizer, model, reference=None, critic=None)  # the container the checkpoints save
    precision = Precision(model_cfg.dtype, device)
    steps = PairSteps(
        run,
        cfg.schedule,
        rm.learning_rate,
        rm.batch_size,
        rm.gradient_accumulation_steps,
        rm.max_grad_norm,
        "reward_model",
    )

    def micro_loss(indices: list[int]) -> tuple[Tensor, dict[str, Tensor]]:
        with precision.autocast():
            return pair_loss(model, tokenizer, [train_pairs[i] for i in indices], device)

    def held_out() -> dict[str, float]:
        return evaluate(model, tokenizer, eval_pairs, steps.micro_batch_size, device, precision.autocast)

    summary = (("loss", "reward_model/loss", ".4f"), ("eval acc", "reward_model/eval_accuracy", ".3f"))
    history = train_on_pairs(
        steps,
        len(train_pairs),
        micro_loss,
        models,
        precision,
        ONE_PROCESS,
        resume_from,
        total_steps,
        asdict(cfg),
        summary,
        held_out if eval_pairs else None,
        rm.eval_every,
    )
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return history

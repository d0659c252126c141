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

from fastppo.core import warmup_scheduled
from fastppo.core.preference import bradley_terry_loss
from fastppo.errors import FastPPOError
from fastppo.logger import RunLogger
from fastppo.rlhf.checkpoint import due, latest_checkpoint, load_training_state, save_checkpoint
from fastppo.rlhf.config import RewardModelTrainerConfig, validate_reward_model, validate_run
from fastppo.rlhf.data import PreferencePair, batch_indices
from fastppo.rlhf.models import POLICY_DIR, Models, Precision, load_reward_model, resolve_device
from fastppo.rlhf.rewards import score_texts
from fastppo.update import set_learning_rate


def split_pairs(pairs: list[PreferencePair], eval_split: float, seed: int) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(training, held-out) pairs: a seeded shuffle, then the last ``eval_split`` share held out."""
    order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed)).tolist()
    held_out = math.floor(eval_split * len(pairs))
    return [pairs[i] for i in order[: len(pairs) - held_out]], [pairs[i] for i in order[len(pairs) - held_out :]]


def pair_loss(model, tokenizer, pairs: list[PreferencePair], device: torch.device) -> tuple[Tensor, dict[str, Tensor]]:
    """Bradley-Terry loss of a micro-batch, chosen and rejected texts scored in one batch of 2B."""
    scores = score_texts(model, tokenizer, [p.prompt + p.chosen for p in pairs] + [p.prompt + p.rejected for p in pairs], device)
    return bradley_terry_loss(scores[: len(pairs)], scores[len(pairs) :])


@torch.no_grad()
def evaluate(model, tokenizer, pairs: list[PreferencePair], batch_size: int, device: torch.device, autocast) -> dict[str, float]:
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
        raise FastPPOError(f"no preference pairs to train on ({len(pairs)} given, {len(eval_pairs)} held out): give more pairs or a smaller --eval-split")
    total_steps = math.ceil(rm.epochs * len(train_pairs) / rm.batch_size)
    validate_run(run, cfg.schedule, total_steps=total_steps)
    output_dir = Path(run.output_dir)
    resume_from = latest_checkpoint(output_dir) if run.resume else None
    torch.manual_seed(run.seed)
    device = resolve_device(model_cfg.device)
    model, tokenizer = load_reward_model(str(resume_from / POLICY_DIR) if resume_from else model_cfg.model, device, trainable=True)
    # Keep the end of long texts, where the completions differ; saved with the tokenizer, so
    # --reward truncates as training did.
    tokenizer.truncation_side, tokenizer.model_max_length = "left", rm.max_length
    models = Models(tokenizer, model, reference=None, critic=None)  # the container the checkpoints save
    precision = Precision(model_cfg.dtype, device)
    params = models.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=rm.learning_rate)
    state = load_training_state(resume_from, optimizer, models) if resume_from else {"step": 0}
    precision.load_state_dict(state.pop("grad_scaler", {}))
    micro_batch_size = rm.batch_size // rm.gradient_accumulation_steps
    history: list[dict[str, float]] = []
    purge_step = state["step"] + 1 if state["step"] else None  # a resumed run continues its curves
    summary = (("loss", "reward_model/loss", ".4f"), ("eval acc", "reward_model/eval_accuracy", ".3f"))
    with RunLogger(
        output_dir, total_steps, tensorboard=True, progress=run.progress, config=asdict(cfg), purge_step=purge_step, summary=summary, wandb_project=run.wandb_project_or_none,
    ) as logger:
        if eval_pairs and not state["step"]:  # the untrained model's accuracy, as step 0
            history.append(evaluate(model, tokenizer, eval_pairs, micro_batch_size, device, precision.autocast))
            logger.log(0, history[-1])
        for step in range(state["step"] + 1, total_steps + 1):
            learning_rate = warmup_scheduled(cfg.schedule.lr_schedule, rm.learning_rate, step, total_steps, cfg.schedule.lr_warmup_steps)
            set_learning_rate(optimizer, learning_rate)
            batch = [train_pairs[i] for i in batch_indices(len(train_pairs), rm.batch_size, step, run.seed)]
            totals: dict[str, Tensor] = {}
            for start in range(0, len(batch), micro_batch_size):
                with precision.autocast():
                    loss, metrics = pair_loss(model, tokenizer, batch[start : start + micro_batch_size], device)
                precision.backward(loss / rm.gradient_accumulation_steps)
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0.0) + value / rm.gradient_accumulation_steps
            grad_norm = precision.step(optimizer, params, rm.max_grad_norm)
            logged = {f"reward_model/{key}": float(value) for key, value in totals.items()} | {"losses/grad_norm": float(grad_norm), "charts/learning_rate": learning_rate}
            if eval_pairs and due(step, rm.eval_every, total_steps):
                logged |= evaluate(model, tokenizer, eval_pairs, micro_batch_size, device, precision.autocast)
            logger.log(step, logged)
            history.append(logged)
            if due(step, run.save_every, total_steps):
                save_checkpoint(output_dir, step, models, optimizer, {"grad_scaler": precision.state_dict()}, run.keep_checkpoints)
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return history

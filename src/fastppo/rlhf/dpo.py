"""Direct Preference Optimization (Rafailov et al. 2023, arXiv:2305.18290).

Same model loading, reference handling (separate frozen copy, or LoRA with adapters disabled),
token layout, logging and checkpoints as the PPO trainer; no rollout and no reward.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from fastppo.errors import FastPPOError
from fastppo.logger import RunLogger
from fastppo.rlhf.checkpoint import latest_checkpoint, load_training_state, save_checkpoint
from fastppo.rlhf.config import DPOTrainerConfig, validate_dpo
from fastppo.rlhf.data import PreferencePair, batch_indices
from fastppo.rlhf.models import Models, Precision, load_models, reference_model
from fastppo.rlhf.tokens import encode_completions, encode_prompts, forward_tokens


def dpo_loss(chosen_logps: Tensor, rejected_logps: Tensor, ref_chosen_logps: Tensor, ref_rejected_logps: Tensor, beta: float) -> tuple[Tensor, dict[str, Tensor]]:
    """L = -log sigmoid(beta * ((log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l)))), mean over pairs.

    All inputs are [B] summed log-probs of whole completions. The implicit rewards
    beta * (log pi - log ref) of chosen and rejected completions are returned as metrics."""
    chosen_rewards = beta * (chosen_logps - ref_chosen_logps)
    rejected_rewards = beta * (rejected_logps - ref_rejected_logps)
    margin = chosen_rewards - rejected_rewards
    loss = -F.logsigmoid(margin).mean()
    metrics = {
        "loss": loss.detach(),
        "rewards_chosen": chosen_rewards.detach().mean(),
        "rewards_rejected": rejected_rewards.detach().mean(),
        "margin": margin.detach().mean(),
        "accuracy": (margin > 0).float().mean(),
    }
    return loss, metrics


def completion_logps(model, query: Tensor, query_mask: Tensor, response: Tensor, response_mask: Tensor) -> Tensor:
    """[B] log-probability of each whole completion (its valid tokens, EOS included)."""
    out = forward_tokens(model, None, query, query_mask, response, response_mask)
    return (out.logprobs * response_mask).sum(dim=1)


def dpo_step_loss(models: Models, pairs: list[PreferencePair], beta: float, max_prompt_length: int, max_completion_length: int, autocast) -> tuple[Tensor, dict[str, Tensor]]:
    """DPO loss of a micro-batch: chosen and rejected completions scored in one batch of 2B rows."""
    device = next(models.policy.parameters()).device
    query, query_mask = encode_prompts(models.tokenizer, [p.prompt for p in pairs] * 2, max_prompt_length, device)
    response, response_mask = encode_completions(models.tokenizer, [p.chosen for p in pairs] + [p.rejected for p in pairs], max_completion_length, device)
    with autocast():
        logps = completion_logps(models.policy, query, query_mask, response, response_mask)
        with torch.no_grad(), reference_model(models) as reference:
            ref_logps = completion_logps(reference, query, query_mask, response, response_mask)
    n = len(pairs)
    return dpo_loss(logps[:n], logps[n:], ref_logps[:n], ref_logps[n:], beta)


def train_dpo(cfg: DPOTrainerConfig, pairs: list[PreferencePair]) -> list[dict[str, float]]:
    """Fine-tune ``cfg.model.model`` on preference pairs; returns the metrics of every optimizer step."""
    model_cfg, dpo, run = cfg.model, cfg.dpo, cfg.run
    validate_dpo(model_cfg, dpo)
    if not pairs:
        raise FastPPOError("no preference pairs to train on: give at least one (prompt, chosen, rejected)")
    output_dir = Path(run.output_dir)
    resume_from = latest_checkpoint(output_dir) if run.resume else None
    torch.manual_seed(run.seed)
    models = load_models(model_cfg, critic=None, resume_from=resume_from)
    precision = Precision(model_cfg.dtype, next(models.policy.parameters()).device)
    params = models.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=dpo.learning_rate)
    state = load_training_state(resume_from, optimizer) if resume_from else {"step": 0}
    precision.load_state_dict(state.pop("grad_scaler", {}))
    total_steps = math.ceil(dpo.epochs * len(pairs) / dpo.batch_size)
    micro_batch_size = dpo.batch_size // dpo.gradient_accumulation_steps
    history = []
    purge_step = state["step"] + 1 if state["step"] else None  # a resumed run continues its curves
    summary = (("loss", "dpo/loss", ".4f"), ("margin", "dpo/margin", ".3f"))
    with RunLogger(output_dir, total_steps, tensorboard=True, progress=run.progress, purge_step=purge_step, summary=summary) as logger:
        for step in range(state["step"] + 1, total_steps + 1):
            batch = [pairs[i] for i in batch_indices(len(pairs), dpo.batch_size, step, run.seed)]
            totals: dict[str, Tensor] = {}
            for start in range(0, len(batch), micro_batch_size):
                loss, metrics = dpo_step_loss(models, batch[start : start + micro_batch_size], dpo.beta, dpo.max_prompt_length, dpo.max_completion_length, precision.autocast)
                precision.backward(loss / dpo.gradient_accumulation_steps)
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0.0) + value / dpo.gradient_accumulation_steps
            grad_norm = precision.step(optimizer, params, dpo.max_grad_norm)
            logged = {f"dpo/{key}": float(value) for key, value in totals.items()} | {"losses/grad_norm": float(grad_norm)}
            logger.log(step, logged)
            history.append(logged)
            if step == total_steps or (run.save_every and step % run.save_every == 0):
                save_checkpoint(output_dir, step, models, optimizer, {"grad_scaler": precision.state_dict()}, run.keep_checkpoints)
    return history

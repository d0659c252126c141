"""The optimizer loop of the trainers that learn from preference pairs (``fastppo dpo`` and
``fastppo reward-model``): per step, the lr from the warm-up schedule, a seeded batch of pairs
(each rank its share under torchrun), micro-batches with gradient accumulation, one clipped
optimizer step in the run's precision, the step's metrics logged and checkpoints saved. What the
two trainers differ in, the loss of a micro-batch and what is evaluated, comes in as functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fastppo.core import warmup_scheduled
from fastppo.rlhf.checkpoint import due, last_checkpoint_named, load_training_state, save_checkpoint
from fastppo.rlhf.config import LRScheduleConfig, RunConfig
from fastppo.rlhf.data import batch_indices
from fastppo.rlhf.health import check_finite
from fastppo.rlhf.models import Models, Precision
from fastppo.rlhf.parallel import Ranks
from fastppo.training.logger import RunLogger
from fastppo.training.update import set_learning_rate


@dataclass
class PairSteps:
    """How the pairs are stepped through: the run's settings and the optimizer's."""

    run: RunConfig
    schedule: LRScheduleConfig
    learning_rate: float
    batch_size: int
    """Pairs per step and rank."""
    gradient_accumulation_steps: int
    max_grad_norm: float
    prefix: str
    """The loss metrics' namespace (``dpo/loss``, ``reward_model/accuracy``)."""

    @property
    def command(self) -> str:
        """The command that trains them (fastppo dpo, fastppo reward-model), as its checkpoints name it."""
        return self.prefix.replace("_", "-")

    @property
    def micro_batch_size(self) -> int:
        return self.batch_size // self.gradient_accumulation_steps


def train_on_pairs(
    steps: PairSteps,
    num_pairs: int,
    micro_loss: Callable[[list[int]], tuple[Tensor, dict[str, Tensor]]],
    models: Models,
    precision: Precision,
    ranks: Ranks,
    resume_from: Path | None,
    total_steps: int,
    logger_config: dict[str, Any],
    summary: tuple[tuple[str, str, str], ...],
    evaluate: Callable[[], dict[str, float]] | None = None,
    evaluate_every: int = 0,
) -> list[dict[str, float]]:
    """Train ``models``' trainable parameters with AdamW for steps 1 .. ``total_steps`` over
    ``num_pairs`` pairs, or from where the checkpoint ``resume_from`` stopped (optimizer, loss
    scaler and RNG states restored); ``micro_loss(indices)`` is the (loss, metrics) of a micro-batch
    of pair indices. With ``evaluate``, its metrics are logged at step 0 of a fresh run and every
    ``evaluate_every`` steps. Returns every logged step's metrics."""
    run, params = steps.run, models.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=steps.learning_rate)
    state: dict[str, Any] = load_training_state(resume_from, optimizer, models, ranks) if resume_from else {"step": 0}
    precision.load_state_dict(state.pop("grad_scaler", {}))
    first_step, micro_batch_size = state["step"] + 1, steps.micro_batch_size
    history: list[dict[str, float]] = []
    output_dir = Path(run.output_dir)
    ignore = ("losses/grad_norm",) if precision.skips_non_finite_steps else ()
    with (
        last_checkpoint_named(output_dir),
        RunLogger(
            output_dir if ranks.main else None,
            total_steps,
            tensorboard=True,
            progress=run.progress and ranks.main,
            config=logger_config,
            purge_step=first_step if first_step > 1 else None,  # a resumed run continues its curves
            summary=summary,
            wandb_project=run.wandb_project_or_none if ranks.main else None,
        ) as logger,
    ):
        if evaluate is not None and first_step == 1:  # the untrained model, as step 0
            history.append(evaluate())
            logger.log(0, history[-1])
        for step in range(first_step, total_steps + 1):
            learning_rate = warmup_scheduled(
                steps.schedule.lr_schedule, steps.learning_rate, step, total_steps, steps.schedule.lr_warmup_steps
            )
            set_learning_rate(optimizer, learning_rate)
            indices = ranks.share(batch_indices(num_pairs, ranks.size * steps.batch_size, step, run.seed))
            totals: dict[str, Tensor] = {}
            for start in range(0, len(indices), micro_batch_size):
                loss, metrics = micro_loss(indices[start : start + micro_batch_size])
                precision.backward(loss / steps.gradient_accumulation_steps)
                for key, value in metrics.items():
                    totals[key] = totals.get(key, 0.0) + value / steps.gradient_accumulation_steps
            ranks.average_gradients(params)
            grad_norm = precision.step(optimizer, params, steps.max_grad_norm)
            logged = {f"{steps.prefix}/{key}": float(value) for key, value in ranks.mean_metrics(totals).items()}
            logged |= {"losses/grad_norm": float(grad_norm), "charts/learning_rate": learning_rate}
            if evaluate is not None and due(step, evaluate_every, total_steps):
                logged |= evaluate()
            check_finite(step, logged, "lower --learning-rate or check the preference data", ignore)
            logger.log(step, logged)
            history.append(logged)
            if due(step, run.save_every, total_steps):
                save_checkpoint(
                    output_dir,
                    step,
                    models,
                    optimizer,
                    {"command": steps.command, "grad_scaler": precision.state_dict()},
                    run.keep_checkpoints,
                    ranks,
                )
    return history

"""Hyperparameter schedules over training progress."""

from __future__ import annotations

import math
from typing import Literal

ScheduleKind = Literal["constant", "linear", "cosine"]


def scheduled(kind: ScheduleKind, start: float, progress: float, end: float = 0.0) -> float:
    """Value at ``progress`` in [0, 1]: ``start`` throughout for "constant", a straight line from
    ``start`` to ``end`` for "linear" (CleanRL's annealing: progress = (iteration - 1) / iterations),
    half a cosine period from ``start`` to ``end`` for "cosine" (SGDR, Loshchilov & Hutter 2017)."""
    if kind == "constant":
        return start
    if kind == "linear":
        return start + (end - start) * progress
    if kind == "cosine":
        return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown schedule {kind!r}: choose constant, linear or cosine")


def schedule_progress(iteration: int, num_iterations: int, anchor: tuple[int, float] = (0, 0.0)) -> float:
    """The schedules' progress at ``iteration`` (1-based) of ``num_iterations``: CleanRL's
    ``(iteration - 1) / num_iterations`` from the default anchor, bit for bit. A resume that changes
    the horizon anchors the line where it stands, ``(iterations done, progress of the next one)``,
    so the schedules go on from their current value straight to the new end instead of jumping."""
    done, at = anchor
    return at + (1.0 - at) * (iteration - 1 - done) / (num_iterations - done)


def warmup_scheduled(kind: ScheduleKind, start: float, step: int, num_steps: int, warmup_steps: int) -> float:
    """Value at (1-based) optimizer ``step`` of ``num_steps``: a linear ramp ``start * step / warmup_steps``
    over the first ``warmup_steps`` steps (Goyal et al. 2017; the first step is not wasted at 0), then
    ``scheduled(kind)`` from ``start`` towards 0 over the remaining steps, CleanRL's progress counted
    from the end of the warm-up (so the last step still has a non-zero rate).

    A pure function of the step, as the RLHF checkpoints store it: a resumed run continues the curve."""
    if step <= warmup_steps:
        return start * step / warmup_steps
    return scheduled(kind, start, schedule_progress(step - warmup_steps, num_steps - warmup_steps))

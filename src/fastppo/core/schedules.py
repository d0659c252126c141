"""Hyperparameter schedules over training progress."""

from __future__ import annotations

from typing import Literal

ScheduleKind = Literal["constant", "linear"]


def scheduled(kind: ScheduleKind, start: float, progress: float, end: float = 0.0) -> float:
    """Value at ``progress`` in [0, 1]: ``start`` throughout for "constant", a straight line from
    ``start`` to ``end`` for "linear" (CleanRL's annealing: progress = (iteration - 1) / iterations)."""
    if kind == "constant":
        return start
    if kind == "linear":
        return start + (end - start) * progress
    raise ValueError(f"unknown schedule {kind!r}: choose constant or linear")

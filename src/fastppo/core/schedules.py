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


def schedule_progress(iteration: int, num_iterations: int, anchor: tuple[int, float] = (0, 0.0)) -> float:
    """The schedules' progress at ``iteration`` (1-based) of ``num_iterations``: CleanRL's
    ``(iteration - 1) / num_iterations`` from the default anchor, bit for bit. A resume that changes
    the horizon anchors the line where it stands, ``(iterations done, progress of the next one)``,
    so the schedules go on from their current value straight to the new end instead of jumping."""
    done, at = anchor
    return at + (1.0 - at) * (iteration - 1 - done) / (num_iterations - done)

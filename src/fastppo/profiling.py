"""Wall-clock time per section of an iteration (env step, policy forward, update...)."""

from __future__ import annotations

import time
from collections import defaultdict


class _Section:
    """One named section's context manager, reused at every entry. A plain class rather than
    ``contextlib.contextmanager``: the rollout enters two sections per env step, and a
    generator-based context costs ~4x more per entry."""

    __slots__ = ("timer", "name", "start")

    def __init__(self, timer: SectionTimer, name: str):
        self.timer, self.name, self.start = timer, name, 0.0

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.timer.seconds[self.name] += time.perf_counter() - self.start


class SectionTimer:
    """Accumulates seconds per named section until ``pop``. On CUDA the figures are host time:
    kernels launched in one section may finish in the next."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._sections: dict[str, _Section] = {}

    def section(self, name: str) -> _Section:
        section = self._sections.get(name)
        if section is None:
            section = self._sections[name] = _Section(self, name)
        return section

    def pop(self) -> dict[str, float]:
        seconds, self.seconds = dict(self.seconds), defaultdict(float)
        return seconds

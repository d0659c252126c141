"""Wall-clock time per section of an iteration (env step, host<->device copies, policy forward,
update...)."""

from __future__ import annotations

import time
from collections import defaultdict


class _Section:
    """One named section's context manager, reused at every entry. A plain class rather than
    ``contextlib.contextmanager``: the rollout enters two sections per env step, and a
    generator-based context costs ~4x more per entry."""

    __slots__ = ("timer", "name", "start", "inner")

    def __init__(self, timer: SectionTimer, name: str):
        self.timer, self.name, self.start, self.inner = timer, name, 0.0, 0.0

    def __enter__(self) -> None:
        self.start, self.inner = time.perf_counter(), 0.0
        self.timer._open.append(self)

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self.start
        open_sections = self.timer._open
        open_sections.pop()
        self.timer.seconds[self.name] += elapsed - self.inner
        if open_sections:
            open_sections[-1].inner += elapsed


class SectionTimer:
    """Accumulates seconds per named section until ``pop``. A section entered inside another
    (the copies inside ``envs.step``) is counted once, as its own: the outer one's figure
    excludes it. On CUDA the figures are host time: kernels launched in one section may finish
    in the next."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._sections: dict[str, _Section] = {}
        self._open: list[_Section] = []

    def section(self, name: str) -> _Section:
        section = self._sections.get(name)
        if section is None:
            section = self._sections[name] = _Section(self, name)
        return section

    def pop(self) -> dict[str, float]:
        seconds, self.seconds = dict(self.seconds), defaultdict(float)
        return seconds

"""SectionTimer adds up the time spent in each named section until pop (on a fake clock)."""

from __future__ import annotations

import pytest

import fastppo.profiling
from fastppo.profiling import SectionTimer


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(fastppo.profiling.time, "perf_counter", fake)
    return fake


def test_time_is_counted_when_the_section_raises(clock):
    timer = SectionTimer()
    with pytest.raises(RuntimeError):
        with timer.section("env"):
            clock.advance(1.0)
            raise RuntimeError
    assert timer.pop() == {"env": 1.0}


def test_sections_accumulate_a_nested_one_counts_once_as_its_own_and_pop_resets(clock):
    timer = SectionTimer()
    for _ in range(2):
        with timer.section("env"):
            clock.advance(2.0)
            with timer.section("copy"):
                clock.advance(4.0)
            clock.advance(1.0)
    with timer.section("update"):
        clock.advance(5.0)
    assert timer.pop() == {"copy": 8.0, "env": 6.0, "update": 5.0}
    assert timer.pop() == {}

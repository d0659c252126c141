"""SectionTimer adds up the time spent in each named section until pop."""

from __future__ import annotations

import time

from fastppo.profiling import SectionTimer


def test_sections_accumulate_and_pop_resets():
    timer = SectionTimer()
    for _ in range(3):
        with timer.section("env"):
            time.sleep(0.002)
    with timer.section("update"):
        pass
    seconds = timer.pop()
    assert set(seconds) == {"env", "update"}
    assert seconds["env"] >= 0.006 and seconds["update"] < seconds["env"]
    assert timer.pop() == {}


def test_time_is_counted_when_the_section_raises():
    timer = SectionTimer()
    try:
        with timer.section("env"):
            time.sleep(0.001)
            raise RuntimeError
    except RuntimeError:
        pass
    assert timer.pop()["env"] >= 0.001

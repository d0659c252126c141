"""Schedules over training progress."""

import pytest

from fastppo.core import schedule_progress, scheduled


def test_constant():
    for progress in (0.0, 0.3, 1.0):
        assert scheduled("constant", 2.5e-4, progress) == 2.5e-4
        assert scheduled("constant", 0.2, progress, end=0.0) == 0.2


def test_linear():
    assert scheduled("linear", 3e-4, 0.0) == pytest.approx(3e-4)
    assert scheduled("linear", 3e-4, 0.5) == pytest.approx(1.5e-4)
    assert scheduled("linear", 3e-4, 1.0) == pytest.approx(0.0)
    assert scheduled("linear", 0.2, 0.25, end=0.1) == pytest.approx(0.175)
    assert scheduled("linear", 0.0, 0.75, end=0.04) == pytest.approx(0.03)  # increasing schedules too


def test_linear_follows_cleanrl_annealing():
    # CleanRL: frac = 1 - (iteration - 1) / num_iterations; lr = frac * learning_rate
    lr, iterations = 2.5e-4, 7
    for iteration in range(1, iterations + 1):
        frac = 1.0 - (iteration - 1.0) / iterations
        assert scheduled("linear", lr, (iteration - 1) / iterations) == pytest.approx(frac * lr)


def test_progress_is_cleanrls_until_a_resume_anchors_it():
    assert [schedule_progress(i, 7) for i in range(1, 8)] == [(i - 1) / 7 for i in range(1, 8)]  # bit for bit
    # Extended from 7 to 10 iterations after 4: iteration 5 keeps its old progress, 11 would reach 1.
    anchor = (4, schedule_progress(5, 7))
    assert schedule_progress(5, 10, anchor) == 4 / 7
    assert schedule_progress(11, 10, anchor) == pytest.approx(1.0)


def test_unknown_kind_raises():
    with pytest.raises(ValueError, match="cosine"):
        scheduled("cosine", 1.0, 0.5)

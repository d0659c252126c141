"""Schedules over training progress."""

import pytest

from fastppo.core import schedule_progress, scheduled, warmup_scheduled


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


def test_cosine():
    assert scheduled("cosine", 1.0, 0.0) == pytest.approx(1.0)
    assert scheduled("cosine", 1.0, 0.25) == pytest.approx(0.85355339)  # (1 + cos(pi/4)) / 2
    assert scheduled("cosine", 1.0, 0.5) == pytest.approx(0.5)
    assert scheduled("cosine", 1.0, 1.0) == pytest.approx(0.0, abs=1e-12)
    assert scheduled("cosine", 1.0, 0.5, end=0.1) == pytest.approx(0.55)


def test_warmup_then_decay_by_hand():
    # 10 steps, 2 of warm-up: 5e-4, 1e-3, then the decay over steps 3..10 at progress (step - 3) / 8.
    linear = [warmup_scheduled("linear", 1e-3, step, 10, 2) for step in range(1, 11)]
    assert linear == pytest.approx([5e-4, 1e-3, 1e-3, 8.75e-4, 7.5e-4, 6.25e-4, 5e-4, 3.75e-4, 2.5e-4, 1.25e-4])
    cosine = {step: warmup_scheduled("cosine", 1e-3, step, 10, 2) for step in (1, 2, 3, 6, 10)}
    assert cosine == pytest.approx({1: 5e-4, 2: 1e-3, 3: 1e-3, 6: 6.9134172e-4, 10: 3.806023e-5})
    assert [warmup_scheduled("constant", 1e-3, step, 10, 4) for step in (1, 4, 5, 10)] == pytest.approx(
        [2.5e-4, 1e-3, 1e-3, 1e-3]
    )


def test_no_warmup_starts_at_the_full_value():
    assert warmup_scheduled("constant", 3e-4, 1, 5, 0) == 3e-4
    assert [warmup_scheduled("linear", 1.0, step, 4, 0) for step in range(1, 5)] == pytest.approx(
        [1.0, 0.75, 0.5, 0.25]
    )


def test_warmup_longer_than_the_run_only_ramps():
    assert [warmup_scheduled("cosine", 1.0, step, 3, 6) for step in range(1, 4)] == pytest.approx([1 / 6, 2 / 6, 3 / 6])


def test_unknown_kind_raises():
    with pytest.raises(ValueError, match="cosine"):
        scheduled("exponential", 1.0, 0.5)

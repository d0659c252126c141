"""Warning signs in the diagnostics map to one warning each, with a likely cause."""

from __future__ import annotations

from fastppo.training.diagnostics import HealthMonitor


def metrics(kl=0.01, clipfrac=0.1, entropy=0.6, v_loss=1.0):
    return {"losses/approx_kl": kl, "losses/clipfrac": clipfrac, "losses/entropy": entropy, "losses/value_loss": v_loss}


def test_healthy_training_gives_no_warning():
    monitor = HealthMonitor()
    assert all(monitor.check(metrics(), i / 100) == [] for i in range(100))


def test_sustained_high_kl_warns_once_about_the_learning_rate():
    monitor = HealthMonitor()
    warnings = [w for i in range(20) for w in monitor.check(metrics(kl=0.08), i / 100)]
    assert len(warnings) == 1 and "learning rate too high" in warnings[0]


def test_a_single_kl_spike_is_not_sustained():
    monitor = HealthMonitor()
    history = [0.01] * 4 + [0.2] + [0.01] * 4
    assert [w for i, kl in enumerate(history) for w in monitor.check(metrics(kl=kl), i / 100)] == []


def test_clip_fraction_too_high_and_stuck_at_zero():
    assert "too aggressive" in HealthMonitor().check(metrics(clipfrac=0.7), 0.1)[0]
    monitor = HealthMonitor()
    warnings = [w for i in range(10) for w in monitor.check(metrics(clipfrac=0.0, kl=1e-7), i / 100)]
    assert len(warnings) == 1 and "stuck at 0" in warnings[0]


def test_clip_fraction_zero_while_the_policy_still_moves_is_not_a_warning():
    # CleanRL's ppo.py on CartPole: clip_fraction 0 and approx_kl ~1e-4 for many iterations, learning fine.
    monitor = HealthMonitor()
    assert [w for i in range(30) for w in monitor.check(metrics(clipfrac=0.0, kl=2e-4), i / 100)] == []


def test_a_policy_still_late_in_an_annealed_run_is_not_stuck():
    monitor = HealthMonitor()
    assert [w for i in range(30) for w in monitor.check(metrics(clipfrac=0.0, kl=1e-9), 0.6 + i / 100)] == []


def test_a_converged_deterministic_policy_is_not_stuck():
    monitor = HealthMonitor()
    monitor.check(metrics(entropy=0.69), 0.0)
    assert [w for i in range(30) for w in monitor.check(metrics(clipfrac=0.0, kl=0.0, entropy=0.02), 0.5 + i / 100)] == []


def test_entropy_collapse_early_but_not_late():
    monitor = HealthMonitor()
    monitor.check(metrics(entropy=0.69), 0.0)
    assert "raise --ent-coef" in monitor.check(metrics(entropy=0.001), 0.1)[0]
    late = HealthMonitor()
    late.check(metrics(entropy=0.69), 0.0)
    assert late.check(metrics(entropy=0.001), 0.9) == []


def test_rising_value_loss_warns():
    monitor = HealthMonitor()
    warnings = [w for i in range(10) for w in monitor.check(metrics(v_loss=2.0**i), i / 100)]
    assert len(warnings) == 1 and "value network diverging" in warnings[0]


def test_small_value_loss_wobbles_do_not_warn():
    monitor = HealthMonitor()
    assert [w for i in range(10) for w in monitor.check(metrics(v_loss=0.0001 * 2.0**i), i / 100)] == []

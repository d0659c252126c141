"""Warning signs in the diagnostics map to one warning each, with a likely cause."""

from __future__ import annotations

import json

import pytest

import fastppo
from fastppo.config import available_presets
from fastppo.envs.env_config import make_config
from fastppo.training.diagnostics import HealthMonitor
from tests.support.paths import SUPPORT


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
    warnings = [w for i in range(10) for w in monitor.check(metrics(clipfrac=0.0, kl=1e-9), i / 100)]
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
    assert [
        w for i in range(30) for w in monitor.check(metrics(clipfrac=0.0, kl=0.0, entropy=0.02), 0.5 + i / 100)
    ] == []


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


def test_the_documented_acrobot_run_learns_without_a_warning():
    """The monitor's inputs, as logged, of ``fastppo train Acrobot-v1 --seed 3 --total-timesteps
    2e5`` (the getting-started command): it learns from -500 to -100 with approx_kl below 1e-5 in
    2 of 3 updates and clip_fraction 0 throughout; "stuck at 0" fired on it."""
    recorded = json.loads((SUPPORT / "fixtures" / "acrobot_seed3_metrics.json").read_text())
    columns = recorded["metrics"]
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    returns = [r for r in recorded["episodic_return"] if r is not None]
    assert returns[0] == -500 and max(returns[-20:]) < -85 and len(rows) == recorded["num_iterations"]  # it learns
    monitor = HealthMonitor()
    assert [w for i, row in enumerate(rows) for w in monitor.check(row, i / len(rows))] == []


def warnings_of_run(capsys, env_id: str, **flags) -> list[str]:
    fastppo.train(env_id, progress=False, tensorboard=False, **flags)
    out = capsys.readouterr()
    return [line for line in (out.out + out.err).splitlines() if "warning" in line.lower()]


def test_a_policy_that_does_not_move_is_warned_about_in_a_real_run(tmp_path, capsys):
    # A learning rate 1e6 times too small: approx_kl ~1e-15, the policy stays where it started.
    tiny = {"num_envs": 2, "num_steps": 16, "total_timesteps": 20 * 32, "seed": 1, "run_dir": tmp_path / "still"}
    warnings = warnings_of_run(capsys, "CartPole-v1", learning_rate=1e-8, **tiny)
    assert (
        len(warnings) == 1
        and "clip_fraction stuck at 0 and approx_kl below 1e-07: the policy barely moves" in warnings[0]
    )


SHORT_UPDATES = 20
"""A short run: the warning signs' windows (10 updates in the first half of the run) fill."""

PRESET_ENVS = {
    "Acrobot-v1": "Acrobot-v1", "CartPole-v1": "CartPole-v1", "CartPoleNoVelocity-v1": "CartPoleNoVelocity-v1",
    "Pendulum-v1": "Pendulum-v1", "cleanrl-discrete": "CartPole-v1", "cleanrl-continuous": "Pendulum-v1",
    "simple_spread_v3": "pz:mpe2.simple_spread_v3",
    "popgym-RepeatPreviousEasy-v0": "popgym:popgym-RepeatPreviousEasy-v0",
    "tictactoe_v3": "pz:pettingzoo.classic.tictactoe_v3", "connect_four_v3": "pz:pettingzoo.classic.connect_four_v3",
    "leduc_holdem_v4": "pz:pettingzoo.classic.leduc_holdem_v4", "LunarLander-v3": "LunarLander-v3",
    "LunarLanderContinuous": "LunarLanderContinuous-v3", "BipedalWalker": "BipedalWalker-v3", "Ant": "Ant-v5",
    "HalfCheetah": "HalfCheetah-v5", "Hopper": "Hopper-v5", "Humanoid": "Humanoid-v5", "Walker2d": "Walker2d-v5",
    "atari": "ALE/Pong-v5", "atari-lstm": "ALE/Pong-v5",
}  # fmt: skip
"""An env each preset is for."""

QUICK = {"Acrobot-v1", "CartPole-v1"}
"""The presets whose short run takes a few seconds; the others' are slow (up to a minute and more)."""

NEEDS = {
    "pz:": "pettingzoo",
    "popgym:": "popgym",
    "ALE/": "ale_py",
    "Lunar": "Box2D",
    "Bipedal": "Box2D",
    "-v5": "mujoco",
}
"""The package an env id needs, by a part of the id: a preset whose env is not installed is skipped."""


def test_every_preset_has_an_env_for_its_short_run():
    assert sorted(PRESET_ENVS) == available_presets()


@pytest.mark.parametrize(
    "preset", [p if p in QUICK else pytest.param(p, marks=pytest.mark.slow) for p in sorted(PRESET_ENVS)]
)
def test_a_short_run_of_each_preset_gives_no_warning(preset, tmp_path, capsys):
    """Each preset as shipped, for its first SHORT_UPDATES updates (BipedalWalker's on 2 of its 32
    envs: 20 of its updates would be 1.3M steps). A warning sign must not fire on a healthy run."""
    env_id = PRESET_ENVS[preset]
    for part, package in NEEDS.items():
        if part in env_id:
            pytest.importorskip(package)
    overrides = {"num_envs": 2} if preset == "BipedalWalker" else {}
    batch = make_config(env_id, preset, overrides).batch_size
    assert (
        warnings_of_run(
            capsys,
            env_id,
            preset=preset,
            total_timesteps=SHORT_UPDATES * batch,
            seed=1,
            run_dir=tmp_path / "run",
            **overrides,
        )
        == []
    )

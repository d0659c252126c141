"""Learning runs: the default one solves CartPole; the long ones are marked slow (make test-slow)."""

from __future__ import annotations

import numpy as np
import pytest

import fastppo


def test_cartpole_preset_solves_within_200k_steps():
    agent = fastppo.train("CartPole-v1", seed=1, total_timesteps=200_000, progress=False, tensorboard=False)
    steps = agent.history[-1]["global_step"]
    assert steps <= 200_000
    assert np.mean(agent.episode_returns[-20:]) >= 475


@pytest.mark.slow
def test_pendulum_preset_reaches_minus_300():
    agent = fastppo.train("Pendulum-v1", seed=1, progress=False, tensorboard=False)
    assert np.mean(agent.episode_returns[-20:]) >= -300


@pytest.mark.slow
def test_lunarlander_preset_reaches_200_within_1m_steps():
    agent = fastppo.train("LunarLander-v3", seed=1, progress=False, tensorboard=False)
    assert np.mean(agent.episode_returns[-20:]) >= 200


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sync", "tensor"])
def test_cartpole_no_velocity_preset_solves_with_memory(backend):
    """The recurrent preset on CartPole seeing only [x, theta]: some 20 episodes in a row average
    475 (a memoryless MLP stays near 45: benchmarks/README.md). ~15 s per backend on 2 cores."""
    agent = fastppo.train("CartPoleNoVelocity-v1", seed=1, backend=backend, progress=False, tensorboard=False, checkpoint_every=0)
    returns = np.asarray(agent.episode_returns)
    assert agent.config.policy.memory != "none"
    assert np.convolve(returns, np.ones(20) / 20, mode="valid").max() >= 475

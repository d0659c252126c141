"""CartPoleNoVelocity-v1 (fastppo.envs.partial): CartPole-v1 observing [x, theta] only.

The gymnasium env is checked against CartPole-v1 itself, step by step; the tensor twin is checked
against the gymnasium env in tests/envs/test_tensor_envs.py (its ``CASES``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import fastppo
from fastppo.envs import make_single_env
from fastppo.envs.make import env_spaces
from fastppo.envs.partial import KeepObservationEntries
from fastppo.errors import FastPPOError

ENV_ID = "CartPoleNoVelocity-v1"


def test_registered_like_cartpole_with_two_observations() -> None:
    env, cartpole = gym.make(ENV_ID), gym.make("CartPole-v1")
    assert env.spec.max_episode_steps == 500 and env.spec.reward_threshold == 475.0
    assert env.action_space == cartpole.action_space
    space = env.observation_space
    assert isinstance(space, gym.spaces.Box) and space.shape == (2,) and space.dtype == np.float32
    np.testing.assert_array_equal(space.low, cartpole.observation_space.low[[0, 2]])
    np.testing.assert_array_equal(space.high, cartpole.observation_space.high[[0, 2]])


def test_observations_are_cartpole_columns_0_and_2_step_for_step() -> None:
    """Same seed, same actions, through several terminations and resets: the observation is
    CartPole-v1's [x, theta] and reward, terminated and truncated are CartPole-v1's."""
    env, cartpole = gym.make(ENV_ID), gym.make("CartPole-v1")
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=3)
    full, _ = cartpole.reset(seed=3)
    episodes = 0
    for _ in range(400):
        assert obs.dtype == np.float32 and obs in env.observation_space
        np.testing.assert_array_equal(obs, full[[0, 2]])
        action = int(rng.integers(2))
        obs, reward, terminated, truncated, _ = env.step(action)
        full, full_reward, full_terminated, full_truncated, _ = cartpole.step(action)
        assert (reward, terminated, truncated) == (full_reward, full_terminated, full_truncated)
        if terminated or truncated:
            episodes += 1
            obs, _ = env.reset()
            full, _ = cartpole.reset()
    assert episodes > 5


def test_truncated_at_500_steps() -> None:
    """Held upright (the state pinned at 0 before each step), the episode is truncated at step 500."""
    env = gym.make(ENV_ID)
    env.reset(seed=0)
    for t in range(1, 501):
        env.unwrapped.state = np.zeros(4)
        _, reward, terminated, truncated, _ = env.step(t % 2)
        assert reward == 1.0 and not terminated and truncated == (t == 500)


def test_renders_rgb_frames() -> None:
    """``fastppo record`` renders with rgb_array; the wrapper leaves rendering to CartPole."""
    env = make_single_env(ENV_ID, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (400, 600, 3) and frame.dtype == np.uint8
    env.close()


def test_keep_observation_entries_rejects_bad_input() -> None:
    with pytest.raises(FastPPOError, match="entries of a 4-vector"):
        KeepObservationEntries(gym.make("CartPole-v1"), [0, 4])
    with pytest.raises(FastPPOError, match="1-D Box"):
        KeepObservationEntries(gym.make("FrozenLake-v1"), [0])


@pytest.mark.parametrize("backend", ["sync", "tensor"])
def test_make_config_and_spaces(backend: str) -> None:
    config = fastppo.make_config(ENV_ID, overrides={"backend": backend})
    assert config.env.env_id == ENV_ID and config.env.backend == backend
    observation_space, action_space = env_spaces(ENV_ID, backend)
    assert observation_space == gym.make(ENV_ID).observation_space
    assert action_space == gym.spaces.Discrete(2)


@pytest.mark.parametrize("backend", ["sync", "tensor"])
def test_mlp_policy_trains(backend: str) -> None:
    # the env's own preset is recurrent: this checks the plain MLP path on the env
    agent = fastppo.train(
        ENV_ID,
        backend=backend,
        total_timesteps=512,
        num_envs=2,
        num_steps=64,
        progress=False,
        tensorboard=False,
        **{"policy.memory": "none"},
    )
    assert agent.history and all(np.isfinite(row["losses/value_loss"]) for row in agent.history)
    action = agent.act(torch.zeros(2).numpy())
    assert action in (0, 1)

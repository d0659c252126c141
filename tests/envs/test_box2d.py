"""Box2D: LunarLander-v3 (discrete), LunarLanderContinuous-v3 and BipedalWalker-v3 get their
presets, and a short run of each trains."""

from __future__ import annotations

import gymnasium as gym
import pytest

import fastppo
from fastppo.config import preset_for_env
from fastppo.envs import make_single_env
from fastppo.envs.env_config import make_config

pytest.importorskip("Box2D", reason='Box2D is not installed: pip install -e ".[box2d]"')


def test_lunar_lander_continuous_is_lunar_lander_with_continuous_actions():
    env = make_single_env("LunarLanderContinuous-v3")
    assert isinstance(env.action_space, gym.spaces.Box) and env.action_space.shape == (2,)
    assert env.spec.max_episode_steps == gym.spec("LunarLander-v3").max_episode_steps
    env.close()


@pytest.mark.parametrize(
    ("env_id", "preset", "num_envs"),
    [("LunarLanderContinuous-v3", "LunarLanderContinuous", 16), ("BipedalWalker-v3", "BipedalWalker", 32)],
)
def test_box2d_presets_load(env_id, preset, num_envs):
    assert preset_for_env(env_id, continuous=True) == preset
    config = make_config(env_id)
    assert config.env.num_envs == num_envs and config.env.normalize_obs and config.ppo.gamma == 0.999


def test_discrete_lunar_lander_keeps_its_own_preset():
    assert preset_for_env("LunarLander-v3", continuous=False) != "LunarLanderContinuous"


@pytest.mark.parametrize("env_id", ["LunarLander-v3", "LunarLanderContinuous-v3", "BipedalWalker-v3"])
def test_a_short_run_trains(env_id):
    agent = fastppo.train(
        env_id, total_timesteps=256, num_envs=2, num_steps=64, num_minibatches=2, progress=False, tensorboard=False
    )
    assert len(agent.history) == 2

"""The EnvPool backend against the gymnasium one: same observation shape, dtype and range, the same
NEXT_STEP reset rows and truncation, and episodic returns recorded the same way (raw, whole game)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
import torch

import fastppo
from fastppo.config import EnvConfig
from fastppo.envs import make_vec_env
from fastppo.envs.envpool_vec import import_envpool, make_envpool_env
from fastppo.errors import FastPPOError

CPU = torch.device("cpu")
needs_envpool = pytest.mark.skipif(
    importlib.util.find_spec("envpool") is None, reason="envpool is not installed: pip install envpool"
)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def test_missing_envpool_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)
    with pytest.raises(FastPPOError, match="envpool is not installed: pip install envpool"):
        import_envpool()


@needs_envpool
def test_unknown_envpool_id_is_a_clear_error():
    with pytest.raises(FastPPOError, match="EnvPool has no env"):
        make_envpool_env(EnvConfig(env_id="NoSuchEnv-v0", backend="envpool"), CPU)


def run_random(env_id: str, backend: str, num_envs: int, steps: int, seed: int = 0):
    """Random actions; returns (observations seen, terminated count, truncated steps, episodes, env)."""
    envs = make_vec_env(EnvConfig(env_id=env_id, num_envs=num_envs, backend=backend), CPU)
    first = envs.reset(seed=seed)
    space = envs.single_action_space
    space.seed(seed)
    observations, terminated, truncated_at = [first.obs], 0, []
    reset_row = torch.zeros(num_envs, dtype=torch.bool)
    for t in range(steps):
        step = envs.step(torch.as_tensor(np.stack([space.sample() for _ in range(num_envs)])))
        # NEXT_STEP: the step after an episode ends carries reward 0 and no flags.
        assert (step.reward[reset_row] == 0).all() and not (step.terminated | step.truncated)[reset_row].any()
        observations.append(step.obs)
        terminated += int(step.terminated.sum())
        truncated_at += [t] * int(step.truncated.sum())
        reset_row = step.terminated | step.truncated
    episodes = envs.pop_episodes()
    envs.close()
    return torch.stack(observations), terminated, truncated_at, episodes, envs


@needs_envpool
def test_atari_matches_gymnasium_observations_and_whole_game_returns():
    results = {
        backend: run_random("BreakoutNoFrameskip-v4", backend, num_envs=2, steps=600) for backend in ("sync", "envpool")
    }
    for backend, (obs, terminated, _, episodes, envs) in results.items():
        assert envs.single_observation_space.shape == (4, 84, 84), backend
        assert obs.dtype == torch.uint8 and obs.shape[2:] == (4, 84, 84), backend
        assert 0 < int(obs.max()) <= 255, backend
        # Lost lives end training episodes (terminated) but only whole games are logged,
        # with the raw score (Breakout: 5 lives, integer points).
        assert episodes.returns, f"{backend}: no game finished in 600 random steps"
        assert terminated >= 5 * len(episodes.returns), backend
        assert all(r >= 0 and float(r).is_integer() for r in episodes.returns), backend
        assert all(length > 50 for length in episodes.lengths), backend
    # Random Breakout scores about 1-2 points a game on both backends.
    for backend, (*_, episodes, _) in results.items():
        assert 0 <= np.mean(episodes.returns) < 10, backend


@needs_envpool
def test_atari_frame_stack_is_envpools_stack_num(tmp_path):
    """--env.frame-stack 1 on EnvPool; the saved agent reloads on the gymnasium env, one channel too."""
    envs = make_vec_env(EnvConfig(env_id="BreakoutNoFrameskip-v4", num_envs=2, backend="envpool", frame_stack=1), CPU)
    assert envs.single_observation_space.shape == (1, 84, 84)
    assert envs.reset(seed=0).obs.shape == (2, 1, 84, 84) and envs.step(torch.ones(2, dtype=torch.long)).obs.shape == (
        2,
        1,
        84,
        84,
    )
    envs.close()
    fastppo.train(
        "BreakoutNoFrameskip-v4", preset="atari-lstm", backend="envpool", run_dir=tmp_path, total_timesteps=128,
        num_envs=2, num_steps=64, num_minibatches=2, progress=False, tensorboard=False,
    )  # fmt: skip
    assert fastppo.load(tmp_path).obs_shape == (1, 84, 84)


@needs_envpool
def test_mujoco_matches_gymnasium_shapes_and_truncation():
    for backend in ("sync", "envpool"):
        obs, terminated, truncated_at, episodes, envs = run_random("HalfCheetah-v4", backend, num_envs=1, steps=1002)
        assert envs.single_observation_space.shape == (17,) and obs.dtype == torch.float32, backend
        assert obs.abs().max() < 100, backend
        assert terminated == 0 and truncated_at == [999], backend  # TimeLimit 1000, no termination
        assert episodes.lengths == [1000] and len(episodes.returns) == 1, backend


@needs_envpool
def test_classic_control_records_the_same_episodes():
    for backend in ("sync", "envpool"):
        obs, terminated, _, episodes, envs = run_random("CartPole-v1", backend, num_envs=4, steps=300)
        assert obs.shape[2:] == (4,) and obs.dtype == torch.float32, backend
        assert len(episodes.returns) == terminated > 10, backend
        assert episodes.returns == [float(n) for n in episodes.lengths], backend  # +1 per step


@needs_envpool
def test_training_runs_on_the_envpool_backend():
    agent = fastppo.train(
        "CartPole-v1",
        backend="envpool",
        total_timesteps=512,
        num_envs=4,
        num_steps=64,
        progress=False,
        tensorboard=False,
    )
    assert len(agent.history) == 2 and agent.episode_returns
    agent = fastppo.train(
        "LunarLanderContinuous-v3",
        backend="envpool",
        total_timesteps=256,
        num_envs=2,
        num_steps=64,
        num_minibatches=2,
        progress=False,
        tensorboard=False,
    )
    assert agent.config.env.num_envs == 2 and len(agent.history) == 2

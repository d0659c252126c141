"""A user's own env named where an env id goes: a TensorEnv subclass as ``path/to/file.py:Class``
(or ``module:Class``) trains, evaluates and fails clearly through the same entry points as the
built-in envs; gymnasium envs by class (module or file) or by gymnasium's own ``module:Id``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

import fastppo
from fastppo.cli import main
from fastppo.envs.gymnasium_vec import check_env_id
from fastppo.envs.tensor import make_tensor_env
from fastppo.errors import FastPPOError

MATCH_ENV = textwrap.dedent(
    '''
    import gymnasium as gym
    import torch

    from fastppo.envs.tensor import TensorEnv


    class Match(TensorEnv):
        """Each step shows one of 3 targets (one-hot); the reward is 1 for naming it. 8 steps an episode."""

        single_observation_space = gym.spaces.Box(0.0, 1.0, shape=(3,))
        single_action_space = gym.spaces.Discrete(3)
        max_episode_steps = 8

        def _reset_state(self):
            return self._uniform(0.0, 3.0).floor()

        def _dynamics(self, state, actions):
            reward = (actions == state[:, 0].long()).to(state.dtype)
            return self._uniform(0.0, 3.0).floor(), reward, torch.zeros_like(reward, dtype=torch.bool)

        def _observe(self, state):
            return torch.nn.functional.one_hot(state[:, 0].long(), 3).to(self.dtype)


    class NotAnEnv:
        pass
    '''
)

TRAIN = dict(num_envs=64, num_steps=8, total_timesteps=16_384, learning_rate=3e-3, progress=False, tensorboard=False)


@pytest.fixture
def match_file(tmp_path: Path) -> str:
    path = tmp_path / "match_env.py"
    path.write_text(MATCH_ENV)
    return str(path)


def test_user_tensor_env_trains_and_evaluates(match_file):
    agent = fastppo.train(f"{match_file}:Match", backend="tensor", seed=1, **TRAIN)
    assert agent.history[0]["charts/episodic_return"] < 4.0  # random guessing scores 8/3
    assert agent.history[-1]["charts/episodic_return"] >= 7.5
    result = fastppo.evaluate(agent, episodes=16, deterministic=True, seed=0)
    assert len(result.returns) == 16 and result.lengths == [8] * 16
    assert result.mean_return >= 7.5


def test_user_tensor_env_from_the_cli(match_file, tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = ["train", f"{match_file}:Match", "--backend", "tensor", "--num-envs", "16", "--num-steps", "8", "--total-timesteps", "512"]
    assert main([*args, "--run-dir", str(run_dir), "--progress", "false", "--tensorboard", "false"]) == 0
    assert main(["eval", str(run_dir), "--episodes", "4"]) == 0
    assert "over 4 episodes" in capsys.readouterr().out
    assert main(["record", str(run_dir), "--out", str(tmp_path / "match.mp4")]) == 2
    assert "a tensor env has no renderer" in capsys.readouterr().err


def test_a_spec_that_is_not_a_tensor_env_is_a_clear_error(match_file):
    with pytest.raises(FastPPOError, match="no tensor env for .*NotAnEnv.*your own subclass of fastppo.envs.tensor.TensorEnv"):
        make_tensor_env(f"{match_file}:NotAnEnv", 4)
    with pytest.raises(FastPPOError, match="cannot load env 'no_such_module_xyz:Match'"):
        fastppo.train("no_such_module_xyz:Match", backend="tensor", **TRAIN)


def test_gymnasium_module_colon_id_syntax_passes_through():
    # gymnasium's own 'module:Id': the module is imported (registering Id), then Id is made.
    env = check_env_id("gymnasium.envs.classic_control:CartPole-v1")
    assert isinstance(env.unwrapped, gym.Env) and env.spec.id == "CartPole-v1"
    env.close()


def test_gymnasium_env_class_from_a_file():
    env = check_env_id(f"{Path(__file__).parent / 'fake_envs.py'}:TargetEnv")
    assert env.spec.id.startswith("fastppo/") and env.spec.id.endswith("fake_envs_py_TargetEnv-v0")
    env.close()

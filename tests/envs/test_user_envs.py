"""A user's own env named where an env id goes: a TensorEnv subclass as ``module:Class``,
``path/to/file.py:Class`` or the class itself trains, evaluates and fails clearly through the same
entry points as the built-in envs; gymnasium envs by class (module or file) or by gymnasium's own
``module:Id``."""

from __future__ import annotations

import pytest
import torch

import fastppo
from fastppo.cli.main import main
from fastppo.env_ids import named_object
from fastppo.envs.gymnasium_vec import gym_make
from fastppo.envs.tensor import make_tensor_env
from fastppo.errors import FastPPOError
from tests.support.fake_envs import MatchTensorEnv
from tests.support.paths import ROOT, SUPPORT

FAKE_ENVS_FILE = SUPPORT / "fake_envs.py"
TRAIN = dict(num_envs=64, num_steps=8, total_timesteps=16_384, learning_rate=3e-3, progress=False, tensorboard=False)


def test_user_tensor_env_from_a_file_trains_and_evaluates():
    agent = fastppo.train(f"{FAKE_ENVS_FILE}:MatchTensorEnv", backend="tensor", seed=1, **TRAIN)
    assert agent.history[0]["charts/episodic_return"] < 4.0  # random guessing scores 8/3
    assert agent.history[-1]["charts/episodic_return"] >= 7.5
    result = fastppo.evaluate(agent, episodes=16, deterministic=True, seed=0)
    assert len(result.returns) == 16 and result.lengths == [8] * 16
    assert result.mean_return >= 7.5


def test_user_tensor_env_from_the_cli(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = [
        "train",
        "tests.support.fake_envs:MatchTensorEnv",
        "--backend",
        "tensor",
        "--num-envs",
        "16",
        "--num-steps",
        "8",
        "--total-timesteps",
        "512",
    ]
    assert main([*args, "--run-dir", str(run_dir), "--progress", "false", "--tensorboard", "false"]) == 0
    env = [
        "--env-id",
        "tests.support.fake_envs:MatchTensorEnv",
    ]  # user code is imported only when the command line names it
    assert main(["eval", str(run_dir), "--episodes", "4", *env]) == 0
    assert "over 4 episodes" in capsys.readouterr().out
    assert main(["record", str(run_dir), "--out", str(tmp_path / "match.mp4"), *env]) == 2
    assert "a tensor env has no renderer" in capsys.readouterr().err


def test_an_env_class_itself_trains_through_the_python_api():
    agent = fastppo.train(MatchTensorEnv, seed=1, **{**TRAIN, "total_timesteps": 1024})
    assert agent.config.env.env_id == "tests.support.fake_envs:MatchTensorEnv"
    assert agent.config.env.backend == "tensor"  # picked for a TensorEnv class
    assert len(agent.history) == 2


def test_a_spec_that_is_not_a_tensor_env_is_a_clear_error():
    with pytest.raises(
        FastPPOError,
        match=(
            "no tensor env for 'tests.support.fake_envs:TargetEnv'.*your own subclass of fastppo.envs.tensor.TensorEnv"
        ),
    ):
        make_tensor_env("tests.support.fake_envs:TargetEnv", 4)  # a gymnasium env, not a tensor env
    with pytest.raises(FastPPOError, match="cannot load env 'no_such_module_xyz:Match'"):
        fastppo.train("no_such_module_xyz:Match", backend="tensor", **TRAIN)


def test_a_tensor_env_by_name_picks_the_tensor_backend(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = [
        "train",
        "tests.support.fake_envs:MatchTensorEnv",
        "--num-envs",
        "16",
        "--num-steps",
        "8",
        "--total-timesteps",
        "256",
        "--num-minibatches",
        "2",
    ]
    assert main([*args, "--run-dir", str(run_dir), "--progress", "false", "--tensorboard", "false"]) == 0
    assert fastppo.load(run_dir).config.env.backend == "tensor"


def test_a_file_env_run_evaluates_from_any_folder(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    monkeypatch.chdir(FAKE_ENVS_FILE.parent)
    args = [
        "fake_envs.py:MatchTensorEnv",
        "--backend",
        "tensor",
        "--num-envs",
        "16",
        "--num-steps",
        "8",
        "--num-minibatches",
        "2",
        "--lr-schedule",
        "constant",
    ]
    assert (
        main(
            [
                "train",
                *args,
                "--total-timesteps",
                "256",
                "--run-dir",
                str(run_dir),
                "--progress",
                "false",
                "--tensorboard",
                "false",
            ]
        )
        == 0
    )
    assert fastppo.load(run_dir).config.env.env_id == f"{FAKE_ENVS_FILE}:MatchTensorEnv"  # stored absolute
    monkeypatch.chdir(tmp_path)
    assert main(["eval", str(run_dir), "--episodes", "2", "--env-id", f"{FAKE_ENVS_FILE}:MatchTensorEnv"]) == 0
    assert "over 2 episodes" in capsys.readouterr().out
    assert (
        main(["train", "--resume", str(run_dir), f"{FAKE_ENVS_FILE}:MatchTensorEnv", "--total-timesteps", "512"]) == 0
    )
    monkeypatch.chdir(FAKE_ENVS_FILE.parent)  # the relative name it was trained with still names the run's env
    assert main(["train", "--resume", str(run_dir), args[0], "--total-timesteps", "768"]) == 0


def test_a_file_without_the_named_class_is_named(capsys):
    assert main(["train", f"{FAKE_ENVS_FILE}:NoSuchEnv"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"fastppo: error: cannot load env '{FAKE_ENVS_FILE}:NoSuchEnv': {FAKE_ENVS_FILE} defines no "
        "'NoSuchEnv' (check the name after the colon)\n"
    )


@pytest.mark.parametrize("name, what", [("NotAnEnv", "a class"), ("make", "a function"), ("MatchTensorEnv", None)])
def test_a_name_that_is_no_gymnasium_env_is_one_clear_line(tmp_path, capsys, name, what):
    envs = tmp_path / "my_envs.py"
    envs.write_text(
        "from tests.support.fake_envs import MatchTensorEnv\nclass NotAnEnv:\n    pass\ndef make():\n    pass\n"
    )
    assert main(["train", f"{envs}:{name}", "--backend", "sync", "--run-dir", str(tmp_path / "run")]) == 2
    expected = (
        f"'{name}' in {envs} is a TensorEnv: train it with --backend tensor"
        if what is None
        else (
            f"{envs} defines '{name}', but it is {what}, not a gymnasium.Env or TensorEnv subclass: name your "
            "env class after the colon"
        )
    )
    assert capsys.readouterr().err == f"fastppo: error: {expected}\n"


def test_gymnasium_env_class_from_a_file():
    env = gym_make(f"{FAKE_ENVS_FILE}:TargetEnv")
    assert env.spec.id.startswith("fastppo/") and env.spec.id.endswith("fake_envs_py_TargetEnv-v0")
    env.close()


def test_gymnasium_module_colon_id_syntax_passes_through():
    # gymnasium's own 'module:Id': the module is imported (registering Id), then Id is made.
    env = gym_make("gymnasium.envs.classic_control:CartPole-v1")
    assert env.spec.id == "CartPole-v1"
    env.close()


class FloatFlags(MatchTensorEnv):
    def _dynamics(self, state, actions):
        next_state, reward, terminated = super()._dynamics(state, actions)
        return next_state, reward, terminated.float()


class WideObservation(MatchTensorEnv):
    def _observe(self, state):
        return torch.zeros(self.num_envs, 4)


class ColumnReward(MatchTensorEnv):
    def _dynamics(self, state, actions):
        next_state, reward, terminated = super()._dynamics(state, actions)
        return next_state, reward.unsqueeze(1), terminated


@pytest.mark.parametrize(
    "env_class, message",
    [
        (
            WideObservation,
            r"WideObservation._observe\(state\) gave observation as a torch.float32 tensor of shape \(6, 4\): "
            r"expected a tensor of shape \[6x3\]",
        ),
        (
            FloatFlags,
            r"FloatFlags._dynamics\(state, actions\) gave terminated as a torch.float32 tensor of shape "
            r"\(6,\): expected a torch.bool tensor of shape \[6\]",
        ),
        (
            ColumnReward,
            r"ColumnReward._dynamics\(state, actions\) gave reward as a torch.float32 tensor of shape \(6, 1\)",
        ),
    ],
)
def test_a_user_env_that_breaks_the_contract_is_named_at_once(env_class, message):
    with pytest.raises(FastPPOError, match=message):
        env = env_class(6, seed=0)
        env.reset()
        env.step(torch.zeros(6, dtype=torch.long))


def test_the_point_reach_example_learns():
    example = ROOT / "examples" / "point_reach.py"
    settings = {**named_object(f"{example}:SETTINGS", "example"), "total_timesteps": 100_000}
    agent = fastppo.train(
        f"{example}:PointReach", backend="tensor", seed=1, progress=False, tensorboard=False, **settings
    )
    returns = [row["charts/episodic_return"] for row in agent.history if "charts/episodic_return" in row]
    assert returns[0] < -35.0  # the first 50-step episodes, nearly random: ~1.2 away on average, about -54
    assert fastppo.evaluate(agent, episodes=32, deterministic=True, seed=0).mean_return > -15.0

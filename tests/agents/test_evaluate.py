"""fastppo eval / record and train --capture-video, from the CLI and the Python API."""

from __future__ import annotations

import json
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest
import torch

import fastppo
from fastppo.agents.agent import build_agent
from fastppo.agents.evaluation import EvalResult
from fastppo.agents.evaluation import record as run_recording
from fastppo.cli.main import main
from fastppo.envs.make import policy_spaces
from fastppo.envs.tensor.cartpole import CartPole


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("eval") / "run"
    fastppo.train(
        "CartPole-v1",
        run_dir=run,
        total_timesteps=512,
        num_envs=2,
        num_steps=32,
        normalize_obs=True,
        progress=False,
        tensorboard=False,
    )
    return run


def frames(path: Path) -> int:
    reader = imageio.get_reader(str(path))
    try:
        return sum(1 for _ in reader)
    finally:
        reader.close()


def test_evaluate_api_returns_stats_and_is_repeatable_with_a_seed(run):
    agent = fastppo.load(run)
    result = fastppo.evaluate(agent, episodes=4, seed=3)
    assert isinstance(result, EvalResult) and len(result.returns) == len(result.lengths) == 4
    assert result.mean_return == pytest.approx(np.mean(result.returns)) and result.std_return == pytest.approx(
        np.std(result.returns)
    )
    assert result.returns == [float(n) for n in result.lengths]  # CartPole: +1 per step
    assert fastppo.evaluate(agent, episodes=4, seed=3).returns == result.returns
    assert fastppo.evaluate(run, "CartPole-v1", episodes=2, deterministic=True, seed=0).env_id == "CartPole-v1"


def test_evaluation_uses_the_frozen_observation_statistics(run):
    agent = fastppo.load(run)
    before = agent.obs_rms.mean.clone()
    fastppo.evaluate(agent, episodes=2, seed=0)
    assert agent.obs_rms is not None and float(agent.obs_rms.count) > 1 and (agent.obs_rms.mean == before).all()


def test_eval_cli_prints_mean_and_std_or_json(run, capsys):
    assert main(["eval", str(run), "--episodes", "3", "--deterministic", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "return" in out and "±" in out and "over 3 episodes (deterministic policy)" in out
    assert main(["eval", str(run), "--episodes", "3", "--seed", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["episodes"] == 3 and set(data) >= {
        "mean_return",
        "std_return",
        "mean_length",
        "std_length",
        "returns",
        "lengths",
    }


def test_eval_computes_on_the_threads_its_run_acted_with(run, capsys):
    # train acts with a small policy on one thread (more only cost time): eval does too, whatever the process had.
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert main(["eval", str(run), "--episodes", "1"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "{missing}"], "is not a directory"),
        (["eval", "{empty}"], "agent.json is missing"),
        (["eval", "{run}", "--episodes", "0"], "--episodes must be >= 1"),
        (["eval", "{run}", "--env-id", "Pendulum-v1"], "the agent expects"),
        (["record", "{missing}"], "is not a directory"),
        (["export", "{empty}", "--onnx", "{empty}/p.onnx"], "agent.json is missing"),
        # Output paths that cannot be written: a folder where the file goes, a file as a parent
        # folder, a place even root cannot create files in.
        (["record", "{run}", "--out", "{empty}"], "the video {empty} is a folder: give a file path"),
        (
            ["record", "{run}", "--out", "{file}/v.mp4"],
            "cannot write the video {file}/v.mp4: {file} is a file, not a folder",
        ),
        (["record", "{run}", "--out", "/proc/v.mp4"], "cannot write the video /proc/v.mp4: No such file or directory"),
        (["export", "{run}", "--onnx", "{empty}"], "the ONNX file {empty} is a folder: give a file path"),
        (
            ["export", "{run}", "--onnx", "{file}/sub/p.onnx"],
            "cannot write the ONNX file {file}/sub/p.onnx: {file} is a file, not a folder",
        ),
        (
            ["export", "{run}", "--onnx", "/proc/p.onnx"],
            "cannot write the ONNX file /proc/p.onnx: No such file or directory",
        ),
        (["plot", "{run}", "--out", "{empty}"], "the plot {empty} is a folder: give a file path"),
        (
            ["plot", "{run}", "--out", "{file}/p.png"],
            "cannot write the plot {file}/p.png: {file} is a file, not a folder",
        ),
        (["plot", "{run}", "--out", "/proc/p.png"], "cannot write the plot /proc/p.png: No such file or directory"),
        # File types their writer cannot write: refused before any frame is rendered or figure drawn.
        (
            ["record", "{run}", "--out", "{empty}/v.txt"],
            "the video {empty}/v.txt ends in '.txt', a file type it cannot be written as: end the name in "
            ".avi, .mkv, .mov, .mp4",
        ),
        (
            ["record", "{run}", "--out", "{empty}/v"],
            "the video {empty}/v has no file type ending: end the name in .avi, .mkv, .mov, .mp4",
        ),
        (
            ["plot", "{run}", "--out", "{empty}/p.xyz"],
            "the plot {empty}/p.xyz ends in '.xyz', a file type it cannot be written as: end the name in "
            ".avif, .eps, .gif, .jpeg, .jpg, .pdf",
        ),
    ],
)
def test_errors_are_one_line_exit_2(run, tmp_path, capsys, argv, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("")
    paths = dict(missing=tmp_path / "missing", empty=tmp_path / "empty", file=tmp_path / "file", run=run)
    argv, message = [a.format(**paths) for a in argv], message.format(**paths)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_record_writes_a_readable_mp4(run, tmp_path, capsys):
    out = tmp_path / "cartpole.mp4"
    assert main(["record", str(run), "--episodes", "2", "--out", str(out), "--seed", "0"]) == 0
    assert "wrote" in capsys.readouterr().out
    result = fastppo.evaluate(run, episodes=2, deterministic=True, seed=0)
    assert frames(out) == sum(result.lengths) + 2  # each episode's first frame, then one per step
    assert (
        fastppo.record(run, tmp_path / "api.mp4", seed=0) == tmp_path / "api.mp4" and frames(tmp_path / "api.mp4") > 0
    )


def test_record_defaults_into_the_run_dir(run, capsys):
    assert main(["record", str(run), "--seed", "0"]) == 0
    assert frames(run / "videos" / "record.mp4") > 0


def test_capture_video_records_episodes_during_training(tmp_path):
    fastppo.train(
        "CartPole-v1",
        run_dir=tmp_path,
        total_timesteps=512,
        num_envs=2,
        num_steps=32,
        capture_video=True,
        progress=False,
        tensorboard=False,
    )
    videos = sorted((tmp_path / "videos").glob("episode-*.mp4"))
    assert [v.name for v in videos[:2]] == ["episode-000000.mp4", "episode-000001.mp4"]
    assert frames(videos[0]) > 1


def test_record_plays_a_pettingzoo_agent_of_an_async_run_in_process(tmp_path):
    """Worker processes have no frames to hand over: the recorded copy is built in this process
    whatever backend the agent trained on."""
    env_id = "pz:mpe2.simple_spread_v3"
    config = fastppo.make_config(env_id, "cleanrl-discrete", {"backend": "async", "num_envs": 2})
    observation_space, action_space, layout = policy_spaces(config)
    agent = build_agent(config, observation_space, action_space, torch.device("cpu"), layout)
    out, result, written = run_recording(agent, tmp_path / "spread.mp4", episodes=1, env_id=env_id, seed=0)
    assert written == frames(out) == result.lengths[0] + 1  # the first frame, then one per step


@pytest.mark.parametrize("memory", ["none", "lstm"])
def test_a_tensor_env_plays_the_first_episode_of_each_row_in_row_order(memory):
    """play_episodes over a tensor env's rows: each row's first episode, in row order, its raw
    return and length, the policy sampled on every row at every step until the last row ends (a
    plain loop over the same env gives the same figures; episodes of different lengths end in
    another order than their rows')."""
    env_id = "fastppo.envs.tensor.cartpole:CartPole"
    config = fastppo.make_config(
        env_id, "cleanrl-discrete", {"num_envs": 1, "num_minibatches": 1, "policy.memory": memory}
    )
    torch.manual_seed(0)
    observation_space, action_space, layout = policy_spaces(config)
    agent = build_agent(config, observation_space, action_space, torch.device("cpu"), layout)
    result = fastppo.evaluate(agent, env_id, episodes=9, seed=5)
    env = CartPole(9)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        step, state = env.reset(seed=5), agent.initial_state(9) if agent.policy.recurrent else None
        returns, lengths = torch.zeros(9), torch.zeros(9, dtype=torch.long)
        running = torch.ones(9, dtype=torch.bool)
        while running.any():
            if state is None:
                action = agent.act(step.obs)
            else:
                action, state = agent.step(step.obs, state)
            step = env.step(torch.as_tensor(action))
            returns += step.reward * running
            lengths += running
            running &= ~(step.terminated | step.truncated)
    assert (result.returns, result.lengths) == (returns.tolist(), lengths.tolist())
    assert sorted(result.lengths) != result.lengths  # rows that end in another order than theirs

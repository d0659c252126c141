"""Opening a run folder someone sent you is as safe as opening a safetensors file: the policy's
spaces are data in agent.json, and no command imports code the folder names (a ``file.py:Class``,
``module:Class`` or uninstalled ``pz:<module>`` env). Such an env is imported only when the
command line (or the Python caller) names it."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import fastppo
import fastppo.agents.export
from fastppo.agents.space_data import spaces_from_data, spaces_to_data
from fastppo.cli.main import main
from fastppo.envs.layout import ObservationLayout
from fastppo.errors import FastPPOError
from fastppo.files.checksums import CHECKSUMS_FILE, write_checksums

SRC = Path(fastppo.__file__).parents[1]
# Importing this writes the marker file beside it: the payload a malicious folder would run.
PAYLOAD = """
from pathlib import Path
Path(__file__).with_name("MARKER").write_text("imported")
import gymnasium as gym
class Env(gym.Env):
    pass
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("trusted") / "run"
    fastppo.train(
        "CartPole-v1", run_dir=run, total_timesteps=128, num_envs=2, num_steps=32, progress=False, tensorboard=False
    )
    return run


def resealed(folder: Path) -> None:
    """``folder``'s checksums made anew: its files edited by whoever sent it, not damaged on the way."""
    write_checksums(folder, [line.split("  ", 1)[1] for line in (folder / CHECKSUMS_FILE).read_text().splitlines()])


def sent_folder(trained: Path, tmp_path: Path, env_id: str) -> Path:
    """A copy of ``trained`` whose agent.json files (final and checkpoints) name ``env_id``, with
    evil.py and evilmod.py (the payload) in ``tmp_path``, the working directory of the commands;
    its checksums match the edited files."""
    for name in ("evil.py", "evilmod.py"):
        (tmp_path / name).write_text(PAYLOAD)
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    for path in run.rglob("agent.json"):
        meta = json.loads(path.read_text())
        meta["config"]["env"]["env_id"] = env_id.format(tmp=tmp_path)
        path.write_text(json.dumps(meta))
        resealed(path.parent)
    return run


def fastppo_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m fastppo.cli``, which puts ``cwd`` first on sys.path, as a user would run it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "fastppo.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


# a file by absolute path, a module or package in the working directory; PettingZoo envs by module, file or
# module function
USER_CODE = [
    "{tmp}/evil.py:Env",
    "evilmod:Env",
    "pz:evilmod",
    "pz:{tmp}/evil.py:make_env",
    "pz:evilmod:make_env",
    "pz:mpe2.simple_spread_v3:parallel_env",
]
COMMANDS = {
    "eval": ["eval", "run", "--episodes", "1"],
    "record": ["record", "run", "--out", "run/x.mp4"],
    "resume": ["train", "--resume", "run", "--total-timesteps", "512"],
}
FIXES = {
    "eval": "fastppo eval run --env-id {env}",
    "record": "fastppo record run --env-id {env}",
    "resume": "fastppo train --resume run {env}",
}


@pytest.mark.parametrize(
    "env_id, command",
    [(env_id, command) for env_id in USER_CODE[:2] for command in COMMANDS]
    + [(env_id, "eval") for env_id in USER_CODE[2:]],
)
def test_a_command_that_needs_the_env_refuses_user_code_the_folder_names(trained, tmp_path, env_id, command):
    sent_folder(trained, tmp_path, env_id)
    done = fastppo_cli(COMMANDS[command], tmp_path)
    assert not (tmp_path / "MARKER").exists()
    assert done.returncode == 2, done.stderr
    named = env_id.format(tmp=tmp_path)
    assert done.stderr == (
        f"fastppo: error: run was trained on user code '{named}', and fastppo never imports code that a run "
        "folder names: "
        f"if you trust it, name it yourself: {FIXES[command].format(env=named)} (in Python: env_id='{named}')\n"
    )


@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="needs the export extra (onnx)")
@pytest.mark.parametrize("env_id", USER_CODE)
def test_export_needs_no_env(trained, tmp_path, env_id, monkeypatch):
    sent_folder(trained, tmp_path, env_id)
    monkeypatch.chdir(tmp_path)  # in this process (fastppo.env_ids puts the working directory on sys.path too)
    monkeypatch.setattr(
        fastppo.agents.export, "_has_onnxscript", lambda: False
    )  # the TorchScript exporter: 10x faster here
    assert main(["export", "run", "--onnx", "policy.onnx"]) == 0
    assert (tmp_path / "policy.onnx").is_file() and not (tmp_path / "MARKER").exists()


def test_the_env_the_command_line_names_is_imported(trained, tmp_path):
    # The other side of the rule, and proof that the payload does run when imported.
    sent_folder(trained, tmp_path, "evilmod:Env")
    fastppo_cli(["eval", "run", "--episodes", "1", "--env-id", "evilmod:Env"], tmp_path)
    assert (tmp_path / "MARKER").read_text() == "imported"


def test_python_load_imports_nothing_and_evaluate_needs_the_env_named(trained, tmp_path, monkeypatch):
    run = sent_folder(trained, tmp_path, "evilmod:Env")
    monkeypatch.chdir(tmp_path)
    agent = fastppo.load(run)
    assert agent.obs_shape == (4,) and agent.action_space == gym.spaces.Discrete(2)
    with pytest.raises(FastPPOError, match="trained on user code 'evilmod:Env'.*env_id='evilmod:Env'"):
        fastppo.evaluate(agent)
    with pytest.raises(FastPPOError, match="trained on user code 'evilmod:Env'"):
        fastppo.evaluate(run)
    assert not (tmp_path / "MARKER").exists()
    result = fastppo.evaluate(run, env_id="CartPole-v1", episodes=1, seed=0)  # the caller's env: played
    assert len(result.returns) == 1


def drop_spaces(run: Path) -> None:
    """``run`` as fastppo wrote it before agent.json stored the spaces (and checksums were kept)."""
    for path in run.rglob("agent.json"):
        meta = json.loads(path.read_text())
        del meta["spaces"]
        path.write_text(json.dumps(meta))
        (path.parent / CHECKSUMS_FILE).unlink()


def test_an_older_folder_rebuilds_its_spaces_from_an_installed_env_only(trained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old = tmp_path / "old"
    shutil.copytree(trained, old)
    drop_spaces(old)
    assert fastppo.load(old).observation_space == fastppo.load(trained).observation_space  # CartPole-v1: built
    run = sent_folder(trained, tmp_path, "evilmod:Env")
    drop_spaces(run)
    with pytest.raises(
        FastPPOError, match=r"trained on user code 'evilmod:Env'.*fastppo.load\('run', env_id='evilmod:Env'\)"
    ):
        fastppo.load("run")
    assert not (tmp_path / "MARKER").exists()
    agent = fastppo.load("run", env_id="CartPole-v1")  # the caller names the env to build
    agent.save(run)  # and the folder now holds its spaces
    assert fastppo.load(run).action_space == gym.spaces.Discrete(2)


def round_trip(space: gym.Space) -> gym.Space:
    data = spaces_to_data(space, space, ObservationLayout())
    text = json.dumps(data, allow_nan=False)  # standard JSON: no Infinity tokens
    return spaces_from_data(json.loads(text))[0]


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(
            np.array([-4.8, -np.inf, -0.41887903, -np.inf], np.float32),
            np.array([4.8, np.inf, 0.41887903, np.inf], np.float32),
        ),
        gym.spaces.Box(-np.inf, np.inf, (3, 2), np.float64),
        gym.spaces.Box(np.float32(1e-7), np.float32(3.3), (2,), np.float32),
        gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
        gym.spaces.Box(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (2,), np.int64),
        gym.spaces.Box(0, 1, (3,), bool),
        gym.spaces.Discrete(5, start=-2),
        gym.spaces.Discrete(3, start=10, dtype=np.int32),
        gym.spaces.MultiDiscrete([3, 4], start=[1, -1]),
        gym.spaces.MultiDiscrete([[2, 3], [4, 5]]),
        gym.spaces.MultiBinary(3),
        gym.spaces.MultiBinary([2, 3]),
    ],
    ids=str,
)
def test_spaces_round_trip_exactly(space):
    back = round_trip(space)
    assert type(back) is type(space) and back.shape == space.shape and back.dtype == space.dtype
    for name in ("low", "high", "n", "start", "nvec"):
        if hasattr(space, name):
            assert np.array_equal(getattr(back, name), getattr(space, name)), name


def test_a_multi_agent_policy_round_trips_through_its_folder(tmp_path):
    agent = fastppo.train(
        "pz:tests.support.fake_pz_envs",
        run_dir=tmp_path / "run",
        total_timesteps=96,
        num_envs=2,
        num_steps=16,
        progress=False,
        tensorboard=False,
        **{"multi_agent.algorithm": "mappo", "multi_agent.policies": "group"},
    )
    loaded = fastppo.load(tmp_path / "run")
    assert loaded.layout == agent.layout == ObservationLayout(critic_only=4, raw=3, groups=(0, 0, 0))
    assert loaded.observation_space == agent.observation_space and loaded.action_space == agent.action_space


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda s: s.update(action={"type": "Dict"}), "spaces.action has type 'Dict'"),
        (lambda s: s["observation"].update(low=[0.0, 1.0]), "spaces.observation.low has 2 values for shape [4]"),
        (lambda s: s["observation"].update(dtype="object"), "spaces.observation.dtype must be one of"),
        (
            lambda s: s["observation"].update(high="nan"),
            "spaces.observation.high must hold finite numbers or 'inf'/'-inf'",
        ),
        (lambda s: s["observation"].update(low=1e39), "spaces.observation.low does not fit float32"),
        (lambda s: s["observation"].update(shape=[-4]), "spaces.observation.shape must hold non-negative integers"),
        (
            lambda s: s["observation"].update(shape=[10**10], low=0.0, high=1.0),
            "spaces.observation.shape [10000000000] holds more than",
        ),
        (lambda s: s["action"].update(n=0), "spaces.action.n must be a positive integer"),
        (lambda s: s["action"].update(n=True), "spaces.action.n must be a positive integer"),
        (lambda s: s["action"].update(start=[0, 1]), "spaces.action.start must be an integer"),
        (lambda s: s["action"].update(start=2**63), "spaces.action.start does not fit int64"),
        (lambda s: s["action"].pop("start"), "spaces.action must be an object with the keys"),
        (lambda s: s["layout"].update(raw=4), "spaces.layout names 4 special columns"),
        (lambda s: s.update(layout=[]), "spaces.layout must be an object"),
    ],
    ids=lambda case: case if isinstance(case, str) else "",
)
def test_damaged_spaces_are_one_clear_line(trained, tmp_path, damage, why):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    meta = json.loads((run / "agent.json").read_text())
    damage(meta["spaces"])
    (run / "agent.json").write_text(json.dumps(meta))
    done = fastppo_cli(["eval", "run"], tmp_path) if why.startswith("spaces.action has") else None
    with pytest.raises(FastPPOError, match="cannot read the agent in .*: damaged or foreign file") as error:
        fastppo.load(run)
    assert why in str(error.value) and "\n" not in str(error.value)
    if done is not None:  # once through the CLI: exit 2, one line
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and why in done.stderr


def test_a_stack_of_seeds_on_user_code_resumes_only_when_the_command_line_names_it(tmp_path, capsys):
    parent, env = tmp_path / "seeds", "tests.support.fake_envs:MatchTensorEnv"
    tiny = [
        "--backend",
        "tensor",
        "--num-envs",
        "4",
        "--num-steps",
        "8",
        "--total-timesteps",
        "64",
        "--lr-schedule",
        "constant",
        "--no-tensorboard",
        "--no-progress",
    ]
    assert main(["train", env, *tiny, "--seeds", "1-2", "--run-dir", str(parent)]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(parent), "--total-timesteps", "128"]) == 2
    fix = f"fastppo train --resume {parent} {env} (in Python: env_id='{env}')"  # the stack's folder, not one seed's
    assert capsys.readouterr().err == (
        f"fastppo: error: {parent} was trained on user code '{env}', and fastppo never imports code that a "
        f"run folder names: if you trust it, name it yourself: {fix}\n"
    )
    assert main(["train", "--resume", str(parent), env, "--total-timesteps", "128"]) == 0


def test_a_seeds_job_that_never_started_does_not_import_the_code_its_plan_names(tmp_path):
    """A stopped --seeds job's seeds.json is data too: resuming seeds that never started builds
    their env only when the command line names it."""
    (tmp_path / "evil.py").write_text(PAYLOAD)
    job = tmp_path / "job"
    job.mkdir()
    config = fastppo.make_config("CartPole-v1", None, {"total_timesteps": 128, "num_envs": 2, "num_steps": 32})
    config.env.env_id = f"{tmp_path}/evil.py:Env"
    (job / "seeds.json").write_text(json.dumps({"seeds": [1, 2], "workers": 1, "config": config.to_dict()}))
    done = fastppo_cli(["train", "--resume", "job"], tmp_path)
    assert not (tmp_path / "MARKER").exists()
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert (
        "fastppo never imports code that a run folder names" in done.stderr
        and f"fastppo train --resume job {tmp_path}/evil.py:Env" in done.stderr
    )


def test_outputs_in_a_run_folder_are_never_written_through_a_link(trained, tmp_path, capsys):
    """RUN/plot.png, RUN/videos (record's default, --capture-video's folder): a link there would
    take the file anywhere the link points. One line, exit 2, nothing written."""
    run, outside = tmp_path / "run", tmp_path / "outside"
    shutil.copytree(trained, run)
    outside.mkdir()
    (run / "plot.png").symlink_to(outside / "plot.png")
    assert main(["plot", str(run)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"fastppo: error: the plot {run / 'plot.png'} is a symbolic link, and fastppo writes no file through "
        "one: remove the link, or give another path"
    ]
    (run / "videos").symlink_to(outside, target_is_directory=True)
    assert main(["record", str(run)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"fastppo: error: the video {run / 'videos' / 'record.mp4'} lies in {run / 'videos'}, a symbolic "
        "link, and fastppo writes no file through one: remove the link, or give another path"
    ]
    new = tmp_path / "new"
    new.mkdir()
    (new / "videos").symlink_to(outside, target_is_directory=True)
    with pytest.raises(FastPPOError, match="--capture-video's folder .*/new/videos is a symbolic link"):
        fastppo.train(
            "CartPole-v1",
            run_dir=new,
            total_timesteps=64,
            num_envs=1,
            num_steps=64,
            capture_video=True,
            progress=False,
            tensorboard=False,
        )
    assert list(outside.iterdir()) == []

"""A damaged checkpoint is refused whole before anything is restored or written: `fastppo train
--resume` ends in one error line and exit code 2, and the run folder is byte for byte as it was
(metrics.jsonl not rewound, config.yaml not rewritten, no folder made). A save that cannot write
(a full disk, a read-only folder) is one line too, and the last good checkpoint stays loadable.
A flipped bit that leaves every value plausible is caught by the checksums saved with the files."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import struct
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import fastppo
import fastppo.training.checkpoint
import fastppo.training.trainer
from fastppo.cli.main import main
from fastppo.files.checksums import CHECKSUMS_FILE
from fastppo.training.checkpoint import load_checkpoint
from tests.support.checkpoints import fields, snapshot, tensors

RESUMED = "checkpoints/000002"  # the copy's newest: its 000003 is removed, so a resume has an iteration to train


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("damaged") / "run"
    fastppo.train(
        "CartPole-v1",
        run_dir=run,
        total_timesteps=384,
        num_envs=2,
        num_steps=64,
        checkpoint_every=1,
        progress=False,
        tensorboard=False,
    )
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    shutil.rmtree(copy / "checkpoints/000003")
    return copy


def flip_bit(path: Path) -> None:
    """Flip the lowest bit of the first tensor's first byte: the value stays finite and plausible."""
    data = bytearray(path.read_bytes())
    data[8 + struct.unpack("<Q", data[:8])[0]] ^= 1  # after the header's length and the header
    path.write_bytes(bytes(data))


def flipped(file: str) -> Callable[[Path], None]:
    return lambda checkpoint: flip_bit(checkpoint / file)


def _kl_beta_edited(checkpoint: Path) -> None:
    meta = json.loads((checkpoint / "trainer.json").read_text())
    meta["kl_beta"] *= 1.5
    (checkpoint / "trainer.json").write_text(json.dumps(meta))


def _set(key: str, value) -> Callable[[dict], None]:
    return lambda d: d.__setitem__(key, value)


def _nan_at_first(t: dict[str, torch.Tensor], key: str) -> None:
    t[key] = t[key].clone()
    t[key].view(-1)[0] = math.nan


def _dangling_ref(meta: dict) -> None:
    attrs = meta["env"]["envs"][0][-1]["attrs"]  # the unwrapped CartPole's
    attrs[next(iter(attrs))] = {"ref": 999}


DAMAGES = {
    "moment smaller": (
        tensors(lambda t: t.update({"optim.0.exp_avg": t["optim.0.exp_avg"][:-1]})),
        "optim.0.exp_avg as [9154] float32 where this run needs [9155] float32",
    ),
    "moment larger": (
        tensors(lambda t: t.update({"optim.0.exp_avg_sq": torch.cat([t["optim.0.exp_avg_sq"], torch.zeros(5)])})),
        "optim.0.exp_avg_sq as [9160] float32",
    ),
    "slot dropped": (tensors(lambda t: t.pop("optim.0.exp_avg_sq")), "trainer.safetensors lacks optim.0.exp_avg_sq"),
    "slots dropped": (
        tensors(lambda t: [t.pop(k) for k in list(t) if k.startswith("optim.")]),
        "trainer.safetensors lacks optim.0.exp_avg, optim.0.exp_avg_sq, optim.0.step",
    ),
    "foreign tensor": (
        tensors(lambda t: t.update({"optim.1.exp_avg": torch.zeros(3)})),
        "holds optim.1.exp_avg, which this run does not have",
    ),
    "moment dtype": (
        tensors(lambda t: t.update({"optim.0.exp_avg": t["optim.0.exp_avg"].double()})),
        "optim.0.exp_avg as [9155] float64 where this run needs [9155] float32",
    ),
    "moment NaN": (
        tensors(lambda t: _nan_at_first(t, "optim.0.exp_avg")),
        "trainer.safetensors holds NaN/Inf in optim.0.exp_avg",
    ),
    "weight NaN": (
        tensors(lambda t: _nan_at_first(t, "policy.action_head.linear.bias"), "policy.safetensors"),
        "policy.safetensors holds NaN/Inf in action_head.linear.bias",
    ),
    "torch rng missing": (tensors(lambda t: t.pop("rng.torch")), "trainer.safetensors lacks rng.torch"),
    "torch rng size": (
        tensors(lambda t: t.update({"rng.torch": t["rng.torch"][:-8]})),
        "rng.torch as [5048] uint8 where this run needs [5056] uint8",
    ),
    "cursor shape": (
        tensors(lambda t: t.update({"cursor.obs": t["cursor.obs"][:1]})),
        "cursor.obs as [1, 4] float32 where this run needs [2, 4] float32",
    ),
    "rng missing": (fields(lambda m: m.pop("rng")), "trainer.json lacks rng"),
    "numpy rng": (
        fields(lambda m: m["rng"]["numpy"].__setitem__(1, [1, 2, 3])),
        "trainer.json's rng is not a python and a numpy RNG state",
    ),
    "python rng": (
        fields(lambda m: m["rng"]["python"].__setitem__(1, [7])),
        "trainer.json's rng is not a python and a numpy RNG state",
    ),
    "iteration -5": (fields(_set("iteration", -5)), "trainer.json's iteration is -5, not the folder's 000002"),
    "iteration x": (fields(_set("iteration", "x")), "trainer.json's iteration is 'x', not the folder's 000002"),
    "iteration off": (fields(_set("iteration", 7)), "trainer.json's iteration is 7, not the folder's 000002"),
    "global_step negative": (
        fields(_set("global_step", -1)),
        "trainer.json's global_step is -1, not 256 (2 iterations of 128 x 1 steps)",
    ),
    "global_step float": (fields(_set("global_step", 256.0)), "trainer.json's global_step is 256.0, not 256"),
    "world_size x": (fields(_set("world_size", "x")), "trainer.json's world_size is 'x', not a positive integer"),
    "kl_beta NaN": (fields(_set("kl_beta", math.nan)), "trainer.json's kl_beta is nan, not a finite number >= 0"),
    "schedule_anchor": (fields(_set("schedule_anchor", [5])), "trainer.json's schedule_anchor is [5]"),
    "format": (fields(_set("format", 2)), "trainer.json's format is 2, not 1"),
    "lr missing": (fields(lambda m: m["param_groups"][0].pop("lr")), "trainer.json's param_groups[0] lacks lr"),
    "params renumbered": (
        fields(lambda m: m["param_groups"][0].__setitem__("params", [1])),
        "param_groups number the parameters [[1]], the optimizer [[0]]",
    ),
    "episode_returns": (
        fields(_set("episode_returns", ["x"])),
        "trainer.json's episode_returns is not a list of finite returns",
    ),
    "dangling env ref": (
        fields(_dangling_ref),
        "trainer.json's env snapshot refers to object 999, which it does not define before",
    ),
    "env count": (
        fields(lambda m: m["env"]["envs"].pop()),
        "trainer.json's env snapshot holds 1 envs, the config makes 2",
    ),
    "env kind": (
        fields(lambda m: m["env"].__setitem__("kind", "tensor")),
        "its env snapshot is of tensor envs, the config makes sync envs",
    ),
    "ppo section missing": (
        fields(lambda m: m["config"].pop("ppo"), "agent.json"),
        "the config lacks ppo.total_timesteps, ppo.num_steps, ppo.num_minibatches ...",
    ),
    "field missing": (fields(lambda m: m["config"]["ppo"].pop("gamma"), "agent.json"), "the config lacks ppo.gamma"),
    "num_envs 0": (
        fields(lambda m: m["config"]["env"].__setitem__("num_envs", 0), "agent.json"),
        "the config is invalid: --env.num-envs must be a positive integer, got 0",
    ),
    "trainer bit": (
        flipped("trainer.safetensors"),
        "trainer.safetensors changed since it was written (its SHA-256 is not the one in SHA256SUMS)",
    ),
    "policy bit": (flipped("policy.safetensors"), "is damaged: policy.safetensors changed since it was written"),
    "kl_beta edited": (_kl_beta_edited, "is damaged: trainer.json changed since it was written"),
    "checksum gone": (
        lambda c: (c / CHECKSUMS_FILE).write_text(
            (c / CHECKSUMS_FILE).read_text().replace("  trainer.json\n", "  other.json\n")
        ),
        "SHA256SUMS lists no checksum for trainer.json",
    ),
}


@pytest.mark.parametrize("case", DAMAGES)
def test_a_damaged_checkpoint_is_one_line_and_leaves_the_run_folder_as_it_was(run, capsys, case):
    damage, message = DAMAGES[case]
    damage(run / RESUMED)
    before = snapshot(run)
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("fastppo: error: "), err
    assert message in err and str(run / RESUMED) in err, err
    assert snapshot(run) == before


GAMES = {  # a turn-based game and a Parallel env, whose snapshots hold their copies and episodes in flight
    "tictactoe": dict(
        env_id="pz:pettingzoo.classic.tictactoe_v3",
        preset="cleanrl-discrete",
        total_timesteps=384,
        num_envs=2,
        num_steps=32,
    ),
    "mpe": dict(env_id="pz:mpe2.simple_spread_v3", preset=None, total_timesteps=288, num_envs=2, num_steps=48),
}


@pytest.fixture(scope="module")
def trained_games(tmp_path_factory) -> dict[str, Path]:
    runs = {}
    for name, settings in GAMES.items():
        runs[name] = tmp_path_factory.mktemp(name) / "run"
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "--total-timesteps .* gives only")  # 3 updates are all it needs
            fastppo.train(**settings, run_dir=runs[name], checkpoint_every=1, progress=False, tensorboard=False)
    return runs


def _cartpole(meta: dict) -> dict:
    return meta["env"]["envs"][0][-1]["attrs"]  # the first copy's unwrapped CartPoleEnv


def _game(meta: dict, copy: int = 0) -> dict:
    """The attributes of the raw game under copy ``copy``'s wrappers."""
    node = meta["env"]["vec"]["attrs"]["envs"]["list"][copy]
    while node["class"] != "raw_env":
        node = node["attrs"].get("env") or node["attrs"]["aec_env"]
    return node["attrs"]


def _state_of_three(meta: dict) -> None:
    state = _cartpole(meta)["state"]
    state.update(shape=[3], data=state["data"][:3])


ENV_DAMAGES = {  # each trained on before its fix, and crashed after metrics.jsonl was rewound
    "CartPole state of shape [3]": (
        "cartpole",
        _state_of_three,
        "sets envs[0].CartPoleEnv.state to an array [3] of numbers where the env has an array [4] of numbers",
    ),
    "action_space a text": (
        "cartpole",
        lambda m: _cartpole(m).__setitem__("action_space", "x"),
        "sets envs[0].CartPoleEnv.action_space to a text where the env has a Discrete",
    ),
    "step hides the method": (
        "cartpole",
        lambda m: _cartpole(m).__setitem__("step", "x"),
        "sets envs[0].CartPoleEnv.step, which is not part of the env's state",
    ),
    "num_envs": (
        "tictactoe",
        lambda m: m["env"]["vec"]["attrs"].__setitem__("num_envs", 3),
        "sets TurnBasedVecEnv.num_envs, which is not part of the env's state",
    ),
    "a game's agents": (
        "tictactoe",
        lambda m: _game(m)["agents"].__setitem__("list", ["a"]),
        "gives copy 0 the agents ['a'], not among the env's ['player_1', 'player_2']",
    ),
    "a game copy missing": (
        "tictactoe",
        lambda m: m["env"]["vec"]["attrs"]["envs"]["list"].pop(),
        "holds 1 copies of the env, the config makes 2",
    ),
    "junk in a game's list": (
        "tictactoe",
        lambda m: _game(m)["board"]["attrs"]["squares"]["list"].__setitem__(2, "junk"),
        "sets TurnBasedVecEnv.envs[0].env.env.env.board.squares[2] to a text where the env has a number",
    ),
    "junk in the finished games": (
        "tictactoe",
        lambda m: m["env"]["vec"]["attrs"]["_games"].__setitem__("list", ["junk"]),
        "holds finished games that are not (learner's seats, 2 seats' returns, moves)",
    ),
    "a Parallel env's agents": (
        "mpe",
        lambda m: _game(m)["agents"].__setitem__("list", ["a"]),
        "gives copy 0 the agents ['a'], not among the env's ['agent_0', 'agent_1', 'agent_2']",
    ),
}


@pytest.mark.parametrize("case", ENV_DAMAGES)
@pytest.mark.games
def test_an_env_snapshot_that_does_not_fit_the_env_is_one_line_and_leaves_the_run_folder_as_it_was(
    trained, trained_games, tmp_path, capsys, case
):
    """A snapshot restores only the state the built env has, each value of the kind and shape it
    holds there: names that are methods or the vec env's own settings, other shapes and kinds,
    other agents or copies, and malformed records are refused before anything is written."""
    env, damage, message = ENV_DAMAGES[case]
    run = tmp_path / "run"
    shutil.copytree(trained if env == "cartpole" else trained_games[env], run)
    *older, newest = sorted(p for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    shutil.rmtree(newest)  # the run then has an iteration left to train
    fields(damage)(older[-1])
    before = snapshot(run)
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(
        f"fastppo: error: checkpoint {older[-1]} is damaged: trainer.json's env snapshot "
    ), err
    assert message in err, err
    assert snapshot(run) == before


@pytest.mark.parametrize(
    "command", [["eval", "{run}", "--episodes", "1"], ["export", "{run}", "--onnx", "{run}/policy.onnx"]]
)
def test_a_flipped_bit_in_the_final_policy_is_one_line(run, capsys, command):
    flip_bit(run / "policy.safetensors")
    before = snapshot(run)
    assert main([part.format(run=run) for part in command]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"fastppo: error: the agent in {run} is damaged: policy.safetensors changed since it was written (its "
        "SHA-256 is not the one in SHA256SUMS)"
    ]
    assert snapshot(run) == before


def test_a_folder_without_checksums_loads_as_before(run):
    """Folders written before checksums were kept (tests/training/test_old_run_folders.py resumes some)."""
    for listing in run.rglob(CHECKSUMS_FILE):
        listing.unlink()
    flip_bit(run / "policy.safetensors")  # unseen without them, as it was
    assert fastppo.load(run).config.env.env_id == "CartPole-v1"


@pytest.mark.parametrize("records", [1, 0])
def test_a_metrics_file_cut_short_before_the_checkpoint_is_one_line(run, capsys, records):
    """Its records up to the checkpoint's step are lost: a resume would go on with a silent gap."""
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(lines[:records]) + lines[records][:20])  # cut inside the next record
    before = snapshot(run)
    assert main(["train", "--resume", str(run)]) == 2
    ends = "ends at step 128" if records else "holds no records"
    assert capsys.readouterr().err.splitlines() == [
        f"fastppo: error: {run / 'metrics.jsonl'} {ends}, short of the step of its checkpoint {run / RESUMED} "
        "(256): the file was cut short, "
        "and resuming would leave a gap in it; put the whole file back, or start a new run"
    ]
    assert snapshot(run) == before


def test_an_undamaged_copy_resumes_to_the_uninterrupted_run(run, trained, capsys):
    assert main(["train", "--resume", str(run)]) == 0
    assert (run / "policy.safetensors").read_bytes() == (trained / "policy.safetensors").read_bytes()
    assert (run / "metrics.jsonl").read_text().count("\n") == 3


def _no_space(real: Callable) -> Callable:
    def save(tensors, path, *args, **kwargs):
        if "000003" in path:  # the resumed iteration's checkpoint: the disk is full by then
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real(tensors, path, *args, **kwargs)

    return save


def test_a_full_disk_at_save_is_one_line_and_keeps_the_last_checkpoint(run, capsys, monkeypatch):
    monkeypatch.setattr(fastppo.training.checkpoint, "save_file", _no_space(fastppo.training.checkpoint.save_file))
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"fastppo: error: cannot write the checkpoint {run}/checkpoints/000003: No space left on device; the "
        f"last good checkpoint is kept: {run / RESUMED}"
    ]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "000001",
        "000002",
        "latest",
    ]  # no half-written folder left
    assert load_checkpoint(run).iteration == 2


def test_a_full_disk_as_the_resume_opens_its_logs_is_one_line(run, capsys, monkeypatch):
    def full(run_dir: Path, global_step: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(run_dir / "metrics.jsonl"))

    monkeypatch.setattr(fastppo.training.trainer, "rewind_metrics", full)
    assert main(["train", "--resume", str(run)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"fastppo: error: cannot write the run folder {run}: No space left on device: pick a writable folder"
    ]
    assert load_checkpoint(run).iteration == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_checkpoints_folder_is_one_line(run, capsys):
    (run / "checkpoints").chmod(0o555)
    try:
        assert main(["train", "--resume", str(run)]) == 2
    finally:
        (run / "checkpoints").chmod(0o755)
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "cannot write the checkpoint" in err and "Permission denied" in err, err
    assert load_checkpoint(run).iteration == 2

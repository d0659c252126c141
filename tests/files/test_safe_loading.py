"""Nothing fastppo loads is unpickled: a crafted pickle where a checkpoint is expected does not
run, and truncated, corrupt or foreign files end in one clear error line and exit code 2."""

from __future__ import annotations

import io
import os
import pickle
import re
import shutil
from pathlib import Path

import pytest
import torch

import fastppo
from fastppo.cli.main import main
from fastppo.errors import FastPPOError
from fastppo.training.checkpoint import load_checkpoint

SRC = Path(fastppo.__file__).parent


class WritesMarker:
    """Unpickling this runs ``open(MARKER, 'w')``: the classic pickle payload."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("safe") / "run"
    fastppo.train(
        "CartPole-v1", run_dir=run, total_timesteps=256, num_envs=2, num_steps=32, progress=False, tensorboard=False
    )
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def payloads(marker: Path) -> dict[str, bytes]:
    raw = pickle.dumps(WritesMarker(marker))
    buffer = io.BytesIO()
    torch.save({"policy": WritesMarker(marker)}, buffer)  # torch's zip format, pickle inside
    return {"pickle": raw, "torch.save": buffer.getvalue()}


def checkpoint_dir(run: Path) -> Path:
    return sorted((run / "checkpoints").iterdir())[0]


TARGETS = ["policy.safetensors", "checkpoints/*/policy.safetensors", "checkpoints/*/trainer.safetensors"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["pickle", "torch.save"])
def test_a_malicious_pickle_in_place_of_a_checkpoint_does_not_run(run, tmp_path, capsys, target, kind):
    marker = tmp_path / "pwned"
    path = next(run.glob(target))
    path.write_bytes(payloads(marker)[kind])
    argv = ["eval", str(run), "--episodes", "1"] if target == "policy.safetensors" else ["train", "--resume", str(run)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "damaged or" in err, err
    with pytest.raises(FastPPOError):
        load_checkpoint(run) if "checkpoints" in target else fastppo.load(run)
    assert not marker.exists()


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(300))


def _foreign_json(path: Path) -> None:
    path.write_text('{"hello": "world"}')


def _empty(path: Path) -> None:
    path.write_bytes(b"")


@pytest.mark.parametrize("damage", [_truncate, _garbage, _foreign_json, _empty])
@pytest.mark.parametrize("name", ["policy.safetensors", "agent.json", "trainer.safetensors", "trainer.json"])
def test_damaged_checkpoint_files_give_one_line_and_exit_2(run, capsys, damage, name):
    damage(checkpoint_dir(run) / name)
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("fastppo: error: "), err
    assert "Traceback" not in err


def test_weights_from_another_config_are_refused(run, trained, tmp_path):
    other = tmp_path / "other"
    fastppo.train(
        "CartPole-v1",
        run_dir=other,
        total_timesteps=256,
        num_envs=2,
        num_steps=32,
        hidden_sizes=(8,),
        progress=False,
        tensorboard=False,
    )
    shutil.copy(other / "policy.safetensors", run / "policy.safetensors")
    with pytest.raises(FastPPOError, match="do not fit the saved config"):
        fastppo.load(run)


@pytest.mark.parametrize("missing", ["run", "checkpoint", "file"])
def test_missing_things_are_named(run, tmp_path, capsys, missing):
    if missing == "run":
        target = tmp_path / "nope"
    elif missing == "checkpoint":
        target = tmp_path / "empty"
        target.mkdir()
    else:
        (checkpoint_dir(run) / "trainer.safetensors").unlink()
        target = run
    assert main(["train", "--resume", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert {"run": "does not exist", "checkpoint": "no checkpoint in", "file": "trainer.safetensors is missing"}[
        missing
    ] in err


def test_no_pickle_loading_anywhere_in_the_source():
    """The guarantee is structural: no module unpickles, torch.load only with weights_only=True."""
    offenders = []
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        if re.search(r"^\s*(import pickle|from pickle|import dill|import cloudpickle)", text, re.M):
            offenders.append(f"{path}: imports pickle")
        for call in re.findall(r"torch\.load\([^)]*\)", text):
            if "weights_only=True" not in call:
                offenders.append(f"{path}: {call}")
        if "allow_pickle=True" in text:
            offenders.append(f"{path}: allow_pickle=True")
    assert not offenders, offenders

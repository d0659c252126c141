"""What an RLHF, DPO or reward-model run folder can be trusted for: a new run never writes into a
used folder, --resume needs a checkpoint, a checkpoint folder with a final name is complete, a
NaN stops the run with its last good checkpoint kept, and a reward model has a trained head."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import pytest
import torch

import fastppo.files.atomic as atomic
from fastppo.errors import FastPPOError
from fastppo.rlhf.checkpoint import LATEST, latest_checkpoint, load_training_state, save_checkpoint
from fastppo.rlhf.config import ModelConfig
from fastppo.rlhf.models import load_models
from tests.support.tiny_lm import cli_error, early_letters, run_cli


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def inputs(tmp_path) -> dict[str, Path]:
    prompts, pairs = tmp_path / "p.jsonl", tmp_path / "pairs.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("hi", "abc", "yo", "ok")))
    pairs.write_text(
        "".join(json.dumps({"prompt": p, "chosen": "aa", "rejected": "zz"}) + "\n" for p in ("hi", "abc", "yo", "ok"))
    )
    return {"prompts": prompts, "pairs": pairs}


def command_argv(command: str, model: Path, inputs: dict[str, Path], output_dir: Path, *extra: str) -> list[str]:
    """A tiny run of ``command`` (two optimizer steps at most) writing into ``output_dir``."""
    specific = {
        "rlhf": ["--reward", "tests.support.tiny_lm:early_letters", "--prompts", str(inputs["prompts"]), "--steps", "2",
                 "--prompts-per-step", "2", "--num-generations", "2", "--mini-batch-size", "4", "--ppo-epochs", "1",
                 "--max-new-tokens", "6", "--estimator", "rloo"],
        "dpo": ["--data", str(inputs["pairs"]), "--batch-size", "2"],
        "reward-model": ["--data", str(inputs["pairs"]), "--batch-size", "2", "--eval-split", "0"],
    }[command]  # fmt: skip
    return [command, "--model", str(model), *specific, "--output-dir", str(output_dir), "--no-progress", *extra]


COMMANDS = ["rlhf", "dpo", "reward-model"]


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory) -> Path:
    """A real `fastppo train` run folder (agent.json, policy.safetensors, metrics.jsonl, checkpoints/)."""
    from fastppo.cli.main import main

    run_dir = tmp_path_factory.mktemp("ppo") / "run"
    argv = [
        "train",
        "CartPole-v1",
        "--run-dir",
        str(run_dir),
        "--total-timesteps",
        "256",
        "--num-envs",
        "2",
        "--num-steps",
        "64",
        "--no-tensorboard",
        "--no-progress",
    ]
    assert main(argv) == 0
    return run_dir


@pytest.mark.parametrize("command", COMMANDS)
def test_a_new_run_refuses_a_used_folder_and_leaves_it_unchanged(
    tiny_model, tmp_path, capsys, inputs, ppo_run, command
) -> None:
    first = tmp_path / "first"
    assert run_cli(command_argv(command, tiny_model, inputs, first)) == 0
    ran = folder_bytes(first)
    assert "metrics.jsonl" in ran and (first / LATEST).is_file()
    message = cli_error(command_argv(command, tiny_model, inputs, first), capsys)
    assert (
        f"--output-dir {first} is not empty (it holds " in message
        and "continue its run with --resume, or give a new or empty folder" in message
    )
    assert folder_bytes(first) == ran
    # Another command's run, and a `fastppo train` run, are refused alike (no --resume hint: there is no RLHF
    # checkpoint).
    ppo_files = folder_bytes(ppo_run)
    message = cli_error(command_argv(command, tiny_model, inputs, ppo_run), capsys)
    assert message == (
        f"fastppo: error: --output-dir {ppo_run} is not empty (it holds SHA256SUMS, agent.json, checkpoints, "
        "...): give a new or empty folder"
    )
    assert folder_bytes(ppo_run) == ppo_files
    # An empty folder is a new run's.
    (tmp_path / "empty").mkdir()
    assert run_cli(command_argv(command, tiny_model, inputs, tmp_path / "empty")) == 0


@pytest.mark.parametrize("command", COMMANDS)
def test_resume_with_nothing_to_resume_is_an_error(tiny_model, tmp_path, capsys, inputs, ppo_run, command) -> None:
    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "absent", tmp_path / "empty", ppo_run):
        before = folder_bytes(folder) if folder.exists() else None
        message = cli_error(command_argv(command, tiny_model, inputs, folder, "--resume"), capsys)
        assert message == (
            f"fastppo: error: --resume: {folder} holds no checkpoint (no latest file) to continue from: drop "
            "--resume to start a new run"
        )
        assert (folder_bytes(folder) if folder.exists() else None) == before
    assert not (tmp_path / "absent").exists()


def tiny_checkpoint_setup(model: Path):
    models = load_models(ModelConfig(model=str(model)), critic="shared")
    optimizer = torch.optim.AdamW(models.trainable_parameters(), lr=1e-3)
    for p in models.trainable_parameters():  # a state to save: one step of made-up gradients
        p.grad = torch.ones_like(p)
    optimizer.step()
    return models, optimizer


def test_a_save_killed_before_its_rename_leaves_the_last_checkpoint(tiny_model, tmp_path, monkeypatch) -> None:
    models, optimizer = tiny_checkpoint_setup(tiny_model)
    first = save_checkpoint(tmp_path, 1, models, optimizer, {"kl_coef": 0.1}, keep=2)
    saved = folder_bytes(first)
    fsynced: list[Path] = []
    real_replace, real_fsync_file = os.replace, atomic._fsync_file

    def recording_fsync(path: Path) -> None:
        fsynced.append(Path(path))
        real_fsync_file(path)

    def killed_at_the_rename(src, dst):
        if Path(dst).name.startswith("checkpoint-"):
            raise KeyboardInterrupt  # the process dies here: the folder is written and fsynced, not yet renamed
        real_replace(src, dst)

    monkeypatch.setattr("fastppo.files.atomic._fsync_file", recording_fsync)
    monkeypatch.setattr("fastppo.files.atomic.os.replace", killed_at_the_rename)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, models, optimizer, {"kl_coef": 0.2}, keep=2)
    monkeypatch.undo()

    (half,) = tmp_path.glob(".checkpoint-tmp-*")
    assert sorted(str(p.relative_to(half)) for p in fsynced) == sorted(
        str(p.relative_to(half)) for p in half.rglob("*") if p.is_file()
    )
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-000001"]
    assert latest_checkpoint(tmp_path) == first and folder_bytes(first) == saved
    state = load_training_state(first, torch.optim.AdamW(models.trainable_parameters(), lr=1e-3), models)
    assert (state["step"], state["kl_coef"]) == (1, 0.1)
    # The next save completes and sweeps the half-written folder away.
    third = save_checkpoint(tmp_path, 3, models, optimizer, {"kl_coef": 0.3}, keep=2)
    assert latest_checkpoint(tmp_path) == third
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-000001", "checkpoint-000003", LATEST]


def test_non_finite_weights_are_never_checkpointed(tiny_model, tmp_path) -> None:
    models, optimizer = tiny_checkpoint_setup(tiny_model)
    with torch.no_grad():
        models.critic.head.bias.fill_(math.nan)
    with pytest.raises(FastPPOError, match=r"refusing to checkpoint non-finite weights \(critic.head.bias\)"):
        save_checkpoint(tmp_path, 1, models, optimizer, {}, keep=2)
    assert list(tmp_path.iterdir()) == []


REWARD_CALLS: list[int] = []


def huge_from_the_third_step(prompts: list[str], completions: list[str]) -> list[float]:
    """Finite scores, but from the third call so large that their sums overflow: the advantages and the
    losses become NaN."""
    REWARD_CALLS.append(len(completions))
    return early_letters(prompts, completions) if len(REWARD_CALLS) < 3 else [3e38] * len(completions)


def test_a_nan_loss_stops_the_run_with_the_last_good_checkpoint_kept(tiny_model, tmp_path, capsys, inputs) -> None:
    REWARD_CALLS.clear()
    run = tmp_path / "run"
    argv = command_argv("rlhf", tiny_model, inputs, run, "--save-every", "1", "--steps", "4")
    argv[argv.index("tests.support.tiny_lm:early_letters")] = f"{__name__}:huge_from_the_third_step"
    message = cli_error(argv, capsys)
    assert message.startswith("fastppo: error: training stopped at step 3: ")
    assert message.endswith(
        "became NaN/Inf; lower --learning-rate, or check the reward and --missing-eos-penalty/--reward-clip; "
        f"the last good checkpoint is kept: {run / 'checkpoint-000002'}"
    )
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-000001", "checkpoint-000002"]
    assert latest_checkpoint(run) == run / "checkpoint-000002"
    assert [json.loads(line)["global_step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    # The kept checkpoint resumes (to the same failure at step 3, with the same reward).
    REWARD_CALLS[:] = [0, 0]
    assert cli_error([*argv, "--resume"], capsys) == message


@pytest.mark.parametrize("command", ["dpo", "reward-model"])
def test_a_diverging_preference_run_stops_with_the_last_good_checkpoint_kept(
    tiny_model, tmp_path, capsys, inputs, command
) -> None:
    run = tmp_path / "run"
    message = cli_error(
        command_argv(
            command, tiny_model, inputs, run, "--save-every", "1", "--batch-size", "1", "--learning-rate", "1e30"
        ),
        capsys,
    )
    prefix = "dpo" if command == "dpo" else "reward_model"
    assert message.startswith(f"fastppo: error: training stopped at step 2: {prefix}/loss, ")
    assert message.endswith(
        "became NaN/Inf; lower --learning-rate or check the preference data; the last good checkpoint is "
        f"kept: {run / 'checkpoint-000001'}"
    )
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-000001"]
    assert not (run / "model.safetensors").exists()  # a reward model's final weights are not written either


def test_a_causal_lm_is_refused_as_a_reward_model(tiny_model, tmp_path, capsys, inputs) -> None:
    argv = command_argv("rlhf", tiny_model, inputs, tmp_path / "run")
    argv[argv.index("tests.support.tiny_lm:early_letters")] = str(tiny_model)
    assert cli_error(argv, capsys) == (
        f"fastppo: error: the reward model '{tiny_model}' has no trained score head (its weights lack "
        "score.weight, so its scores would be random noise): "
        f"train one with fastppo reward-model --model {tiny_model}, or pass a sequence-classification model folder"
    )
    assert not (tmp_path / "run").exists()


DEVICES = [("cuda", "torch sees no CUDA GPU: use --device cpu"),
           ("cuda:3", "torch sees 1 CUDA GPU(s): use cuda:0 to cuda:0"),
           ("mps", "torch sees no Apple MPS GPU: use --device cpu"),
           ("meta", "unknown device 'meta': use cpu, cuda, cuda:N, mps or auto")]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("device, message", DEVICES, ids=[d for d, _ in DEVICES])
def test_a_device_this_machine_lacks_is_one_line(
    tiny_model, tmp_path, capsys, inputs, monkeypatch, command, device, message
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: device == "cuda:3")  # cuda:3 on a machine with one GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert message in cli_error(command_argv(command, tiny_model, inputs, tmp_path / "run", "--device", device), capsys)
    assert not (tmp_path / "run").exists()


def test_resume_refuses_a_run_of_another_command(tiny_model, tmp_path, capsys, inputs) -> None:
    """`dpo --resume` on an rlhf run's folder (a critic beside the policy): one line, the folder as it was."""
    run = tmp_path / "run"
    assert run_cli(command_argv("rlhf", tiny_model, inputs, run, "--estimator", "gae")) == 0
    before = folder_bytes(run)
    message = cli_error(command_argv("dpo", tiny_model, inputs, run, "--resume"), capsys)
    assert message == (
        f"fastppo: error: --resume: {run} holds a run of fastppo rlhf, not of fastppo dpo: continue it with "
        "'fastppo rlhf --resume', or give a new or empty --output-dir"
    )
    # A checkpoint written before they named their command: its optimizer state does not fit DPO's models.
    state = run / "checkpoint-000002" / "trainer_state.json"
    state.write_text(json.dumps({k: v for k, v in json.loads(state.read_text()).items() if k != "command"}))
    before = folder_bytes(run)
    message = cli_error(command_argv("dpo", tiny_model, inputs, run, "--resume"), capsys)
    assert message.startswith(
        f"fastppo: error: checkpoint {run / 'checkpoint-000002'} does not fit this run: its optimizer state "
        "is for other models ("
    )
    assert message.endswith("): resume it with the command and --model that wrote it")
    assert folder_bytes(run) == before


def _checkpoint_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"step": 1, "world_size": 1}))
    return folder


@pytest.mark.parametrize(
    "pointer",
    [
        "../elsewhere/checkpoint-000001",
        "{tmp}/elsewhere/checkpoint-000001",
        "checkpoint-000001/../../elsewhere/checkpoint-000001",
        "link",
    ],
)
def test_latest_never_names_a_folder_outside_the_output_dir(tmp_path, pointer) -> None:
    outside = _checkpoint_folder(tmp_path / "elsewhere" / "checkpoint-000001")
    run = tmp_path / "run"
    _checkpoint_folder(run / "checkpoint-000001")
    if pointer == "link":
        (run / "checkpoint-000005").symlink_to(outside)
        pointer = "checkpoint-000005"
    (run / LATEST).write_text(pointer.format(tmp=tmp_path))
    with pytest.raises(
        FastPPOError,
        match=(
            f"{run / LATEST} names .*, not a checkpoint folder of {run} \\(checkpoint-NNNNNN\\): write the name "
            "of its newest checkpoint into it"
        ),
    ):
        latest_checkpoint(run)
    (run / LATEST).write_text("checkpoint-000001\n")
    assert latest_checkpoint(run) == run / "checkpoint-000001"


class WritesMarker:
    """Unpickling this runs ``open(marker, 'w')``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def pickled_weights(folder: Path, marker: Path) -> None:
    """``folder``'s model.safetensors replaced by a pytorch_model.bin that runs code when unpickled."""
    (folder / "model.safetensors").unlink()
    torch.save({"transformer.wte.weight": WritesMarker(marker)}, folder / "pytorch_model.bin")


def test_pickled_weights_are_one_line_and_never_run(tiny_model, tmp_path, capsys, inputs) -> None:
    marker = tmp_path / "pwned"
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    pickled_weights(model, marker)
    message = cli_error(command_argv("dpo", model, inputs, tmp_path / "new"), capsys)
    assert message == (
        f"fastppo: error: cannot load '{model}': its weights are a pickle that holds more than tensors, and "
        "unpickling it could run code: "
        "save the model as safetensors (save_pretrained's default) or pass another model"
    )
    # In a checkpoint of a run, as --resume loads it.
    run = tmp_path / "run"
    assert run_cli(command_argv("dpo", tiny_model, inputs, run)) == 0
    pickled_weights(run / "checkpoint-000002" / "policy", marker)
    message = cli_error(command_argv("dpo", tiny_model, inputs, run, "--resume"), capsys)
    assert message.startswith(
        f"fastppo: error: cannot load '{run / 'checkpoint-000002' / 'policy'}': its weights are a pickle"
    )
    assert not marker.exists()

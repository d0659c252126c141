"""Atomic checkpoints that restore a run exactly: fp32 weights (via save_pretrained), optimizer state,
counters, KL coefficient, fp16 loss scale and RNG states. Safetensors and JSON only, no pickle.

Layout: ``output_dir/checkpoint-000050/`` written under a temporary name, every file fsynced, and
renamed into place (:func:`fastppo.files.atomic.publish_folder`), then ``output_dir/latest`` (a
one-line file, replaced atomically) points to it. A crash at any moment leaves the previous
checkpoint intact and ``latest`` pointing to a complete folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from fastppo.errors import FastPPOError
from fastppo.files import outputs
from fastppo.files.atomic import atomic_write_text, publish_folder
from fastppo.rlhf.models import Models, save_models
from fastppo.rlhf.parallel import ONE_PROCESS, Ranks
from fastppo.training.distributed import check_world_size

LATEST = "latest"
CHECKPOINT_NAME = re.compile(r"checkpoint-\d{6,}")
STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"
TMP_PREFIX = ".checkpoint-tmp-"


def _optimizer_tensors(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    tensors = {
        f"{index}.{key}": torch.as_tensor(value).contiguous()
        for index, slots in state["state"].items()
        for key, value in slots.items()
    }
    return tensors, state["param_groups"]


def _load_optimizer(
    optimizer: torch.optim.Optimizer,
    tensors: dict[str, torch.Tensor],
    param_groups: list[dict[str, Any]],
    models: Models,
    ranks: Ranks,
) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    ranks.load_optimizer_state(models, optimizer, {"state": state, "param_groups": param_groups})


def _rng_tensors(ranks: Ranks) -> dict[str, torch.Tensor]:
    """This process's RNG states; under torchrun every rank's, prefixed ``rank{r}.``, so that each
    rank resumes its own sampling stream."""
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors.update({f"cuda.{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
    if ranks.size == 1:
        return tensors
    return {
        f"rank{rank}.{key}": value
        for rank, part in enumerate(ranks.gather_objects(tensors))
        for key, value in part.items()
    }


def _restore_rng(tensors: dict[str, torch.Tensor], ranks: Ranks) -> None:
    if ranks.size > 1:
        prefix = f"rank{ranks.rank}."
        tensors = {key.removeprefix(prefix): value for key, value in tensors.items() if key.startswith(prefix)}
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[f"cuda.{i}"] for i in range(len(tensors) - 1)]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def due(step: int, every: int, last_step: int) -> bool:
    """Whether a periodic action (checkpoint, samples, eval) runs at ``step``: every ``every`` steps
    (0: never) and at the last step."""
    return step == last_step or (every > 0 and step % every == 0)


def save_checkpoint(
    output_dir: Path,
    step: int,
    models: Models,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    keep: int,
    ranks: Ranks = ONE_PROCESS,
) -> Path | None:
    """Write ``checkpoint-{step}`` atomically, point ``latest`` at it, delete all but the newest ``keep``.

    Under torchrun every rank calls it (the RNG states, and with FSDP the weights and optimizer
    state, are gathered), and rank 0 alone writes; the others return None. Non-finite weights are
    refused on every rank alike: the previous checkpoint stays the latest."""
    _refuse_non_finite(models, ranks)
    weights = {
        "policy": ranks.full_state(models.policy),
        "critic": ranks.full_state(models.critic) if models.critic is not None else None,
    }
    optimizer_state = ranks.full_optimizer_state(models, optimizer)
    rng = _rng_tensors(ranks)
    if not ranks.main:
        return None
    output_dir.mkdir(parents=True, exist_ok=True)
    final = output_dir / f"checkpoint-{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=output_dir))
    save_models(models, tmp, weights)
    tensors, param_groups = _optimizer_tensors(optimizer_state)
    save_file(tensors, tmp / OPTIMIZER_FILE)
    save_file(rng, tmp / RNG_FILE)
    (tmp / STATE_FILE).write_text(
        json.dumps({**state, "step": step, "world_size": ranks.size, "param_groups": param_groups}, indent=2)
    )
    publish_folder(tmp, final)
    atomic_write_text(output_dir / LATEST, final.name)
    for old in sorted(output_dir.glob("checkpoint-*"))[: -max(keep, 1)]:
        os.replace(
            old, old.with_name(f".old-{old.name}-{os.getpid()}")
        )  # renamed first: no numbered folder is seen half deleted
    for leftover in [*output_dir.glob(f"{TMP_PREFIX}*"), *output_dir.glob(".old-*")]:
        if leftover.is_dir():  # ours, or left by a killed process
            shutil.rmtree(leftover, ignore_errors=True)
    return final


def _refuse_non_finite(models: Models, ranks: Ranks) -> None:
    modules = {"policy": models.policy, "critic": models.critic}
    # An FSDP parameter is checked on its shard here (to_local): one sum over the ranks then agrees.
    local = [
        (name, p.to_local() if hasattr(p, "to_local") else p)
        for key, module in modules.items()
        if module is not None
        for name, p in module.named_parameters(prefix=key)
        if p.requires_grad
    ]
    bad = [name for name, p in local if not torch.isfinite(p).all()]
    if ranks.sum(torch.tensor(float(len(bad)), device=next(models.policy.parameters()).device)).item():
        where = f" ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})" if bad else " (on another rank)"
        raise FastPPOError(f"refusing to checkpoint non-finite weights{where}: lower the learning rate")


def resume_point(output_dir: Path, resume: bool, command: str) -> Path | None:
    """The checkpoint a run of ``command`` (rlhf, dpo, reward-model) continues from with
    ``resume``, else None; checked before anything is written. A new run needs an absent or empty
    folder: a second run in a used one would append to its metrics.jsonl and write over its model
    and checkpoints. A checkpoint of another command is refused (its optimizer state fits another
    set of models)."""
    if resume:
        found = latest_checkpoint(output_dir)
        if found is None:
            raise FastPPOError(
                f"--resume: {output_dir} holds no checkpoint (no {LATEST} file) to continue from: drop --resume "
                "to start a new run"
            )
        written_by = _read_state(found).get("command", command)  # older checkpoints do not say
        if written_by != command:
            raise FastPPOError(
                f"--resume: {output_dir} holds a run of fastppo {written_by}, not of fastppo {command}: continue "
                f"it with 'fastppo {written_by} --resume', or give a new or empty --output-dir"
            )
        return found
    if output_dir.is_file():
        raise FastPPOError(f"--output-dir {output_dir} is a file: give a new or empty folder")
    used = sorted(p.name for p in output_dir.iterdir()) if output_dir.is_dir() else []
    if used:
        listed = ", ".join(used[:3]) + (", ..." if len(used) > 3 else "")
        again = "continue its run with --resume, or " if (output_dir / LATEST).is_file() else ""
        raise FastPPOError(
            f"--output-dir {output_dir} is not empty (it holds {listed}): {again}give a new or empty folder"
        )
    outputs.check_creatable_folder(
        output_dir, "--output-dir"
    )  # below a file, or unwritable: one line before the model loads
    return None


@contextmanager
def last_checkpoint_named(output_dir: Path) -> Iterator[None]:
    """A run that stops on an error says which checkpoint is its last good one (the one --resume continues from)."""
    try:
        yield
    except FastPPOError as exc:
        pointer = output_dir / LATEST
        if not pointer.is_file():
            raise
        raise FastPPOError(
            f"{exc}; the last good checkpoint is kept: {output_dir / pointer.read_text().strip()}"
        ) from None


def latest_checkpoint(output_dir: Path) -> Path | None:
    """The checkpoint folder ``latest`` names, or None without one; a FastPPOError for a name
    that is not a checkpoint folder of ``output_dir`` itself (a path, a link: followed, it would
    resume from elsewhere) or for a folder missing or incomplete."""
    pointer = output_dir / LATEST
    if not pointer.is_file():
        return None
    name = pointer.read_bytes().decode("utf-8", errors="replace").strip()
    folder = output_dir / name
    if not CHECKPOINT_NAME.fullmatch(name) or folder.is_symlink():
        what = f"{folder}, a symbolic link" if CHECKPOINT_NAME.fullmatch(name) else repr(name[:80])
        raise FastPPOError(
            f"{pointer} names {what}, not a checkpoint folder of {output_dir} (checkpoint-NNNNNN): write the "
            "name of its newest checkpoint into it"
        )
    if not (folder / STATE_FILE).is_file():
        raise FastPPOError(
            f"checkpoint {folder} named by {pointer} is missing or incomplete: delete {pointer} to start over"
        )
    check_world_size(output_dir, _read_state(folder).get("world_size", 1))
    return folder


def _read_state(folder: Path) -> dict[str, Any]:
    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FastPPOError(
            f"checkpoint {folder} is damaged: {STATE_FILE} cannot be read ({str(exc).splitlines()[0]}): delete "
            f"it and point {LATEST} at the one before"
        ) from None
    if not isinstance(state, dict):
        raise FastPPOError(
            f"checkpoint {folder} is damaged: {STATE_FILE} is not an object: delete it and point {LATEST} at the "
            "one before"
        )
    return state


def load_training_state(
    folder: Path, optimizer: torch.optim.Optimizer, models: Models, ranks: Ranks = ONE_PROCESS
) -> dict[str, Any]:
    """Restore optimizer and RNG states in place (this rank's); return the counters saved with them.
    A FastPPOError when the optimizer state does not fit ``models`` (a checkpoint of other models)."""
    state = _read_state(folder)
    state.pop("world_size", None)
    state.pop("command", None)
    try:
        _load_optimizer(optimizer, load_file(folder / OPTIMIZER_FILE), state.pop("param_groups"), models, ranks)
    except (ValueError, KeyError, RuntimeError, SafetensorError) as exc:
        raise FastPPOError(
            f"checkpoint {folder} does not fit this run: its optimizer state is for other models "
            f"({str(exc).splitlines()[0]}): resume it with the command and --model that wrote it"
        ) from None
    _restore_rng(load_file(folder / RNG_FILE), ranks)
    return state

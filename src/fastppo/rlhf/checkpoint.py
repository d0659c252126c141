"""Atomic checkpoints that restore a run exactly: fp32 weights (via save_pretrained), optimizer state,
counters, KL coefficient, fp16 loss scale and RNG states. Safetensors and JSON only, no pickle.

Layout: ``output_dir/checkpoint-000050/`` written under a temporary name and renamed into place,
then ``output_dir/latest`` (a one-line file, replaced atomically) points to it. A crash at any
moment leaves the previous checkpoint intact and ``latest`` pointing to a complete folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from fastppo.errors import FastPPOError
from fastppo.rlhf.models import Models, save_models

LATEST = "latest"
STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    state = optimizer.state_dict()
    tensors = {f"{index}.{key}": torch.as_tensor(value).contiguous() for index, slots in state["state"].items() for key, value in slots.items()}
    return tensors, state["param_groups"]


def _load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], param_groups: list[dict[str, Any]]) -> None:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    optimizer.load_state_dict({"state": state, "param_groups": param_groups})


def _rng_tensors() -> dict[str, torch.Tensor]:
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors.update({f"cuda.{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())})
    return tensors


def _restore_rng(tensors: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[f"cuda.{i}"] for i in range(len(tensors) - 1)]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def save_checkpoint(output_dir: Path, step: int, models: Models, optimizer: torch.optim.Optimizer, state: dict[str, Any], keep: int) -> Path:
    """Write ``checkpoint-{step}`` atomically, point ``latest`` at it, delete all but the newest ``keep``."""
    output_dir.mkdir(parents=True, exist_ok=True)
    final = output_dir / f"checkpoint-{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=".checkpoint-tmp-", dir=output_dir))
    save_models(models, tmp)
    tensors, param_groups = _optimizer_tensors(optimizer)
    save_file(tensors, tmp / OPTIMIZER_FILE)
    save_file(_rng_tensors(), tmp / RNG_FILE)
    (tmp / STATE_FILE).write_text(json.dumps({**state, "step": step, "param_groups": param_groups}, indent=2))
    if final.exists():  # re-saving the same step after a resume
        shutil.rmtree(final)
    os.replace(tmp, final)
    pointer = output_dir / f".{LATEST}.tmp"
    pointer.write_text(final.name)
    os.replace(pointer, output_dir / LATEST)
    for old in sorted(output_dir.glob("checkpoint-*"))[:-max(keep, 1)]:
        shutil.rmtree(old)
    return final


def latest_checkpoint(output_dir: Path) -> Path | None:
    pointer = output_dir / LATEST
    if not pointer.is_file():
        return None
    folder = output_dir / pointer.read_text().strip()
    if not (folder / STATE_FILE).is_file():
        raise FastPPOError(f"checkpoint {folder} named by {pointer} is missing or incomplete: delete {pointer} to start over")
    return folder


def load_training_state(folder: Path, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore optimizer and RNG states in place; return the counters saved with them."""
    state = json.loads((folder / STATE_FILE).read_text())
    _load_optimizer(optimizer, load_file(folder / OPTIMIZER_FILE), state.pop("param_groups"))
    _restore_rng(load_file(folder / RNG_FILE))
    return state

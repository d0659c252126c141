"""A run folder's bytes, and checkpoints written wrong on purpose."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from fastppo.files.checksums import write_checksums
from fastppo.training.checkpoint import CHECKPOINT_FILES


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder``: a file's bytes, None for a folder."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


# ``tensors`` and ``fields`` write a checkpoint wrong rather than damage it on disk: its checksums
# are made anew, so that the checks that name the wrong field see it (as in a folder without checksums).


def tensors(
    edit: Callable[[dict[str, torch.Tensor]], None], file: str = "trainer.safetensors"
) -> Callable[[Path], None]:
    def damage(checkpoint: Path) -> None:
        found = load_file(str(checkpoint / file))
        edit(found)
        save_file(found, str(checkpoint / file))
        write_checksums(checkpoint, CHECKPOINT_FILES)

    return damage


def fields(edit: Callable[[dict], None], file: str = "trainer.json") -> Callable[[Path], None]:
    def damage(checkpoint: Path) -> None:
        meta = json.loads((checkpoint / file).read_text())
        edit(meta)
        (checkpoint / file).write_text(json.dumps(meta))
        write_checksums(checkpoint, CHECKPOINT_FILES)

    return damage

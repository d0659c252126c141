"""Reading prompt and preference files (JSON lines) and drawing batches from them reproducibly."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from fastppo.errors import FastPPOError


@dataclass(frozen=True)
class PreferencePair:
    prompt: str
    chosen: str
    rejected: str


def _read_jsonl(path: str | Path, keys: tuple[str, ...], flag: str) -> list[dict[str, str]]:
    path = Path(path)
    if not path.is_file():
        raise FastPPOError(f"{flag} file {str(path)!r} does not exist: pass a JSON-lines file with one {{{', '.join(map(repr, keys))}: ...}} object per line")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FastPPOError(f"{path}:{number} is not valid JSON ({exc.msg}): write one JSON object per line") from exc
        if not isinstance(row, dict) or any(not isinstance(row.get(k), str) for k in keys):
            raise FastPPOError(f"{path}:{number} must be an object with string fields {', '.join(keys)}")
        rows.append(row)
    if not rows:
        raise FastPPOError(f"{flag} file {str(path)!r} is empty: add at least one line like {json.dumps({k: '...' for k in keys})}")
    return rows


def read_prompts(path: str | Path) -> list[str]:
    """Prompts from a JSON-lines file of ``{"prompt": "..."}`` objects."""
    return [row["prompt"] for row in _read_jsonl(path, ("prompt",), "--prompts")]


def read_preferences(path: str | Path) -> list[PreferencePair]:
    """Preference pairs from a JSON-lines file of ``{"prompt", "chosen", "rejected"}`` objects."""
    return [PreferencePair(r["prompt"], r["chosen"], r["rejected"]) for r in _read_jsonl(path, ("prompt", "chosen", "rejected"), "--data")]


def batch_indices(num_items: int, batch_size: int, step: int, seed: int) -> list[int]:
    """Indices for (1-based) ``step``: consecutive slices of a shuffled order that is reshuffled
    every pass over the data. A pure function of its arguments, so a resumed run draws exactly
    the batches it would have drawn."""
    indices = []
    orders: dict[int, list[int]] = {}
    for position in range((step - 1) * batch_size, step * batch_size):
        data_epoch, i = divmod(position, num_items)
        if data_epoch not in orders:
            orders[data_epoch] = torch.randperm(num_items, generator=torch.Generator().manual_seed(seed * 100_003 + data_epoch)).tolist()
        indices.append(orders[data_epoch][i])
    return indices

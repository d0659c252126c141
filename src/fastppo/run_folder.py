"""What a run folder holds, named once. A new run started over a run's files would replace its
policy and cut its metrics.jsonl back to nothing, and a run inside a folder of runs (or runs inside
a run) makes ``fastppo report`` read one and miss the others: ``fastppo train`` and ``--seeds``
(``fastppo.train``, ``fastppo.train_seeds``) refuse such a folder unless they resume it.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastppo.errors import FastPPOError

# Names only, no imports from the layers that write them (agent, checkpoint): they import these.
POLICY_FILE = "policy.safetensors"
AGENT_FILE = "agent.json"
CHECKPOINT_DIR = "checkpoints"

SEEDS_PLAN = "seeds.json"
"""A --seeds job's plan in its parent folder (fastppo.seeds), written before any seed starts."""
RUN_FILES = ("config.yaml", "metrics.jsonl", AGENT_FILE, POLICY_FILE, CHECKPOINT_DIR, SEEDS_PLAN)
"""What ``fastppo train`` writes into a run folder, TensorBoard's event files aside."""
TENSORBOARD_EVENTS = "events.out.tfevents.*"
SEED_FOLDER = re.compile(r"seed_\d+")
"""A ``--seeds`` run's part: ``--resume`` on its parent continues it."""


def own_run_files(folder: Path) -> list[str]:
    """The names of a run's files in ``folder`` itself (not below it)."""
    return [name for name in RUN_FILES if (folder / name).exists()] + sorted(p.name for p in folder.glob(TENSORBOARD_EVENTS))


def check_no_run(folder: str | Path) -> None:
    """A FastPPOError naming what is there when ``folder`` holds a run's files, a ``--seeds``
    run's seed folders, or runs one level below it; a missing folder, an empty one or one of
    unrelated files passes. Called before anything is written there."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    try:
        below = sorted(p for p in folder.iterdir() if p.is_dir() and p.name != CHECKPOINT_DIR and own_run_files(p))
    except OSError as exc:
        raise FastPPOError(f"cannot read {folder}: {exc.strerror or exc}: pick a readable --run-dir") from None
    seeds = [f"{p.name}/" for p in below if SEED_FOLDER.fullmatch(p.name)]
    found = own_run_files(folder) + seeds
    if found:
        raise FastPPOError(f"{folder} already holds a run ({_first(found)}): continue it with 'fastppo train --resume {folder}' or pick another --run-dir")
    if below:  # e.g. --run-dir runs: a run there would make runs/ a run and a folder of runs at once
        raise FastPPOError(f"{folder} holds runs ({_first([f'{p.name}/' for p in below])}): pick another --run-dir, a folder of its own for the new run")


def _first(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")

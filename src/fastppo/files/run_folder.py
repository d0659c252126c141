"""What a run folder holds, named once. A new run started over a run's files would replace its
policy and cut its metrics.jsonl back to nothing, and a run inside a folder of runs (or runs inside
a run) makes ``fastppo report`` read one and miss the others: ``fastppo train`` and ``--seeds``
(``fastppo.train``, ``fastppo.train_seeds``) refuse such a folder unless they resume it.
"""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any

import yaml

from fastppo.config import Config
from fastppo.env_ids import file_spec
from fastppo.errors import FastPPOError
from fastppo.files.atomic import atomic_write_text
from fastppo.files.checksums import CHECKSUMS_FILE

# Names only, no imports from the layers that write them (agent, checkpoint): they import these.
CONFIG_FILE = "config.yaml"
POLICY_FILE = "policy.safetensors"
AGENT_FILE = "agent.json"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_NAME = re.compile(r"^\d{6,}$")
"""A complete checkpoint folder's name: its iteration, zero-padded."""
TRAINER_JSON = "trainer.json"
LATEST = "latest"
"""checkpoints/latest: a one-line pointer to the newest checkpoint folder."""
VIDEO_DIR = "videos"
VIDEO_FILE = re.compile(r"episode-\d{6,}\.mp4")
"""A training video in RUN_DIR/videos (fastppo.envs.video)."""

SEEDS_PLAN = "seeds.json"
"""A --seeds job's plan in its parent folder (fastppo.experiments.seeds), written before any seed starts."""
RUN_FILES = (CONFIG_FILE, "metrics.jsonl", AGENT_FILE, POLICY_FILE, CHECKSUMS_FILE, CHECKPOINT_DIR, SEEDS_PLAN)
"""What ``fastppo train`` writes into a run folder, TensorBoard's event files aside."""
UNFINISHED_WRITE = re.compile(
    rf"\.(tmp|old)-\d{{6,}}-\d+|\.({'|'.join(map(re.escape, (*RUN_FILES, LATEST)))})\.tmp-\d+"
)
"""The name of a write in progress: a checkpoint folder before its rename, or the one it
replaces (fastppo.training.checkpoint), a run's file before its rename (fastppo.files.atomic)."""
TENSORBOARD_EVENTS = "events.out.tfevents.*"
SEED_FOLDER = re.compile(r"seed_\d+")
"""A ``--seeds`` run's part: ``--resume`` on its parent continues it."""


def write_config(run_dir: Path, config: Config) -> None:
    """``run_dir``/config.yaml, atomically, between YAML's document markers (``---`` and ``...``):
    a file cut short at any byte lacks the end marker, even where what is left still parses."""
    # libyaml's dumper where PyYAML has it: the same text, ~4x faster (a stack writes one per seed).
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    atomic_write_text(
        run_dir / CONFIG_FILE,
        yaml.dump(config.to_dict(), Dumper=dumper, sort_keys=False, explicit_start=True, explicit_end=True),
    )


def read_config(path: Path) -> dict[str, Any]:
    """A run's config.yaml (``path``) as data, checked whole: a ValueError (or a YAMLError, an
    OSError) for a file cut short (written with the markers, its end marker lost) or one that lacks
    a field or holds a bad value (``Config.from_dict``), never a part of a config taken for it."""
    text = path.read_text(encoding="utf-8")
    if text.startswith("---") and not text.rstrip().endswith("\n..."):
        raise ValueError(f"{CONFIG_FILE} is cut short (its end marker '...' is missing)")
    data = yaml.safe_load(text)
    Config.from_dict(data)
    return data


def own_run_files(folder: Path) -> list[str]:
    """The names of a run's files in ``folder`` itself (not below it)."""
    return [name for name in RUN_FILES if (folder / name).exists()] + sorted(
        p.name for p in folder.glob(TENSORBOARD_EVENTS)
    )


def failed_start_files(folder: Path) -> list[Path]:
    """What a run that stopped before its first checkpoint (a seed of a --seeds job killed in its
    start-up) wrote in ``folder``, which a resume deletes to start it again: its files, TensorBoard
    events and videos, and unfinished saves. A FastPPOError where ``folder`` or anything in it is a
    link or something else (a file of the user's): a resume deletes only what a run wrote."""
    if folder.is_symlink():
        raise FastPPOError(
            f"{folder} is a link, not a folder a run made: remove it yourself (fastppo deletes nothing through a link)"
        )
    foreign = []
    for path in folder.iterdir():
        if path.is_symlink():
            foreign.append(path)
        elif path.name == CHECKPOINT_DIR and path.is_dir():  # no complete checkpoint in it: the run would have started
            foreign += [
                p
                for p in path.iterdir()
                if p.is_symlink() or not (UNFINISHED_WRITE.fullmatch(p.name) or p.name == LATEST)
            ]
        elif path.name == VIDEO_DIR and path.is_dir():
            foreign += [
                p for p in path.iterdir() if p.is_symlink() or not (VIDEO_FILE.fullmatch(p.name) and p.is_file())
            ]
        elif not (
            path.is_file()
            and (path.name in RUN_FILES or path.match(TENSORBOARD_EVENTS) or UNFINISHED_WRITE.fullmatch(path.name))
        ):
            foreign.append(path)
    if foreign:
        names = sorted(str(p.relative_to(folder)) for p in foreign)
        raise FastPPOError(
            f"{folder} holds {_first(names)}, which no fastppo run wrote: move it out of the folder (fastppo deletes "
            "only what a run wrote), or pick another --run-dir"
        )
    return sorted(folder.iterdir())


def check_no_run(folder: str | Path, start_over: bool = False) -> None:
    """A FastPPOError naming what is there when ``folder`` holds a run's files, a ``--seeds``
    run's seed folders, or runs one level below it; a missing folder, an empty one or one of
    unrelated files passes, and with ``start_over`` (``fastppo train --resume``) one whose run
    stopped before its first checkpoint. Called before anything is written there."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    try:
        below = sorted(p for p in folder.iterdir() if p.is_dir() and p.name != CHECKPOINT_DIR and own_run_files(p))
    except OSError as exc:
        raise FastPPOError(f"cannot read {folder}: {exc.strerror or exc}: pick a readable --run-dir") from None
    seeds = [f"{p.name}/" for p in below if SEED_FOLDER.fullmatch(p.name)]
    found = own_run_files(folder) + seeds
    if found and not (start_over and stopped_before_first_checkpoint(folder)):
        raise FastPPOError(
            f"{folder} already holds a run ({_first(found)}): continue it with 'fastppo train --resume {folder}' or "
            "pick another --run-dir"
        )
    if below:  # e.g. --run-dir runs: a run there would make runs/ a run and a folder of runs at once
        raise FastPPOError(
            f"{folder} holds runs ({_first([f'{p.name}/' for p in below])}): pick another --run-dir, a folder of its "
            "own for the new run"
        )


def check_not_a_run(folder: str | Path, what: str) -> None:
    """A FastPPOError when ``folder``, where a command other than training writes (``what``: a
    report's --out, a sweep's --run-dir), holds a run's files or a --seeds job's seed runs: its
    files would mix with the run's (a sweep.db in a finished run). Called before anything is written."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    seeds = [
        f"{p.name}/"
        for p in sorted(folder.iterdir())
        if SEED_FOLDER.fullmatch(p.name) and p.is_dir() and own_run_files(p)
    ]
    found = own_run_files(folder) + seeds
    if found:
        raise FastPPOError(f"{what} {folder} is a run's folder ({_first(found)}): give {what} a folder of its own")


def stopped_before_first_checkpoint(folder: Path) -> bool:
    """Whether ``folder`` holds a run that stopped (failed, or was killed) before its first
    checkpoint: its config.yaml, and what else it wrote by then (metrics.jsonl, TensorBoard
    events), as regular files, and no checkpoint, saved agent or --seeds plan. Nothing there can
    be resumed: ``fastppo train --resume`` starts it over with its config.yaml, rewriting it,
    cutting metrics.jsonl back to nothing and having TensorBoard drop the old curves
    (``fastppo.training.logger``)."""
    files = own_run_files(folder)
    return (
        CONFIG_FILE in files
        and not list_checkpoints(folder)
        and not {AGENT_FILE, POLICY_FILE, SEEDS_PLAN} & set(files)
        and all(
            (folder / name).is_file() and not (folder / name).is_symlink() for name in files if name != CHECKPOINT_DIR
        )
    )


def _first(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")


def default_run_dir(config: Config, seed: str | None = None) -> Path:
    """runs/<env>__<exp>__<seed>__<timestamp>, CleanRL's naming (``seed``: the --seeds spec of a
    folder of seeds instead of the run's own), with -2, -3, ... after the timestamp where that
    folder exists already (a run of the same name started in the same second): a new run never
    lands in another's folder, which training would refuse."""
    env = config.env.env_id
    if (parts := file_spec(env)) is not None:  # an absolute path: the file's name is name enough
        env = f"{Path(parts[0]).name}:{parts[1]}"
    env = re.sub(r"[^\w.-]+", "_", env).strip("_")  # a name to type unquoted: openspiel:goofspiel(num_cards=4)
    name = f"{env}__{config.run.exp_name}__{seed or config.run.seed}__{int(time.time())}"
    candidates = (Path(config.run.run_root) / (name if n == 1 else f"{name}-{n}") for n in itertools.count(1))
    return next(path for path in candidates if not path.exists())


def checkpoint_root(run_dir: Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoint folders, oldest first (temporary folders of interrupted saves excluded)."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    return sorted(
        (p for p in root.iterdir() if p.is_dir() and CHECKPOINT_NAME.match(p.name)), key=lambda p: int(p.name)
    )


def seed_folders(run_dir: str | Path) -> list[Path]:
    """The seed folders (``seed_<n>``, in seed order) with checkpoints of a ``--seeds`` run's folder
    that holds none itself; empty for an ordinary run. Every seed run has one: the last is written
    as it ends, whatever ``--checkpoint-every`` says."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or list_checkpoints(run_dir):
        return []
    found = [d for d in run_dir.glob("seed_*") if d.name.removeprefix("seed_").isdigit() and list_checkpoints(d)]
    return sorted(found, key=lambda d: int(d.name.removeprefix("seed_")))


def find_checkpoint(path: str | Path) -> Path:
    """The newest complete checkpoint of a run directory, or ``path`` itself if it is one."""
    path = Path(path)
    if not path.exists():
        raise FastPPOError(f"{path} does not exist: give a run directory (runs/...) or a checkpoint folder")
    if (path / TRAINER_JSON).is_file():
        return path
    found = list_checkpoints(path)
    if not found and stopped_before_first_checkpoint(path):
        raise FastPPOError(
            f"no checkpoint in {path}: its run stopped before its first, and has no agent to load; 'fastppo train "
            f"--resume {path}' starts it over"
        )
    if not found:
        raise FastPPOError(
            f"no checkpoint in {path}: expected {path / CHECKPOINT_DIR}/NNNNNN/ (written by 'fastppo train')"
        )
    return found[-1]

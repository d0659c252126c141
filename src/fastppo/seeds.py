"""Many seeds of one config: ``fastppo train ENV --seeds 1-10 --workers K``.

Each seed is an ordinary run (its own folder, checkpoints, metrics, resume) trained in its own
worker process, K at a time; ``fastppo report`` then reads the parent folder as a group of runs.
Processes rather than threads: each run's torch, numpy and env state stay its own, and a seed's
crash cannot take the others down.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from collections.abc import Iterable
from typing import Any, NamedTuple

from fastppo.config import Config, check_seed
from fastppo.errors import FastPPOError
from fastppo.outputs import new_folders, remove_if_empty

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def parse_seeds(spec: str) -> list[int]:
    """'1-10', '1,3,5' or '1-4,8' -> the seeds in order, each once; a one-line error otherwise."""
    seeds: list[int] = []
    for part in spec.replace(" ", "").split(","):
        match = _RANGE.match(part)
        if not match:
            raise FastPPOError(f"--seeds expects seeds and ranges like 1-10 or 1,3,5, got {spec!r}")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise FastPPOError(f"--seeds range {part} runs backwards: write {last}-{first}")
        seeds += [check_seed(s, "--seeds") for s in range(first, last + 1) if s not in seeds]
    return seeds


RECENT_EPISODES = 20


class SeedResult(NamedTuple):
    seed: int
    run_dir: Path
    final_return: float | None  # mean of the last RECENT_EPISODES episodes; None when none finished
    error: str | None = None

    @classmethod
    def of(cls, seed: int, run_dir: Path, episode_returns: list[float]) -> SeedResult:
        recent = episode_returns[-RECENT_EPISODES:]
        return cls(seed, run_dir, sum(recent) / len(recent) if recent else None)

    def __str__(self) -> str:
        if self.error:
            shown = "failed: " + self.error
        elif self.final_return is None:
            shown = "no episode finished"
        else:
            shown = f"{self.final_return:.1f} mean return over the last {RECENT_EPISODES} episodes"
        return f"fastppo: seed {self.seed}: {shown} ({self.run_dir})"


def print_summary(results: list[SeedResult], parent: Path) -> None:
    """The seeds' final returns in one line, and where ``fastppo report`` reads them."""
    finals = [r.final_return for r in results if r.final_return is not None]
    if finals:
        print(f"fastppo: mean of the seeds' final returns {sum(finals) / len(finals):.1f} (min {min(finals):.1f}, max {max(finals):.1f}); statistics: fastppo report {parent}")


def _train_one(config: Config, run_dir: Path) -> SeedResult:
    from fastppo.trainer import train

    try:
        agent = train(config, run_dir)
    except FastPPOError as exc:
        return SeedResult(config.run.seed, run_dir, None, str(exc))
    return SeedResult.of(config.run.seed, run_dir, agent.episode_returns)


class SeedPlan(NamedTuple):
    config: Config
    seeds: list[int]
    parent: Path  # each seed's run goes to parent/seed_<n>
    workers: int | None  # processes at a time; None: one stacked process (fastppo.seed_stack)


def plan_seeds(env_id: str | type, seeds: str | Iterable[int], preset: str | None, run_dir: str | Path | None, workers: int | None, overrides: dict[str, Any]) -> SeedPlan:
    """What ``--seeds`` (the CLI) and ``fastppo.train_seeds`` train: the seeds (a spec such as
    "1-10", or ints), the config, the parent folder (default runs/<env>__<exp>__<seeds>__<time>)
    and how: tensor envs without ``workers`` as one stack, else ``workers`` processes at a time
    (default: one per CPU core, at most one per seed)."""
    from fastppo.api import default_run_dir, make_config

    if any(key in ("seed", "run.seed") for key in overrides):
        raise FastPPOError("--seeds and --seed both name the seed: keep one")
    seed_list = parse_seeds(seeds) if isinstance(seeds, str) else [check_seed(int(s), "--seeds") for s in dict.fromkeys(seeds)]
    if not seed_list:
        raise FastPPOError("--seeds names no seed: give at least one")
    config = make_config(env_id, preset, overrides)
    spec = seeds if isinstance(seeds, str) else f"{seed_list[0]}-{seed_list[-1]}"
    parent = Path(run_dir) if run_dir else default_run_dir(config, seed=spec.replace(",", "_"))
    if config.env.backend == "tensor" and workers is None:
        return SeedPlan(config, seed_list, parent, None)
    return SeedPlan(config, seed_list, parent, workers if workers is not None else min(len(seed_list), os.cpu_count() or 1))


def train_seeds(config: Config, seeds: list[int], parent: Path, workers: int) -> list[SeedResult]:
    """Train ``config`` once per seed into ``parent/seed_<n>``, ``workers`` runs at a time, each
    without a progress bar (a line per finished seed instead); results in seed order."""
    if workers < 1:
        raise FastPPOError(f"--workers must be >= 1, got {workers}")
    runs = [(dataclasses.replace(config, run=dataclasses.replace(config.run, seed=seed, progress=False)), parent / f"seed_{seed}") for seed in seeds]
    for run_config, run_dir in runs:
        run_config.validate()
        if run_dir.exists() and any(run_dir.iterdir()):
            raise FastPPOError(f"{run_dir} is not empty: pick another --run-dir for these seeds")
    fresh = new_folders(parent)
    results = []
    # spawn, not fork: a forked child would inherit torch's thread pools and the parent's RNG state.
    with ProcessPoolExecutor(max_workers=min(workers, len(runs)), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_train_one, run_config, run_dir) for run_config, run_dir in runs]
        for future in as_completed(futures):
            result = future.result()
            print(result, flush=True)
            results.append(result)
    remove_if_empty(fresh)  # every seed failed to start: no empty folder left (each seed's own went with it)
    return sorted(results, key=lambda r: seeds.index(r.seed))

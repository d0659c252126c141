"""Many seeds of one config: ``fastppo train ENV --seeds 1-10 --workers K``.

Each seed is an ordinary run (its own folder, checkpoints, metrics, resume) trained in one of K
worker processes; ``fastppo report`` then reads the parent folder as a group of runs. On tensor
envs each worker trains its share of the seeds as one stack (``fastppo.seed_stack``); on other
envs each takes the next seed when it is free. Processes rather than threads: each run's torch,
numpy and env state stay its own, and a seed's crash cannot take the others down.
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import os
import queue
import re
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from fastppo.config import Config, available_cpus, check_seed
from fastppo.errors import FastPPOError
from fastppo.outputs import new_folders, remove_if_empty

_RANGE = re.compile(r"^(\d{1,20})(?:-(\d{1,20}))?$")  # 20 digits: past any seed, short of int()'s digit limit
MAX_SEEDS = 10_000
"""The most seeds one command trains: a slip such as 1-100000000 is an error up front, not a list of
a hundred million runs."""


def parse_seeds(spec: str) -> list[int]:
    """'1-10', '1,3,5' or '1-4,8' -> the seeds in order; a one-line error otherwise, a seed named
    twice included. The count is checked before any range is expanded, and the work is linear in it."""
    ranges = []
    for part in spec.replace(" ", "").split(","):
        match = _RANGE.match(part)
        if not match:
            raise FastPPOError(f"--seeds expects whole numbers >= 0 and ranges like 1-10 or 1,3,5, got {spec!r}")
        first, last = int(match[1]), int(match[2] or match[1])
        if last < first:
            raise FastPPOError(f"--seeds range {part} runs backwards: write {last}-{first}")
        check_seed(last, "--seeds")  # the range's largest: the others are in bounds too
        ranges.append(range(first, last + 1))
    count = sum(map(len, ranges))
    if count > MAX_SEEDS:
        raise FastPPOError(f"--seeds {spec} names {count} seeds, more than the {MAX_SEEDS} one command trains: split them over several commands, each with its own --run-dir")
    return _each_once([seed for seeds in ranges for seed in seeds], f"--seeds {spec}")


def seed_list(seeds: str | Iterable[int]) -> list[int]:
    """``--seeds``' spec, or ``fastppo.train_seeds``' ints, as the checked list of seeds."""
    if isinstance(seeds, str):
        return parse_seeds(seeds)
    taken = list(itertools.islice(seeds, MAX_SEEDS + 1))  # never more: range(1, 2**32) would fill the memory
    if len(taken) > MAX_SEEDS:
        raise FastPPOError(f"seeds: more than the {MAX_SEEDS} seeds one call trains: split them over several calls, each with its own run_dir")
    return _each_once([check_seed(int(seed), "--seeds") for seed in taken], "seeds")


def _each_once(seeds: list[int], named_by: str) -> list[int]:
    """``seeds``, or a FastPPOError naming the first seed named twice: its runs would share one folder."""
    seen: set[int] = set()
    for seed in seeds:
        if seed in seen:
            raise FastPPOError(f"{named_by} names seed {seed} twice: name each seed once")
        seen.add(seed)
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


class SeedPlan(NamedTuple):
    config: Config  # a stack's torch threads resolved: each of its processes gets its share of the cores
    seeds: list[int]
    parent: Path  # each seed's run goes to parent/seed_<n>
    workers: int  # processes at once; tensor envs: each trains its share of the seeds as one stack


def plan_seeds(env_id: str | type, seeds: str | Iterable[int], preset: str | None, run_dir: str | Path | None, workers: int | None, overrides: dict[str, Any]) -> SeedPlan:
    """What ``--seeds`` (the CLI) and ``fastppo.train_seeds`` train: the seeds (a spec such as
    "1-10", or ints), the config, the parent folder (default runs/<env>__<exp>__<seeds>__<time>)
    and the processes (``worker_count``)."""
    from fastppo.api import default_run_dir, make_config
    from fastppo.run_folder import check_no_run

    if any(key in ("seed", "run.seed") for key in overrides):
        raise FastPPOError("--seeds and --seed both name the seed: keep one")
    listed = seed_list(seeds)
    if not listed:
        raise FastPPOError("--seeds names no seed: give at least one")
    config = make_config(env_id, preset, overrides)
    spec = seeds if isinstance(seeds, str) else f"{listed[0]}-{listed[-1]}"
    parent = Path(run_dir) if run_dir else default_run_dir(config, seed=spec.replace(",", "_"))
    check_no_run(parent)  # a single run there, or an earlier --seeds job: report would mix them
    workers = worker_count(config, len(listed), workers)
    return SeedPlan(stack_threads(config, workers), listed, parent, workers)


def worker_count(config: Config, seeds: int, workers: int | None) -> int:
    """Processes that train ``seeds`` seeds at once: ``workers`` (at most one per seed), else one
    per CPU core (cores / --run.torch-threads when that is set), but one for a stack of seeds on a
    GPU, where the GPU computes. On CPU cores separate processes beat threads: a 64-seed CartPole
    stack solved in 15.9-16.1 s as one process on 2 threads and in 13.7-14.1 s as two processes of
    32 seeds on one thread each (benchmarks/README.md), the ops being too small for two threads."""
    from fastppo.trainer import resolve_device

    if workers is not None and workers < 1:
        raise FastPPOError(f"--workers must be >= 1, got {workers}")
    if workers is None:
        on_gpu = config.env.backend == "tensor" and resolve_device(config.run.device).type != "cpu"
        workers = 1 if on_gpu else available_cpus() // max(1, config.run.torch_threads)
    return max(1, min(workers, seeds))


def stack_threads(config: Config, workers: int) -> Config:
    """``config`` with a stack's automatic torch threads (every core, for one process) split
    between ``workers`` processes. Saved with each seed: a resumed stack takes as many processes
    (``worker_count``) and threads as it had, and computes as it did."""
    if config.env.backend != "tensor" or config.run.torch_threads:
        return config
    return dataclasses.replace(config, run=dataclasses.replace(config.run, torch_threads=max(1, available_cpus() // workers)))


def stacks(seeds: list[int], workers: int, checkpoints: list | None = None) -> list[list[int]]:
    """The stacks ``seeds`` train in: ``workers`` shares of consecutive seeds whose sizes differ by
    at most one; resumed (``checkpoints``, one per seed), the stacks they were saved from, each
    still at one iteration (a process of the run may have stopped later than another). A stack's
    float rounding depends on its width, so the same stacks continue each seed bit for bit."""
    if checkpoints is None:
        return [seeds[i * len(seeds) // workers : (i + 1) * len(seeds) // workers] for i in range(min(workers, len(seeds)))]
    saved: dict[tuple, list[int]] = {}
    for seed, checkpoint in zip(seeds, checkpoints):
        saved.setdefault((tuple(checkpoint.meta.get("stack", ())), checkpoint.iteration), []).append(seed)
    return list(saved.values())


def train_seeds(config: Config, seeds: list[int], parent: Path, workers: int, checkpoints: list | None = None) -> tuple[list[SeedResult], int | None]:
    """Train ``config`` once per seed into ``parent/seed_<n>`` with ``workers`` processes, without
    progress bars but the first stack's (a line per finished seed instead): on tensor envs each
    process trains its share of the seeds (``stacks``) as one stack, with ``checkpoints`` (one per
    seed) a stopped stack resumed, and a single stack trains in this process (its errors raised
    here); otherwise each process takes the next seed when it is free. Prints each seed's result;
    returns the results in seed order and the signal that stopped the run (None if none did).

    A terminal's Ctrl-C reaches the workers too (one process group): each stops after its current
    iteration with a checkpoint, and they are waited for. A SIGTERM sent to this process alone is
    passed on to them; one sent to every process of the job (a scheduler's) reaches a worker twice,
    and it stops as gracefully (a worker takes a repeat within a second for the same request; a
    later one stops it at once, as a single run's second Ctrl-C does).

    Workers are forked where each computes on one thread (torch's DataLoader does the same):
    nothing to import again, where a spawned worker spends ~2 s importing torch. A forked process
    cannot use GNU OpenMP's thread pool if its parent has (it hangs), hence spawn otherwise, and on
    GPUs (CUDA refuses forked children) and outside Linux."""
    from fastppo.seed_stack import check_seed_stack
    from fastppo.trainer import resolve_device, train_seed_stack

    stacked = config.env.backend == "tensor"
    quiet = dataclasses.replace(config, run=dataclasses.replace(config.run, progress=False)).validate()
    if stacked:
        check_seed_stack(config)  # once here, not as an error per process
    if checkpoints is None:
        for seed in seeds:
            run_dir = parent / f"seed_{seed}"
            if run_dir.exists() and any(run_dir.iterdir()):
                raise FastPPOError(f"{run_dir} is not empty: pick another --run-dir for these seeds")
    parts = stacks(seeds, workers, checkpoints) if stacked else [[seed] for seed in seeds]
    if stacked and len(parts) == 1:  # no process to start
        agents = train_seed_stack(config, seeds, parent, checkpoints)
        results = [SeedResult.of(seed, agent.run_dir, agent.episode_returns) for seed, agent in zip(seeds, agents)]
        print(*results, sep="\n", flush=True)
        stopped = agents[0].interrupted_by
        return results, stopped and int(stopped)
    by_seed = dict(zip(seeds, checkpoints or [None] * len(seeds)))
    on_cpu = resolve_device(config.run.device).type == "cpu"  # also --device auto on a machine without a GPU
    fork = sys.platform.startswith("linux") and quiet.intra_op_threads(stacked) == 1 and on_cpu
    context = multiprocessing.get_context("fork" if fork else "spawn")
    tasks, reports = context.Queue(), context.Queue()
    fresh = new_folders(parent)
    # The first stack keeps the progress bar, if asked for: the stacks move at about one pace.
    configs = [config if i == 0 and stacked else quiet for i in range(min(workers, len(parts)))]
    processes = [context.Process(target=_worker, args=(c, parent, tasks, reports), name=f"fastppo-seeds-{i}") for i, c in enumerate(configs)]
    for process in processes:  # before the first put starts the queue's thread: a fork copies no thread
        process.start()
    for part in parts:
        tasks.put((part, [by_seed[s] for s in part] if checkpoints else None))
    for _ in processes:
        tasks.put(None)  # one stop mark per worker, after the work
    results: dict[int, SeedResult] = {}
    stopped: int | None = None
    with _terms_passed_on(processes) as passed_on:
        while len(results) < len(seeds) and (any(p.is_alive() for p in processes) or not reports.empty()):
            try:
                part_results, signal_number = reports.get(timeout=0.5)
            except queue.Empty:
                continue
            stopped = stopped or signal_number
            for result in part_results:
                print(result, flush=True)
                results[result.seed] = result
    stopped = stopped or (passed_on[0] if passed_on else None)
    for process in processes:
        process.join()
    for seed in seeds:  # a stop before the seed's turn, a second Ctrl-C, or a worker that died
        if seed not in results:
            codes = [p.exitcode for p in processes if p.exitcode]  # negative: the signal that killed it
            why = "stopped before it finished" if stopped else "its worker process ended without a result" + (f" (exit code {codes[0]})" if codes else "")
            results[seed] = SeedResult(seed, parent / f"seed_{seed}", None, why)
            print(results[seed], flush=True)
    remove_if_empty(fresh)  # every seed failed to start: no empty folder left (each seed's own went with it)
    return [results[seed] for seed in seeds], stopped


def _worker(config: Config, parent: Path, tasks: Any, reports: Any) -> None:
    """One worker process: train the tasks' seeds (a stack, or one run) until the stop mark or a
    signal, reporting each task's results."""
    from fastppo.trainer import StopRequest, train, train_seed_stack

    StopRequest.repeat_grace = 1.0  # a signal may come twice at once: from the job's sender and from the parent
    try:
        while (task := tasks.get()) is not None:
            seeds, checkpoints = task
            try:
                if config.env.backend == "tensor":
                    agents = train_seed_stack(config, seeds, parent, checkpoints)
                else:
                    agents = [train(dataclasses.replace(config, run=dataclasses.replace(config.run, seed=seeds[0])), parent / f"seed_{seeds[0]}")]
            except FastPPOError as exc:
                reports.put(([SeedResult(seed, parent / f"seed_{seed}", None, str(exc)) for seed in seeds], None))
                continue
            stopped = agents[0].interrupted_by
            reports.put(([SeedResult.of(seed, agent.run_dir, agent.episode_returns) for seed, agent in zip(seeds, agents)], stopped and int(stopped)))
            if stopped:
                return
    except KeyboardInterrupt:  # a second Ctrl-C (stops at once), or one between two seeds
        reports.put(([], int(signal.SIGINT)))


@contextmanager
def _terms_passed_on(processes: list[Any]) -> Iterator[list[int]]:
    """While waiting for ``processes``: Ctrl-C (which the terminal sends them too) does not end
    this process, and a SIGTERM is passed on to them (a kill of this process alone would leave
    them training); yields the list of the signals passed on."""
    passed: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # only it may set handlers
        yield passed
        return

    def pass_on(signum: int, frame: Any) -> None:
        passed.append(signum)
        for process in processes:
            if process.is_alive():
                os.kill(process.pid, signum)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN), signal.SIGTERM: signal.signal(signal.SIGTERM, pass_on)}
    try:
        yield passed
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

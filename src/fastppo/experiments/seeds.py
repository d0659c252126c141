"""Many seeds of one config: ``fastppo train ENV --seeds 1-10 --workers K``.

Each seed is an ordinary run (its own folder, checkpoints, metrics, resume); ``fastppo report``
then reads the parent folder as a group of runs. The seeds are split into populations, each
trained by ``train_population`` wherever it is placed: on tensor envs each of K workers' shares
is one stack (``fastppo.training.seed_stack``; a lone stack trains in this process), on other
envs each seed is a population of one, a worker taking the next when it is free. Processes rather
than threads: each run's torch, numpy and env state stay its own, and a seed's crash cannot take
the others down.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import multiprocessing
import os
import queue
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from fastppo.agents.agent import FINAL_EPISODES
from fastppo.config import Config, available_cpus, check_seed
from fastppo.errors import FastPPOError
from fastppo.files.outputs import new_folders, remove_if_empty
from fastppo.files.run_folder import SEEDS_PLAN, failed_start_files

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
        raise FastPPOError(
            f"--seeds {spec} names {count} seeds, more than the {MAX_SEEDS} one command trains: split them over "
            "several commands, each with its own --run-dir"
        )
    return _each_once([seed for seeds in ranges for seed in seeds], f"--seeds {spec}")


def seed_list(seeds: str | Iterable[int]) -> list[int]:
    """``--seeds``' spec, or ``fastppo.train_seeds``' ints, as the checked list of seeds."""
    if isinstance(seeds, str):
        return parse_seeds(seeds)
    taken = list(itertools.islice(seeds, MAX_SEEDS + 1))  # never more: range(1, 2**32) would fill the memory
    if len(taken) > MAX_SEEDS:
        raise FastPPOError(
            f"seeds: more than the {MAX_SEEDS} seeds one call trains: split them over several calls, each with "
            "its own run_dir"
        )
    return _each_once([check_seed(int(seed), "--seeds") for seed in taken], "seeds")


def _each_once(seeds: list[int], named_by: str) -> list[int]:
    """``seeds``, or a FastPPOError naming the first seed named twice: its runs would share one folder."""
    seen: set[int] = set()
    for seed in seeds:
        if seed in seen:
            raise FastPPOError(f"{named_by} names seed {seed} twice: name each seed once")
        seen.add(seed)
    return seeds


class SeedResult(NamedTuple):
    seed: int
    run_dir: Path
    recent_return: (
        float | None
    )  # mean of the last FINAL_EPISODES episodes (Agent.final_return); None when none finished
    error: str | None = None
    stopped_at: int | None = None  # the step a signal stopped the seed at (its checkpoint's); None: it ran to its end
    started: bool = True  # False: the job was stopped before the seed's turn

    @classmethod
    def of(cls, seed: int, run_dir: Path, episode_returns: list[float], stopped_at: int | None = None) -> SeedResult:
        recent = episode_returns[-FINAL_EPISODES:]
        return cls(seed, run_dir, sum(recent) / len(recent) if recent else None, stopped_at=stopped_at)

    @property
    def finished(self) -> bool:
        """Trained to its end (its --total-timesteps or --run.stop-return): its return is final."""
        return self.started and self.error is None and self.stopped_at is None

    def __str__(self) -> str:
        recent = (
            "no episode finished"
            if self.recent_return is None
            else f"{self.recent_return:.1f} mean return over the last {FINAL_EPISODES} episodes"
        )
        if self.error:
            shown = "failed: " + self.error
        elif not self.started:
            shown = "not started: the job was stopped first"
        elif self.stopped_at is not None:
            shown = f"stopped at step {self.stopped_at}" + ("" if self.recent_return is None else f", {recent} so far")
        else:
            shown = recent
        return f"fastppo: seed {self.seed}: {shown} ({self.run_dir})"


def print_summary(results: list[SeedResult], parent: Path) -> None:
    """The finished seeds' final returns in one line, and where ``fastppo report`` reads them;
    the seeds left to train (stopped, not started), and how to train them on."""
    finals = [r.recent_return for r in results if r.finished and r.recent_return is not None]
    if finals:
        which = "the seeds'" if len(finals) == len(results) else f"the {len(finals)} finished seeds'"
        print(
            f"fastppo: mean of {which} final returns {sum(finals) / len(finals):.1f} (min {min(finals):.1f}, max "
            f"{max(finals):.1f}); statistics: fastppo report {parent}"
        )
    left = [r for r in results if not r.finished and not r.error]
    if left:
        print(
            f"fastppo: {len(left)} of the {len(results)} seeds are not finished (stopped or not started): "
            f"fastppo train --resume {parent} trains them on"
        )


class SeedProgress(NamedTuple):
    """A worker's report that its seeds (one run, or a stack) reached ``global_step``."""

    seeds: list[int]
    global_step: int


PROGRESS_EVERY = 10.0
"""Seconds between the job's progress lines while its worker processes train (they show no bar)."""
REPORT_EVERY = 1.0
"""Seconds between a worker's progress reports: a fast run must not flood the queue."""


def progress_line(done: int, total: int, running: dict[tuple[int, ...], int], total_steps: int, elapsed: float) -> str:
    """The job's state in one line: seeds done, those running and their steps, the time so far."""

    def named(seeds: tuple[int, ...]) -> str:
        return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}-{seeds[-1]}"

    shown = [f"{named(seeds)} at step {step}/{total_steps}" for seeds, step in sorted(running.items())]
    more = f", +{len(shown) - 4} more" if len(shown) > 4 else ""
    steps = f" ({', '.join(shown[:4])}{more})" if shown else ""
    count = sum(map(len, running))
    return f"fastppo: seeds: {done}/{total} done, {count} running{steps}, elapsed {elapsed:.0f} s"


class SeedPlan(NamedTuple):
    config: Config  # a stack's torch threads resolved: each of its processes gets its share of the cores
    seeds: list[int]
    parent: Path  # each seed's run goes to parent/seed_<n>
    workers: int  # processes at once; tensor envs: each trains its share of the seeds as one stack


def plan_seeds(
    env_id: str | type,
    seeds: str | Iterable[int],
    preset: str | None,
    run_dir: str | Path | None,
    workers: int | None,
    overrides: dict[str, Any],
) -> SeedPlan:
    """What ``--seeds`` (the CLI) and ``fastppo.train_seeds`` train: the seeds (a spec such as
    "1-10", or ints), the config, the parent folder (default runs/<env>__<exp>__<seeds>__<time>)
    and the processes (``worker_count``)."""
    from fastppo.envs.env_config import make_config
    from fastppo.files.run_folder import check_no_run, default_run_dir

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
    from fastppo.devices import resolve_device

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
    return dataclasses.replace(
        config, run=dataclasses.replace(config.run, torch_threads=max(1, available_cpus() // workers))
    )


PLAN_FILE = SEEDS_PLAN
"""In a --seeds job's folder: its seeds, config and processes, written as it starts, so that
``fastppo train --resume`` knows the seeds that never started too."""


def save_plan(plan: SeedPlan) -> None:
    from fastppo.files.atomic import atomic_write_text

    plan.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        plan.parent / PLAN_FILE,
        json.dumps({"seeds": plan.seeds, "workers": plan.workers, "config": plan.config.to_dict()}, indent=1),
    )


def read_plan(parent: Path) -> SeedPlan | None:
    """The plan ``save_plan`` wrote in ``parent``; None where there is none (a folder of seeds
    trained before jobs wrote one). A damaged one is a one-line error."""
    path = parent / PLAN_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return SeedPlan(Config.from_dict(data["config"]), [int(s) for s in data["seeds"]], parent, int(data["workers"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise FastPPOError(
            f"{path} is damaged ({exc}): resume each seed alone, fastppo train --resume {parent}/seed_<n>"
        ) from None


def resume_plan(parent: Path, overrides: dict[str, Any], env_id: str | None) -> tuple[Config, list[int], int, list]:
    """What ``fastppo train --resume PARENT`` trains of a --seeds job: the config, the seeds left
    (each started one from its newest checkpoint, or its stack's: ``resume_seed_stack_config``;
    each one that never started from scratch: None), the processes and the checkpoints. Finished
    seeds (their --total-timesteps or --run.stop-return reached, as ``overrides`` may move them)
    stay out; if every seed is finished, a one-line error."""
    from fastppo.files.run_folder import seed_folders
    from fastppo.training.resume import every_seed_finished, finished_run, resume_config, resume_seed_stack_config

    plan = read_plan(parent)
    started = {int(d.name.removeprefix("seed_")) for d in seed_folders(parent)}
    if plan is None:  # a job from before plans were written: the seeds with checkpoints, as one stack or many
        config, seeds, checkpoints = resume_seed_stack_config(parent, overrides, env_id)
        return config, seeds, worker_count(config, len(seeds), None), checkpoints
    fresh = [seed for seed in plan.seeds if seed not in started]  # train_seeds starts them again
    unfinished = [
        seed for seed in plan.seeds if seed in started and not finished_run(parent / f"seed_{seed}", overrides)
    ]
    if not fresh and not unfinished:
        raise every_seed_finished(parent)
    config = plan_config(plan.config, overrides, env_id, parent)
    by_seed: dict[int, Any] = dict.fromkeys(fresh)
    if unfinished and config.env.backend == "tensor":  # the stacks they were saved from, each at one iteration
        config, seeds, checkpoints = resume_seed_stack_config(parent, overrides, env_id)
        by_seed.update(zip(seeds, checkpoints))
    else:
        by_seed.update((seed, resume_config(parent / f"seed_{seed}", overrides, env_id)[1]) for seed in unfinished)
    seeds = [seed for seed in plan.seeds if seed in by_seed]
    return config, seeds, worker_count(config, len(seeds), plan.workers), [by_seed[seed] for seed in seeds]


def plan_config(config: Config, overrides: dict[str, Any], env_id: str | None, parent: Path) -> Config:
    """A saved plan's config for its seeds that never started, with the overrides a resume allows
    (``fastppo.training.resume.RESUMABLE_OVERRIDES``; ``resume_config`` checks the started seeds the same way)."""
    from fastppo.config import apply_overrides, resolve_key
    from fastppo.training.resume import RESUMABLE_OVERRIDES, check_resumed_env

    check_resumed_env(
        parent, config.env.env_id, env_id
    )  # seeds.json is data too: its user-code env only when named again
    for key, value in overrides.items():
        full = resolve_key(config, key)
        section, name = full.split(".")
        if full not in RESUMABLE_OVERRIDES and getattr(
            getattr(apply_overrides(Config(), {full: value}), section), name
        ) != getattr(getattr(config, section), name):
            raise FastPPOError(
                f"cannot change {full} when resuming (allowed: {', '.join(RESUMABLE_OVERRIDES)}): start a new "
                "run instead"
            )
        apply_overrides(config, {full: value})
    return config.validate()


def stacks(seeds: list[int], workers: int, checkpoints: list | None = None) -> list[list[int]]:
    """The stacks ``seeds`` train in: ``workers`` shares of consecutive seeds whose sizes differ by
    at most one; resumed (``checkpoints``, one per seed), the stacks they were saved from, each
    still at one iteration (a process of the run may have stopped later than another), then the
    seeds that never started (None) in ``workers`` shares. A stack's float rounding depends on its
    width, so the same stacks continue each seed bit for bit."""
    if checkpoints is None:
        return [
            seeds[i * len(seeds) // workers : (i + 1) * len(seeds) // workers] for i in range(min(workers, len(seeds)))
        ]
    saved: dict[tuple, list[int]] = {}
    for seed, checkpoint in zip(seeds, checkpoints):
        if checkpoint is not None:
            saved.setdefault((tuple(checkpoint.meta.get("stack", ())), checkpoint.iteration), []).append(seed)
    fresh = [seed for seed, checkpoint in zip(seeds, checkpoints) if checkpoint is None]
    return list(saved.values()) + (stacks(fresh, workers) if fresh else [])


def train_seeds(
    config: Config, seeds: list[int], parent: Path, workers: int, checkpoints: list | None = None
) -> tuple[list[SeedResult], int | None]:
    """Train ``config`` once per seed into ``parent/seed_<n>`` with ``workers`` processes, without
    progress bars but the first stack's (a line per finished seed instead): on tensor envs each
    process trains its share of the seeds (``stacks``) as one stack, and a single stack trains in
    this process (its errors raised here); otherwise each process takes the next seed when it is
    free. With ``checkpoints`` (one per seed, None for a seed not started: ``resume_plan``) a
    stopped job goes on. Writes the job's plan (``PLAN_FILE``) first. Prints each seed's result;
    returns the results in the order of ``seeds`` and the signal that stopped the job (None if none did).

    Any SIGINT or SIGTERM stops the whole job: one to this process alone (``kill PID``) is passed
    on to the workers; one to every process of the job (a terminal's Ctrl-C, a scheduler's
    SIGTERM) reaches a worker twice, and it stops as gracefully (a worker takes a repeat within a
    second for the same request). Each worker stops after its current iteration with a checkpoint
    and starts no further seed, even where the signal came in a run's last iteration or between
    two runs (the job's stop is shared by its processes); they are waited for. A later signal
    stops them at once, as a single run's second Ctrl-C does.

    Workers are forked where each computes on one thread (torch's DataLoader does the same):
    nothing to import again, where a spawned worker spends ~2 s importing torch. A forked process
    cannot use GNU OpenMP's thread pool if its parent has (it hangs), hence spawn otherwise, and on
    GPUs (CUDA refuses forked children) and outside Linux."""
    from fastppo.devices import resolve_device
    from fastppo.training.seed_stack import check_seed_stack

    stacked = config.env.backend == "tensor"
    quiet = dataclasses.replace(config, run=dataclasses.replace(config.run, progress=False)).validate()
    if stacked:
        check_seed_stack(config)  # once here, not as an error per process
    if checkpoints is not None and all(c is None for c in checkpoints):  # a resume of seeds that all never started
        checkpoints = None
    by_seed = dict(zip(seeds, checkpoints or [None] * len(seeds)))
    # A seed that never finished a checkpoint (a kill in its start-up) starts again: what it wrote
    # goes, once every check has passed, here; a folder with anything else is refused.
    restarted = [
        path
        for seed in seeds
        if by_seed[seed] is None and (parent / f"seed_{seed}").exists()
        for path in failed_start_files(parent / f"seed_{seed}")
    ]
    for path in restarted:  # none is a link (failed_start_files): nothing outside the folder goes
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    fresh = new_folders(parent)
    planned = read_plan(parent)  # a resumed job keeps its seeds and processes on record
    save_plan(
        SeedPlan(
            config,
            planned.seeds + [s for s in seeds if s not in planned.seeds] if planned else seeds,
            parent,
            planned.workers if planned else workers,
        )
    )
    parts = stacks(seeds, workers, checkpoints) if stacked else [[seed] for seed in seeds]
    if stacked and len(parts) == 1:  # one population on one device: no process to start
        try:
            stack_results, stack_stopped = _results(seeds, train_population(config, seeds, parent, checkpoints))
        except FastPPOError:
            _forget_unstarted_job(parent, fresh)
            raise
        print(*stack_results, sep="\n", flush=True)
        return stack_results, stack_stopped
    on_cpu = resolve_device(config.run.device).type == "cpu"  # also --device auto on a machine without a GPU
    fork = sys.platform.startswith("linux") and quiet.intra_op_threads(stacked) == 1 and on_cpu
    context = multiprocessing.get_context("fork") if fork else multiprocessing.get_context("spawn")
    tasks, reports = context.Queue(), context.Queue()
    job_stop = context.Value(
        "i", 0, lock=False
    )  # the signal that stops the job (0: none); plain reads and writes are safe in a handler
    # The first stack keeps the progress bar, if asked for: the stacks move at about one pace.
    configs = [config if i == 0 and stacked else quiet for i in range(min(workers, len(parts)))]
    processes = [
        context.Process(target=_worker, args=(c, parent, tasks, reports, job_stop), name=f"fastppo-seeds-{i}")
        for i, c in enumerate(configs)
    ]
    for process in processes:  # before the first put starts the queue's thread: a fork copies no thread
        process.start()
    for part in parts:
        part_checkpoints = [by_seed[s] for s in part]
        tasks.put((part, None if all(c is None for c in part_checkpoints) else part_checkpoints))
    for _ in processes:
        tasks.put(None)  # one stop mark per worker, after the work
    results: dict[int, SeedResult] = {}
    stopped: int | None = None
    running: dict[tuple[int, ...], int] = {}  # the seeds in training (a run, or a stack) and their step
    began = last_line = time.monotonic()
    lines = not configs[0].run.progress  # unless the first stack shows its bar, a line now and then
    with _signals_passed_on(processes, job_stop):
        while len(results) < len(seeds) and (any(p.is_alive() for p in processes) or not reports.empty()):
            if lines and time.monotonic() - last_line >= PROGRESS_EVERY:
                last_line = time.monotonic()
                print(
                    progress_line(len(results), len(seeds), running, config.ppo.total_timesteps, last_line - began),
                    flush=True,
                )
            try:
                report = reports.get(timeout=0.5)
            except queue.Empty:
                continue
            if isinstance(report, SeedProgress):
                running[tuple(report.seeds)] = report.global_step
                continue
            part_results, signal_number = report
            stopped = stopped or signal_number
            for result in part_results:
                print(result, flush=True)
                results[result.seed] = result
                running = {part: step for part, step in running.items() if result.seed not in part}
    stopped = stopped or job_stop.value or None
    for process in processes:
        process.join()
    for seed in seeds:  # a stop before the seed's turn, a stop at once, or a worker that died
        if seed not in results:
            results[seed] = _unreported(
                seed, parent / f"seed_{seed}", stopped, [p.exitcode for p in processes if p.exitcode], config.batch_size
            )
            print(results[seed], flush=True)
    _forget_unstarted_job(parent, fresh)
    return [results[seed] for seed in seeds], stopped


def _forget_unstarted_job(parent: Path, fresh: list[Path]) -> None:
    """Where every seed failed to start, remove the plan and the folders this job made, which hold
    nothing else: ``fastppo report runs/`` would stop at them."""
    if parent in fresh and not any(p.is_file() for p in parent.glob("seed_*/**/*")):
        (parent / PLAN_FILE).unlink(missing_ok=True)
    remove_if_empty(fresh)


def _results(seeds: list[int], agents: list[Any]) -> tuple[list[SeedResult], int | None]:
    """The seeds' results from their trained agents, and the signal that stopped them (None: they
    finished; a stack's seeds that reached their stop-return before it did are finished)."""
    stopped = [int(a.interrupted_by) for a in agents if a.interrupted_by is not None]
    by_seed = {agent.config.run.seed: agent for agent in agents}  # each result labelled by its own agent's seed
    results = [
        SeedResult.of(
            seed,
            agent.run_dir,
            agent.episode_returns,
            None if agent.interrupted_by is None else int(agent.history[-1]["global_step"]) if agent.history else 0,
        )
        for seed, agent in ((seed, by_seed[seed]) for seed in seeds)
    ]
    return results, stopped[0] if stopped else None


def _unreported(seed: int, run_dir: Path, stopped: int | None, exit_codes: list[int], batch_size: int) -> SeedResult:
    """A seed no worker reported: stopped at once (at its newest checkpoint), not started, or its worker died."""
    from fastppo.files.run_folder import list_checkpoints

    saved = list_checkpoints(run_dir)
    if stopped and saved:
        return SeedResult(seed, run_dir, None, stopped_at=int(saved[-1].name) * batch_size)
    if stopped:
        return SeedResult(seed, run_dir, None, started=False)
    return SeedResult(
        seed,
        run_dir,
        None,
        "its worker process ended without a result" + (f" (exit code {exit_codes[0]})" if exit_codes else ""),
    )


def _worker(config: Config, parent: Path, tasks: Any, reports: Any, job_stop: Any) -> None:
    """One worker process: train the tasks' seeds (a stack, or one run) until the stop mark or the
    job's stop, reporting each task's results."""
    from fastppo.training.signals import StopRequest

    def stop_job(
        signum: int, frame: Any
    ) -> None:  # between runs; a run's own handlers replace this one while it trains
        job_stop.value = job_stop.value or signum

    for signum in StopRequest.SIGNALS:
        signal.signal(signum, stop_job)
    StopRequest.repeat_grace = 1.0  # a signal may come twice at once: from the job's sender and from the parent
    StopRequest.job = job_stop
    while not job_stop.value and (task := tasks.get()) is not None and not job_stop.value:
        seeds, checkpoints = task
        try:
            agents = train_population(config, seeds, parent, checkpoints, _progress_reporter(seeds, reports))
        except FastPPOError as exc:
            reports.put(([SeedResult(seed, parent / f"seed_{seed}", None, str(exc)) for seed in seeds], None))
            continue
        except KeyboardInterrupt as exc:  # a second signal stopped the run at once (or one in its start-up)
            print(
                f"fastppo: seed {', '.join(map(str, seeds))}: {getattr(exc, 'note', None) or 'stopped at once'}",
                file=sys.stderr,
                flush=True,
            )
            reports.put(([], getattr(exc, "signum", signal.SIGINT)))
            return
        reports.put(_results(seeds, agents))


def train_population(
    config: Config,
    seeds: list[int],
    parent: Path,
    checkpoints: list | None,
    on_iteration: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """Train ``seeds`` as one population in this process, each seed's run into ``parent/seed_<n>``
    (``checkpoints``: one per seed, to resume): a stack of them on tensor envs, otherwise one seed,
    a population of one, as its single run. The agents, in the order of ``seeds``; wherever the
    population is placed (this process, or a worker), this is how it trains."""
    from fastppo.training.trainer import train, train_seed_stack

    if config.env.backend == "tensor":
        return train_seed_stack(config, seeds, parent, checkpoints, on_iteration)
    (seed,) = seeds  # other envs train one seed per population
    if checkpoints:
        return [train(checkpoints[0].config, parent / f"seed_{seed}", checkpoints[0], on_iteration)]
    seeded = dataclasses.replace(config, run=dataclasses.replace(config.run, seed=seed))
    return [train(seeded, parent / f"seed_{seed}", on_iteration=on_iteration)]


def _progress_reporter(seeds: list[int], reports: Any) -> Callable[[int, Any], None]:
    """A run's ``on_iteration`` that tells the parent its step, at most every ``REPORT_EVERY`` seconds."""
    last = -REPORT_EVERY

    def report(global_step: int, metrics: Any) -> None:
        nonlocal last
        if time.monotonic() - last >= REPORT_EVERY:
            last = time.monotonic()
            reports.put(SeedProgress(seeds, global_step))

    return report


@contextmanager
def _signals_passed_on(processes: list[Any], job_stop: Any) -> Iterator[None]:
    """While waiting for ``processes``: a SIGINT or SIGTERM stops the job (``job_stop``) and is
    passed on to them (a kill of this process alone would leave them training; a terminal's Ctrl-C
    reaches them too, where their grace takes the copy for the same request)."""
    if threading.current_thread() is not threading.main_thread():  # only it may set handlers
        yield
        return

    def pass_on(signum: int, frame: Any) -> None:
        job_stop.value = job_stop.value or signum
        for process in processes:
            if process.is_alive():
                os.kill(process.pid, signum)

    previous = {signum: signal.signal(signum, pass_on) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

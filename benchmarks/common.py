"""Helpers shared by the speed benchmarks: machine description, raw env throughput, time-to-solve.

Every benchmark prints the machine and the load average at start and end: on a shared machine a
load above the core count means the figures are contended (ratios measured in the same run stay
meaningful; absolute SPS do not).

fastppo itself is imported inside the helpers that use it, so that a script timing another library
in a fresh process (``sb3_compare.py``'s cold-process row) can use this module without paying for
fastppo's imports.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from fastppo.config import Config

SOLVED_RETURN = 475.0
"""CartPole-v1 counts as solved when the mean of the last 20 episode returns reaches this."""


def positive(text: str) -> int:
    """argparse type: an integer >= 1 (argparse names the flag in its one-line error)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def nonnegative(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def check_device(parser: argparse.ArgumentParser, device: str) -> None:
    """A --device this machine cannot train on (no CUDA GPU, a kind fastppo does not train on):
    the parser's one-line error and exit 2, before any child process or model is started."""
    from fastppo.devices import resolve_device
    from fastppo.errors import FastPPOError

    try:
        kind = resolve_device(device).type
    except FastPPOError as exc:
        parser.error(str(exc))
    if kind not in ("cpu", "cuda"):
        parser.error(f"--device {device}: give cpu, cuda or cuda:N")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, python {platform.python_version()}"


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min) {five:.1f} (5 min) on {os.cpu_count()} cores"


def header(title: str) -> None:
    print(f"# {title}\n# {machine()}\n# start: {load()}", flush=True)


def footer() -> None:
    print(f"# end: {load()}", flush=True)


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (no display on the benchmark machines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path, title: str, recorded: str | None = None) -> None:
    """Write ``fig`` as a small PNG titled with ``title``, this machine and today's date, so that
    the image says where and when its figures were measured wherever it is shown. ``recorded``:
    the figures were measured elsewhere, earlier (its machine and date), and only drawn here."""
    where = (
        f"{machine()}, {date.today().isoformat()}"
        if recorded is None
        else f"recorded figures measured on {recorded}; drawn {date.today().isoformat()}"
    )
    fig.suptitle(f"{title}\n{where}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    print(f"plot: {path}", flush=True)


def raw_env_sps(env_id: str, backend: str, num_envs: int, seconds: float = 2.0, seed: int = 0) -> float:
    """Random actions through fastppo's VecEnv (torch in, torch out), no policy: the ceiling."""
    from fastppo.config import EnvConfig
    from fastppo.envs import make_vec_env

    envs = make_vec_env(EnvConfig(env_id=env_id, num_envs=num_envs, backend=backend), torch.device("cpu"))
    envs.reset(seed=seed)
    space = envs.single_action_space
    space.seed(seed)
    actions = [torch.as_tensor(np.stack([space.sample() for _ in range(num_envs)])) for _ in range(64)]
    for i in range(20):  # warm-up: worker processes started, caches filled
        envs.step(actions[i % 64])
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(actions[steps % 64])
        steps += 1
    elapsed = time.perf_counter() - start
    envs.close()
    return steps * num_envs / elapsed


@dataclass
class RunResult:
    wall_s: float
    steps: int
    solved_s: float | None = None
    solved_steps: int | None = None
    last20: float = float("nan")
    rollout_ends: list[float] = field(default_factory=list)
    """Seconds from the call at which each rollout's episodes were collected."""
    timings: list[dict[str, float]] = field(default_factory=list)
    """Each logged iteration's ``time/*`` split (policy, env, copy, update seconds), without the prefix."""

    @property
    def sps(self) -> float:
        return self.steps / self.wall_s


class Solved(Exception):
    """Raised from inside the loop to end a time-to-solve run the moment it is solved."""


def run_fastppo(config: Config, stop_when_solved: bool = False, threshold: float = SOLVED_RETURN) -> RunResult:
    """Train with ``config`` (no files written); wall time from the call (env and network set-up
    included, as for the peers). The solve check runs where the trainer collects each rollout's
    finished episodes, before that iteration's update, as the peers' per-step callbacks see an
    episode when it ends; with ``stop_when_solved`` the run ends at the first rollout after
    which the last 20 finished episodes average ``threshold``."""
    import fastppo.training.trainer as trainer

    config.run.progress, config.run.tensorboard = False, False
    last20: deque[float] = deque(maxlen=20)
    result = RunResult(wall_s=0.0, steps=0)
    original = trainer.make_vec_env
    start = time.perf_counter()

    def watched(*args, **kwargs):
        envs = original(*args, **kwargs)
        pop = envs.pop_episodes

        def pop_and_check():
            episodes = pop()
            result.rollout_ends.append(time.perf_counter() - start)
            last20.extend(episodes.returns)
            result.steps += config.batch_size
            if len(last20) == 20 and np.mean(last20) >= threshold and result.solved_s is None:
                result.solved_s, result.solved_steps = time.perf_counter() - start, result.steps
                if stop_when_solved:
                    raise Solved
            return episodes

        envs.pop_episodes = pop_and_check
        return envs

    trainer.make_vec_env = watched
    try:
        trainer.train(
            config,
            on_iteration=lambda _, metrics: result.timings.append(
                {k[5:]: v for k, v in metrics.items() if k.startswith("time/")}
            ),
        )
    except Solved:
        pass
    finally:
        trainer.make_vec_env = original
    result.wall_s = time.perf_counter() - start
    result.last20 = float(np.mean(last20)) if last20 else float("nan")
    return result

"""Two checkouts of fastppo timed against each other on the same machine, in the same run: each
command a fresh process (start-up included, as a user meets it), the two trees alternating
(A B A B ...) so that a change in the machine's load falls on both.

    git worktree add --detach /tmp/before <commit>
    python benchmarks/before_after.py --before /tmp/before --after .            # ~15 min on 2 cores
    python benchmarks/before_after.py --before /tmp/before --after . --quick    # ~3 min

The rows: CartPole-v1 solved (fastppo's preset, last-20 mean >= 475; sync and tensor envs), SPS at
CleanRL's ppo.py settings (cleanrl-discrete, CartPole-v1), 64 seeds stacked on tensor envs against
the same 64 seeds' budget as one single run's steps, HalfCheetah-v5 on CPU with CleanRL's
continuous settings, and tensor-env CartPole-v1 at its preset's width (32 envs x 32 steps) and
wide (1 024 envs x 64 steps, one epoch of one minibatch), and a self-play game (Leduc hold'em with its
preset: half the hands against the latest self, half against a pool of 50 snapshots, and 20
evaluation games against a random player every 4 iterations; a game whose preset keeps the MLP, so
that checkouts from before the board encoder compare like with like) and connect four with its
preset (the board encoder; a checkout before 2026-11-28 trains its MLP instead). Each row prints the median wall time of
each tree and after/before (below 1: the after tree is faster), and the median CPU seconds of the
processes (user + system: less swayed than wall time by other work on a shared machine); a
time-to-solve row also prints the step at which each run solved. A fixed-budget row then prints
each tree's steady SPS (the steps after the first iteration over their wall time, from
metrics.jsonl) with after/before, and where an iteration's time went (the trainer's sections).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common import footer, header, positive

ROWS = {
    "solve-sync": ["train", "CartPole-v1", "--run.stop-return", "475"],
    "solve-tensor": ["train", "CartPole-v1", "--backend", "tensor", "--run.stop-return", "475"],
    "cleanrl-sps": ["train", "CartPole-v1", "--preset", "cleanrl-discrete", "--total-timesteps", "100000"],
    "stack-64": ["train", "CartPole-v1", "--backend", "tensor", "--seeds", "1-64", "--total-timesteps", "65536"],
    "halfcheetah-cpu": [
        "train", "HalfCheetah-v5", "--preset", "cleanrl-continuous", "--total-timesteps", "20480", "--device", "cpu",
    ],
    "preset-tensor": ["train", "CartPole-v1", "--backend", "tensor", "--total-timesteps", "100000"],
    "width-tensor": [
        "train", "CartPole-v1", "--backend", "tensor", "--num-envs", "1024", "--num-steps", "64",
        "--update-epochs", "1", "--num-minibatches", "1", "--total-timesteps", "1048576",
    ],
    "selfplay-leduc": [
        "train", "pz:pettingzoo.classic.leduc_holdem_v4", "--self-play.eval-every", "4", "--total-timesteps", "131072",
    ],
    "selfplay-connect-four": ["train", "pz:pettingzoo.classic.connect_four_v3", "--total-timesteps", "40960"],
}  # fmt: skip
QUICK = {
    "cleanrl-sps": ("100000", "25000"),
    "stack-64": ("65536", "16384"),
    "halfcheetah-cpu": ("20480", "4096"),
    "preset-tensor": ("100000", "30720"),
    "width-tensor": ("1048576", "393216"),
    "selfplay-leduc": ("131072", "32768"),
    "selfplay-connect-four": ("40960", "20480"),
}


@dataclass
class Run:
    """One fresh process's figures."""

    wall_s: float
    cpu_s: float
    """User + system CPU seconds of the process."""
    last_step: float | None
    metrics: list[dict[str, float]]
    first_logged: tuple[float, float | None] | None
    """(the step logged, the process's CPU seconds) when the parent first saw an iteration logged."""

    def steady_sps(self) -> float | None:
        """Steps per second after the first iteration (start-up, first-call costs left out)."""
        if len(self.metrics) < 2:
            return None
        first, last = self.metrics[0], self.metrics[-1]
        return (last["global_step"] - first["global_step"]) / (last["time"] - first["time"])

    def steady_cpu_sps(self) -> float | None:
        """Steps per CPU second of the process after the iteration ``first_logged`` saw: less
        swayed by other processes on a shared machine than wall time (not immune: they share the
        caches)."""
        if (
            self.first_logged is None
            or self.first_logged[1] is None
            or self.last_step is None
            or self.last_step <= self.first_logged[0]
        ):
            return None
        return (self.last_step - self.first_logged[0]) / (self.cpu_s - self.first_logged[1])

    def split(self) -> dict[str, float]:
        """The trainer's sections (time/env, time/policy, time/update, ...) after the first
        iteration, as shares of their sum."""
        seconds: dict[str, float] = {}
        for row in self.metrics[1:]:
            for key, value in row.items():
                if key.startswith("time/"):
                    seconds[key[5:]] = seconds.get(key[5:], 0.0) + value
        total = sum(seconds.values()) or 1.0
        return {name: value / total for name, value in sorted(seconds.items(), key=lambda kv: -kv[1])}


def checkout(path: str) -> Path:
    """A folder with fastppo's sources (``src/fastppo``): without it the child processes would
    import the installed fastppo and time it against itself."""
    tree = Path(path)
    if not (tree / "src" / "fastppo" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{path} is not a fastppo checkout (no src/fastppo/__init__.py)")
    return tree


def child_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a running process (Linux's /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(tree: Path, args: list[str], folder: Path) -> Run:
    """``fastppo ARGS`` run from ``tree``'s sources in a fresh process: its wall and CPU seconds,
    the last step it logged (a time-to-solve row: where it solved), its metrics, and the CPU
    seconds it had spent when its first iteration was logged (polled every few ms)."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    command = [sys.executable, "-m", "fastppo", *args, "--no-progress", "--no-tensorboard", "--run-dir", str(folder)]
    path = folder / "metrics.jsonl"
    first_logged: tuple[float, float | None] | None = None
    with tempfile.TemporaryFile("w+") as err:
        cpu, start = child_cpu_seconds(), time.perf_counter()
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
        while process.poll() is None:
            if first_logged is None and path.is_file():
                lines = path.read_text().split("\n")[:-1]  # complete lines only
                if lines:
                    first_logged = (json.loads(lines[-1])["global_step"], process_cpu_seconds(process.pid))
            time.sleep(0.005)
        seconds, cpu = time.perf_counter() - start, child_cpu_seconds() - cpu
        if process.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{tree}: {' '.join(args)} failed ({process.returncode}): {err.read().strip()[-500:]}")
    metrics = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return Run(seconds, cpu, metrics[-1]["global_step"] if metrics else None, metrics, first_logged)


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def split_text(runs: list[Run]) -> str:
    """The median share of each section over ``runs``, as the trainer's summary line words it."""
    splits = [run.split() for run in runs]
    names = list(splits[0]) if splits else []
    return ", ".join(f"{name} {100 * statistics.median(s.get(name, 0.0) for s in splits):.0f}%" for name in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=checkout, required=True, help="checkout of the reference commit")
    parser.add_argument("--after", type=checkout, required=True, help="checkout of the commit to compare")
    parser.add_argument("--rows", nargs="+", choices=tuple(ROWS), default=list(ROWS))
    parser.add_argument("--pairs", type=positive, default=3, help="A B pairs per row (default 3)")
    parser.add_argument("--quick", action="store_true", help="smaller budgets, 2 pairs")
    args = parser.parse_args()
    pairs = 2 if args.quick else args.pairs
    header("before/after: two fastppo checkouts, alternating fresh processes")
    print(
        f"date: {time.strftime('%Y-%m-%d %H:%M')}\nbefore: {args.before.resolve()}\nafter:  "
        f"{args.after.resolve()}\npairs per row: {pairs}\n"
    )
    print(
        f"{'row':<22} {'before s':>9} {'after s':>9} {'after/before':>13} {'CPU after/before':>17}   steps "
        "(before | after)"
    )
    for row in args.rows:
        command = list(ROWS[row])
        if args.quick and row in QUICK:
            command[command.index(QUICK[row][0])] = QUICK[row][1]
        runs: dict[str, list[Run]] = {"before": [], "after": []}
        with tempfile.TemporaryDirectory() as scratch:
            for pair in range(pairs):
                order = ("before", "after") if pair % 2 == 0 else ("after", "before")
                for side in order:
                    runs[side].append(run_once(getattr(args, side), command, Path(scratch) / f"{side}{pair}"))
        before, after = (statistics.median(r.wall_s for r in runs[side]) for side in ("before", "after"))
        cpu_before, cpu_after = (statistics.median(r.cpu_s for r in runs[side]) for side in ("before", "after"))
        shown = (
            " | ".join(",".join(str(r.last_step) for r in runs[side]) for side in ("before", "after"))
            if row.startswith("solve")
            else ""
        )
        print(
            f"{row:<22} {before:>9.1f} {after:>9.1f} {after / before:>13.3f} {cpu_after / cpu_before:>17.3f}   {shown}",
            flush=True,
        )
        for label, measure in (("steady SPS", Run.steady_sps), ("steady steps per CPU s", Run.steady_cpu_sps)):
            sps = {side: median([measure(r) for r in runs[side]]) for side in ("before", "after")}
            if not row.startswith("solve") and sps["before"] and sps["after"]:
                print(
                    f"{'':<22} {label}: before {sps['before']:,.0f}, after {sps['after']:,.0f}, after/before "
                    f"{sps['after'] / sps['before']:.3f}"
                )
        if not row.startswith("solve"):
            for side in ("before", "after"):
                print(f"{'':<22} {side} time: {split_text(runs[side])}", flush=True)
    print(
        "\ncommand per row: python -m fastppo <row's args> --no-progress --no-tensorboard --run-dir <tmp>; "
        f"{' '.join(sys.argv)}"
    )
    footer()


if __name__ == "__main__":
    main()

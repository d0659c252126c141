"""Two checkouts of fastppo timed against each other on the same machine, in the same run: each
command a fresh process (start-up included, as a user meets it), the two trees alternating
(A B A B ...) so that a change in the machine's load falls on both.

    git worktree add --detach /tmp/before <commit>
    python benchmarks/before_after.py --before /tmp/before --after .            # ~15 min on 2 cores
    python benchmarks/before_after.py --before /tmp/before --after . --quick    # ~3 min

The rows: CartPole-v1 solved (fastppo's preset, last-20 mean >= 475; sync and tensor envs), SPS at
CleanRL's ppo.py settings (cleanrl-discrete, CartPole-v1), 64 seeds stacked on tensor envs against
the same 64 seeds' budget as one single run's steps, and HalfCheetah-v5 on CPU with CleanRL's
continuous settings. Each row prints the median wall time of each tree and after/before (below 1:
the after tree is faster); a time-to-solve row also prints the step at which each run solved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import footer, header, positive

ROWS = {
    "solve-sync": ["train", "CartPole-v1", "--run.stop-return", "475"],
    "solve-tensor": ["train", "CartPole-v1", "--backend", "tensor", "--run.stop-return", "475"],
    "cleanrl-sps": ["train", "CartPole-v1", "--preset", "cleanrl-discrete", "--total-timesteps", "100000"],
    "stack-64": ["train", "CartPole-v1", "--backend", "tensor", "--seeds", "1-64", "--total-timesteps", "65536"],
    "halfcheetah-cpu": ["train", "HalfCheetah-v5", "--preset", "cleanrl-continuous", "--total-timesteps", "20480", "--device", "cpu"],
}
QUICK = {"cleanrl-sps": ("100000", "25000"), "stack-64": ("65536", "16384"), "halfcheetah-cpu": ("20480", "4096")}


def checkout(path: str) -> Path:
    """A folder with fastppo's sources (``src/fastppo``): without it the child processes would
    import the installed fastppo and time it against itself."""
    tree = Path(path)
    if not (tree / "src" / "fastppo" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{path} is not a fastppo checkout (no src/fastppo/__init__.py)")
    return tree


def run_once(tree: Path, args: list[str], folder: Path) -> tuple[float, float | None]:
    """Wall seconds of ``fastppo ARGS`` run from ``tree``'s sources in a fresh process, and the
    last step it logged (a time-to-solve row: where it solved)."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    command = [sys.executable, "-m", "fastppo", *args, "--no-progress", "--no-tensorboard", "--run-dir", str(folder)]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    metrics = folder / "metrics.jsonl"
    last = json.loads(metrics.read_text().splitlines()[-1])["global_step"] if metrics.is_file() else None
    return seconds, last


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
    print(f"date: {time.strftime('%Y-%m-%d %H:%M')}\nbefore: {args.before.resolve()}\nafter:  {args.after.resolve()}\npairs per row: {pairs}\n")
    print(f"{'row':<16} {'before s':>9} {'after s':>9} {'after/before':>13}   steps (before | after)")
    for row in args.rows:
        command = list(ROWS[row])
        if args.quick and row in QUICK:
            command[command.index(QUICK[row][0])] = QUICK[row][1]
        times: dict[str, list[float]] = {"before": [], "after": []}
        steps: dict[str, list[float | None]] = {"before": [], "after": []}
        with tempfile.TemporaryDirectory() as scratch:
            for pair in range(pairs):
                order = ("before", "after") if pair % 2 == 0 else ("after", "before")
                for side in order:
                    seconds, step = run_once(getattr(args, side), command, Path(scratch) / f"{side}{pair}")
                    times[side].append(seconds)
                    steps[side].append(step)
        before, after = statistics.median(times["before"]), statistics.median(times["after"])
        shown = " | ".join(",".join(str(s) for s in steps[side]) for side in ("before", "after")) if row.startswith("solve") else ""
        print(f"{row:<16} {before:>9.1f} {after:>9.1f} {after / before:>13.3f}   {shown}", flush=True)
    print(f"\ncommand per row: python -m fastppo <row's args> --no-progress --no-tensorboard --run-dir <tmp>; {' '.join(sys.argv)}")
    footer()


if __name__ == "__main__":
    main()

"""Many seeds at once: one stacked process (``--backend tensor --seeds 1-N``) vs N single runs one
after the other vs N SB3 rl-zoo runs, CartPole-v1, wall time until every seed is solved.

    python benchmarks/seed_stack.py                      # 64 seeds; ~10 min on 2 cores
    python benchmarks/seed_stack.py --seeds 8 --sb3-seeds 2 --single-seeds 8   # ~2 min
    python benchmarks/seed_stack.py --compile            # and a second stack, compiled

Every run is a fresh ``python`` process timed from its launch, start-up included, as a user meets
it. A seed is solved when the mean of its last 20 episode returns reaches 475. The stacked run
trains fastppo's ``CartPole-v1`` preset on tensor envs for all seeds at once and ends when the
last seed is solved; each single run (the same preset, one seed) and each SB3 run (rl-zoo's
CartPole hyperparameters, 8 sync envs) ends when its seed is solved, and the N runs' times add up.
With ``--sb3-seeds K < N`` (or ``--single-seeds``), K seeds are run and their mean time is
scaled to N, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import deque

import numpy as np

from common import SOLVED_RETURN, footer, header
from sb3_compare import cold_solve

ZOO_BUDGET = 200_000


def stack_child(seeds: int, compile: bool) -> None:
    """Inside the fresh process: train seeds 1..N as one stack until all are solved; print each
    seed's solve time (epoch seconds) and steps as JSON."""
    from pathlib import Path
    from tempfile import mkdtemp

    import fastppo.trainer as trainer
    from fastppo.api import make_config

    config = make_config("CartPole-v1", None, {"backend": "tensor", "checkpoint_every": 0, "progress": False, "tensorboard": False, "total_timesteps": 500_000, "compile": compile})
    per_seed = config.env.num_envs
    last20 = [deque(maxlen=20) for _ in range(seeds)]
    solved: list[float | None] = [None] * seeds
    steps = [0]

    class AllSolved(Exception):
        pass

    original = trainer.make_vec_env

    def watched(*args, **kwargs):
        envs = original(*args, **kwargs)
        pop = envs.pop_episodes

        def pop_and_check():
            episodes = pop()
            steps[0] += config.batch_size
            for ret, row in zip(episodes.returns, episodes.rows or []):
                last20[row // per_seed].append(ret)
            for i, window in enumerate(last20):
                if solved[i] is None and len(window) == 20 and np.mean(window) >= SOLVED_RETURN:
                    solved[i] = time.time()
            if all(s is not None for s in solved):
                raise AllSolved
            return episodes

        envs.pop_episodes = pop_and_check
        return envs

    trainer.make_vec_env = watched
    try:
        trainer.train_seed_stack(config, list(range(1, seeds + 1)), Path(mkdtemp()))
    except AllSolved:
        pass
    print(json.dumps({"solved": solved, "steps": steps[0]}))


def stacked(seeds: int, compile: bool = False) -> tuple[float, list[float | None], int]:
    """(seconds from launch until every seed is solved, each seed's, steps per seed) of one stacked process."""
    launch = time.time()
    command = [sys.executable, __file__, "--stack-child", str(seeds), *(["--compile"] if compile else [])]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    child = json.loads(out.strip().splitlines()[-1])
    times = [None if s is None else s - launch for s in child["solved"]]
    return time.time() - launch, times, child["steps"]


def sequential(library: str, seeds: int) -> tuple[float, int, list[float | None]]:
    """(sum of the runs' seconds to solve, unsolved runs, each run's seconds) for seeds 1..``seeds``, one fresh process each."""
    times = [cold_solve(library, seed, ZOO_BUDGET)[0] for seed in range(1, seeds + 1)]
    return sum(t for t in times if t is not None), sum(t is None for t in times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=64, help="seeds in the stack (N)")
    parser.add_argument("--single-seeds", type=int, default=None, help="single fastppo runs to time (default N; fewer are scaled to N)")
    parser.add_argument("--sb3-seeds", type=int, default=8, help="SB3 runs to time (scaled to N)")
    parser.add_argument("--compile", action="store_true", help="also time the stack with --compile (a second stacked row)")
    parser.add_argument("--stack-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stack_child:
        stack_child(args.stack_child, args.compile)
        return
    n = args.seeds
    header(f"{n} CartPole-v1 seeds: wall time until all are solved (fresh processes, start-up included)")
    rows = []
    for compile in (False, True) if args.compile else (False,):
        name = "fastppo stacked (1 process" + (", --compile)" if compile else ")")
        seconds, times, steps = stacked(n, compile)
        unsolved = sum(t is None for t in times)
        print(f"{name}: {seconds:.1f} s ({steps} steps per seed; {unsolved} unsolved); first seed solved at {min(t for t in times if t):.1f} s", flush=True)
        rows.append((name, seconds, n, unsolved))
    stack_s = rows[0][1]
    for library, count in (("fastppo tensor", args.single_seeds or n), ("SB3 rl-zoo", args.sb3_seeds)):
        total, failed, times = sequential(library, count)
        scaled = total * n / count
        print(f"{library}, {count} sequential runs: {total:.1f} s (mean {total / max(count - failed, 1):.2f} s per solved seed; {failed} unsolved) -> {scaled:.1f} s for {n}")
        rows.append((f"{library} sequential{'' if count == n else f' ({count} run, x{n / count:g})'}", scaled, count, failed))
    print(f"\n| runs of {n} seeds | seconds to all solved | seeds timed | unsolved | vs stacked |\n|---|--:|--:|--:|--:|")
    for name, seconds, count, failed in rows:
        print(f"| {name} | {seconds:.1f} | {count} | {failed} | {seconds / stack_s:.1f}x |")
    footer()


if __name__ == "__main__":
    main()

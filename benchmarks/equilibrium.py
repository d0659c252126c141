"""How near an equilibrium self-play gets in OpenSpiel's Kuhn poker and Leduc poker, beside
OpenSpiel's own algorithms given the same wall time on the same machine, in the same run.

For each game, ``--seeds`` fastppo trainings (each a whole ``fastppo train`` process, timed from
start to exit, niced), by magnetic mirror descent (``--self-play.magnet-coef``: the learner plays
its latest self in every seat, its loss pulled toward a magnet that follows its weights slowly),
scored by the exploitability at the end of training of the learner's own policy
(``eval/exploitability``), the policy the run saves; a game whose flags keep a pool and
``--self-play.average-policy`` also shows the pool's time-average (``eval/exploitability_average``).
Then OpenSpiel's CFR and external-sampling MCCFR, each run for the mean wall time of the fastppo
processes (their iterations alone count against it, not the final exploitability), scored by the
exploitability of their average policy. NFSP is not run: OpenSpiel's PyTorch NFSP learns from one
Python-stepped episode at a time, and its Leduc examples train for millions of episodes, far
beyond these budgets; external-sampling MCCFR is the second algorithm instead.

    python benchmarks/equilibrium.py                         # 3 seeds each of Kuhn and Leduc
    python benchmarks/equilibrium.py --games kuhn --seeds 1
    python benchmarks/equilibrium.py --workers 2             # two processes at once, on 2 cores
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from common import footer, header, positive

GAMES = {
    "kuhn": (
        "openspiel:kuhn_poker",
        "--total-timesteps 524288 --num-envs 64 --num-steps 32 --gamma 1 --learning-rate 1e-3 --ppo.ent-coef 0 "
        "--self-play.magnet-coef 0.5 --self-play.exploitability-every 16",
    ),
    "leduc": (
        "openspiel:leduc_poker",
        "--total-timesteps 1572864 --num-envs 64 --num-steps 32 --gamma 1 --learning-rate 1e-3 --ppo.ent-coef 0 "
        "--policy.hidden-sizes 128,128 --self-play.magnet-coef 1 --self-play.magnet-rate 0.01 "
        "--self-play.exploitability-every 64",
    ),
}
"""Each game's env id and fastppo's flags (besides --seed and the run folder)."""


def train_fastppo(env_id: str, flags: str, seed: int, run_dir: Path) -> tuple[float, dict[str, float]]:
    """(wall seconds of the whole process, its last exploitability figures)."""
    command = ["nice", "-n", "5", sys.executable, "-m", "fastppo", "train", env_id, *shlex.split(flags)]
    command += ["--seed", str(seed), "--run-dir", str(run_dir), "--no-tensorboard"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"fastppo train failed: {done.stderr.strip().splitlines()[-1]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    last = [r for r in records if "eval/exploitability" in r][-1]
    return seconds, {k: last[k] for k in ("eval/exploitability", "eval/exploitability_average") if k in last}


def openspiel_for(game_name: str, algorithm: str, seconds: float) -> tuple[int, float]:
    """(iterations, exploitability of the average policy) of OpenSpiel's ``algorithm`` run for
    ``seconds`` of iterations."""
    import pyspiel
    from open_spiel.python.algorithms import cfr, exploitability, external_sampling_mccfr

    game = pyspiel.load_game(game_name)
    if algorithm == "cfr":
        solver = cfr.CFRSolver(game)
        step = solver.evaluate_and_update_policy
    else:
        solver = external_sampling_mccfr.ExternalSamplingSolver(game)
        step = solver.iteration
    iterations, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        iterations += 1
    return iterations, float(exploitability.exploitability(game, solver.average_policy()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=positive, default=3, help="fastppo trainings per game (default 3)")
    parser.add_argument(
        "--games", default="kuhn,leduc", help="comma-separated, of: " + ", ".join(GAMES) + " (default all)"
    )
    parser.add_argument(
        "--workers",
        type=positive,
        default=1,
        help="trainings (and OpenSpiel runs) at once, each a single-threaded process (default 1; at most one per core)",
    )
    args = parser.parse_args()
    games = args.games.split(",")
    if unknown := [g for g in games if g not in GAMES]:
        parser.error(f"argument --games: unknown game {unknown[0]!r}: choose among {', '.join(GAMES)}")
    header("exploitability at the end of training, fastppo beside OpenSpiel's CFR and ES-MCCFR for the same time")
    print(f"# command: python {' '.join(map(shlex.quote, sys.argv))}; {args.workers} process(es) at once")
    print(f"# date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; nice 5 for fastppo and the OpenSpiel runs")
    os.nice(5)
    with tempfile.TemporaryDirectory() as root:
        for name in games:
            env_id, flags = GAMES[name]
            print(f"\n## {env_id}\nfastppo train {env_id} {flags}\n")
            print("| who | seed | wall s | exploitability (learner) | exploitability (pool average) |")
            print("|---|--:|--:|--:|--:|")
            times = []
            seeds = range(1, args.seeds + 1)
            # Each training is one single-threaded process: --workers of them at once, one per core.
            with ThreadPoolExecutor(args.workers) as pool:
                folders = [Path(root) / f"{name}-{seed}" for seed in seeds]
                runs = pool.map(train_fastppo, [env_id] * len(seeds), [flags] * len(seeds), seeds, folders)
                for seed, (seconds, figures) in zip(seeds, runs):
                    times.append(seconds)
                    learner = figures["eval/exploitability"]
                    average = figures.get("eval/exploitability_average")  # with a pool and --self-play.average-policy
                    shown = "-" if average is None else f"{average:.4f}"
                    print(f"| fastppo | {seed} | {seconds:.0f} | {learner:.4f} | {shown} |", flush=True)
            budget = sum(times) / len(times)
            game_name = env_id.split(":", 1)[1]
            algorithms = ("cfr", "es-mccfr")
            with ProcessPoolExecutor(min(args.workers, len(algorithms))) as pool:
                solved = pool.map(openspiel_for, [game_name] * 2, algorithms, [budget] * 2)
                for algorithm, (iterations, value) in zip(algorithms, solved):
                    print(
                        f"| OpenSpiel {algorithm} ({iterations} iterations) | - | {budget:.0f} | - | {value:.6f} |",
                        flush=True,
                    )
    footer()


if __name__ == "__main__":
    main()

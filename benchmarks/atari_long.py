"""One Atari run longer than a call: trains, or resumes, RUN_DIR for ``--seconds`` (and at least one
iteration), then stops it the way a user's Ctrl-C does (SIGINT: fastppo saves a checkpoint and exits 130) and reports
where the run stands. Run again with the same RUN_DIR to go on: fastppo's resume is exact, so the
calls make one run. Made for a lent GPU machine, whose calls last 10 minutes at most: the run folder
goes back and forth through the call's output folder (``--keep-checkpoints 1`` and no TensorBoard
keep each file under the 16 MiB a returned file may weigh).

    python atari_long.py runs/breakout10m --seconds 480 -- BreakoutNoFrameskip-v4 --device cuda  # first call
    python atari_long.py runs/breakout10m --seconds 480                                             # then: resumes
    python atari_long.py runs/pong --seconds 300 -- PongNoFrameskip-v4 --device cuda --num-envs 64 \\
        --total-timesteps 3000000 --stop-return 20 --stop-window 20

The arguments after ``--`` start a new run (``fastppo train`` with the ``atari`` preset); a folder
that already holds a checkpoint is resumed and takes none. Prints this call's wall time and SPS,
the run's steps against its budget, its training time so far (the logged iterations' time), the
mean raw score of its last 20 games, and, once the run is over (budget spent or ``--stop-return``
reached), a deterministic evaluation of 10 games (raw score), as ``fastppo eval`` gives it.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from common import footer, header, positive

LAST_GAMES = 20
EVAL_GAMES = 10
SAVE_GRACE = 120  # seconds the run may take to finish its iteration and save after SIGINT
FILE_LIMIT = 16 * 2**20  # what a device call returns per file


def fastppo(*args: str) -> list[str]:
    return [sys.executable, "-m", "fastppo", *args]


def positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def newest_checkpoint(run_dir: Path) -> Path | None:
    latest = run_dir / "checkpoints" / "latest"
    return run_dir / "checkpoints" / latest.read_text().strip() if latest.is_file() else None


class BadInput(Exception):
    """A run folder that does not fit the arguments: the parser's one line, exit 2."""


def logged_iterations(run_dir: Path) -> int:
    metrics = run_dir / "metrics.jsonl"
    return len(metrics.read_text().splitlines()) if metrics.is_file() else 0


def train_for(run_dir: Path, seconds: float, new_run: list[str]) -> tuple[int, float]:
    """Start or resume the run; SIGINT it once ``seconds`` have passed and it has logged an iteration in
    this call (a call that saves nothing would be lost). (Its exit code, this call's wall seconds.)"""
    if (run_dir / "config.yaml").is_file():  # a run, with a checkpoint or stopped before its first
        if new_run:
            raise BadInput(f"{run_dir} holds a run: give no train arguments to resume it")
        command = fastppo("train", "--resume", str(run_dir), "--no-progress")
    else:
        if not new_run:
            raise BadInput(f"{run_dir} holds no run: give the new run's train arguments after --")
        command = fastppo(
            "train", *new_run[:1], "--preset", "atari", *new_run[1:], "--run-dir", str(run_dir),
            "--no-tensorboard", "--keep-checkpoints", "1", "--no-progress",
        )  # fmt: skip
    print("$ " + " ".join(command[1:]), flush=True)
    logged = logged_iterations(run_dir)
    start = time.perf_counter()
    process = subprocess.Popen(command)
    while process.poll() is None:
        if time.perf_counter() - start >= seconds and logged_iterations(run_dir) > logged:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=SAVE_GRACE)
            break
        time.sleep(0.2)
    return process.returncode, time.perf_counter() - start


def report(run_dir: Path, call_seconds: float, steps_before: int) -> bool:
    """Print where the run stands; whether it is over."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    budget = config["ppo"]["total_timesteps"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    batch = config["env"]["num_envs"] * config["ppo"]["num_steps"]
    trained = sum(batch / row["charts/SPS"] for row in rows if row.get("charts/SPS"))
    checkpoint = newest_checkpoint(run_dir)
    state = json.loads((checkpoint / "trainer.json").read_text()) if checkpoint else {}
    steps, games = state.get("global_step", 0), state.get("episode_returns", [])[-LAST_GAMES:]
    stop_return = config["run"].get("stop_return")
    over = steps >= budget // batch * batch or (
        stop_return is not None and len(games) == LAST_GAMES and np.mean(games) >= stop_return
    )
    print(f"{config['env']['env_id']}: {steps:,} of {budget:,} steps, this call {call_seconds:.0f} s wall, ", end="")
    print(f"{(steps - steps_before) / call_seconds:.0f} SPS; the run's training time so far {trained:.0f} s")
    if games:
        print(
            f"last {len(games)} games: mean raw score {np.mean(games):.1f} (min {min(games):.0f}, max {max(games):.0f})"
        )
    sizes = {path.relative_to(run_dir): path.stat().st_size for path in run_dir.rglob("*") if path.is_file()}
    heavy = [f"{path} ({size / 2**20:.1f} MiB)" for path, size in sizes.items() if size > FILE_LIMIT]
    if heavy:
        print("warning: over 16 MiB, a device call will not return: " + ", ".join(heavy))
    return over


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument(
        "--seconds", type=positive_seconds, required=True, help="train this long in this call, then save and stop"
    )
    parser.add_argument(
        "--eval-games", type=positive, default=EVAL_GAMES, help="games of the final evaluation (default: 10)"
    )
    parser.epilog = "after --: a new run's env id and its fastppo train flags"
    cut = sys.argv.index("--") if "--" in sys.argv else len(sys.argv)
    args, new_run = parser.parse_args(sys.argv[1:cut]), sys.argv[cut + 1 :]
    header(f"atari_long: {args.run_dir}, at most {args.seconds:.0f} s")
    checkpoint = newest_checkpoint(args.run_dir)
    steps_before = json.loads((checkpoint / "trainer.json").read_text())["global_step"] if checkpoint else 0
    try:
        code, seconds = train_for(args.run_dir, args.seconds, new_run)
    except BadInput as exc:
        parser.error(str(exc))
    if code not in (0, 130):
        sys.exit(f"atari_long.py: fastppo train exited with {code}")
    if report(args.run_dir, seconds, steps_before):
        evaluate = fastppo(
            "eval", str(args.run_dir), "--episodes", str(args.eval_games), "--deterministic", "--seed", "1"
        )
        result = subprocess.run([*evaluate, "--json"], check=True, capture_output=True, text=True)
        print(f"deterministic evaluation, {args.eval_games} game(s) (raw score): {result.stdout.strip()}")
    footer()


if __name__ == "__main__":
    main()

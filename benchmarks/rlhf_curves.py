"""Reward and KL curves of `fastppo rlhf` with PPO (a value head and GAE), GRPO and RLOO, over seeds,
on the offline example's task (examples/rlhf_tiny.py: a random 2-layer GPT-2 learns to answer a word
with letters of that word).

    python rlhf_curves.py [--seeds 1 2 3] [--steps 30] [--out ../runs/rlhf_curves]

Every run is the example's command (its flags, `--estimator` changed) in a fresh process; the script
prints, per estimator, the mean reward of the first 3 steps and of the last 5, the last step's KL to
the reference (mean and range over the seeds) and the wall time per run, and saves the curves
(mean over seeds, min-max band) to OUT/curves.png.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from common import footer, header

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.rlhf_tiny import TRAIN_FLAGS, build  # noqa: E402

ESTIMATORS = ("gae", "grpo", "rloo")
CURVES = (("rlhf/reward_mean", "reward (share of the prompt's letters)"), ("rlhf/kl_ref", "KL to the reference (nats per completion)"))


def flags(estimator: str, steps: int) -> list[str]:
    """The example's flags with this estimator and budget."""
    words = TRAIN_FLAGS.split()
    for name, value in (("--estimator", estimator), ("--steps", str(steps))):
        words[words.index(name) + 1] = value
    return words


def run(model: Path, estimator: str, seed: int, steps: int, out: Path) -> tuple[list[dict], float]:
    """One `fastppo rlhf` run in a fresh process: its metrics per step and its wall seconds."""
    folder = out / f"{estimator}_seed{seed}"
    command = [sys.executable, "-m", "fastppo", "rlhf", "--model", str(model), "--reward", f"{ROOT / 'examples' / 'rlhf_tiny.py'}:reward",
               "--prompts", str(model / "prompts.jsonl"), *flags(estimator, steps), "--seed", str(seed), "--output-dir", str(folder), "--no-progress"]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()], seconds


def spread(values: list[float]) -> str:
    return f"{np.mean(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def plot(curves: dict[str, list[list[dict]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CURVES), figsize=(10, 3.5))
    for ax, (metric, label) in zip(axes, CURVES):
        for estimator, runs in curves.items():
            steps = [r["global_step"] for r in runs[0]]
            values = np.array([[r[metric] for r in run] for run in runs])
            ax.plot(steps, values.mean(0), label="PPO (GAE)" if estimator == "gae" else estimator.upper())
            ax.fill_between(steps, values.min(0), values.max(0), alpha=0.2)
        ax.set_xlabel("step")
        ax.set_ylabel(label)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per run (default: the example's 30)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "rlhf_curves")
    args = parser.parse_args()
    header(f"fastppo rlhf on the offline example: {', '.join(ESTIMATORS)}, seeds {args.seeds}, {args.steps} steps")
    model = args.out / "tiny-gpt2"
    model.mkdir(parents=True, exist_ok=True)
    build(model)
    curves: dict[str, list[list[dict]]] = {}
    print("\n| estimator | reward, first 3 steps | reward, last 5 steps | KL at the last step | wall s per run |\n|---|---|---|---|---|")
    for estimator in ESTIMATORS:
        runs, seconds = zip(*(run(model, estimator, seed, args.steps, args.out) for seed in args.seeds))
        curves[estimator] = list(runs)
        first = [np.mean([r["rlhf/reward_mean"] for r in run[:3]]) for run in runs]
        last = [np.mean([r["rlhf/reward_mean"] for r in run[-5:]]) for run in runs]
        kl = [run[-1]["rlhf/kl_ref"] for run in runs]
        print(f"| {estimator} | {spread(first)} | {spread(last)} | {spread(kl)} | {np.mean(seconds):.0f} |", flush=True)
    plot(curves, args.out / "curves.png")
    print(f"\ncurves: {args.out / 'curves.png'} (mean over seeds, min-max band); values: mean [min, max] over seeds")
    footer()


if __name__ == "__main__":
    main()

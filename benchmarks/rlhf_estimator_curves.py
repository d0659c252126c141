"""Reward and KL curves of `fastppo rlhf` on two tiny offline tasks: PPO (GAE, value head) vs GRPO
vs RLOO over a few seeds, with bootstrap CIs.

    cd benchmarks && python rlhf_estimator_curves.py                  # ~30 min of one core
    python rlhf_estimator_curves.py --seeds 1 --steps 20 --tasks tiny  # a quick check, ~1 min

Tasks (both start from the random 2-layer GPT-2 of examples/rlhf_tiny.py, nothing is downloaded):

- tiny: examples/rlhf_tiny.py as it is: sixteen words, answer with letters of the word, reward
  the share of the first six characters that are letters of the prompt (0.1 at random, 1 at best);
- sentiment: the eight film-review openings of benchmarks/reward_model_sentiment.py ("the plot")
  as prompts, scored by the reward model that script trains here with `fastppo reward-model`.

Every run is `python -m fastppo rlhf` in a fresh process with the same flags for all three
estimators (SHARED_FLAGS, plus the task's --max-new-tokens), only --estimator and --seed change;
the library's per-estimator defaults stay as they are (KL in the loss and no advantage whitening
for grpo, KL in the reward and whitened advantages for gae and rloo). Each run gets one torch
thread (--torch-threads 1): torch's default of one thread per core ran 20-60x slower per step
when other jobs shared the two cores (the metrics are the same bit for bit).

Per task the script prints a Markdown table (reward at the start: mean of steps 1-3; at the end:
mean of the last 5 steps; KL to the reference, summed per completion, mean of the last 5 steps;
each a mean over seeds with a 95% percentile-bootstrap CI from scipy.stats.bootstrap, crude with
3 seeds) and saves OUT/rlhf_estimator_curves.png: mean over seeds with a min-max band. A run
whose metrics.jsonl already has --steps rows (and its wall time in wall_s.txt) is read, not run
again.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import bootstrap

from common import footer, header
from reward_model_sentiment import SUBJECTS

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.rlhf_tiny import build  # noqa: E402

ESTIMATORS = {"PPO (gae, value head)": "gae", "GRPO": "grpo", "RLOO": "rloo"}
SHARED_FLAGS = ["--num-generations", "4", "--prompts-per-step", "16", "--mini-batch-size", "16",
                "--learning-rate", "3e-3", "--kl-warn", "30", "--save-every", "0", "--device", "cpu",
                "--torch-threads", "1", "--no-progress"]  # fmt: skip
MAX_NEW_TOKENS = {"tiny": 6, "sentiment": 16}
REWARD, KL = "rlhf/reward_mean", "rlhf/kl_ref"
START_STEPS, END_STEPS = 3, 5

Runs = dict[str, list[tuple[list[dict], float]]]
"""Per estimator label, one (metrics rows, wall seconds) per seed."""


@dataclass
class Task:
    name: str
    model: Path
    reward: str
    prompts: Path


def prepare_tiny(out: Path) -> Task:
    """The example's model, prompts and reward function."""
    folder = out / "tiny-model"
    if not (folder / "prompts.jsonl").exists():
        build(folder)
    return Task("tiny", folder, f"{ROOT / 'examples' / 'rlhf_tiny.py'}:reward", folder / "prompts.jsonl")


def prepare_sentiment(out: Path, policy: Path) -> Task:
    """The reward model of reward_model_sentiment.py (trained by that script, once) and its review openings as
    prompts."""
    reward_model = out / "sentiment-reward-model"
    if not (reward_model / "model.safetensors").exists():
        subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "reward_model_sentiment.py"), "--output-dir", str(reward_model)],
            check=True,
            cwd=ROOT,
        )
    prompts = out / "sentiment-prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": subject}) + "\n" for subject in SUBJECTS))
    return Task("sentiment", policy, str(reward_model), prompts)


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_once(task: Task, estimator: str, seed: int, steps: int, run_dir: Path) -> tuple[list[dict], float]:
    """One `fastppo rlhf` run in a fresh process (output to run_dir/log.txt); returns its metrics and wall seconds."""
    wall_file = run_dir / "wall_s.txt"
    rows = read_metrics(run_dir)
    if len(rows) == steps and wall_file.exists():
        return rows, float(wall_file.read_text())
    shutil.rmtree(run_dir, ignore_errors=True)  # metrics.jsonl is appended to: start clean
    run_dir.mkdir(parents=True)
    command = [sys.executable, "-m", "fastppo", "rlhf", "--model", str(task.model), "--reward", task.reward,
               "--prompts", str(task.prompts), "--estimator", estimator, "--seed", str(seed), "--steps", str(steps),
               "--max-new-tokens", str(MAX_NEW_TOKENS[task.name]), *SHARED_FLAGS,
               "--output-dir", str(run_dir)]  # fmt: skip
    start = time.perf_counter()
    with (run_dir / "log.txt").open("w") as log:
        subprocess.run(command, check=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    wall_file.write_text(f"{wall:.1f}")
    return read_metrics(run_dir), wall


def curve(rows: list[dict], key: str) -> np.ndarray:
    return np.array([row[key] for row in rows])


def mean_ci(values: list[float]) -> str:
    """Mean over seeds with a 95% percentile-bootstrap CI."""
    values = np.asarray(values)
    if len(values) < 2 or np.ptp(values) == 0:
        return f"{values.mean():.3f}"
    ci = bootstrap(
        (values,), np.mean, confidence_level=0.95, method="percentile", n_resamples=10_000, random_state=0
    ).confidence_interval
    return f"{values.mean():.3f} [{ci.low:.3f}, {ci.high:.3f}]"


def table(task: str, results: Runs, seeds: int) -> str:
    lines = [f"**{task}** ({seeds} seeds; mean [95% bootstrap CI])", "",
             f"| estimator | reward, steps 1-{START_STEPS} | reward, last {END_STEPS} steps | KL to reference, "
             f"last {END_STEPS} steps (nats) | wall s per run (min-max) |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    for label, runs in results.items():
        start = [curve(rows, REWARD)[:START_STEPS].mean() for rows, _ in runs]
        end = [curve(rows, REWARD)[-END_STEPS:].mean() for rows, _ in runs]
        kl = [curve(rows, KL)[-END_STEPS:].mean() for rows, _ in runs]
        walls = [wall for _, wall in runs]
        lines.append(
            f"| {label} | {mean_ci(start)} | {mean_ci(end)} | {mean_ci(kl)} | {np.mean(walls):.0f} "
            f"({min(walls):.0f}-{max(walls):.0f}) |"
        )
    return "\n".join(lines)


def plot(all_results: dict[str, Runs], path: Path) -> None:
    """One column per task, reward above KL; mean over seeds with a min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(all_results), figsize=(5 * len(all_results), 6), squeeze=False, sharex="col")
    for column, (task, results) in enumerate(all_results.items()):
        for row, (key, ylabel) in enumerate([(REWARD, "mean reward"), (KL, "KL to reference (nats)")]):
            ax = axes[row][column]
            for label, runs in results.items():
                curves = np.stack([curve(rows, key) for rows, _ in runs])
                steps = np.arange(1, curves.shape[1] + 1)
                (line,) = ax.plot(steps, curves.mean(axis=0), label=label, linewidth=1.2)
                ax.fill_between(
                    steps, curves.min(axis=0), curves.max(axis=0), color=line.get_color(), alpha=0.2, linewidth=0
                )
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
        axes[0][column].set_title(f"{task} ({len(runs)} seeds, band: min-max)")
        axes[1][column].set_xlabel("step")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument(
        "--steps", type=int, default=200, help="rollout + update steps of every run, both tasks (default: 200)"
    )
    parser.add_argument("--tasks", nargs="+", choices=["tiny", "sentiment"], default=["tiny", "sentiment"])
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "runs" / "rlhf_estimator_curves",
        help="models, runs and the PNG (default: runs/rlhf_estimator_curves)",
    )
    args = parser.parse_args()
    header(f"fastppo rlhf reward and KL curves: {', '.join(ESTIMATORS)} x seeds {args.seeds} x {args.steps} steps")
    args.out.mkdir(parents=True, exist_ok=True)
    begin = time.perf_counter()
    tiny = prepare_tiny(args.out)
    tasks = [tiny if name == "tiny" else prepare_sentiment(args.out, tiny.model) for name in args.tasks]
    all_results: dict[str, Runs] = {}
    for task in tasks:
        results = all_results[task.name] = {label: [] for label in ESTIMATORS}
        for seed in args.seeds:
            for label, estimator in ESTIMATORS.items():
                rows, wall = run_once(
                    task, estimator, seed, args.steps, args.out / task.name / estimator / f"seed-{seed}"
                )
                results[label].append((rows, wall))
                print(
                    f"{task.name} {estimator} seed {seed}: reward {rows[0][REWARD]:.3f} -> "
                    f"{rows[-1][REWARD]:.3f}, KL {rows[-1][KL]:.2f}, {wall:.0f} s",
                    flush=True,
                )
    for task, results in all_results.items():
        print("\n" + table(task, results, len(args.seeds)))
    png = args.out / "rlhf_estimator_curves.png"
    plot(all_results, png)
    print(f"\ncurves: {png}\ntotal wall {time.perf_counter() - begin:.0f} s")
    footer()


if __name__ == "__main__":
    main()

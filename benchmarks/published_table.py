"""A published-style table: 9 envs x 10 seeds at CleanRL's step budgets, IQM + 95% CI, next to
the published PPO means (CleanRL's, or where it publishes none at the budget, the best we can cite).

Each env trains fastppo's preset for that env through the CLI users run, ``--seeds`` into one folder
per env under ``--out``; ``fastppo report`` then scores every run (mean episodic return over the
last 10% of its steps), and this script prints its IQM / CI table beside the published figures.

The table is long to fill on 2 CPU cores (~5 min per MuJoCo run), so it is built to be spread over
several sessions: tensor envs train all their seeds at once as stacks (``--seeds``: a stack per
CPU core; minutes); every other run is its own process, ``--workers`` at a time. Started again,
the script skips finished runs and resumes stopped ones from their last checkpoint (``fastppo
train --resume``; stacks of seeds as they were). ``--envs`` picks a subset.

    python published_table.py --out runs/published_table --workers 2
    python published_table.py --envs HalfCheetah-v4 --out runs/published_table   # later: the rest
    python published_table.py --out runs/published_table --plot published_table.png   # and its chart

``--plot`` draws each env's IQM with its 95% CI beside the published mean ± std. With
``--recorded`` it draws the table recorded on the docs' Benchmarks page instead of training (for
when the runs are no longer on disk), titled with that table's machine and date.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

import yaml

from common import footer, header, pyplot, save_figure

SEEDS = range(1, 11)


class Row(NamedTuple):
    env: str
    budget: int
    backend: str  # tensor: all seeds at once, stacked
    published: str  # the published PPO mean ± std at this budget, or why there is none
    source: str = "CleanRL, 3 seeds"


# CleanRL's budgets are its scripts' defaults: ppo.py 500k steps (discrete), ppo_continuous_action.py
# 1M. Figures: docs.cleanrl.dev PPO page, ppo.py table (CartPole-v1, Acrobot-v1) and
# ppo_continuous_action.py's MuJoCo v4 table (Humanoid-v4 from its benchmark page, tag pr-424).
# CleanRL publishes Ant only at 8M steps (1824.17 ± 905.78); the best PPO figure at 1M we can cite is
# rl-baselines3-zoo's benchmark.md: Ant-v3, tuned settings, one run, deterministic evaluation.
TABLE = [
    Row("CartPole-v1", 500_000, "tensor", "490.04 ± 6.12"),
    Row("Acrobot-v1", 500_000, "tensor", "-86.36 ± 1.32"),
    Row("LunarLander-v3", 500_000, "gymnasium", "not published"),
    Row("Pendulum-v1", 1_000_000, "tensor", "not published"),
    Row("HalfCheetah-v4", 1_000_000, "gymnasium", "1442.64 ± 46.03"),
    Row("Hopper-v4", 1_000_000, "gymnasium", "2382.86 ± 271.74"),
    Row("Walker2d-v4", 1_000_000, "gymnasium", "2287.95 ± 571.78"),
    Row("Ant-v4", 1_000_000, "gymnasium", "1327.16 ± 451.58", "rl-zoo, Ant-v3, 1 run"),
    Row("Humanoid-v4", 1_000_000, "gymnasium", "716.11 ± 49.08"),
]


class Score(NamedTuple):
    """An env's end-of-training figures over its seeds (``fastppo report``)."""

    iqm: float
    low: float  # the IQM's 95% CI
    high: float
    mean: float


PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "index.md"
PAGE_SECTION = "## A published-style table"
PAGE_ROW = re.compile(r"^\| (\S+) \| [\d,]+ \| \d+ \| ([-\d.]+) \[([-\d.]+), ([-\d.]+)\] \| ([-\d.]+) \|")


def recorded_scores(page: Path = PAGE) -> tuple[dict[str, Score], str]:
    """(each env's figures, "machine, date") as the Benchmarks page's table records them: its rows,
    the date of its ``Command:`` line and the machine its next paragraph opens with."""
    section = page.read_text().split(PAGE_SECTION, 1)[1].split("\n## ", 1)[0]
    date = re.search(r"^Command: .*\((.+)\)\.$", section, re.MULTILINE)[1]
    machine = re.search(r"^Command: .*\n\n([^;]+);", section, re.MULTILINE)[1].replace("\n", " ")
    scores = {m[1]: Score(*map(float, m.groups()[1:])) for m in map(PAGE_ROW.match, section.splitlines()) if m}
    return scores, f"{machine}, {date}"


def plot_scores(scores: dict[str, Score], path: str, recorded: str | None = None) -> None:
    """A panel per env: fastppo's IQM with its 95% CI and its mean, beside the published mean ± std
    where there is one. ``recorded``: the machine and date of figures measured earlier
    (the page's table), drawn now."""
    plt = pyplot()
    published = {row.env: tuple(map(float, row.published.split(" ± "))) for row in TABLE if "±" in row.published}
    sources = {row.env: row.source for row in TABLE}
    envs = [row.env for row in TABLE if row.env in scores]
    columns = len(envs) // 2 + 1  # a panel to spare for the legend
    fig, axes = plt.subplots(2, columns, figsize=(2.2 * columns, 5), squeeze=False)
    for ax, env in zip(axes.flat, envs):
        score = scores[env]
        ax.errorbar(
            [0],
            [score.iqm],
            yerr=[[score.iqm - score.low], [score.high - score.iqm]],
            fmt="o",
            color="tab:blue",
            capsize=4,
            label="fastppo IQM, 95% CI (10 seeds)",
        )
        ax.plot([0], [score.mean], "x", color="tab:blue", label="fastppo mean")
        if env in published:
            mean, std = published[env]
            ax.errorbar(
                [1], [mean], yerr=[std], fmt="s", color="tab:orange", capsize=4, label="published PPO mean ± std"
            )
        else:
            ax.text(1, score.iqm, "not\npublished", ha="center", va="center", fontsize=7, color="tab:orange")
        budget = next(row.budget for row in TABLE if row.env == env)
        ax.set_xticks([0, 1], ["fastppo", sources[env].split(",")[0]], fontsize=8)
        ax.set_xlim(-0.6, 1.6)
        ax.set_title(f"{env}, {budget:,} steps", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("episodic return", fontsize=8)
    for ax in axes.flat[len(envs) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    axes.flat[len(envs)].legend(handles, labels, loc="center", fontsize=7, frameon=False)
    title = "End-of-training return (last 10% of steps) at CleanRL's budgets vs published PPO"
    if recorded:
        title += "\nfrom the table of the docs' Benchmarks page"
    save_figure(fig, path, title, recorded)


def finished(run_dir: Path, budget: int) -> bool:
    """Whether the run logged its last iteration (a stopped run also leaves its latest agent behind)."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists() or not metrics.read_text().strip():
        return False
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    batch = config["env"]["num_envs"] * config["ppo"]["num_steps"]
    return json.loads(metrics.read_text().splitlines()[-1])["global_step"] >= budget // batch * batch


def fastppo(*args: str) -> float:
    """Run the fastppo CLI in a fresh process; its wall seconds. A failure stops the script."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fastppo", *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def train_stacked(row: Row, parent: Path) -> dict[str, float]:
    if all(finished(parent / f"seed_{s}", row.budget) for s in SEEDS):
        return {}
    if any((parent / f"seed_{s}" / "checkpoints").exists() for s in SEEDS):  # stopped stacks go on as they were
        seconds = fastppo("train", "--resume", str(parent), "--no-progress")
    else:
        shutil.rmtree(parent, ignore_errors=True)
        seconds = fastppo(
            "train",
            row.env,
            "--backend",
            "tensor",
            "--seeds",
            f"{SEEDS[0]}-{SEEDS[-1]}",
            "--total-timesteps",
            str(row.budget),
            "--run-dir",
            str(parent),
            "--no-progress",
        )
    print(f"{row.env}: {len(SEEDS)} seeds stacked: {seconds:.0f} s", flush=True)
    return {"stack": seconds}


def train_one(row: Row, run_dir: Path) -> tuple[str, float] | None:
    if finished(run_dir, row.budget):
        return None
    if (run_dir / "checkpoints" / "latest").exists():
        seconds = fastppo("train", "--resume", str(run_dir), "--no-progress")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
        seconds = fastppo(
            "train",
            row.env,
            "--seed",
            run_dir.name.removeprefix("seed_"),
            "--total-timesteps",
            str(row.budget),
            "--run-dir",
            str(run_dir),
            "--no-progress",
        )
    print(f"{row.env} {run_dir.name}: {seconds:.0f} s", flush=True)
    return run_dir.name, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/published_table"))
    parser.add_argument("--envs", nargs="+", default=[row.env for row in TABLE], choices=[row.env for row in TABLE])
    parser.add_argument("--workers", type=int, default=2, help="single runs trained at once (default: 2)")
    parser.add_argument(
        "--plot", metavar="PATH", help="also draw the table (IQM and CI beside the published figures) as a PNG at PATH"
    )
    parser.add_argument(
        "--recorded",
        action="store_true",
        help="with --plot: draw the table recorded on docs/benchmarks/index.md instead of training",
    )
    args = parser.parse_args()
    if args.recorded:
        if not args.plot:
            parser.error("--recorded draws the page's table: give --plot PATH")
        scores, recorded = recorded_scores()
        plot_scores(scores, args.plot, recorded)
        return
    header(f"published-style table: {', '.join(args.envs)}, seeds {SEEDS[0]}-{SEEDS[-1]}")
    timings_file = args.out / "timings.json"
    args.out.mkdir(parents=True, exist_ok=True)
    timings = json.loads(timings_file.read_text()) if timings_file.exists() else {}
    rows = [row for row in TABLE if row.env in args.envs]
    for row in rows:
        if row.backend == "tensor":
            timings.setdefault(row.env, {}).update(train_stacked(row, args.out / row.env))
            timings_file.write_text(json.dumps(timings, indent=1))
    singles = [(row, args.out / row.env / f"seed_{s}") for row in rows if row.backend != "tensor" for s in SEEDS]
    with ThreadPoolExecutor(args.workers) as pool:
        for row, job in zip([r for r, _ in singles], [pool.submit(train_one, *single) for single in singles]):
            try:
                done = job.result()
            except subprocess.CalledProcessError as exc:  # a run failed or was stopped (Ctrl-C): start no other
                pool.shutdown(cancel_futures=True)
                sys.exit(
                    f"{row.env}: {' '.join(exc.cmd[2:])} exited with {exc.returncode}; run the script again to go on"
                )
            if done:
                timings.setdefault(row.env, {})[done[0]] = done[1]
                timings_file.write_text(json.dumps(timings, indent=1))
    complete = [row for row in TABLE if all(finished(args.out / row.env / f"seed_{s}", row.budget) for s in SEEDS)]
    fastppo("report", *(str(args.out / row.env) for row in complete), "--out", str(args.out / "report"))
    scores = {line["env"]: line for line in csv.DictReader(open(args.out / "report" / "report.csv"))}
    print("\n| env | steps | seeds | IQM [95% CI] | mean | median | published PPO (mean ± std) | wall |")
    print("|---|--:|--:|---|--:|--:|---|---|")
    for row in TABLE:
        score = scores.get(row.env)
        if row not in complete or score is None:
            print(f"| {row.env} | {row.budget:,} | - | not run yet | | | {row.published} ({row.source}) | |")
            continue
        spent = timings.get(row.env, {})
        wall = (
            f"{spent['stack']:.0f} s, 10 seeds stacked"
            if "stack" in spent
            else f"{sum(spent.values()) / max(len(spent), 1):.0f} s per seed"
        )
        print(
            f"| {row.env} | {row.budget:,} | {len(score['seeds'].split())} | {float(score['iqm']):.1f} "
            f"[{float(score['iqm_low']):.1f}, {float(score['iqm_high']):.1f}] | {float(score['mean']):.1f} | "
            f"{float(score['median']):.1f} | {row.published} ({row.source}) | {wall} |"
        )
    footer()
    if args.plot:
        plot_scores(
            {
                row.env: Score(*(float(scores[row.env][key]) for key in ("iqm", "iqm_low", "iqm_high", "mean")))
                for row in complete
                if row.env in scores
            },
            args.plot,
        )


if __name__ == "__main__":
    main()

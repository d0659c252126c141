"""Statistics over seeds: final scores as IQM, mean and median with 95% stratified-bootstrap
confidence intervals, in Markdown and CSV, plus sample-efficiency curves and a performance profile.

The estimates follow Agarwal et al. 2021, "Deep RL at the Edge of the Statistical Precipice",
through their library ``rliable`` (the ``stats`` extra): the interquartile mean is robust to an
outlier seed yet less noisy than the median, and percentile bootstrap CIs show how much the
numbers would move with other seeds.

- **Runs and groups.** A run is a folder written by ``fastppo train`` (``config.yaml`` +
  ``metrics.jsonl``); a folder holding runs stands for all of them. Runs are grouped as
  ``fastppo plot`` groups them: the same env and config, seeds (and bookkeeping) apart. A group
  is named by the hyperparameters that set it apart from the other groups of its env. A seed
  counts once per group (a run found in two folders is refused, both named), and a group of fewer
  than ``MIN_TRUSTED_RUNS`` runs is noted under the table: its interval is not to be trusted.
- **Final score** of a run: the mean of the metric over the values logged in the last
  ``final_window`` fraction of its steps (the last value at least).
- **Performance profile** (one curve per config name, pooling its envs): the fraction of runs
  whose normalised final score exceeds tau. Scores are normalised per env, by default min-max
  over all runs of that env in the report (0 = the worst run, 1 = the best), or
  ``(score - low) / (high - low)`` with reference scores ``{env_id: [low, high]}`` from a YAML
  file (e.g. a random policy's and a solved score), comparable across reports.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fastppo.config import check_seed
from fastppo.errors import FastPPOError, install_extra
from fastppo.experiments.plot import RETURN, Run, config_label, differing_keys, find_runs, group_runs, read_run

ONLY_CONFIG = "only config"
"""The name of a group that is its env's only one."""
ESTIMATES = ("IQM", "mean", "median")
MIN_TRUSTED_RUNS = 5
"""Below this many runs a group's bootstrap interval is noted as not to be trusted: resampling 2-4
scores spans little more than the scores themselves, however far other seeds would fall."""
UNTRUSTED = f"fewer than {MIN_TRUSTED_RUNS} runs: the interval is not to be trusted"


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its confidence interval."""

    point: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.point:.2f} [{self.low:.2f}, {self.high:.2f}]"


@dataclass
class GroupStats:
    """One env and config: its runs (by seed), their final scores and the estimates over them."""

    env_id: str
    config: str
    runs: list[Run]
    scores: np.ndarray
    estimates: dict[str, Estimate]

    @property
    def seeds(self) -> list[Any]:
        return [run.config.get("run.seed") for run in self.runs]

    @property
    def steps(self) -> int:
        """Steps of the shortest run (an interrupted run shows here)."""
        return int(min(run.records[-1]["global_step"] for run in self.runs))

    @property
    def step_range(self) -> str:
        """The runs' steps, ``shortest-longest`` where they differ (seeds ended at --stop-return)."""
        longest = int(max(run.records[-1]["global_step"] for run in self.runs))
        return str(self.steps) if longest == self.steps else f"{self.steps}-{longest}"


def require_stats() -> None:
    """FastPPOError, before any work, if the ``stats`` extra (rliable, matplotlib) is missing."""
    try:
        import matplotlib  # noqa: F401
        import rliable.library  # noqa: F401
    except ImportError as exc:
        raise FastPPOError(
            f"fastppo report needs the 'stats' extra ({exc.name} is missing): {install_extra('stats')}"
        ) from None


def final_score(run: Run, metric: str, final_window: float) -> float:
    """The mean of ``metric`` over the values logged in the last ``final_window`` fraction of the
    run's steps, or its last value if none falls there."""
    steps, values = run.series(metric)
    if not len(values):
        if metric == RETURN and run.group_returns:  # agents in several groups: no headline return
            raise FastPPOError(
                f"{run.path} logged no {metric}: its agents are in groups that may play against each other, so "
                f"it logs each group's: pick one, --metric {run.group_returns[0]}"
            )
        raise FastPPOError(
            f"{run.path} logged no {metric} (no episode finished?): train longer, or pick another --metric"
        )
    last_step = run.records[-1]["global_step"]
    return float(values[steps >= min((1 - final_window) * last_step, steps[-1])].mean())


@contextmanager
def seeded_numpy(seed: int) -> Iterator[None]:
    """rliable resamples with numpy's global RNG (its ``random_state`` does not reach the
    resampling): seed that for reproducible intervals, then give the caller's state back."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _point_estimates(scores: np.ndarray) -> np.ndarray:
    """IQM, mean and median of a (runs, tasks) score matrix. The median is over all scores (over
    seeds for one env), not rliable's median over tasks of per-task means."""
    from rliable import metrics

    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores), np.median(scores)])


def interval_estimates(scores: np.ndarray, reps: int, seed: int = 0) -> dict[str, Estimate]:
    """IQM, mean and median of ``scores`` (runs x tasks) with stratified-bootstrap percentile CIs."""
    from rliable import library

    with seeded_numpy(seed):
        points, intervals = library.get_interval_estimates({"": scores}, _point_estimates, reps=reps)
    return {
        name: Estimate(float(p), float(low), float(high))
        for name, p, low, high in zip(ESTIMATES, points[""], *intervals[""])
    }


def _iqm_per_step(values: np.ndarray) -> np.ndarray:
    """rliable's aggregate_iqm at every step of a (runs, tasks, steps) array, in one call."""
    from scipy.stats import trim_mean

    return trim_mean(values.reshape(-1, values.shape[-1]), 0.25, axis=0)


def iqm_curve(values: np.ndarray, reps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(IQM per step, its CI [2, steps]) of ``values`` [runs, steps] on a common step grid."""
    from rliable import library

    with seeded_numpy(seed):
        points, intervals = library.get_interval_estimates({"": values[:, None, :]}, _iqm_per_step, reps=reps)
    return points[""], intervals[""]


def collect(
    run_dirs: list[str | Path], metric: str = RETURN, final_window: float = 0.1, reps: int = 2000, seed: int = 0
) -> list[GroupStats]:
    """Read and group the runs, score each one, and estimate per group (sorted by env and name)."""
    if not 0 < final_window <= 1:
        raise FastPPOError(
            f"--final-window {final_window} is not a fraction of the run: pick a value in (0, 1], e.g. 0.1"
        )
    if reps < 1:
        raise FastPPOError(f"--reps {reps}: the bootstrap needs at least 1 resample (2000 is usual)")
    check_seed(seed, "--bootstrap-seed")  # numpy's global seed, else a traceback from the bootstrap
    groups = group_runs([read_run(path) for path in find_runs(run_dirs)])
    stats = []
    for env_id in sorted({group[0].env_id for group in groups}):
        env_groups = [group for group in groups if group[0].env_id == env_id]
        keys = differing_keys(env_groups)
        for group in env_groups:
            check_each_seed_once(group)
            runs = sorted(group, key=lambda run: (run.config.get("run.seed", 0), str(run.path)))
            scores = np.array([final_score(run, metric, final_window) for run in runs])
            name = config_label(runs[0].config, keys) or ONLY_CONFIG
            stats.append(GroupStats(env_id, name, runs, scores, interval_estimates(scores[:, None], reps, seed)))
    return sorted(stats, key=lambda s: (s.env_id, s.config))


def check_each_seed_once(group: list[Run]) -> None:
    """A FastPPOError naming both folders when two runs of one config have the same seed (the same
    command run twice, or a run copied): counted twice, one seed would narrow the intervals
    falsely. Refused rather than counted once: the two may differ (another machine, thread count
    or version), and keeping either one in silence would pick the score."""
    folders: dict[Any, Path] = {}
    for run in group:
        seed = run.config.get("run.seed")
        if (first := folders.setdefault(seed, run.path)) != run.path:
            raise FastPPOError(
                f"seed {seed} of one {run.env_id} config was found twice, in {first} and {run.path}: a seed "
                "counts once: leave one of the two folders out of the report"
            )


def markdown_table(stats: list[GroupStats], caption: str) -> str:
    rows = [
        f"| {s.env_id} | {s.config} | {len(s.runs)} | {s.step_range} | "
        + " | ".join(str(s.estimates[name]) for name in ESTIMATES)
        + " |"
        for s in stats
    ]
    header = (
        "| env | config | seeds | steps | IQM [95% CI] | mean [95% CI] | median [95% CI] "
        "|\n|---|---|--:|--:|--:|--:|--:|"
    )
    notes = [
        f"Note: {s.env_id}, {s.config}: {len(s.runs)} run{'s' if len(s.runs) > 1 else ''}, {UNTRUSTED}."
        for s in stats
        if len(s.runs) < MIN_TRUSTED_RUNS
    ]
    return "\n".join([caption, "", header, *rows, *([""] + notes if notes else [])]) + "\n"


def csv_table(stats: list[GroupStats]) -> str:
    """One row per group, full precision, CI bounds in their own columns."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        [
            "env",
            "config",
            "seeds",
            "steps",
            *(f"{n.lower()}{part}" for n in ESTIMATES for part in ("", "_low", "_high")),
        ]
    )
    for s in stats:
        figures = [getattr(s.estimates[n], part) for n in ESTIMATES for part in ("point", "low", "high")]
        writer.writerow([s.env_id, s.config, " ".join(map(str, s.seeds)), s.step_range, *figures])
    return out.getvalue()


def read_references(path: str | Path, env_ids: list[str]) -> dict[str, tuple[float, float]]:
    """``{env_id: [low, high]}`` from a YAML file, checked to cover ``env_ids``."""
    try:
        data = yaml.safe_load(Path(path).read_text())
        references = {str(env): (float(low), float(high)) for env, (low, high) in data.items()}
    except OSError as exc:
        raise FastPPOError(f"cannot read --normalize {path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, AttributeError, TypeError, ValueError):
        raise FastPPOError(
            f"--normalize {path} must map each env id to [low, high] scores, e.g. 'CartPole-v1: [9.4, 500]'"
        ) from None
    missing = [env for env in env_ids if env not in references]
    if missing:
        raise FastPPOError(
            f"--normalize {path} has no reference scores for {', '.join(missing)}: add them as 'ENV: [low, high]'"
        )
    if flat := [env for env in env_ids if references[env][0] == references[env][1]]:
        raise FastPPOError(f"--normalize {path}: low equals high for {', '.join(flat)}: give two different scores")
    return references


def normalized_profiles(
    stats: list[GroupStats], references: dict[str, tuple[float, float]] | None
) -> dict[str, np.ndarray]:
    """Per config name, the normalised scores (runs, envs) that its profile pools. Each env gives
    as many runs (lowest seeds first) as the env with the fewest runs of that name, since rliable
    takes a full matrix."""
    by_env = {env: np.concatenate([s.scores for s in stats if s.env_id == env]) for env in {s.env_id for s in stats}}
    scale = references or {env: (scores.min(), scores.max()) for env, scores in by_env.items()}
    profiles = {}
    for name in dict.fromkeys(s.config for s in stats):
        members = [s for s in stats if s.config == name]
        runs = min(len(s.scores) for s in members)
        # `or 1.0`: an env whose runs all scored the same normalises to 0, not NaN.
        columns = [
            (s.scores[:runs] - scale[s.env_id][0]) / ((scale[s.env_id][1] - scale[s.env_id][0]) or 1.0) for s in members
        ]
        profiles[f"{name} ({runs} runs x {len(members)} env{'s' if len(members) > 1 else ''})"] = np.stack(
            columns, axis=1
        )
    return profiles

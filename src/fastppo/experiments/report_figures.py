"""The figures of ``fastppo report``, drawn with rliable's plot helpers: sample-efficiency curves
(IQM over seeds at each step with its 95% CI band, one panel per env) and the performance profile
across envs (fraction of runs above each normalised score, with 95% CI bands)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from fastppo.experiments.plot import curves_on_grid
from fastppo.experiments.report import GroupStats, iqm_curve, seeded_numpy
from fastppo.files.outputs import writing

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PANELS_PER_ROW = 3


def _pyplot() -> ModuleType:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(
    stats: list[GroupStats], metric: str, out: Path, smooth: int = 10, reps: int = 2000, seed: int = 0
) -> Path:
    """One panel per env: each config's ``metric`` (moving average over ``smooth`` iterations)
    interpolated onto the steps all its runs cover, IQM over seeds with a 95% CI band."""
    from rliable import plot_utils

    plt = _pyplot()
    envs = list(dict.fromkeys(s.env_id for s in stats))
    cols = min(len(envs), PANELS_PER_ROW)
    rows = -(-len(envs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.5 * rows), squeeze=False, layout="constrained")
    for ax, env in zip(axes.flat, envs):
        # Each config on its own grid, the steps its runs cover (a shorter or pruned run's config spans fewer).
        for color, s in enumerate(s for s in stats if s.env_id == env):
            curve = curves_on_grid(s.runs, metric, smooth)
            assert curve is not None  # the report refused any run that did not log ``metric``
            grid, values = curve
            label = f"{s.config} ({len(s.runs)} seed{'s' if len(s.runs) > 1 else ''})"
            point, interval = iqm_curve(values, reps, seed)
            plot_utils.plot_sample_efficiency_curve(  # a single step (one logged return per run) as a dot
                grid,
                {label: point},
                {label: interval},
                colors={label: f"C{color}"},
                ax=ax,
                marker="o" if len(grid) == 1 else "",
                xlabel="environment steps",
                ylabel=f"IQM {metric}",
                labelsize="medium",
                ticklabelsize="small",
            )
        ax.set_title(env)
        ax.legend(fontsize="small")
    for ax in axes.flat[len(envs) :]:
        ax.set_visible(False)
    fig.suptitle(f"IQM over seeds, 95% stratified-bootstrap CI; moving average over {smooth} iterations")
    return _save(fig, out)


def score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """rliable's default profile (the fraction of all scores above each tau) in one comparison:
    its own evaluates tau by tau in Python, ~25 s of a 3-config report at 2000 resamples."""
    return (scores.reshape(-1, 1) > taus).mean(axis=0)


def plot_profile(
    profiles: dict[str, np.ndarray], normalization: str, out: Path, reps: int = 2000, seed: int = 0
) -> Path:
    """The performance profile of each config name over the normalised final scores (runs, envs)."""
    from rliable import library, plot_utils

    plt = _pyplot()
    scores = np.concatenate([matrix.ravel() for matrix in profiles.values()])
    taus = np.linspace(min(0.0, scores.min()), max(1.0, scores.max()), 101)
    with seeded_numpy(seed):
        curves, intervals = library.create_performance_profile(
            profiles, taus, custom_profile_func=score_distribution, reps=reps
        )
    fig, ax = plt.subplots(figsize=(8, 5), layout="constrained")
    plot_utils.plot_performance_profiles(
        curves,
        taus,
        performance_profile_cis=intervals,
        ax=ax,
        xlabel=f"normalised final score τ ({normalization})",
        ylabel="fraction of runs with score > τ",
        labelsize="medium",
        ticklabelsize="small",
    )
    ax.legend(fontsize="small")
    ax.set_title("performance profile across envs, 95% stratified-bootstrap CI")
    return _save(fig, out)


def _save(fig: Figure, out: Path) -> Path:
    import matplotlib.pyplot as plt

    with writing(out, "the figure"):
        fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

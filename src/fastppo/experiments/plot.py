"""Learning curves and PPO diagnostics of one or more runs, in one PNG.

Runs of the same env and config (everything but the seed and the bookkeeping) are seeds of one
experiment: drawn as their mean with a shaded min-max band. Reads each run directory's
``metrics.jsonl`` and ``config.yaml``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fastppo.config import Config
from fastppo.errors import FastPPOError
from fastppo.files.outputs import output_file, writing
from fastppo.files.run_folder import AGENT_FILE, CONFIG_FILE, read_config

RETURN = "charts/episodic_return"
RATINGS = "ratings/"
EXPLOITABILITY = "eval/exploitability"
TRAINING_WINS = "self_play/win_vs_"
"""The learner's win rate in training games against an opponent (self_play/win_vs_<pool, random or fixed player>)."""
DIAGNOSTICS = (
    ("losses/approx_kl", "approx KL"),
    ("losses/clipfrac", "clip fraction"),
    ("losses/entropy", "entropy"),
    ("losses/value_loss", "value loss"),
    ("losses/explained_variance", "explained variance"),
)
NOT_HYPERPARAMETERS = {
    "run.seed", "run.exp_name", "run.run_root", "run.device", "run.torch_threads", "run.torch_deterministic",
    "run.tensorboard", "run.progress", "run.checkpoint_every", "run.keep_checkpoints", "run.collective_timeout",
    "env.capture_video",
}  # fmt: skip
"""Config keys that do not make runs different experiments."""
TITLE_KEYS = {
    "env.num_envs": "envs", "ppo.num_steps": "steps", "ppo.learning_rate": "lr", "ppo.update_epochs": "epochs",
    "ppo.num_minibatches": "minibatches", "ppo.clip_coef": "clip", "ppo.gamma": "γ", "ppo.gae_lambda": "λ",
    "ppo.ent_coef": "ent",
}  # fmt: skip


@dataclass
class Run:
    path: Path
    config: dict[str, Any]  # flat 'section.field' -> value
    records: list[dict[str, float]]

    @property
    def env_id(self) -> str:
        return str(self.config.get("env.env_id", "?"))

    def series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        rows = [(r["global_step"], r[name]) for r in self.records if name in r and r[name] is not None]
        data = np.asarray(rows, dtype=float).reshape(-1, 2)
        finite = np.isfinite(data[:, 1])
        return data[finite, 0], data[finite, 1]

    @property
    def ratings(self) -> list[str]:
        """A self-play run's ratings (ratings/learner, ratings/<fixed player>), in logged order."""
        return list(dict.fromkeys(name for record in self.records for name in record if name.startswith(RATINGS)))

    @property
    def fixed_player_wins(self) -> list[str]:
        """A self-play run's win rates against each fixed player, in logged order: its evaluation
        games' (eval/<player>/win_rate) and its curriculum's training games'
        (self_play/win_vs_<player>, random-share's among them; the pool is no fixed player)."""
        return list(
            dict.fromkeys(
                name
                for record in self.records
                for name in record
                if (name.startswith("eval/") and name.endswith("/win_rate"))
                or (name.startswith(TRAINING_WINS) and name != f"{TRAINING_WINS}pool")
            )
        )

    @property
    def group_returns(self) -> list[str]:
        """A multi-agent run's group return metrics (charts/episodic_return/<group>), in logged order."""
        return list(dict.fromkeys(name for record in self.records for name in record if name.startswith(f"{RETURN}/")))


def read_run(path: str | Path) -> Run:
    """A run directory's config and metrics; FastPPOError naming what is missing or damaged (a
    config cut short or lacking a field among them: runs are grouped by their whole config)."""
    path = Path(path)
    if not path.exists():
        raise FastPPOError(
            f"{path} does not exist: give a run directory (metrics.jsonl and config.yaml in it) or a folder of runs"
        )
    if not path.is_dir():
        raise FastPPOError(f"{path} is a file, not a run directory (expected metrics.jsonl and config.yaml in it)")
    try:
        if (path / CONFIG_FILE).exists():
            config = read_config(path / CONFIG_FILE)
        else:
            config = json.loads((path / AGENT_FILE).read_text())["config"]
        # Whole, as read_config checks config.yaml; a field added since the run was written reads as
        # the default it trained with, so that the run groups with a newer one of the same settings.
        config = Config.from_dict(config).to_dict()
        flat = {f"{section}.{key}": value for section, values in config.items() for key, value in values.items()}
        records = read_metrics(path / "metrics.jsonl")
    except FileNotFoundError as exc:
        raise FastPPOError(f"{path} is not a fastppo run: {Path(exc.filename).name} is missing") from None
    except OSError as exc:
        raise FastPPOError(f"cannot read {exc.filename or path}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, ValueError, KeyError, AttributeError, TypeError) as exc:
        raise FastPPOError(f"cannot read the config of {path}: {str(exc).splitlines()[0]}") from None
    if not records:
        raise FastPPOError(f"{path}/metrics.jsonl holds no metrics yet: train longer, or check the run")
    return Run(path, flat, records)


def read_metrics(path: Path) -> list[dict[str, float]]:
    """The records of a metrics.jsonl. Its last line is skipped when it is cut short (no newline
    yet: a killed run); a damaged line anywhere else is a FastPPOError naming the file and line."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    records = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            if number == len(lines):  # the logger ends every record with a newline: this one was cut short
                break
            what = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "not JSON"
            raise FastPPOError(
                f"{path} line {number} is {what}: the file is damaged; fix or delete that line, or leave the run out"
            ) from None
        if not isinstance(record, dict) or not _is_number(record.get("global_step")):
            raise FastPPOError(
                f"{path} line {number} is not a metrics record (a JSON object with a numeric global_step): fix "
                "or delete that line, or leave the run out"
            )
        bad = next((name for name, value in record.items() if value is not None and not _is_number(value)), None)
        if bad is not None:
            raise FastPPOError(
                f"{path} line {number}: {bad} is {record[bad]!r}, not a number: fix or delete that line, or "
                "leave the run out"
            )
        records.append(record)
    return records


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def find_runs(paths: list[str | Path]) -> list[Path]:
    """Each path as a run, or, for a folder that is not one, every run folder below it; a
    FastPPOError for a run with runs inside it."""
    if not paths:
        raise FastPPOError("give at least one run directory (or a folder of runs)")
    found: dict[Path, None] = {}  # ordered, and a run named twice (itself and by its parent) counts once
    for path in map(Path, paths):
        if path.is_dir() and not (path / "metrics.jsonl").exists() and not (path / "config.yaml").exists():
            below = sorted(p.parent for p in path.rglob("metrics.jsonl"))
            if not below:
                raise FastPPOError(
                    f"{path} is neither a run directory nor a folder of runs (no metrics.jsonl in or below it)"
                )
            found.update(dict.fromkeys(p.resolve() for p in below))
        else:
            found[path.resolve()] = None  # read_run names what is missing
    for run in found:  # e.g. a single run and a --seeds job trained into one folder: which is meant?
        if inner := next((p.parent for p in run.rglob("metrics.jsonl") if p.parent != run), None):
            raise FastPPOError(
                f"{run} is a run and a folder of runs at once ({inner.relative_to(run)} inside it): move the run "
                "or the runs inside it into a folder of its own"
            )
    return list(found)


def experiment_key(run: Run) -> tuple:
    return tuple(sorted((k, json.dumps(v)) for k, v in run.config.items() if k not in NOT_HYPERPARAMETERS))


def group_runs(runs: list[Run]) -> list[list[Run]]:
    """Runs grouped by experiment (same env and hyperparameters), in first-seen order."""
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(experiment_key(run), []).append(run)
    return list(groups.values())


def differing_keys(groups: list[list[Run]]) -> list[str]:
    """The config keys, env id aside, whose values differ between the groups, sorted."""
    keys = sorted({k for g in groups for k in g[0].config} - NOT_HYPERPARAMETERS - {"env.env_id"})
    return [k for k in keys if len({json.dumps(g[0].config.get(k)) for g in groups}) > 1]


def config_label(config: dict[str, Any], keys: list[str]) -> str:
    """'learning_rate=0.001, num_envs=8': the values of ``keys`` (flat 'section.field') by field name."""
    return ", ".join(f"{k.split('.', 1)[1]}={config.get(k)}" for k in keys)


def _labels(groups: list[list[Run]]) -> list[str]:
    """Each group named by its env plus the hyperparameters that differ between groups."""
    differing = differing_keys(groups)
    labels = []
    for group in groups:
        extra = config_label(group[0].config, differing[:4])
        seeds = f"{len(group)} seed{'s' if len(group) > 1 else ''}"
        labels.append(f"{group[0].env_id}{' (' + extra + ')' if extra else ''} — {seeds}")
    return labels


def check_smooth(window: int) -> None:
    """A FastPPOError for a ``--smooth`` below 1, before any run is read."""
    if window < 1:
        raise FastPPOError(f"--smooth must be >= 1 (1: the raw curves), got {window}")


def image_suffixes() -> set[str]:
    """The file endings matplotlib's Agg canvas saves figures as (.png, .pdf, .svg, ...)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return {f".{name}" for name in FigureCanvasAgg.get_supported_filetypes()}


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or len(values) < 2:
        return values
    window = min(window, len(values))
    kernel = np.ones(window) / window
    # Edge-corrected moving average: the first points average over what exists.
    return (
        np.convolve(values, kernel, mode="full")[: len(values)]
        / np.convolve(np.ones(len(values)), kernel, mode="full")[: len(values)]
    )


def curves_on_grid(runs: list[Run], name: str, smooth: int, points: int = 300) -> tuple[np.ndarray, np.ndarray] | None:
    """(steps, values [runs, points]): ``name`` of each run that logged it, smoothed, then
    interpolated onto one step grid over the steps all of them cover; None if none logged it."""
    curves = [run.series(name) for run in runs]
    curves = [(x, _smooth(y, smooth)) for x, y in curves if len(x)]
    if not curves:
        return None
    start, end = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
    grid = np.linspace(start, end, points) if end > start else np.asarray([start])
    return grid, np.stack([np.interp(grid, x, y) for x, y in curves])


def _aggregate(runs: list[Run], name: str, smooth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(steps, mean, min, max) of ``name`` across runs on a common step grid."""
    curves = curves_on_grid(runs, name, smooth)
    if curves is None:
        return None
    grid, values = curves
    return grid, values.mean(0), values.min(0), values.max(0)


def _title(groups: list[list[Run]]) -> str:
    envs = sorted({g[0].env_id for g in groups})
    title = f"PPO on {', '.join(envs)}"
    if len(groups) == 1:
        cfg = groups[0][0].config
        shown = ", ".join(
            f"{short} {cfg[k]:g}" if isinstance(cfg.get(k), float) else f"{short} {cfg.get(k)}"
            for k, short in TITLE_KEYS.items()
            if k in cfg
        )
        title += f"\n{shown}"
    return title


def plot_runs(run_dirs: list[str | Path], out: str | Path, smooth: int = 10) -> Path:
    """Episodic return vs env steps (mean and min-max band over seeds) above a row of diagnostics."""
    try:
        import matplotlib
    except ImportError:
        raise FastPPOError("fastppo plot needs matplotlib: pip install 'fastppo[plot]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    check_smooth(smooth)
    groups = group_runs([read_run(p) for p in find_runs(run_dirs)])
    out = output_file(
        out, "the plot", image_suffixes()
    )  # after the runs (RUN_DIR/plot.png needs RUN_DIR), before drawing
    labels = _labels(groups)
    fig = plt.figure(figsize=(16, 9), layout="constrained")
    grid = fig.add_gridspec(2, len(DIAGNOSTICS), height_ratios=(2.2, 1))
    # Self-play runs: beside the return (against the pool), the openskill ratings (the fixed
    # players' anchors among them), the win rates against each fixed player, and the
    # exploitability a small zero-sum game logs (--self-play.exploitability-every).
    rated = any(run.ratings for group in groups for run in group)
    played = any(run.fixed_player_wins for group in groups for run in group)
    exploited = any(EXPLOITABILITY in record for group in groups for run in group for record in run.records)
    panels = rated + played + exploited
    columns = len(DIAGNOSTICS)
    beside = iter([grid[0, 3:]] if panels == 1 else [grid[0, column] for column in range(columns - panels, columns)])
    ax_return = fig.add_subplot(grid[0, : min(3, columns - panels)] if panels else grid[0, :])
    ax_ratings = fig.add_subplot(next(beside)) if rated else None
    ax_wins = fig.add_subplot(next(beside)) if played else None
    ax_exploitability = fig.add_subplot(next(beside)) if exploited else None
    diag_axes = [fig.add_subplot(grid[1, i]) for i in range(len(DIAGNOSTICS))]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (group, label) in enumerate(zip(groups, labels)):
        color = colors[index % len(colors)]
        # Agents in several groups without a headline (--multi-agent.headline): each group's return, one
        # line style each.
        names = [RETURN] if any(RETURN in r for run in group for r in run.records) else group[0].group_returns
        for name, style in zip(names, ("-", "--", ":", "-.")):
            curve = _aggregate(group, name, smooth)
            if curve is not None:
                steps, mean, low, high = curve
                ax_return.plot(
                    steps,
                    mean,
                    color=color,
                    lw=2,
                    ls=style,
                    label=label if name == RETURN else f"{label}: {name.removeprefix(RETURN + '/')}",
                )
                if len(group) > 1:
                    ax_return.fill_between(steps, low, high, color=color, alpha=0.2, lw=0)
        for name, style in zip(group[0].ratings if ax_ratings else [], ("-", "--", ":", "-.") * 4):
            curve = _aggregate(group, name, smooth)
            if curve is not None and ax_ratings is not None:
                ax_ratings.plot(
                    curve[0], curve[1], color=color, lw=1.6, ls=style, label=f"{label}: {name.removeprefix(RATINGS)}"
                )
        for name, style in zip(group[0].fixed_player_wins if ax_wins else [], ("-", "--", ":", "-.") * 4):
            # Evaluation games come every --self-play.eval-every iterations: drawn as logged.
            curve = _aggregate(group, name, 1 if name.startswith("eval/") else smooth)
            if curve is not None and ax_wins is not None:
                player = name.removeprefix("eval/").removesuffix("/win_rate") + " (evaluation)"
                if name.startswith(TRAINING_WINS):
                    player = name.removeprefix(TRAINING_WINS) + " (training games)"
                ax_wins.plot(curve[0], curve[1], color=color, lw=1.6, ls=style, label=f"{label}: {player}")
        if ax_exploitability is not None and (curve := _aggregate(group, EXPLOITABILITY, 1)) is not None:
            ax_exploitability.plot(curve[0], curve[1], color=color, lw=1.6, label=label)
        for ax, (name, _) in zip(diag_axes, DIAGNOSTICS):
            curve = _aggregate(group, name, smooth)
            if curve is not None:
                steps, mean, low, high = curve
                ax.plot(steps, mean, color=color, lw=1.2)
                if len(group) > 1:
                    ax.fill_between(steps, low, high, color=color, alpha=0.15, lw=0)
    band = " (line: mean over seeds, band: min-max)" if any(len(g) > 1 for g in groups) else ""
    ax_return.set_title(f"episodic return{band}, moving average over {smooth} iterations", fontsize=11)
    ax_return.set_xlabel("environment steps")
    ax_return.set_ylabel("episodic return")
    ax_return.grid(alpha=0.3)
    if ax_return.get_legend_handles_labels()[0]:  # a game against itself alone has no return to draw
        ax_return.legend(loc="best")
    for panel, title in (
        (ax_ratings, "openskill rating (mu - 3 sigma)"),
        (ax_wins, "win rate against each fixed player"),
        (ax_exploitability, "exploitability (OpenSpiel's, per game)"),
    ):
        if panel is not None:  # a game's panels, each drawn only when the run logged its metric
            panel.set_title(title, fontsize=11)
            panel.set_xlabel("environment steps")
            panel.grid(alpha=0.3)
            if panel.get_legend_handles_labels()[0]:
                panel.legend(loc="best", fontsize=8)
    if ax_wins is not None:
        ax_wins.set_ylim(-0.05, 1.05)
    for ax, (_, title) in zip(diag_axes, DIAGNOSTICS):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("environment steps", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.get_offset_text().set_fontsize(7)
        ax.grid(alpha=0.3)
    fig.suptitle(_title(groups), fontsize=13)
    with writing(out, "the plot"):
        fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

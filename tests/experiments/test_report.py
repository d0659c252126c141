"""fastppo report: IQM/mean/median CIs equal rliable's own, runs grouped by config, the tables'
content, the performance profile's scores, a CLI run on real runs, one-line errors."""

from __future__ import annotations

import csv
import io
import shutil
import sys
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from rliable import library as rly
from rliable import metrics

import fastppo
from fastppo.cli.main import main
from fastppo.experiments.plot import Run
from fastppo.experiments.report import (
    Estimate,
    GroupStats,
    collect,
    csv_table,
    final_score,
    interval_estimates,
    iqm_curve,
    markdown_table,
    normalized_profiles,
)
from fastppo.experiments.report_figures import score_distribution

SCORES = np.random.RandomState(0).normal(200.0, 50.0, size=(10, 1))


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """Two seeds at lr 0.01 and one at lr 0.001, in a folder of runs (a few seconds in all)."""
    root = tmp_path_factory.mktemp("report")
    for name, seed, lr in (("lr-2/s1", 1, 1e-2), ("lr-2/s2", 2, 1e-2), ("lr-3/s1", 1, 1e-3)):
        tiny = dict(
            total_timesteps=512,
            num_envs=4,
            num_steps=64,
            seed=seed,
            learning_rate=lr,
            progress=False,
            tensorboard=False,
        )
        fastppo.train("CartPole-v1", run_dir=root / name, **tiny)
    return root


def _rliable(func, scores: np.ndarray, reps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    np.random.seed(seed)  # rliable resamples with numpy's global RNG
    points, intervals = rly.get_interval_estimates({"x": scores}, func, reps=reps)
    return points["x"], intervals["x"]


@pytest.mark.parametrize(
    "name, func", [("IQM", metrics.aggregate_iqm), ("mean", metrics.aggregate_mean), ("median", np.median)]
)
def test_interval_estimates_equal_rliables_own(name, func):
    estimate = interval_estimates(SCORES, reps=300, seed=7)[name]
    point, (low, high) = _rliable(lambda s: np.array([func(s)]), SCORES, reps=300, seed=7)
    assert (estimate.point, estimate.low, estimate.high) == pytest.approx((point[0], low[0], high[0]), rel=1e-12)
    assert low[0] < point[0] < high[0]


def test_iqm_is_the_mean_of_the_middle_half_and_the_callers_rng_is_untouched():
    np.random.seed(123)
    expected = np.random.rand()
    np.random.seed(123)
    estimates = interval_estimates(np.arange(1.0, 9.0)[:, None], reps=50)
    assert estimates["IQM"].point == 4.5 and estimates["mean"].point == 4.5 and estimates["median"].point == 4.5
    assert np.random.rand() == expected
    assert interval_estimates(SCORES, reps=50, seed=1) == interval_estimates(SCORES, reps=50, seed=1)


def test_iqm_curve_equals_rliables_sample_efficiency_recipe():
    values = np.random.RandomState(1).normal(size=(6, 9)).cumsum(axis=1)
    points, intervals = iqm_curve(values, reps=100, seed=3)
    # rliable's README: IQM frame by frame over a (runs, tasks, frames) array.
    expected_points, expected_intervals = _rliable(
        lambda s: np.array([metrics.aggregate_iqm(s[..., i]) for i in range(s.shape[-1])]),
        values[:, None, :],
        reps=100,
        seed=3,
    )
    np.testing.assert_allclose(points, expected_points, rtol=1e-12)
    np.testing.assert_allclose(intervals, expected_intervals, rtol=1e-12)


def test_score_distribution_equals_rliables():
    scores, taus = np.random.RandomState(2).rand(5, 3), np.linspace(0, 1, 11)
    np.testing.assert_array_equal(score_distribution(scores, taus), rly.score_distributions(scores, taus))


def test_final_score_is_the_mean_over_the_last_fraction_of_steps():
    records = [{"global_step": 100 * i, "charts/episodic_return": float(i)} for i in range(1, 11)] + [
        {"global_step": 1100}
    ]
    run = Run(Path("r"), {}, records)  # the last iteration ended no episode
    assert final_score(run, "charts/episodic_return", 0.2) == 9.5  # steps 900 and 1000 (>= 880)
    assert final_score(run, "charts/episodic_return", 1.0) == 5.5
    assert final_score(run, "charts/episodic_return", 0.01) == 10.0  # none in the window: the last value


def test_runs_are_grouped_by_config_and_a_folder_stands_for_its_runs(root):
    stats = collect([root, root / "lr-2" / "s1"], reps=20)  # a run named twice counts once
    assert [(s.env_id, s.config, s.seeds) for s in stats] == [
        ("CartPole-v1", "learning_rate=0.001", [1]),
        ("CartPole-v1", "learning_rate=0.01", [1, 2]),
    ]
    assert [run.path.name for run in stats[1].runs] == ["s1", "s2"]
    assert all(s.steps == 512 and np.isfinite(s.scores).all() for s in stats)
    assert [s.config for s in collect([root / "lr-2"], reps=20)] == ["only config"]


def test_a_run_written_before_a_field_was_added_groups_with_a_newer_run_of_its_settings(root, tmp_path):
    """An older folder lacks the fields added since (FIELDS_ADDED): it trained with their defaults,
    so it is the same config as a newer run, not a group of its own."""
    runs = tmp_path / "runs"
    shutil.copytree(root / "lr-2", runs)
    config = runs / "s1" / "config.yaml"
    text = config.read_text()
    older = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("  precision:"))
    assert older != text
    config.write_text(older)
    assert [(s.config, s.seeds) for s in collect([runs], reps=10)] == [("only config", [1, 2])]


def test_the_steps_column_spans_runs_that_ended_apart():
    def runs(*ends: int) -> list[Run]:
        return [Run(Path(f"s{i}"), {"run.seed": i}, [{"global_step": end}]) for i, end in enumerate(ends)]

    estimates = {name: Estimate(1.0, 0.5, 1.5) for name in ("IQM", "mean", "median")}
    assert GroupStats("e", "c", runs(512, 512), np.zeros(2), estimates).step_range == "512"
    stopped = GroupStats("e", "c", runs(14336, 26624, 20480), np.zeros(3), estimates)  # seeds ended at --stop-return
    assert stopped.steps == 14336 and stopped.step_range == "14336-26624"
    assert "| 3 | 14336-26624 |" in markdown_table([stopped], "") and ",14336-26624," in csv_table([stopped])


def _stats(env: str, config: str, scores: list[float]) -> GroupStats:
    runs = [
        Run(Path(f"{env}-{seed}"), {"run.seed": seed}, [{"global_step": 1000}]) for seed in range(1, len(scores) + 1)
    ]
    estimates = {"IQM": Estimate(1.0, 0.5, 1.5), "mean": Estimate(2.0, 1.25, 2.75), "median": Estimate(3.0, 2.0, 4.125)}
    return GroupStats(env, config, runs, np.array(scores), estimates)


def test_markdown_and_csv_tables():
    stats = [_stats("CartPole-v1", "learning_rate=0.01", [1.0, 2.0, 3.0])]
    assert markdown_table(stats, "Caption.").splitlines() == [
        "Caption.",
        "",
        "| env | config | seeds | steps | IQM [95% CI] | mean [95% CI] | median [95% CI] |",
        "|---|---|--:|--:|--:|--:|--:|",
        "| CartPole-v1 | learning_rate=0.01 | 3 | 1000 | 1.00 [0.50, 1.50] | 2.00 [1.25, 2.75] | 3.00 [2.00, 4.12] |",
        "",
        "Note: CartPole-v1, learning_rate=0.01: 3 runs, fewer than 5 runs: the interval is not to be trusted.",
    ]
    rows = list(csv.DictReader(io.StringIO(csv_table(stats))))
    assert rows == [
        {"env": "CartPole-v1", "config": "learning_rate=0.01", "seeds": "1 2 3", "steps": "1000",
         "iqm": "1.0", "iqm_low": "0.5", "iqm_high": "1.5", "mean": "2.0", "mean_low": "1.25", "mean_high": "2.75",
         "median": "3.0", "median_low": "2.0", "median_high": "4.125"}
    ]  # fmt: skip


def test_only_groups_of_fewer_than_five_runs_are_noted_as_untrusted():
    table = markdown_table([_stats("A", "x", [1.0] * 4), _stats("A", "y", [1.0] * 5), _stats("B", "x", [1.0])], "")
    assert [line for line in table.splitlines() if line.startswith("Note:")] == [
        "Note: A, x: 4 runs, fewer than 5 runs: the interval is not to be trusted.",
        "Note: B, x: 1 run, fewer than 5 runs: the interval is not to be trusted.",
    ]
    assert "Note:" not in markdown_table([_stats("A", "y", [1.0] * 5)], "")


def test_profile_scores_are_normalised_per_env():
    stats = [_stats("A", "x", [0.0, 5.0, 10.0]), _stats("B", "x", [100.0, 300.0]), _stats("B", "y", [200.0, 200.0])]
    minmax = normalized_profiles(stats, None)
    # Each env gives as many runs as the env with the fewest (B: 2), lowest seeds first.
    np.testing.assert_allclose(minmax["x (2 runs x 2 envs)"], [[0.0, 0.0], [0.5, 1.0]])
    np.testing.assert_allclose(minmax["y (2 runs x 1 env)"], [[0.5], [0.5]])
    given = normalized_profiles(stats, {"A": (0.0, 20.0), "B": (0.0, 400.0)})
    np.testing.assert_allclose(given["x (2 runs x 2 envs)"], [[0.0, 0.25], [0.25, 0.75]])


def test_report_cli_writes_the_tables_and_figures(root, tmp_path, capsys):
    references = tmp_path / "refs.yaml"
    references.write_text("CartPole-v1: [9.4, 500]\n")
    out = tmp_path / "report"
    assert main(["report", str(root), "--out", str(out), "--reps", "20", "--normalize", str(references)]) == 0
    printed = capsys.readouterr().out
    table = (out / "report.md").read_text()
    assert (
        table in printed
        and "| CartPole-v1 | learning_rate=0.01 | 2 | 512 |" in table
        and "| CartPole-v1 | learning_rate=0.001 | 1 | 512 |" in table
    )
    assert len((out / "report.csv").read_text().splitlines()) == 3
    for figure in ("curves.png", "profile.png"):
        assert str(out / figure) in printed
        assert mpimg.imread(str(out / figure)).shape[0] > 300


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "does not exist: give a run directory (metrics.jsonl and config.yaml in it) or a folder of runs"),
        ("no_runs", "is neither a run directory nor a folder of runs"),
        ("no_episodes", "logged no charts/episodic_return"),
        ("window", "--final-window 1.5 is not a fraction"),
        ("smooth", "--smooth must be >= 1 (1: the raw curves), got 0"),
        ("bootstrap_seed", "--bootstrap-seed must be in [0, 4294967295]"),
        ("references", "has no reference scores for CartPole-v1"),
        ("no_extra", "needs the 'stats' extra"),
    ],
)
def test_bad_input_is_one_line(root, tmp_path, capsys, monkeypatch, case, message):
    target, extra = root, []
    if case == "missing":
        target = tmp_path / "nowhere"
    elif case == "no_runs":
        target = tmp_path
    elif case == "no_episodes":
        target = tmp_path / "run"
        target.mkdir()
        (target / "config.yaml").write_text((root / "lr-2" / "s1" / "config.yaml").read_text())
        (target / "metrics.jsonl").write_text('{"global_step": 256, "charts/SPS": 1000.0}\n')
    elif case == "window":
        extra = ["--final-window", "1.5"]
    elif case == "smooth":
        extra = ["--smooth", "0"]
    elif case == "bootstrap_seed":
        extra = ["--bootstrap-seed", "-1"]
    elif case == "references":
        (tmp_path / "refs.yaml").write_text("Acrobot-v1: [-500, -100]\n")
        extra = ["--normalize", str(tmp_path / "refs.yaml")]
    else:
        monkeypatch.setitem(sys.modules, "rliable", None)  # import rliable now raises ImportError
    assert main(["report", str(target), "--out", str(tmp_path / "out"), "--reps", "10", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def _cut_at_line(text: str, start: str) -> str:
    return text[: text.index(f"\n{start}") + 1]


@pytest.mark.parametrize(
    "cut, message",
    [
        (lambda text: _cut_at_line(text, "multi_agent:"), "config.yaml is cut short (its end marker '...' is missing)"),
        (
            lambda text: text[: text.index("collective_timeout: ") + len("collective_timeout: ") + 1],
            "config.yaml is cut short (its end marker '...' is missing)",
        ),
        (
            lambda text: _cut_at_line(text.removeprefix("---\n"), "  stop_window:"),
            "the config lacks run.stop_window, run.collective_timeout",
        ),  # no markers: as before them
    ],
    ids=["at a section", "in the last value", "unmarked"],
)
def test_a_config_cut_short_is_one_line_not_a_group_of_its_own(root, tmp_path, capsys, cut, message):
    """What is left still parses as YAML; grouped by it, the run would be an experiment of its own."""
    runs = tmp_path / "runs"
    shutil.copytree(root / "lr-2", runs)
    config = runs / "s2" / "config.yaml"
    config.write_text(cut(config.read_text()))
    assert main(["report", str(runs), "--out", str(tmp_path / "out"), "--reps", "10"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"fastppo: error: cannot read the config of {runs / 's2'}: {message}"
    ]
    assert not (tmp_path / "out").exists()


def test_curves_draw_each_config_on_the_steps_its_runs_cover(tmp_path, monkeypatch):
    """A config whose runs stopped early (a pruned sweep trial) or logged once shares a panel with
    full-length ones: each is drawn on its own steps."""
    from rliable import plot_utils

    from fastppo.experiments.report_figures import plot_curves

    drawn = {}
    draw = plot_utils.plot_sample_efficiency_curve
    monkeypatch.setattr(
        plot_utils,
        "plot_sample_efficiency_curve",
        lambda frames, points, *a, **k: drawn.update({next(iter(points)): frames}) or draw(frames, points, *a, **k),
    )
    full = [Run(Path("a"), {}, [{"global_step": s, "charts/episodic_return": float(s)} for s in range(100, 1001, 100)])]
    short = [Run(Path("b"), {}, [{"global_step": s, "charts/episodic_return": float(s)} for s in range(100, 401, 100)])]
    once = [Run(Path("c"), {}, [{"global_step": 100, "charts/episodic_return": 1.0}])]
    estimate = {name: Estimate(0.0, 0.0, 0.0) for name in ("IQM", "mean", "median")}
    stats = [
        GroupStats("CartPole-v1", name, runs, np.zeros(1), estimate)
        for name, runs in (("full", full), ("short", short), ("once", once))
    ]
    assert plot_curves(stats, "charts/episodic_return", tmp_path / "curves.png", smooth=1, reps=10).exists()
    assert [(frames[0], frames[-1], len(frames)) for frames in drawn.values()] == [
        (100, 1000, 300),
        (100, 400, 300),
        (100, 100, 1),
    ]


def test_a_seed_found_in_two_folders_is_refused_with_both_named(root, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(root / "lr-2" / "s1", copy)  # the same command run twice: one seed, two folders
    assert main(["report", str(root), str(copy), "--out", str(tmp_path / "out"), "--reps", "10"]) == 2
    err = capsys.readouterr().err.strip()
    first = (root / "lr-2" / "s1").resolve()
    assert err == (
        f"fastppo: error: seed 1 of one CartPole-v1 config was found twice, in {first} and {copy.resolve()}: "
        "a seed counts once: leave one of the two folders out of the report"
    )
    assert not (tmp_path / "out").exists()
    # The same run reached twice (itself, through its parent, through a link) counts once.
    (tmp_path / "link").symlink_to(root / "lr-2")
    stats = collect([root / "lr-2", root / "lr-2" / "s2", tmp_path / "link"], reps=10)
    assert [s.seeds for s in stats] == [[1, 2]]


def test_a_folder_that_is_a_run_and_a_folder_of_runs_is_refused(root, tmp_path, capsys):
    both = tmp_path / "both"
    shutil.copytree(root / "lr-2" / "s1", both)  # a single run, then --seeds into the same folder
    shutil.copytree(root / "lr-2" / "s2", both / "seed_2")
    for target in (both, tmp_path):
        assert main(["report", str(target), "--out", str(tmp_path / "out"), "--reps", "10"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"fastppo: error: {both.resolve()} is a run and a folder of runs at once (seed_2 inside it): move "
            "the run or the runs inside it into a folder of its own"
        )


def _files(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("target", ["lr-2/s1", "seeds"])
def test_a_report_into_a_run_folder_is_refused_and_writes_nothing(root, tmp_path, capsys, target):
    """--out a run's folder (or a --seeds job's) would mix report.md and its figures with the
    run's files: one line, exit 2, the folder byte for byte as it was."""
    (tmp_path / "seeds").mkdir()
    shutil.copytree(root / "lr-2" / "s1", tmp_path / "seeds" / "seed_1")
    shutil.copytree(root / "lr-2" / "s1", tmp_path / "lr-2" / "s1")
    out = tmp_path / target
    before = _files(out)
    assert main(["report", str(root), "--out", str(out), "--reps", "10"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"fastppo: error: --out {out} is a run's folder "
        f"({'config.yaml, metrics.jsonl, agent.json, ...' if target != 'seeds' else 'seed_1/'}): give --out a "
        "folder of its own"
    ]
    assert _files(out) == before

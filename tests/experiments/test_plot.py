"""fastppo plot: seeds of one experiment grouped, diagnostics panel, clear errors."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.figure
import matplotlib.image as mpimg
import numpy as np
import pytest

import fastppo
from fastppo.cli.main import main
from fastppo.experiments.plot import group_runs, read_run
from fastppo.games.ratings import START_RATING, ordinal


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("plot")
    dirs = []
    for seed, lr in ((1, 1e-3), (2, 1e-3), (1, 3e-4)):
        run = root / f"lr{lr}_s{seed}"
        fastppo.train(
            "CartPole-v1",
            run_dir=run,
            total_timesteps=2048,
            seed=seed,
            learning_rate=lr,
            progress=False,
            tensorboard=False,
        )
        dirs.append(run)
    return dirs


def test_seeds_of_one_config_are_grouped(runs):
    groups = group_runs([read_run(r) for r in runs])
    assert [[r.path for r in g] for g in groups] == [runs[:2], runs[2:]]


def test_plot_cli_writes_a_png(runs, tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert main(["plot", *map(str, runs), "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    image = mpimg.imread(str(out))
    assert image.shape[0] > 500 and image.shape[1] > 1000


def test_plot_of_one_run_defaults_into_it(runs):
    assert main(["plot", str(runs[0])]) == 0
    assert (runs[0] / "plot.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    "setup, message",
    [
        ("missing", "does not exist: give a run directory (metrics.jsonl and config.yaml in it) or a folder of runs"),
        ("empty", "is neither a run directory nor a folder of runs"),
        ("no_config", "is not a fastppo run: agent.json is missing"),  # config.yaml, else the agent's copy
        ("no_metrics", "holds no metrics"),
        ("smooth", "--smooth must be >= 1 (1: the raw curves), got -3"),
    ],
)
def test_plot_errors_are_one_line(tmp_path, capsys, runs, setup, message):
    target = tmp_path / "x"
    if setup != "missing":
        target.mkdir()
    if setup == "no_config":
        (target / "metrics.jsonl").write_text((runs[0] / "metrics.jsonl").read_text())
    if setup == "no_metrics":
        (target / "config.yaml").write_text((runs[0] / "config.yaml").read_text())
        (target / "metrics.jsonl").write_text("")
    if setup == "smooth":
        target = runs[0]
    assert main(["plot", str(target), *(["--smooth", "-3"] if setup == "smooth" else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_plot_without_matplotlib_is_one_line(runs, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    assert main(["plot", str(runs[0])]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "fastppo: error: fastppo plot needs matplotlib: pip install 'fastppo[plot]'"
    ]


def test_a_last_line_cut_short_by_a_kill_is_skipped(runs, tmp_path):
    run = tmp_path / "killed"
    run.mkdir()
    (run / "config.yaml").write_text((runs[0] / "config.yaml").read_text())
    whole = (runs[0] / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(whole + '{"global_step": 99999, "charts/epi')
    assert read_run(run).records == read_run(runs[0]).records


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda lines: [lines[0], b'{"global_step": 3, "charts/epi', *lines[1:]],
            "metrics.jsonl line 2 is not JSON: the file is damaged",
        ),
        (
            lambda lines: [*lines[:2], b"\xff\xfe", *lines[2:]],
            "metrics.jsonl line 3 is not UTF-8 text: the file is damaged",
        ),
        (
            lambda lines: [b"[1]", *lines],
            "metrics.jsonl line 1 is not a metrics record (a JSON object with a numeric global_step)",
        ),
        (
            lambda lines: [lines[0], b'{"global_step": 3, "charts/SPS": "fast"}', *lines[1:]],
            "metrics.jsonl line 2: charts/SPS is 'fast', not a number",
        ),
    ],
)
def test_a_damaged_metrics_line_is_named_by_its_number(runs, tmp_path, capsys, damage, message):
    run = tmp_path / "damaged"
    run.mkdir()
    (run / "config.yaml").write_text((runs[0] / "config.yaml").read_text())
    lines = (runs[0] / "metrics.jsonl").read_bytes().splitlines()
    (run / "metrics.jsonl").write_bytes(b"\n".join(damage(lines)) + b"\n")
    for command in (
        ["plot", str(run), "--out", str(tmp_path / "p.png")],
        ["report", str(run), "--out", str(tmp_path / "report")],
    ):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert (
            err.startswith(f"fastppo: error: {run / message.split(' ', 1)[0]} {message.split(' ', 1)[1]}")
            and len(err.splitlines()) == 1
        ), err
    assert not (tmp_path / "p.png").exists()


@pytest.mark.games
def test_a_self_play_run_plots_its_ratings_beside_the_return(tmp_path, monkeypatch):
    run = tmp_path / "ttt"
    fastppo.train(
        "pz:pettingzoo.classic.tictactoe_v3", run_dir=run, total_timesteps=6144, num_envs=4, num_steps=64,
        progress=False, tensorboard=False, **{"self_play.pool_size": 2, "self_play.snapshot_every": 2},
    )  # fmt: skip
    assert read_run(run).ratings[0] == "ratings/learner"
    import matplotlib.figure

    titles = []
    monkeypatch.setattr(
        matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: titles.extend(ax.get_title() for ax in fig.axes)
    )
    assert main(["plot", str(run), "--out", str(tmp_path / "p.png")]) == 0
    assert "openskill rating (mu - 3 sigma)" in titles


@pytest.mark.games
def test_an_openspiel_run_plots_its_exploitability_beside_the_return(tmp_path, monkeypatch):
    run = tmp_path / "kuhn"
    agent = fastppo.train(
        "openspiel:kuhn_poker", run_dir=run, total_timesteps=1024, num_envs=4, num_steps=64, progress=False,
        tensorboard=False, **{"self_play.exploitability_every": 1, "self_play.pool_size": 2},
    )  # fmt: skip
    import matplotlib.figure

    drawn = {}
    monkeypatch.setattr(
        matplotlib.figure.Figure,
        "savefig",
        lambda fig, *a, **k: drawn.update({ax.get_title(): [line.get_ydata() for line in ax.lines] for ax in fig.axes}),
    )
    assert main(["plot", str(run), "--out", str(tmp_path / "p.png")]) == 0
    logged = [row["eval/exploitability"] for row in agent.history]
    assert "openskill rating (mu - 3 sigma)" in drawn  # a pool's ratings, and beside them:
    [line] = drawn["exploitability (OpenSpiel's, per game)"]  # the logged figures, unsmoothed, first to last
    assert line[0] == pytest.approx(logged[0]) and line[-1] == pytest.approx(logged[-1]) and len(logged) == 4


@pytest.mark.games
def test_a_run_against_fixed_players_plots_its_anchored_ratings_and_win_rates(tmp_path, monkeypatch):
    """Ratings: the learner's moves, each fixed player's stays at its start (the anchor); win
    rates: the evaluation games' against random, as logged, and the curriculum's games' against
    minimax (never won)."""
    run = tmp_path / "ttt"
    agent = fastppo.train(
        "pz:pettingzoo.classic.tictactoe_v3", run_dir=run, total_timesteps=1024, num_envs=4, num_steps=64,
        progress=False, tensorboard=False,
        **{"self_play.fixed_opponents": "minimax", "self_play.fixed_share": 0.5, "self_play.eval_every": 1,
           "self_play.eval_games": 4},
    )  # fmt: skip
    drawn: dict[str, dict[str, np.ndarray]] = {}
    monkeypatch.setattr(
        matplotlib.figure.Figure,
        "savefig",
        lambda fig, *a, **k: drawn.update(
            {ax.get_title(): {line.get_label(): line.get_ydata() for line in ax.lines} for ax in fig.axes}
        ),
    )
    assert main(["plot", str(run), "--out", str(tmp_path / "p.png"), "--smooth", "1"]) == 0
    ratings, wins = drawn["openskill rating (mu - 3 sigma)"], drawn["win rate against each fixed player"]
    (minimax,) = (line for label, line in ratings.items() if label.endswith(": minimax"))
    (learner,) = (line for label, line in ratings.items() if label.endswith(": learner"))
    assert np.all(minimax == ordinal(START_RATING)) and np.ptp(learner) > 0
    (random,) = (line for label, line in wins.items() if label.endswith(": random (evaluation)"))
    logged = [row["eval/random/win_rate"] for row in agent.history]
    assert random[0] == pytest.approx(logged[0]) and random[-1] == pytest.approx(logged[-1])
    (curriculum,) = (line for label, line in wins.items() if label.endswith(": minimax (training games)"))
    assert np.all(curriculum == 0.0)

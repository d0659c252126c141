"""The benchmark scripts' ``--plot`` images: drawn from the rows they measured, titled with the
machine and date, and the published-table chart drawn from the very figures the Benchmarks page
records (so the committed image and the page's table cannot disagree unnoticed)."""

from __future__ import annotations

import importlib
from datetime import date

import pytest

from tests.support.paths import ROOT

BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture
def benchmark(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module


def test_the_published_chart_reads_the_pages_table(benchmark):
    scores, recorded = benchmark("published_table").recorded_scores()
    assert recorded == (
        "AMD EPYC, 2 cores, no GPU, torch 2.13.0+cpu, 2026-11-23/25; Ant-v4 2026-11-28; Humanoid-v4 2026-11-28/29"
    )
    assert list(scores) == [
        "CartPole-v1",
        "Acrobot-v1",
        "LunarLander-v3",
        "Pendulum-v1",
        "HalfCheetah-v4",
        "Hopper-v4",
        "Walker2d-v4",
        "Ant-v4",
        "Humanoid-v4",
    ]
    assert scores["Walker2d-v4"] == (3844.6, 3416.6, 4292.5, 3853.7)
    assert scores["Acrobot-v1"] == (-84.6, -85.6, -83.6, -84.7)


@pytest.mark.parametrize(
    ("script", "draw", "where"),
    [
        (
            "seed_stack",
            lambda module, path: module.plot_width_rows(
                {"fastppo's CartPole-v1 preset": [2e-5, 9e-6, 5e-6]}, [1, 8, 64], 8192, "cpu", path
            ),
            None,
        ),
        (
            "sb3_compare",
            lambda module, path: module.plot_rows(
                {"CartPole-v1": (10_000.0, 5_000.0)},
                {"warm process": {"SB3 rl-zoo": [6.0], "fastppo sync": [1.5], "fastppo tensor": [float("inf")]}},
                [1],
                path,
            ),
            None,
        ),
        (
            "published_table",
            lambda module, path: module.plot_scores(module.recorded_scores()[0], path, "a machine, a day"),
            "recorded figures measured on a machine, a day; drawn ",
        ),
    ],
)
def test_a_plot_is_a_small_png_titled_with_where_and_when(script, draw, where, benchmark, tmp_path, monkeypatch):
    module, common = benchmark(script), benchmark("common")
    titles = []

    def save(fig, path, title, recorded=None):
        common.save_figure(fig, path, title, recorded)
        titles.append(fig.get_suptitle())

    monkeypatch.setattr(module, "save_figure", save)
    path = tmp_path / "plot.png"
    draw(module, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size < 150_000
    assert titles[0].splitlines()[-1] == (where or f"{common.machine()}, ") + date.today().isoformat()

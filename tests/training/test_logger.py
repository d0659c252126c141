"""RunLogger: history, metrics.jsonl, and a progress line that keeps the last known figures and
fits 80 columns."""

from __future__ import annotations

import io
import json
import re

from rich.console import Console

from fastppo.training.logger import RunLogger


def test_history_jsonl_and_progress_keep_the_last_return(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")  # wide enough for every figure
    logger = RunLogger(tmp_path, total_steps=200, tensorboard=False, progress=True)
    logger.log(
        100, {"charts/SPS": 10.0, "charts/episodic_return": 42.0, "losses/approx_kl": 0.01, "losses/clipfrac": 0.1}
    )
    logger.log(200, {"charts/SPS": 11.0, "losses/approx_kl": 0.02, "losses/clipfrac": 0.2})  # no episode ended
    stats = logger._progress.tasks[0].fields["stats"]
    logger.close()
    assert stats == "SPS 11 | return 42.0 | kl 0.0200 | clip 0.200"
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in rows] == [100, 200] and "charts/episodic_return" not in rows[1]
    assert [r["global_step"] for r in logger.history] == [100, 200]


def test_the_progress_line_fits_80_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # what rich assumes when stderr is piped
    logger = RunLogger(None, total_steps=10_000_000, tensorboard=False, progress=True)
    logger.log(
        5_120_000,
        {
            "charts/SPS": 41234.0,
            "charts/episodic_return": -1234.5,
            "losses/approx_kl": 0.0123,
            "losses/clipfrac": 0.123,
        },
    )
    console = Console(width=80, file=io.StringIO())
    console.print(logger._progress.get_renderable())
    logger.close()
    (line,) = console.file.getvalue().splitlines()
    assert "…" not in line, line
    # steps, SPS, return, elapsed and ETA whole; kl and clip give way first
    assert re.search(r" 5\.12M/10M SPS 41234 \| return -1234\.5 \d:\d\d:\d\d eta (\d:\d\d:\d\d|-:--:--)$", line), line


def test_a_long_warning_is_one_line_when_piped(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    logger = RunLogger(None, total_steps=100, tensorboard=False, progress=False)
    warning = (
        "approx_kl above 0.05 for 3 iterations: the policy moves too far per update; lower --learning-rate or set "
        "--target-kl 0.02"
    )
    logger.message(f"[yellow]warning:[/] {warning}")
    assert capsys.readouterr().err == f"warning: {warning}\n"

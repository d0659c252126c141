"""RunLogger: history, metrics.jsonl, and a progress line that keeps the last known figures."""

from __future__ import annotations

import json

from fastppo.logger import RunLogger


def test_history_jsonl_and_progress_keep_the_last_return(tmp_path):
    logger = RunLogger(tmp_path, total_steps=200, tensorboard=False, progress=True)
    logger.log(100, {"charts/SPS": 10.0, "charts/episodic_return": 42.0, "losses/approx_kl": 0.01, "losses/clipfrac": 0.1})
    logger.log(200, {"charts/SPS": 11.0, "losses/approx_kl": 0.02, "losses/clipfrac": 0.2})  # no episode ended
    stats = logger._progress.tasks[0].fields["stats"]
    logger.close()
    assert stats == "SPS 11 | return 42.0 | kl 0.0200 | clip 0.200"
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in rows] == [100, 200] and "charts/episodic_return" not in rows[1]
    assert [r["global_step"] for r in logger.history] == [100, 200]

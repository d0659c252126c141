"""Multi-agent runs as users read and deploy them: each agent group's return reported apart
(a competitive env's sum means nothing), a headline only for a team or a named group, and
``agent.act`` on PettingZoo's own observations (tests/fake_pz_teams.py, tests/fake_pz_envs.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import fastppo
from fastppo.cli import main
from fastppo.evaluation import agent_rows_env
from fastppo.envs.pettingzoo_vec import make_parallel_env
from fastppo.trainer import progress_summary

CHASE = "pz:tests.fake_pz_teams"
RELAY = "pz:tests.fake_pz_envs"
TINY = ["--num-envs", "2", "--num-steps", "8", "--num-minibatches", "2", "--update-epochs", "1", "--no-progress", "--no-tensorboard"]
README = Path(__file__).parent.parent / "README.md"


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_competitive_run_logs_each_groups_return_and_no_team_sum(tmp_path, capsys):
    """Chase: adversaries +t, agent -t at step t of 3: adversary 2 x 6 = 12, agent -6 exactly;
    their sum (6) stands for nothing and is not logged."""
    run = tmp_path / "run"
    assert main(["train", CHASE, *TINY, "--total-timesteps", "32", "--run-dir", str(run)]) == 0
    logged = [r for r in records(run) if r["charts/episodes"]]
    assert len(logged) == 2 and all(r["charts/episodes"] == 4 for r in logged)  # 16 steps of 2 copies: 4 episodes of 3 + reset rows
    for r in logged:
        assert "charts/episodic_return" not in r
        assert (r["charts/episodic_return/adversary"], r["charts/episodic_return/agent"]) == (12.0, -6.0)
        assert (r["charts/agent_return/adversary_0"], r["charts/agent_return/agent_0"], r["charts/episodic_length"]) == (6.0, -6.0, 3.0)
    assert "mean returns over the last 8 episodes: adversary 12.0, agent -6.0" in capsys.readouterr().out
    assert main(["eval", str(run), "--episodes", "2", "--env-id", CHASE]) == 0
    assert "returns adversary 12.0 ± 0.0, agent -6.0 ± 0.0, length 3.0 ± 0.0 over 2 episodes" in capsys.readouterr().out
    assert main(["eval", str(run), "--episodes", "2", "--env-id", CHASE, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["mean_return"], result["mean_group_returns"], result["episodes"]) == (None, {"adversary": 12.0, "agent": -6.0}, 2)
    # plot draws each group's curve; report names the metric to pick
    assert main(["plot", str(run), "--out", str(tmp_path / "plot.png")]) == 0 and (tmp_path / "plot.png").stat().st_size > 0
    capsys.readouterr()
    pytest.importorskip("rliable")
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "--metric charts/episodic_return/adversary" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("headline", "expected"), [("team", 6.0), ("adversary", 12.0), ("agent", -6.0)])
def test_the_headline_is_the_team_sum_or_the_group_named(tmp_path, capsys, headline, expected):
    run = tmp_path / "run"
    assert main(["train", CHASE, *TINY, "--total-timesteps", "16", "--multi-agent.headline", headline, "--run-dir", str(run)]) == 0
    (record,) = records(run)
    assert record["charts/episodic_return"] == expected and record["charts/episodic_return/adversary"] == 12.0
    assert main(["eval", str(run), "--episodes", "2", "--env-id", CHASE]) == 0
    assert f"return {expected:.1f} ± 0.0 (adversary 12.0 ± 0.0, agent -6.0 ± 0.0)" in capsys.readouterr().out


def test_a_team_of_one_group_keeps_its_sum_as_headline(tmp_path):
    """Relay's agent_0..2 are one group: the headline is their sum, equal to the group's."""
    run = tmp_path / "run"
    assert main(["train", RELAY, *TINY, "--total-timesteps", "32", "--run-dir", str(run)]) == 0
    record = records(run)[-1]
    assert record["charts/episodic_return"] == record["charts/episodic_return/agent"]
    assert record["charts/episodic_return"] == pytest.approx(sum(record[f"charts/agent_return/agent_{i}"] for i in range(3)))


@pytest.mark.parametrize(("headline", "stop", "stopped_at"), [("adversary", "12", 16), ("adversary", "12.5", None), ("agent", "6", None), ("team", "6", 16)])
def test_stop_return_reads_the_named_groups_mean(tmp_path, capsys, headline, stop, stopped_at):
    """The adversaries' mean is 12 from the first iteration on, the agent's -6, the team's 6: a
    run stops on the group it names, never on another's or the sum's."""
    run = tmp_path / "run"
    argv = ["train", CHASE, *TINY, "--total-timesteps", "48", "--stop-return", stop, "--stop-window", "2", "--multi-agent.headline", headline, "--run-dir", str(run)]
    assert main(argv) == 0
    out = "".join(capsys.readouterr())
    assert records(run)[-1]["global_step"] == (stopped_at or 48)
    assert (f"reached --run.stop-return {float(stop):g} at step {stopped_at}: stopped" in out) == (stopped_at is not None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stop-return", "10"], "name the one it reads, e.g. --multi-agent.headline adversary"),
        (["--multi-agent.headline", "prey"], "--multi-agent.headline prey is no group of this env's agents (adversary, agent)"),
    ],
)
def test_a_headline_that_cannot_be_read_is_one_line(tmp_path, capsys, argv, message):
    assert main(["train", CHASE, *TINY, "--total-timesteps", "16", *argv, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_the_progress_bar_shows_each_groups_return():
    config = fastppo.make_config(CHASE, "cleanrl-discrete", {})
    envs = agent_rows_env_for(config)
    assert [label for label, _, _ in progress_summary(envs.spaces)] == ["SPS", "adversary", "agent", "kl", "clip"]
    envs.close()
    config.multi_agent.headline = "team"
    envs = agent_rows_env_for(config)
    assert [label for label, _, _ in progress_summary(envs.spaces)] == ["SPS", "return", "adversary", "agent", "kl", "clip"]
    envs.close()


def agent_rows_env_for(config):
    from fastppo.envs import make_vec_env

    return make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)

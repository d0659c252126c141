"""A curriculum against fixed players (fastppo.games.curriculum): the share of training games
against them and its linear schedule, the fixed player's own moves on the game and its whole
history, results and anchored ratings logged per player, exact resume, bad input in one line."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

import fastppo
from fastppo.agents.agent import build_agent
from fastppo.cli.main import main
from fastppo.envs import make_vec_env
from fastppo.games.curriculum import FIXED
from fastppo.games.league import LATEST, League, make_league
from fastppo.games.ratings import START_RATING, ordinal
from fastppo.training.resume import resume_config
from fastppo.training.trainer import train
from tests.support.resume import ITERATIONS, assert_same_run, stop_after

pytestmark = pytest.mark.games

TICTACTOE = "pz:pettingzoo.classic.tictactoe_v3"
RUN = {"num_envs": 2, "num_minibatches": 2, "update_epochs": 2, "progress": False, "tensorboard": False}


def league_on(copies: int, **self_play) -> tuple[League, object]:
    """A league on ``copies`` tic-tac-toe envs, as a run builds it (8 iterations of 8 steps)."""
    overrides = {"num_envs": copies, "num_steps": 8, "total_timesteps": 8 * 8 * copies}
    overrides |= {f"self_play.{k}": v for k, v in self_play.items()}
    config = fastppo.make_config(TICTACTOE, "cleanrl-discrete", overrides)
    envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
    torch.manual_seed(0)
    agent = build_agent(
        config, envs.single_observation_space, envs.single_action_space, torch.device("cpu"), envs.layout
    )
    league = make_league(config, envs, agent, seed=0)
    assert isinstance(league, League)
    return league, envs


def test_the_share_of_games_against_fixed_players_falls_linearly_to_0():
    league, _ = league_on(1, fixed_opponents="random,minimax", fixed_share=0.8, fixed_schedule="linear")
    assert league.fixed is not None and league.fixed.num_iterations == 8
    assert [league.fixed.share(i) for i in (1, 5, 8)] == pytest.approx([0.8, 0.4, 0.1])  # 0.8 (1 - (i - 1) / 8)
    drawn = Counter()
    for iteration, games in ((0, 800), (4, 800)):
        league.iteration = iteration  # the games of iteration + 1
        for _ in range(games):
            league.new_game(0)
            drawn[iteration, int(league.opponent[0])] += 1
    assert drawn[0, FIXED] + drawn[0, FIXED - 1] == pytest.approx(640, abs=50)  # 80% of 800
    assert drawn[0, FIXED] == pytest.approx(drawn[0, FIXED - 1], abs=60)  # each player alike
    assert drawn[4, FIXED] + drawn[4, FIXED - 1] == pytest.approx(320, abs=50)  # 40%
    assert drawn[0, LATEST] + drawn[4, LATEST] == 1600 - sum(v for (_, o), v in drawn.items() if o <= FIXED)


def test_a_fixed_player_plays_its_seat_from_the_game_and_its_history_and_anchors_the_rating():
    """minimax (perfect play, reading the history) against a learner that plays at random: the
    learner never wins; its results are logged against minimax, its rating falls, and minimax's
    rating stays where it started."""
    league, envs = league_on(4, fixed_opponents="minimax", fixed_share=1.0)
    step = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(60):
        legal = step.action_mask.numpy()
        step = envs.step(torch.as_tensor([rng.choice(np.flatnonzero(m)) if m.any() else 0 for m in legal]))
        assert set(league.opponent.tolist()) == {FIXED}
    metrics = league.after_update(1)
    assert metrics["self_play/win_vs_minimax"] == 0.0
    assert metrics["self_play/draw_vs_minimax"] + metrics["self_play/loss_vs_minimax"] == pytest.approx(1.0)
    assert metrics["self_play/loss_vs_minimax"] > 0.5 and metrics["self_play/fixed_share"] == 1.0
    assert league.ratings.fixed == {"minimax": START_RATING} and metrics["ratings/minimax"] == ordinal(START_RATING)
    assert metrics["ratings/learner"] < ordinal(START_RATING)


def test_stop_and_resume_with_a_curriculum_equals_one_go(tmp_path, monkeypatch):
    """Stopped after 3 of 6 iterations, games against fixed players in flight (minimax reading
    their histories), the falling share, the league's RNG and the game seeds must come back."""
    overrides = RUN | {
        "num_steps": 7,
        "total_timesteps": ITERATIONS * 2 * 7,
        "checkpoint_every": 0,
        "self_play.fixed_opponents": "random,minimax",
        "self_play.fixed_share": 0.9,
        "self_play.fixed_schedule": "linear",
    }
    train(fastppo.make_config(TICTACTOE, "cleanrl-discrete", overrides), tmp_path / "one_go")
    with monkeypatch.context() as patch:
        stop_after(patch, ITERATIONS // 2)
        train(fastppo.make_config(TICTACTOE, "cleanrl-discrete", overrides), tmp_path / "split")
    resumed_config, checkpoint = resume_config(tmp_path / "split")
    assert {FIXED, FIXED - 1} & set(checkpoint.meta["self_play"]["opponent"])  # a fixed player's game in flight
    train(resumed_config, tmp_path / "split", checkpoint)
    assert_same_run(tmp_path / "one_go", tmp_path / "split")
    logged = [json.loads(line) for line in (tmp_path / "one_go" / "metrics.jsonl").read_text().splitlines()]
    assert any("self_play/loss_vs_minimax" in m for m in logged[ITERATIONS // 2 :])


TINY_CLI = ["--env.num-envs", "2", "--ppo.num-steps", "8", "--ppo.total-timesteps", "32", "--run.progress", "false"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            [TICTACTOE, "--self-play.fixed-share", "0.3"],
            "--self-play.fixed-share needs fixed players to play: give --self-play.fixed-opponents",
        ),
        (
            [TICTACTOE, "--self-play.fixed-opponents", "random"],
            "--self-play.fixed-opponents are played in a share of the games: give --self-play.fixed-share",
        ),
        (
            [TICTACTOE, "--self-play.fixed-opponents", "random", "--self-play.fixed-share", "1.5"],
            "--self-play.fixed-share must be in [0, 1], got 1.5",
        ),
        (
            [TICTACTOE, "--self-play.fixed-schedule", "linear"],
            "--self-play.fixed-schedule linear schedules --self-play.fixed-share, which is 0",
        ),
        (
            [TICTACTOE, "--self-play.fixed-opponents", "random", "--self-play.fixed-share", "0.3"]
            + ["--self-play.fixed-schedule", "cosine"],
            "--self-play.fixed-schedule",
        ),
        (
            [TICTACTOE, "--self-play.fixed-opponents", "mcts:0", "--self-play.fixed-share", "0.3"],
            "--self-play.fixed-opponents mcts:0: MCTS needs 2 to 10000 simulations per move",
        ),
        (
            ["pz:pettingzoo.classic.connect_four_v3", "--self-play.fixed-opponents", "minimax"]
            + ["--self-play.fixed-share", "0.3"],
            "--self-play.fixed-opponents minimax: minimax plays pz:pettingzoo.classic.tictactoe_v3 only",
        ),
        (
            ["pz:tests.support.fake_pz_envs:race", "--env-kwargs", '{"seats": 3}']
            + ["--self-play.fixed-opponents", "random", "--self-play.fixed-share", "0.3"],
            "--self-play.fixed-opponents play one seat against the learner in the other, and this game has 3 seats",
        ),
        (
            ["pz:tests.support.fake_pz_teams", "--self-play.pool-size", "2", "--self-play.fixed-opponents", "random"]
            + ["--self-play.fixed-share", "0.3"],
            "--self-play.fixed-opponents plays games against fixed players (random, MCTS), which need a turn-based "
            "game",
        ),
    ],
    ids=[
        "share-without-players",
        "players-without-share",
        "share-above-1",
        "schedule-without-share",
        "schedule-unknown",
        "mcts-0",
        "minimax-off-tictactoe",
        "three-seats",
        "parallel-env",
    ],
)
def test_bad_curriculum_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    run = tmp_path / "run"
    assert main(["train", *argv, *TINY_CLI, "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("fastppo: error: "), err
    assert message in err, err
    assert not run.exists()


def test_a_player_class_of_yours_trains_from_the_command_line_and_resumes_only_when_named_again(tmp_path, capsys):
    run, spec = tmp_path / "run", "tests/support/fake_pz_envs.py:FirstLegal"
    mine = ["--self-play.fixed-opponents", spec]
    assert main(["train", TICTACTOE, *mine, "--self-play.fixed-share", "1", *TINY_CLI, "--run-dir", str(run)]) == 0
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(f"self_play/loss_vs_{spec}" in m for m in logged)  # every game against it
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--ppo.total-timesteps", "64"]) == 2
    err = capsys.readouterr().err
    assert (
        len(err.splitlines()) == 1
        and (
            f"plays your code '{spec}' (--self-play.fixed-opponents), and fastppo never imports code that a run folder "
            f"names: if you trust it, name it yourself: fastppo train --resume {run} --self-play.fixed-opponents {spec}"
        )
        in err
    ), err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    assert main(["train", "--resume", str(run), "--ppo.total-timesteps", "64", *mine]) == 0

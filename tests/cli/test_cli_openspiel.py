"""OpenSpiel's games from the command line: ``openspiel:<game>`` trains, is evaluated against
``mcts:N`` (perfect-information games) and played by a person in OpenSpiel's own words; what
cannot be done is one line and exit 2, with nothing written."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import fastppo
from fastppo.agents.agent import AGENT_FILES
from fastppo.cli.main import main
from fastppo.envs.openspiel_env import OpenSpielGame
from fastppo.files.checksums import write_checksums
from fastppo.files.run_folder import AGENT_FILE
from fastppo.games.matches import play_games
from fastppo.games.openspiel_games import MCTSPlayer
from fastppo.games.players import RandomPlayer

pyspiel = pytest.importorskip("pyspiel")
from open_spiel.python.algorithms import mcts  # noqa: E402

TINY = dict(total_timesteps=1024, num_envs=4, num_steps=32, progress=False, tensorboard=False)
pytestmark = [pytest.mark.games, pytest.mark.filterwarnings("ignore::UserWarning")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("openspiel")
    fastppo.train("openspiel:kuhn_poker", run_dir=folder / "kuhn", seed=1, **TINY)
    fastppo.train("openspiel:tic_tac_toe", run_dir=folder / "tictactoe", seed=1, **TINY)
    return {"kuhn": folder / "kuhn", "tictactoe": folder / "tictactoe"}


def test_a_game_of_three_players_trains_by_self_play(tmp_path):
    agent = fastppo.train("openspiel:kuhn_poker(players=3)", run_dir=tmp_path / "run", seed=1, **TINY)
    assert agent.pettingzoo is not None and agent.pettingzoo.names == ("player_0", "player_1", "player_2")
    assert (tmp_path / "run" / "policy.safetensors").is_file()


def test_mcts_plays_an_openspiel_game_as_openspiels_own_bot_on_the_envs_state():
    env = OpenSpielGame("openspiel:connect_four")
    env.reset(seed=0)
    for move in (3, 3, 4):
        env.step(move)
    player = MCTSPlayer("openspiel:connect_four", 50, seed=5)
    random_state = np.random.RandomState(5)
    evaluator = mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=random_state)
    bot = mcts.MCTSBot(env.game, 2.0, 50, evaluator, random_state=random_state)
    assert player.act(env, "player_1", [3, 3, 4]) == bot.step(env.state)


def test_mcts_beats_random_at_an_openspiel_game():
    results = play_games("openspiel:tic_tac_toe", (MCTSPlayer("openspiel:tic_tac_toe", 200), RandomPlayer()), 10)
    assert results.total.losses == 0 and results.total.wins >= 8, results.table()


def test_eval_against_mcts_on_an_openspiel_game(runs, capsys):
    assert main(["eval", str(runs["tictactoe"]), "--opponent", "mcts:5", "--games", "4", "--seed", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(
        f"fastppo: openspiel:tic_tac_toe: player {runs['tictactoe']} vs opponent mcts:5, 4 games"
    )
    assert [line.split()[:2] for line in lines[2:]] == [["player_0", "2"], ["player_1", "2"], ["all", "4"]]


def test_a_person_plays_kuhn_poker_in_openspiels_words(runs, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("1\n1\n"))  # bet, and call a bet
    assert main(["play", str(runs["kuhn"]), "--seat", "0", "--seed", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = lines.index("you are player_0")
    assert lines[first + 1] in ("0", "1", "2")  # the information-state string: the seat's card alone
    assert lines[first + 2] == "moves: 0 Pass, 1 Bet"
    result = next(i for i, line in enumerate(lines) if line.startswith(("you won", "you lost")))
    cards = lines[result - 1].split()  # OpenSpiel's state string at the end: both cards and the betting
    assert cards[0] == lines[first + 1] and cards[2] in ("b", "bb", "pbb")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "openspiel:no_such_game"], "OpenSpiel has no game 'no_such_game' (openspiel:no_such_game): name"),
        (
            ["train", "openspiel:goofspiel(num_cards=4)"],
            "openspiel:goofspiel(num_cards=4) is a simultaneous game, and fastppo plays games in turns: write "
            "openspiel:turn_based_simultaneous_game(game=goofspiel(num_cards=4))",
        ),
        (
            ["train", "openspiel:kuhn_poker(players=3)", "--self-play.pool-size", "4"],
            "--self-play.pool-size needs a two-seat game (the learner in one seat, a snapshot in the other), and this "
            "one has 3 seats",
        ),
        (
            ["train", "openspiel:kuhn_poker(players=3)", "--self-play.exploitability-every", "5"],
            "--self-play.exploitability-every: openspiel:kuhn_poker(players=3) seats 3 players, and exploitability",
        ),
        (
            ["train", "openspiel:kuhn_poker", "--self-play.average-policy", "--self-play.pool-size", "4"],
            "--self-play.average-policy scores the average of the pool's snapshots: give --self-play.pool-size N and "
            "--self-play.exploitability-every K too",
        ),
        (
            ["train", "openspiel:kuhn_poker", "--self-play.eval-every", "5", "--self-play.eval-opponents", "mcts:10"],
            "--self-play.eval-opponents mcts:10: MCTS searches the whole state, and openspiel:kuhn_poker is a game of "
            "imperfect information",
        ),
        (
            ["eval", "{kuhn}", "--opponent", "mcts:10"],
            "--opponent mcts:10: MCTS searches the whole state, and openspiel:kuhn_poker is a game of imperfect "
            "information",
        ),
        (
            ["train", "openspiel:kuhn_poker", "--env-kwargs", '{{"players": 3}}'],
            "--env-kwargs {'players': 3}: an OpenSpiel game takes its parameters in its id",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(runs, tmp_path, capsys, argv, message):
    argv = [a.format(**runs) for a in argv]
    if argv[0] == "train":
        argv += ["--run-dir", str(tmp_path / "run"), "--total-timesteps", "1024"]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"fastppo: error: {message}"), err
    assert not (tmp_path / "run").exists()


def folder_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("recorded", "message"),
    [
        # written before agent.json recorded the tensor its seats saw: OpenSpiel's observation tensor then
        (
            None,
            "was trained on OpenSpiel's observation tensor of openspiel:kuhn_poker, and fastppo now shows a "
            "seat of this game its information state tensor (since 2026-11-28",
        ),
        ("board", "is damaged: agent.json's openspiel_tensor is 'board'"),
    ],
)
def test_a_folder_trained_on_another_tensor_is_refused_in_one_line(runs, tmp_path, capsys, recorded, message):
    """eval and resume say so, and leave the folder as it was."""
    old = tmp_path / "kuhn"
    shutil.copytree(runs["kuhn"], old)
    assert json.loads((old / AGENT_FILE).read_text())["openspiel_tensor"] == "information state"
    for agent_file in old.rglob(AGENT_FILE):
        meta = json.loads(agent_file.read_text())
        meta.pop("openspiel_tensor")
        agent_file.write_text(json.dumps(meta if recorded is None else meta | {"openspiel_tensor": recorded}))
        write_checksums(agent_file.parent, AGENT_FILES)
    before = folder_files(old)
    for argv in (["eval", str(old)], ["train", "--resume", str(old), "--total-timesteps", "2048"]):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
        assert folder_files(old) == before

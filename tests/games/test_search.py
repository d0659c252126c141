"""Search at play time (fastppo.games.search, fastppo eval --search N): the PUCT rule by hand,
copies of the game that step on their own, perfect tic-tac-toe found by search with an untrained
agent, the critic's value read for the seat to move, and what cannot be searched refused in one
line."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

pytest.importorskip("pyspiel")

import fastppo
from fastppo.errors import FastPPOError
from fastppo.games.game_env import make_game
from fastppo.games.matches import evaluate_games, play_games
from fastppo.games.minimax import MinimaxPlayer
from fastppo.games.search import SearchPlayer, check_search, puct_scores, snapshot
from tests.support.games import LEDUC, leduc_agent, untrained_agent

pytestmark = [pytest.mark.games, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
TICTACTOE = "pz:pettingzoo.classic.tictactoe_v3"
CONNECT_FOUR = "pz:pettingzoo.classic.connect_four_v3"


def test_puct_scores_add_the_priors_bonus_to_the_mean_value():
    prior = np.array([0.5, 0.3, 0.2])
    visits = np.array([3.0, 1.0, 0.0])
    value_sums = np.array([1.5, -1.0, 0.0])
    # sqrt(4) = 2: 0.5 + 2 * 0.5 * 2 / 4, -1 + 2 * 0.3 * 2 / 2, 0 + 2 * 0.2 * 2 / 1
    np.testing.assert_allclose(puct_scores(prior, visits, value_sums, c=2.0), [1.0, -0.4, 0.8])


@pytest.mark.parametrize(("env_id", "moves"), [(CONNECT_FOUR, [3, 3, 4, 2]), ("openspiel:connect_four", [3, 3, 4, 2])])
def test_a_snapshot_steps_on_its_own_and_sees_what_the_game_would(env_id, moves):
    env = make_game(env_id)
    env.reset(seed=0)
    env.step(moves[0])
    twin = snapshot(env.unwrapped)
    for move in moves[1:]:
        twin.step(move)
    assert env.agent_selection == "player_1" and twin.agent_selection == "player_0"  # the game did not move
    for move in moves[1:]:
        env.step(move)
    for seat in env.possible_agents:
        ours, theirs = env.observe(seat), twin.observe(seat)
        np.testing.assert_array_equal(ours["observation"], theirs["observation"])
        np.testing.assert_array_equal(ours["action_mask"], theirs["action_mask"])


def test_search_with_an_untrained_agent_finds_tictactoes_wins_and_blocks():
    torch.manual_seed(0)
    search = SearchPlayer(untrained_agent(TICTACTOE), TICTACTOE, 400)
    env = make_game(TICTACTOE)
    env.reset(seed=0)
    for move in [0, 1, 3, 4]:  # X holds cells 0 and 3, O 1 and 4: X wins at 6 (minimax's test)
        env.step(move)
    assert search.act(env, "player_1", [0, 1, 3, 4]) == 6
    env.reset(seed=0)
    for move in [0, 1, 3]:  # X threatens 6: O blocks
        env.step(move)
    assert search.act(env, "player_2", [0, 1, 3]) == 6


def test_search_with_an_untrained_agent_never_loses_to_perfect_play():
    torch.manual_seed(0)
    agent = untrained_agent(TICTACTOE)
    results = play_games(TICTACTOE, [SearchPlayer(agent, TICTACTOE, 400), MinimaxPlayer()], 4, seed=0)
    assert results.total.losses == 0, results.table()
    # the policy alone, untrained, loses to it
    assert evaluate_games(agent, TICTACTOE, "minimax", 4, seed=0).total.losses > 0


def test_the_critics_value_is_read_for_the_seat_to_move():
    # A critic that says the seat to move has won (+1) everywhere: after one simulation the
    # root's move leads to a position good for the other seat, -1 for the root's.
    torch.manual_seed(0)
    agent = untrained_agent(TICTACTOE)
    with torch.no_grad():
        for layer in (agent.policy.value_head,):
            layer.weight.zero_()
            layer.bias.fill_(1.0)
    search = SearchPlayer(agent, TICTACTOE, 2)
    env = make_game(TICTACTOE)
    env.reset(seed=0)
    root, value = search._position(snapshot(env.unwrapped))
    assert value == pytest.approx(1.0)
    search._simulate(root)
    assert root.visits.sum() == 1 and root.value_sums.sum() == pytest.approx(-1.0)


@pytest.mark.parametrize(
    ("build", "env_id", "simulations", "message"),
    [
        (lambda: untrained_agent(TICTACTOE), TICTACTOE, 1, "--search needs 2 to 10000 simulations per move"),
        (lambda: untrained_agent(TICTACTOE), TICTACTOE, 10_001, "--search needs 2 to 10000 simulations per move"),
        (lambda: leduc_agent(), LEDUC, 100, f"--search looks ahead in the game's whole state, move by move: {LEDUC}"),
        (
            lambda: untrained_agent("openspiel:leduc_poker"),
            "openspiel:leduc_poker",
            100,
            "--search looks ahead in the game's whole state, move by move: openspiel:leduc_poker",
        ),
    ],
)
def test_what_cannot_be_searched_is_one_line(build, env_id, simulations, message):
    with pytest.raises(FastPPOError, match="^" + message.replace("(", r"\(")) as caught:
        check_search(build(), env_id, simulations)
    assert "\n" not in str(caught.value)


def test_a_run_with_normalised_rewards_is_refused():
    agent = untrained_agent(TICTACTOE)
    agent.config.env.normalize_reward = True
    with pytest.raises(FastPPOError, match="this run normalised its rewards"):
        check_search(agent, TICTACTOE, 100)


def test_search_plays_its_most_visited_move_so_stochastic_is_refused():
    with pytest.raises(FastPPOError, match="--search plays the most visited move of its search: drop --stochastic"):
        evaluate_games(untrained_agent(TICTACTOE), TICTACTOE, "random", 2, deterministic=False, search=10)


def test_the_documented_match_runs_as_written(tmp_path, capsys):
    """SearchPlayer's docstring example, its run folder a short training's and 2 games of its 10."""
    run = tmp_path / "tictactoe"
    fastppo.train(TICTACTOE, run_dir=run, seed=1, total_timesteps=1280, num_envs=4, num_steps=32, progress=False)
    code = textwrap.dedent(SearchPlayer.__doc__.split("In your own matches:\n", 1)[1])
    assert code.count('"runs/tictactoe"') == 1 and code.count(", 10, seed=0") == 1
    exec(code.replace('"runs/tictactoe"', repr(str(run))).replace(", 10, seed=0", ", 2, seed=0"), {})
    assert capsys.readouterr().out.splitlines()[-1].split()[:5] == ["all", "2", "0", "2", "0"]

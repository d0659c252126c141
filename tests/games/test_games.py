"""Players and whole games on PettingZoo's turn-based classic games (fastppo.games.players,
games, minimax, openspiel_games, leduc): the move tables to OpenSpiel checked by replaying random
games in both libraries, perfect tic-tac-toe, MCTS, a fastppo agent through the dict API, the
seat-swapped results, and Leduc hold'em's observation mapping and exploitability."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

pytest.importorskip("pyspiel")
pytest.importorskip("rlcard")

import pyspiel
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms import exploitability as openspiel_exploitability

from fastppo.errors import FastPPOError
from fastppo.games import leduc, leduc_rules
from fastppo.games.game_env import legal_actions, make_game
from fastppo.games.matches import GameResults, game_table, play_game, play_games
from fastppo.games.minimax import MinimaxPlayer, board_of, value
from fastppo.games.openspiel_games import SAME_RULES, MCTSPlayer, openspiel_state
from fastppo.games.players import (
    AgentPlayer,
    PolicyPlayer,
    RandomPlayer,
    SeatedPlayers,
    agent_policy,
    player_from_spec,
)
from tests.support.games import leduc_agent

TICTACTOE = "pz:pettingzoo.classic.tictactoe_v3"
CONNECT_FOUR = "pz:pettingzoo.classic.connect_four_v3"
LEDUC = leduc_rules.LEDUC_ENV_ID
RACE = "pz:tests.support.fake_pz_envs:race"

# PettingZoo's leduc_holdem_v4 module warns that it is imported without its registry.
pytestmark = [pytest.mark.games, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


# --- the move tables to OpenSpiel -------------------------------------------------------------


def tictactoe_picture(env) -> list[list[int]]:
    """PettingZoo's board as drawn (``tictactoe.board``: cell ``3 * column + row``), rows top down;
    0 empty, 1 first seat, 2 second."""
    cells = env.unwrapped.board.squares
    return [[cells[3 * column + row] for column in range(3)] for row in range(3)]


def connect_four_picture(env) -> list[list[int]]:
    """PettingZoo's connect four board, row 0 on top (row-major ``board``)."""
    cells = env.unwrapped.board
    return [[cells[7 * row + column] for column in range(7)] for row in range(6)]


def openspiel_picture(state) -> list[list[int]]:
    """OpenSpiel's board as it prints it (rows top down; x moves first)."""
    return [[".xo".index(mark) for mark in line] for line in str(state).split("\n") if line]


@pytest.mark.parametrize(
    ("env_id", "picture", "games"), [(TICTACTOE, tictactoe_picture, 300), (CONNECT_FOUR, connect_four_picture, 100)]
)
def test_random_games_replay_move_for_move_in_openspiel(env_id, picture, games):
    """The same board after every move, the same legal moves and player to move, the game over at
    the same move with the same returns: the two libraries play the same game under the table."""
    rules = SAME_RULES[env_id.removeprefix("pz:")]
    game = pyspiel.load_game(rules.openspiel)
    rng = np.random.default_rng(0)
    outcomes = {}
    for _ in range(games):
        env = make_game(env_id)
        env.reset()
        state = game.new_initial_state()
        returns = dict.fromkeys(env.possible_agents, 0.0)
        for agent in env.agent_iter():
            _, reward, terminated, truncated, _ = env.last()
            returns[agent] += reward
            if terminated or truncated:
                env.step(None)
                continue
            assert state.current_player() == env.possible_agents.index(agent)
            legal = legal_actions(env, agent)
            assert sorted(rules.to_openspiel[a] for a in legal) == state.legal_actions()
            move = int(rng.choice(legal))
            env.step(move)
            state.apply_action(rules.to_openspiel[move])
            assert picture(env) == openspiel_picture(state)
            assert all(env.terminations.values()) == state.is_terminal()
        assert [returns[a] for a in env.possible_agents] == state.returns()
        outcomes[tuple(state.returns())] = outcomes.get(tuple(state.returns()), 0) + 1
    assert set(outcomes) >= {(1.0, -1.0), (-1.0, 1.0)}  # both seats won some games


def test_openspiel_state_is_rebuilt_from_the_history_and_the_bot_answers_in_pettingzoo_cells():
    """X (first seat) holds PettingZoo cells 0 and 3 (top row, left and middle), O cells 1 and 4:
    X wins at cell 6 (top right), OpenSpiel's cell 2. An untransposed table would send the bot's
    answer to PettingZoo's cell 2 (bottom left)."""
    history = [0, 1, 3, 4]
    rules = SAME_RULES["pettingzoo.classic.tictactoe_v3"]
    assert str(openspiel_state(rules, pyspiel.load_game("tic_tac_toe"), history)) == "xx.\noo.\n..."
    env = make_game(TICTACTOE)
    env.reset()
    for move in history:
        env.step(move)
    assert MCTSPlayer(TICTACTOE, 20, seed=0).act(env, "player_1", history) == 6


def test_mcts_beats_random_at_connect_four_and_replays_from_its_seed():
    strong = play_games(CONNECT_FOUR, [MCTSPlayer(CONNECT_FOUR, 50), RandomPlayer()], 10, seed=0)
    assert (strong.total.wins, strong.moves) == (10, 137)
    weak = [play_games(CONNECT_FOUR, [MCTSPlayer(CONNECT_FOUR, 10), RandomPlayer()], 10, seed=0) for _ in range(2)]
    assert [(r.total.wins, r.moves) for r in weak] == [
        (9, 180),
        (9, 180),
    ]  # fewer simulations, weaker; the same games again


# --- minimax ----------------------------------------------------------------------------------


def test_minimax_values_tictactoe_as_known():
    assert value(board_of([])) == 0  # a draw under perfect play
    assert value.cache_info().currsize == 5478  # every legal position, once
    # X (first seat) holds cells 0 and 3, O 1 and 4: X wins now at 6, leaving 4 cells: 1 + 4
    assert value(board_of([0, 1, 3, 4])) == 5
    # X 0, 3, 4 threatens 5 and 8, O (1, 6) can block one: X wins next, leaving 2 cells
    assert value(board_of([0, 1, 3, 6, 4])) == -3
    player = MinimaxPlayer()
    assert player.act(None, "player_1", [0, 1, 3, 4]) == 6
    assert player.act(None, "player_2", [0, 1, 3]) == 6  # O blocks, though lost


def test_minimax_draws_itself_and_never_loses_to_random():
    against_itself = play_games(TICTACTOE, [MinimaxPlayer(), MinimaxPlayer()], 20, seed=0)
    assert against_itself.total.draws == 20
    against_random = play_games(TICTACTOE, [MinimaxPlayer(), RandomPlayer()], 200, seed=0)
    assert [(s.games, s.losses) for s in against_random.seats] == [(100, 0), (100, 0)]
    assert (against_random.total.wins, against_random.total.draws) == (174, 26)


# --- a fastppo agent --------------------------------------------------------------------------


class Recording:
    """Wraps a player: notes each (seat, legal moves, move)."""

    def __init__(self, player):
        self.player, self.name, self.moves = player, player.name, []

    def reset(self, seed: int) -> None:
        self.player.reset(seed)

    def act(self, env, agent, history):
        move = self.player.act(env, agent, history)
        self.moves.append((agent, legal_actions(env, agent).tolist(), move))
        return move


def test_an_agent_plays_through_the_dict_api_with_its_masks():
    agent = Recording(AgentPlayer(leduc_agent()))
    play_games(LEDUC, [agent, RandomPlayer()], 40, seed=0)
    seats = {seat for seat, _, _ in agent.moves}
    assert seats == {"player_0", "player_1"}
    for _, legal, move in agent.moves:
        assert move == (
            leduc_rules.RAISE if leduc_rules.RAISE in legal else min(legal)
        )  # argmax of equal logits: the first legal


def test_agent_policy_gives_the_masked_softmax():
    probabilities = agent_policy(leduc_agent())
    mask = np.array([0, 1, 0, 1], dtype=np.int8)  # check or raise
    shown = {"observation": leduc_rules.rlcard_observation(0, None, 1, 2), "action_mask": mask}
    expected = np.exp([0.0, 5.0, 0.0, 0.0]) * mask
    np.testing.assert_allclose(probabilities("player_0", shown), expected / expected.sum(), rtol=1e-6)


def test_a_sampling_agent_replays_from_the_game_seed_and_leaves_torchs_generator_alone():
    agent = leduc_agent(prefer_raise=False)  # every legal action alike: the moves are the draws
    torch.manual_seed(123)
    before = torch.get_rng_state()
    runs = [
        play_games(LEDUC, [AgentPlayer(agent, deterministic=False), RandomPlayer()], 30, seed=1).to_dict()
        for _ in range(2)
    ]
    assert torch.equal(torch.get_rng_state(), before)
    for run in runs:
        run.pop("seconds"), run.pop("games_per_second")
    assert runs[0] == runs[1]


# --- the opponent spec ------------------------------------------------------------------------


def test_opponent_specs_build_their_players(tmp_path):
    assert player_from_spec("random", TICTACTOE).name == "random"
    assert player_from_spec("minimax", TICTACTOE).name == "minimax"
    assert player_from_spec("mcts:100", CONNECT_FOUR).name == "mcts:100"
    # the bounds of mcts:N play whole games (one simulation would not: OpenSpiel's root is expanded on the second)
    assert play_games(TICTACTOE, [player_from_spec("mcts:2", TICTACTOE), RandomPlayer()], 2, seed=0).games == 2
    assert player_from_spec("mcts:10000", TICTACTOE).simulations == 10_000
    agent = leduc_agent()
    agent.save(tmp_path / "run")
    player = player_from_spec(str(tmp_path / "run"), LEDUC)
    assert isinstance(player, AgentPlayer) and player.name == str(tmp_path / "run")
    results = play_games(LEDUC, [Recording(player), RandomPlayer()], 10, seed=0)
    assert results.games == 10


@pytest.mark.parametrize(
    ("spec", "env_id", "message"),
    [
        ("mcts:0", TICTACTOE, "--opponent mcts:0: MCTS needs 2 to 10000 simulations per move"),
        ("mcts:-3", TICTACTOE, "--opponent mcts:-3: MCTS needs 2 to 10000 simulations per move"),
        # one simulation leaves OpenSpiel's root unexpanded (its ValueError at the first move);
        # a huge N never ends a move
        ("mcts:1", TICTACTOE, "--opponent mcts:1: MCTS needs 2 to 10000 simulations per move"),
        ("mcts:10001", CONNECT_FOUR, "--opponent mcts:10001: MCTS needs 2 to 10000 simulations per move"),
        (
            "mcts:99999999999999999999999",
            TICTACTOE,
            "--opponent mcts:99999999999999999999999: MCTS needs 2 to 10000 simulations per move",
        ),
        ("mcts:" + "9" * 5000, TICTACTOE, "--opponent mcts:999"),
        ("mcts:many", TICTACTOE, "--opponent mcts:many: give the number of simulations per move as an integer"),
        ("mcts:\u00b2", TICTACTOE, "--opponent mcts:\u00b2: give the number of simulations per move as an integer"),
        (
            "mcts:10",
            LEDUC,
            "--opponent mcts:10: MCTS plays pz:pettingzoo.classic.tictactoe_v3, pz:pettingzoo.classic.connect_four_v3",
        ),
        (
            "minimax",
            CONNECT_FOUR,
            "--opponent minimax: minimax plays pz:pettingzoo.classic.tictactoe_v3 only, not "
            "pz:pettingzoo.classic.connect_four_v3: use random, mcts:N",
        ),
        # a game OpenSpiel has no twin of: mcts:N is no choice there
        (
            "minimax",
            RACE,
            f"--opponent minimax: minimax plays pz:pettingzoo.classic.tictactoe_v3 only, not {RACE}: use "
            "random, the run folder of an agent trained on this game or a player class",
        ),
        ("alphazero", CONNECT_FOUR, "--opponent alphazero: unknown opponent, and no such folder"),
        ("", CONNECT_FOUR, "--opponent '': an empty name names no opponent (nor the working directory)"),
        ("random", "pz:mpe2.simple_spread_v3", "--opponent random: pz:mpe2.simple_spread_v3 built a"),
        ("random", "CartPole-v1", "--opponent random: CartPole-v1 names no turn-based PettingZoo game"),
    ],
)
def test_bad_opponent_specs_are_one_line_errors(spec, env_id, message):
    with pytest.raises(FastPPOError) as error:
        player_from_spec(spec, env_id)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_an_agent_of_another_game_is_refused(tmp_path):
    leduc_agent().save(tmp_path / "run")
    with pytest.raises(
        FastPPOError,
        match=(
            r"^--opponent .*run: .*run holds an agent trained on pz:pettingzoo.classic.leduc_holdem_v4, not on "
            r"pz:pettingzoo.classic.connect_four_v3"
        ),
    ):
        player_from_spec(str(tmp_path / "run"), CONNECT_FOUR)


# --- play_games -------------------------------------------------------------------------------


def test_results_swap_seats_add_up_and_replay_from_the_seed():
    results = play_games(TICTACTOE, [RandomPlayer(), RandomPlayer()], 101, seed=3)
    assert isinstance(results, GameResults) and [s.seat for s in results.seats] == ["player_1", "player_2"]
    assert [s.games for s in results.seats] == [51, 50]
    for row in (*results.seats, results.total):
        assert row.wins + row.draws + row.losses == row.games
    assert results.total.games == 101 and results.moves > 5 * 101
    data = json.loads(json.dumps(results.to_dict()))
    assert (data["games"], data["seats"]["player_2"]["games"]) == (101, 50)
    assert data["wins"] == results.total.wins and data["win_rate"] == results.total.wins / 101
    again = play_games(TICTACTOE, [RandomPlayer(), RandomPlayer()], 101, seed=3)
    assert [(s.wins, s.draws, s.losses) for s in again.seats] == [(s.wins, s.draws, s.losses) for s in results.seats]
    assert play_games(TICTACTOE, [RandomPlayer(), RandomPlayer()], 101, seed=4).moves != results.moves
    table = results.table().splitlines()
    assert (
        table[0].startswith("pz:pettingzoo.classic.tictactoe_v3: player random vs opponent random, 101 games")
        and len(table) == 5
    )
    assert re.match(r"player_1\s+51\s+\d+\s+\d+\s+\d+\s+-?\d\.\d{3}$", table[2])


@pytest.mark.parametrize("env_id", [TICTACTOE, CONNECT_FOUR, LEDUC])
def test_a_game_on_the_training_env_scores_as_pettingzoos_own_loop(env_id):
    """play_game plays on a TurnBasedVecEnv, the players behind its Opponents: the same seeds give
    the moves and returns of PettingZoo's own AEC loop (agent_iter, last, step(None) for a seat
    whose game is over; a seat's return the sum of the rewards last() gives it)."""
    envs = game_table(env_id)
    for game in range(6):
        seated = {seat: RandomPlayer(10 * game + k) for k, seat in enumerate(envs.agents)}
        returns, history = play_game(envs, seated, seed=game)
        env = make_game(env_id)
        env.reset(seed=game)
        expected, moves = dict.fromkeys(env.possible_agents, 0.0), []
        for k, seat in enumerate(env.possible_agents):
            seated[seat].reset(10 * game + k)
        for seat in env.agent_iter():
            _, reward, terminated, truncated, _ = env.last()
            expected[seat] += float(reward)
            move = None if terminated or truncated else seated[seat].act(env, seat, moves)
            moves += [] if move is None else [move]
            env.step(move)
        assert (returns, history) == (expected, moves)
    with pytest.raises(
        ValueError, match=r"^seat a player at each of \['player_1', 'player_2'\], not at \['player_1'\]$"
    ):
        SeatedPlayers(game_table(TICTACTOE), {"player_1": RandomPlayer()})


def test_the_first_seat_wins_more_in_random_tictactoe():
    """The seats are told apart: random play from the first seat wins about 58% of games (known:
    ~58.5% / 28.8% / 12.7% wins / losses / draws for the first player)."""
    results = play_games(TICTACTOE, [RandomPlayer(), RandomPlayer()], 2000, seed=0)
    first, second = results.seats
    assert 0.54 < first.wins / first.games < 0.63 and 0.25 < second.wins / second.games < 0.33


class CallingStation:
    """Calls or checks every bet and notes the card it holds in each game."""

    name = "calling station"

    def __init__(self):
        self.hands: list[tuple[int, str, str]] = []
        self.game = -1

    def reset(self, seed: int) -> None:
        self.game += 1

    def act(self, env, agent, history):
        game = env.unwrapped.env.game
        self.hands.append((self.game, agent, game.players[env.possible_agents.index(agent)].hand.get_index()))
        legal = legal_actions(env, agent)
        return leduc_rules.CALL if leduc_rules.CALL in legal else leduc_rules.CHECK


def test_leduc_games_deal_the_same_cards_to_both_seats_of_a_pair():
    a, b = CallingStation(), CallingStation()
    play_games(LEDUC, [a, b], 20, seed=0)
    dealt = {(game, seat): card for game, seat, card in a.hands + b.hands}
    assert len(dealt) == 40  # both seats act in every game
    for pair in range(10):
        assert dealt[(2 * pair, "player_0")] == dealt[(2 * pair + 1, "player_0")]
        assert dealt[(2 * pair, "player_1")] == dealt[(2 * pair + 1, "player_1")]
    assert len({dealt[(2 * pair, "player_0")] for pair in range(10)}) > 1
    a_cards = sorted(card for game, seat, card in a.hands)
    b_cards = sorted(card for game, seat, card in b.hands)
    assert a_cards == b_cards  # each player held each deal once


def test_an_illegal_move_is_refused():
    class Cheater(RandomPlayer):
        name = "cheater"

        def act(self, env, agent, history):
            return history[0]  # the first player's cell

    with pytest.raises(
        ValueError, match=r"^cheater played \d as player_2, an illegal move \(legal: \[(\d, ){7}\d\]\)$"
    ):
        play_games(TICTACTOE, [RandomPlayer(), Cheater()], 1)


# --- Leduc hold'em ----------------------------------------------------------------------------


def test_the_observation_encoding_is_rlcards():
    """``rlcard_observation`` rebuilt from rlcard's game state equals what PettingZoo shows, at every
    decision of 200 random hands."""
    rng = np.random.default_rng(0)
    env = make_game(LEDUC)
    decisions = 0
    for hand in range(200):
        env.reset(seed=hand)
        for agent in env.agent_iter():
            _, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            game = env.unwrapped.env.game
            me, other = (
                game.players[env.possible_agents.index(agent)],
                game.players[1 - env.possible_agents.index(agent)],
            )
            public = None if game.public_card is None else "JQK".index(game.public_card.rank)
            expected = leduc_rules.rlcard_observation("JQK".index(me.hand.rank), public, me.in_chips, other.in_chips)
            np.testing.assert_array_equal(env.observe(agent)["observation"], expected)
            decisions += 1
            env.step(int(rng.choice(legal_actions(env, agent))))
    assert decisions > 400


def shown(state_history: list[int]) -> dict:
    state = pyspiel.load_game("leduc_poker").new_initial_state()
    for action in state_history:
        state.apply_action(action)
    return leduc.observation_of(state)


def one_hot_at(*indices: int) -> np.ndarray:
    observation = np.zeros(36, dtype=np.float32)
    observation[list(indices)] = 1
    return observation


FOLD, CALL, RAISE = leduc.OPENSPIEL_FOLD, leduc.OPENSPIEL_CALL, leduc.OPENSPIEL_RAISE


@pytest.mark.parametrize(
    ("history", "observation", "mask"),
    [
        # player 0 holds card 0 (J), player 1 card 3 (Q); antes 1 each; player 0 may check or raise
        ([0, 3], (0, 6 + 1, 21 + 1), [0, 1, 0, 1]),
        # player 0 raised to 3: player 1 (Q, 1 in) may call, raise or fold
        ([0, 3, RAISE], (1, 6 + 1, 21 + 3), [1, 1, 1, 0]),
        # player 1 re-raised to 5: player 0 (3 in) may call or fold, not raise a third time
        ([0, 3, RAISE, RAISE], (0, 6 + 3, 21 + 5), [1, 0, 1, 0]),
        # called; the public card 5 (K); round 2 opens with player 0, 5 chips each
        ([0, 3, RAISE, RAISE, CALL, 5], (0, 3 + 2, 6 + 5, 21 + 5), [0, 1, 0, 1]),
        # raises of 4: player 0 to 9, player 1 to 13
        ([0, 3, RAISE, RAISE, CALL, 5, RAISE, RAISE], (0, 3 + 2, 6 + 9, 21 + 13), [1, 0, 1, 0]),
        # player 1 holds card 4 (K); checked round 1; public card 2 (Q); player 0 checked: player 1 may check or raise
        ([1, 4, CALL, CALL, 2, CALL], (2, 3 + 1, 6 + 1, 21 + 1), [0, 1, 0, 1]),
    ],
)
def test_openspiel_states_map_to_the_observations_worked_out_by_hand(history, observation, mask):
    result = shown(history)
    np.testing.assert_array_equal(result["observation"], one_hot_at(*observation))
    assert result["action_mask"].tolist() == mask


def test_chips_from_the_history_are_openspiels_own_at_every_information_state():
    table = openspiel_policy.TabularPolicy(pyspiel.load_game("leduc_poker"))
    for state in table.states:
        money = re.search(r"\[Money: (\d+) (\d+)\]", state.information_state_string()).groups()
        assert leduc.openspiel_chips(state)[0] == [100 - int(m) for m in money]
    assert len(table.states) == 936


def test_the_uniform_policys_exploitability_is_openspiels():
    game = pyspiel.load_game("leduc_poker")
    direct = openspiel_exploitability.exploitability(game, openspiel_policy.UniformRandomPolicy(game))
    assert leduc.exploitability(leduc.uniform_policy) == pytest.approx(direct, rel=1e-12)
    assert direct == pytest.approx(2.3736111111, abs=1e-9)


def rule(hand: int, public: int | None, mine: int, theirs: int, legal: set[str]) -> dict[str, float]:
    """A policy that uses the cards, the chips and every kind of action: raise with a king or a
    pair, fold a jack facing a bet of 3 or more chips in, else call/check or raise half-half."""
    if hand == 2 or hand == public:
        choice = {"raise": 1.0} if "raise" in legal else {"call": 1.0}
    elif hand == 0 and theirs > mine and theirs >= 3:
        choice = {"fold": 1.0}
    else:
        choice = {"call": 0.5, "raise": 0.5} if "raise" in legal else {"call": 1.0}
    return choice


def rule_on_rlcard_observations(agent: str, observation: dict) -> np.ndarray:
    obs, mask = observation["observation"], observation["action_mask"]
    public = int(np.argmax(obs[3:6])) if obs[3:6].any() else None
    legal = {name for name, allowed in zip(("call", "raise", "fold", "check"), mask) if allowed}
    legal = legal | {"call"} if "check" in legal else legal  # the rule says call for check or call
    choice = rule(int(np.argmax(obs[0:3])), public, int(np.argmax(obs[6:21])), int(np.argmax(obs[21:36])), legal)
    facing_bet = np.argmax(obs[21:36]) > np.argmax(obs[6:21])  # from the chips, not the mask: the mask is under test
    probabilities = np.zeros(4)
    for name, p in choice.items():
        probabilities[
            {
                "call": leduc_rules.CALL if facing_bet else leduc_rules.CHECK,
                "raise": leduc_rules.RAISE,
                "fold": leduc_rules.FOLD,
            }[name]
        ] += p
    return probabilities


def test_a_policy_on_rlcard_observations_scores_as_the_same_rule_written_against_openspiel():
    """The same rule read from OpenSpiel's own information state strings (cards, ``Money``,
    legal actions) gives the same exploitability: the card ranks, chips and actions map right."""
    game = pyspiel.load_game("leduc_poker")
    direct = openspiel_policy.TabularPolicy(game)
    for row, state in enumerate(direct.states):
        text = state.information_state_string()
        player = state.current_player()
        private = int(re.search(r"\[Private: (\d)\]", text).group(1))
        public = re.search(r"\[Public: (\d)\]", text)
        money = [int(m) for m in re.search(r"\[Money: (\d+) (\d+)\]", text).groups()]
        legal = {FOLD: "fold", CALL: "call", RAISE: "raise"}
        choice = rule(
            private // 2,
            None if public is None else int(public.group(1)) // 2,
            100 - money[player],
            100 - money[1 - player],
            {legal[a] for a in state.legal_actions()},
        )
        direct.action_probability_array[row] = [choice.get(legal[a], 0.0) for a in range(3)]
    expected = openspiel_exploitability.exploitability(game, direct)
    assert leduc.exploitability(rule_on_rlcard_observations) == pytest.approx(expected, rel=1e-12)
    assert expected != pytest.approx(leduc.exploitability(leduc.uniform_policy))


def test_a_policy_that_plays_illegal_actions_is_refused():
    with pytest.raises(ValueError, match=r"give illegal actions probability 0"):
        leduc.exploitability(lambda agent, observation: np.full(4, 0.25))


def test_a_rule_beats_random_at_leduc_per_hand():
    results = play_games(LEDUC, [PolicyPlayer(rule_on_rlcard_observations, "rule"), RandomPlayer()], 1000, seed=0)
    assert results.total.mean_return > 0.5  # big blinds per hand


def card_id(card) -> int:
    """rlcard's card (suit S/H, rank J/Q/K) as a card 0-5 of rank ``card // 2``."""
    return 2 * "JQK".index(card.rank) + "SH".index(card.suit)


def test_rlcards_rules_as_an_openspiel_game_replay_pettingzoo_move_for_move():
    """Hands dealt by PettingZoo's env, random legal moves (folds rarer): the same player to move, the same
    observation and mask at every decision, the end at the same move with the same payoffs (rlcard
    pays big blinds, half the chips)."""
    from fastppo.games.rlcard_leduc import RlcardLeducGame

    game = RlcardLeducGame()
    env = make_game(LEDUC)
    rng = np.random.default_rng(0)
    folds = showdowns = 0
    for hand in range(300):
        env.reset(seed=hand)
        dealt = env.unwrapped.env.game
        state = game.new_initial_state()
        state.apply_action(env.possible_agents.index(env.agent_selection))  # the small blind acts first
        for player in dealt.players:
            state.apply_action(card_id(player.hand))
        returns = dict.fromkeys(env.possible_agents, 0.0)
        for agent in env.agent_iter():
            observation, reward, terminated, truncated, _ = env.last()
            returns[agent] += reward
            if terminated or truncated:
                env.step(None)
                continue
            if state.is_chance_node():
                state.apply_action(card_id(dealt.public_card))
            assert state.current_player() == env.possible_agents.index(agent)
            shown = leduc.observation_of(state, "rlcard")
            np.testing.assert_array_equal(shown["observation"], observation["observation"])
            assert shown["action_mask"].tolist() == observation["action_mask"].tolist()
            legal = legal_actions(env, agent)
            weights = np.where(legal == leduc_rules.FOLD, 0.1, 1.0)  # random play folds most hands before the showdown
            move = int(rng.choice(legal, p=weights / weights.sum()))
            env.step(move)
            state.apply_action(move)
        assert state.is_terminal()
        assert [2 * returns[agent] for agent in env.possible_agents] == state.returns()
        folds += state.folded is not None
        showdowns += state.folded is None
    assert folds > 50 and showdowns > 100


def test_exploitability_in_rlcards_rules():
    """The uniform policy's table is OpenSpiel's uniform one over the game's 1 872 information
    states (936 per small blind seat), and its exploitability 2.9432 chips per hand."""
    table = leduc.tabular_policy(leduc.uniform_policy, "rlcard")
    assert len(table.states) == 1872
    np.testing.assert_array_equal(
        table.action_probability_array, openspiel_policy.TabularPolicy(table.game).action_probability_array
    )
    assert openspiel_exploitability.exploitability(table.game, table) == pytest.approx(2.9432098765, abs=1e-9)

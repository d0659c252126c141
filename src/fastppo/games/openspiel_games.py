"""OpenSpiel's MCTS bot as an outside opponent for PettingZoo's tic-tac-toe and connect four, and
for any perfect-information OpenSpiel game (``openspiel:<game>``, whose env holds OpenSpiel's
state itself: ``fastppo.envs.openspiel_env``).

OpenSpiel (``pyspiel``) implements the same two games with its own action numbers, so the bot
plays OpenSpiel's game and a table translates moves. The tables were checked against both
libraries' sources and by replaying random games in both (tests/games/test_games.py: the same board
after every move, the same legal moves, the same final step and the same returns):

- tic-tac-toe: PettingZoo numbers the cells column by column (``pettingzoo.classic.tictactoe.board``:
  ``0 3 6 / 1 4 7 / 2 5 8``, which its renderer draws), OpenSpiel row by row (``0 1 2 / 3 4 5 /
  6 7 8``): PettingZoo's cell ``3 * column + row`` is OpenSpiel's ``3 * row + column``, the
  transpose (its own inverse). Any permutation that keeps the eight lines would give the same
  rules; the transpose also gives the same picture.
- connect four: both number the 7 columns 0-6 from the left, 6 rows; the same numbers.
- In both games PettingZoo's first seat (``possible_agents[0]``: player_1 in tic-tac-toe,
  player_0 in connect four) moves first, as OpenSpiel's player 0 (x) does, and a win is +1/-1,
  a draw 0, in both.

The bot sees the position as an OpenSpiel state rebuilt from the game's history each move, so it
keeps no state of its own between moves (``MCTSBot`` with ``RandomRolloutEvaluator``: OpenSpiel's
usual settings, UCT constant 2, one random rollout per leaf, solving proven wins/losses)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastppo.env_ids import is_openspiel
from fastppo.envs.openspiel_env import is_perfect_information, load_game
from fastppo.errors import FastPPOError, install_extra
from fastppo.games.game_env import game_module


@dataclass(frozen=True)
class SameRules:
    """A PettingZoo game and OpenSpiel's game of the same rules: ``to_openspiel[a]`` is
    OpenSpiel's number for PettingZoo's move ``a``."""

    openspiel: str
    to_openspiel: tuple[int, ...]

    @property
    def to_pettingzoo(self) -> tuple[int, ...]:
        return tuple(int(a) for a in np.argsort(self.to_openspiel))


SAME_RULES = {
    "pettingzoo.classic.tictactoe_v3": SameRules("tic_tac_toe", tuple(3 * (cell % 3) + cell // 3 for cell in range(9))),
    "pettingzoo.classic.connect_four_v3": SameRules("connect_four", tuple(range(7))),
}
"""PettingZoo module -> OpenSpiel's game of the same rules (see the module docstring)."""


def same_rules(env_id: str) -> SameRules | None:
    """The OpenSpiel twin of ``pz:<module>``, or None when OpenSpiel's mapping does not cover it."""
    return SAME_RULES.get(game_module(env_id))


def mcts_plays(env_id: str) -> bool:
    """Whether ``mcts:N`` plays ``env_id``: a PettingZoo game with an OpenSpiel twin, or a
    perfect-information OpenSpiel game."""
    if is_openspiel(env_id):
        return is_perfect_information(load_game(env_id))
    return same_rules(env_id) is not None


def load_openspiel_game(name: str) -> Any:
    """OpenSpiel's game ``name``; a one-line FastPPOError when open_spiel is not installed (it is
    imported here, not with this module, so that fastppo's other players work without it)."""
    try:
        import pyspiel
    except ImportError:
        raise FastPPOError(f"OpenSpiel is not installed: {install_extra('games')}") from None
    return pyspiel.load_game(name)


def openspiel_state(rules: SameRules, game: Any, history: list[int]) -> Any:
    """OpenSpiel's state after the PettingZoo moves ``history`` (both seats', in order)."""
    state = game.new_initial_state()
    for action in history:
        state.apply_action(rules.to_openspiel[action])
    return state


MIN_SIMULATIONS, MAX_SIMULATIONS = 2, 10_000
"""The range of ``mcts:N``: OpenSpiel's bot expands the root on its second simulation (with one it
has no move to choose: a ValueError), and 10 000 simulations take ~4 s a move at connect four
(1 000 already play strongly); more would make one game take hours."""


def simulations(text: str) -> int:
    """The N of ``mcts:N`` (``text``) in ``[MIN_SIMULATIONS, MAX_SIMULATIONS]``, or a one-line FastPPOError."""
    if not re.fullmatch(r"-?[0-9]+", text):
        raise FastPPOError(f"give the number of simulations per move as an integer, e.g. mcts:100, not mcts:{text}")
    if (
        len(text) > 6 or not MIN_SIMULATIONS <= int(text) <= MAX_SIMULATIONS
    ):  # the length first: int() refuses 4 300 digits and more
        raise FastPPOError(
            f"MCTS needs {MIN_SIMULATIONS} to {MAX_SIMULATIONS} simulations per move (the strength knob, e.g. "
            f"mcts:100), got {text}"
        )
    return int(text)


def check_simulations(simulations: int, who: str, example: str) -> None:
    """A one-line FastPPOError unless ``simulations`` is an int in ``[MIN_SIMULATIONS,
    MAX_SIMULATIONS]``: ``who`` needs them, ``example`` shows a good value."""
    if (
        isinstance(simulations, bool)
        or not isinstance(simulations, int)
        or not MIN_SIMULATIONS <= simulations <= MAX_SIMULATIONS
    ):
        raise FastPPOError(
            f"{who} needs {MIN_SIMULATIONS} to {MAX_SIMULATIONS} simulations per move ({example}), got {simulations!r}"
        )


class MCTSPlayer:
    """OpenSpiel's MCTS bot with ``simulations`` per move (2 to 10 000), the strength knob (10 is
    weak, 1 000 strong at connect four). ``game``: the fastppo env id of tic-tac-toe, connect four or
    a perfect-information OpenSpiel game."""

    def __init__(self, game: str, simulations: int, seed: int = 0, uct_c: float = 2.0, rollouts: int = 1):
        rules = None if is_openspiel(game) else same_rules(game)
        if is_openspiel(game) and not mcts_plays(game):
            raise FastPPOError(
                f"MCTS searches the whole state, and {game} is a game of imperfect information, whose seats do not "
                "see it: rate against random or another run's agent"
            )
        if rules is None and not is_openspiel(game):
            covered = ", ".join(f"pz:{module}" for module in SAME_RULES)
            raise FastPPOError(
                f"MCTS plays {covered} (OpenSpiel's games of the same rules) and perfect-information OpenSpiel games "
                f"(openspiel:<game>), not {game}"
            )
        check_simulations(simulations, "MCTS", "the strength knob, e.g. mcts:100")
        self.name = f"mcts:{simulations}"
        self.rules = rules
        self.simulations = simulations
        self.uct_c = uct_c
        self.rollouts = rollouts
        self.game = load_game(game) if rules is None else load_openspiel_game(rules.openspiel)
        self.reset(seed)

    def reset(self, seed: int) -> None:
        from open_spiel.python.algorithms import mcts  # importable once load_openspiel_game was

        random_state = np.random.RandomState(seed)
        evaluator = mcts.RandomRolloutEvaluator(n_rollouts=self.rollouts, random_state=random_state)
        self._bot = mcts.MCTSBot(self.game, self.uct_c, self.simulations, evaluator, random_state=random_state)

    def act(self, env: Any, agent: str, history: list[int]) -> int:
        # An OpenSpiel game's env holds the state, chance outcomes included; a twin's is rebuilt.
        state = env.unwrapped.state if self.rules is None else openspiel_state(self.rules, self.game, history)
        seat = list(env.possible_agents).index(agent)
        if state.current_player() != seat:
            raise ValueError(
                f"the history has OpenSpiel's player {state.current_player()} to move, not {agent} (seat "
                f"{seat}): pass every move of this game, both seats', in order"
            )
        move = self._bot.step(state)
        return move if self.rules is None else self.rules.to_pettingzoo[move]

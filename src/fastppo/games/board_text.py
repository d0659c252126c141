"""Turn-based games drawn as text for a person at a terminal (``fastppo play``): the position as
the seat to move sees it, with the numbers its moves are typed as.

PettingZoo renders its classic boards with pygame only, so tic-tac-toe and connect four are drawn
from the env's own board (``env.unwrapped.board``: marks 1 and 2 for the first and second seat);
Leduc hold'em, whose rlcard state is not a board, is told in words from the seat's observation
(``fastppo.games.leduc_rules``' encoding); an OpenSpiel game (``openspiel:<game>``) in OpenSpiel's
own words (``fastppo.envs.openspiel_env.OpenSpielGame.text``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastppo.env_ids import is_openspiel
from fastppo.errors import FastPPOError
from fastppo.games.game_env import legal_actions
from fastppo.games.leduc_rules import CHIP_SLOTS, LEDUC_ENV_ID, RANKS, RLCARD_ACTIONS

MARKS = ".XO"
"""An empty cell, the first seat's mark, the second seat's (PettingZoo's board values 0, 1, 2)."""


@dataclass(frozen=True)
class BoardText:
    """How one game is shown: ``position(env, seat)`` the lines ``seat`` sees, ``move(action)``
    an action as the person types and reads it, ``revealed(env, seat)`` what the game hid from
    ``seat`` until its end (the opponent's cards), if anything."""

    position: Callable[[Any, str], str]
    move: Callable[[int], str] = str
    revealed: Callable[[Any, str], str] | None = None


def _you(env: Any, seat: str) -> str:
    return f"you are {MARKS[1 + env.possible_agents.index(seat)]} ({seat})"


def tictactoe(env: Any, seat: str) -> str:
    """PettingZoo numbers the cells column by column (``board.squares[3 * column + row]``); an
    empty cell shows its number."""
    squares = env.unwrapped.board.squares

    def cell(row: int, column: int) -> str:
        index = 3 * column + row
        return MARKS[squares[index]] if squares[index] else str(index)

    rows = [" " + " | ".join(cell(row, column) for column in range(3)) for row in range(3)]
    return _you(env, seat) + "\n" + "\n---+---+---\n".join(rows)


def connect_four(env: Any, seat: str) -> str:
    """PettingZoo's board is row-major, row 0 on top; the column numbers below are the moves."""
    board = env.unwrapped.board
    rows = [" ".join(MARKS[board[7 * row + column]] for column in range(7)) for row in range(6)]
    return "\n".join([_you(env, seat), *rows, " ".join(str(column) for column in range(7))])


def leduc(env: Any, seat: str) -> str:
    """The seat's observation in words: its card, the public card, the chips each side has put in."""
    observation = env.observe(seat)["observation"]
    hand, public = np.flatnonzero(observation[:RANKS]), np.flatnonzero(observation[RANKS : 2 * RANKS])
    mine, theirs = (
        int(np.argmax(observation[start : start + CHIP_SLOTS])) for start in (2 * RANKS, 2 * RANKS + CHIP_SLOTS)
    )
    public_card = "JQK"[public[0]] if len(public) else "not dealt yet"
    return (
        f"you are {seat}: your card {'JQK'[hand[0]]}, public card {public_card}; chips in: you {mine}, the "
        f"opponent {theirs}"
    )


def leduc_opponent_card(env: Any, seat: str) -> str:
    """The opponent's card, from rlcard's game state (no observation of ``seat`` shows it)."""
    opponent = env.unwrapped.env.game.players[1 - env.possible_agents.index(seat)]
    return f"the opponent held {opponent.hand.rank}"


def openspiel(env: Any, seat: str) -> str:
    """OpenSpiel's state string (in a game of imperfect information, the seat's own
    information-state string until the end), then the seat's moves as OpenSpiel names them."""
    game = env.unwrapped
    moves = ", ".join(f"{move} {game.move_text(seat, move)}" for move in legal_actions(env, seat))
    return f"you are {seat}\n{game.text(seat)}" + (f"\nmoves: {moves}" if moves else "")


BOARDS = {
    "pz:pettingzoo.classic.tictactoe_v3": BoardText(tictactoe),
    "pz:pettingzoo.classic.connect_four_v3": BoardText(connect_four),
    LEDUC_ENV_ID: BoardText(leduc, lambda action: f"{action} {RLCARD_ACTIONS[action]}", leduc_opponent_card),
}


def board_text(env_id: str) -> BoardText:
    """How ``env_id`` is shown, or a one-line FastPPOError naming the games that can be."""
    if is_openspiel(env_id):
        return BoardText(openspiel)
    if env_id not in BOARDS:
        raise FastPPOError(
            f"{env_id} has no text board to play on: a person can play {', '.join(BOARDS)} and OpenSpiel's games "
            "(openspiel:<game>)"
        )
    return BOARDS[env_id]

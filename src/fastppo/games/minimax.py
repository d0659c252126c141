"""A perfect tic-tac-toe player: the yardstick "draws against perfect play" needs (a trained
agent that never loses to it plays perfectly too).

Negamax over every position (5 478 legal ones, memoised, so a game costs microseconds after the
first): a win scores ``1 + the empty cells left`` for the winner, so the player prefers the fastest
win and, when lost, the slowest loss (the most chances for an imperfect opponent to go wrong).
Among equally good moves it picks at random from its seeded generator: a deterministic player
would always play the same few games, and a test "never loses to minimax" would then cover only
those."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
"""The eight winning lines. PettingZoo numbers the cells column by column; the set of lines is the
same whichever way a 3x3 board is numbered by rows or columns."""


def board_of(history: list[int]) -> tuple[int, ...]:
    """The 9 cells after ``history`` (cells played in order; the first seat moves first): 0 empty,
    1 the first seat's mark, 2 the second's."""
    cells = [0] * 9
    for turn, cell in enumerate(history):
        cells[cell] = 1 + turn % 2
    return tuple(cells)


def _winner(board: tuple[int, ...]) -> int:
    for a, b, c in LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return board[a]
    return 0


@cache
def value(board: tuple[int, ...]) -> int:
    """The score, under perfect play from here, of the player to move: positive wins (``1 + empty
    cells`` at the end), 0 draws, negative loses."""
    empty = board.count(0)
    if _winner(board):  # the player who just moved won
        return -(1 + empty)
    if not empty:
        return 0
    return max(move_values(board).values())


def move_values(board: tuple[int, ...]) -> dict[int, int]:
    """Each legal move's score for the player to move (``value`` of the position it leads to,
    negated)."""
    mark = 1 + (9 - board.count(0)) % 2
    return {cell: -value(board[:cell] + (mark,) + board[cell + 1 :]) for cell in range(9) if not board[cell]}


class MinimaxPlayer:
    """Perfect tic-tac-toe (``pz:pettingzoo.classic.tictactoe_v3``), random among the best moves."""

    name = "minimax"

    def __init__(self, seed: int = 0):
        self.reset(seed)

    def reset(self, seed: int) -> None:
        self._random = np.random.default_rng(seed)

    def act(self, env: Any, agent: str, history: list[int]) -> int:
        values = move_values(board_of(history))
        best = max(values.values())
        return int(self._random.choice([cell for cell, v in values.items() if v == best]))

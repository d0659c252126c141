"""The symmetries of a game's board: transforms of a position that leave the game's rules as they
were (connect four's mirror image; tic-tac-toe's four rotations, each with and without a
reflection). The search (``fastppo.games.search``) reads each position it scores in every such
view and averages what the networks say, as AlphaGo scored positions over the board's symmetries:
a trained network is seldom exactly symmetric, and its errors in one view are partly undone by
the others (connect four, ``--search 400`` against MCTS-100: benchmarks page).

A ``Symmetry`` moves the seat's observation planes (height x width x planes, as PettingZoo gives
them) and renames the moves: ``moves[k]`` is the move of the original position that is move ``k``
in the transformed one (its cell, or its column, carried along with the board)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Symmetry:
    """``board`` transforms an array whose first two axes are the board's rows and columns;
    ``moves[k]``: the original move that is move ``k`` after it."""

    board: Callable[[np.ndarray], np.ndarray]
    moves: np.ndarray

    def view(self, observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A PettingZoo game's observation (``observation`` planes and ``action_mask``) as the
        transformed position shows it."""
        return {
            "observation": np.ascontiguousarray(self.board(observation["observation"])),
            "action_mask": np.ascontiguousarray(observation["action_mask"][self.moves]),
        }

    def unview(self, probabilities: np.ndarray) -> np.ndarray:
        """Move probabilities of the transformed position, given back to the original's moves."""
        original = np.empty_like(probabilities)
        original[self.moves] = probabilities
        return original


def _cells(board: Callable[[np.ndarray], np.ndarray], height: int, width: int) -> Symmetry:
    """A symmetry of a game whose moves are the board's cells, numbered row by row."""
    return Symmetry(board, board(np.arange(height * width).reshape(height, width)).ravel())


def _square(turns: int, reflect: bool) -> Callable[[np.ndarray], np.ndarray]:
    def board(array: np.ndarray) -> np.ndarray:
        return np.rot90(np.swapaxes(array, 0, 1) if reflect else array, turns, axes=(0, 1))

    return board


def _mirror(array: np.ndarray) -> np.ndarray:
    return array[:, ::-1]


SYMMETRIES: dict[str, list[Symmetry]] = {
    # columns are the moves; the mirror image swaps column c and 6 - c
    "pz:pettingzoo.classic.connect_four_v3": [Symmetry(_mirror, np.arange(7)[::-1].copy())],
    # the 3 x 3 observation holds square 3 i + j at [i, j], square k being move k
    "pz:pettingzoo.classic.tictactoe_v3": [
        _cells(_square(turns, reflect), 3, 3) for turns in range(4) for reflect in (False, True) if turns or reflect
    ],
}
"""Each game's symmetries besides the identity; a game not named here has none."""

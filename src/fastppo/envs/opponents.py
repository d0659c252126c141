"""Who plays the rows of a multi-agent env that the learner does not: the protocol the
self-play league (fastppo.games.league) and the fixed players of whole games
(fastppo.games.players.SeatedPlayers) implement, and the default, the learner everywhere. The
envs hold one (``opponents``) and ask it at each new episode, for each opponent move, and at each
episode's end (fastppo.envs.turn_based, fastppo.envs.pettingzoo_vec)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Opponents(Protocol):
    """Who plays the rows (seats of a game, agents of a Parallel env) the learner does not."""

    def new_game(self, copy: int) -> np.ndarray:
        """bool [rows of a copy]: the rows the learner plays in the episode ``copy`` starts now."""
        ...

    def act(self, copies: np.ndarray, rows: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
        """Actions [k] of the opponents' rows [k, width] in ``copies`` [k] (a copy may repeat)."""
        ...

    def game_over(self, copy: int, returns: np.ndarray) -> None:
        """The episode in ``copy`` ended with ``returns`` [rows of a copy]."""
        ...


class LearnerEverywhere:
    """Self-play against itself alone: the learner plays every row of every copy."""

    def __init__(self, seats: int):
        self.seats = seats

    def new_game(self, copy: int) -> np.ndarray:
        return np.ones(self.seats, dtype=bool)

    def act(self, copies: np.ndarray, rows: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
        raise AssertionError("the learner plays every seat: no opponent moves")

    def game_over(self, copy: int, returns: np.ndarray) -> None:
        pass

"""The self-play league's ratings: the learner's openskill rating, moved by every game it finishes
against a pool snapshot (which is rated too) or against a fixed player (random, OpenSpiel's MCTS),
whose rating never moves: the fixed players anchor the scale (were they rated too, the whole
scale would drift with the learner)."""

from __future__ import annotations

from typing import Any

from fastppo.errors import FastPPOError, install_extra

Rating = tuple[float, float]
"""openskill's (mu, sigma)."""
START_RATING: Rating = (25.0, 25.0 / 3.0)
"""openskill's default (mu, sigma)."""


def ordinal(rating: Rating) -> float:
    """openskill's conservative single figure, mu - 3 sigma."""
    return rating[0] - 3.0 * rating[1]


class Ratings:
    """The learner's rating and the fixed players' anchors (module docstring)."""

    def __init__(self) -> None:
        self.learner: Rating = START_RATING
        self.fixed: dict[str, Rating] = {}
        self._model: Any = None

    def rate(self, a: Rating, b: Rating, result: int) -> tuple[Rating, Rating]:
        """(a, b)'s openskill ratings after a game that ``a`` won (1), drew (0) or lost (-1)."""
        if self._model is None:
            try:
                from openskill.models import PlackettLuce
            except ImportError:
                raise FastPPOError(f"self-play ratings need openskill: {install_extra('games')}") from None
            self._model = PlackettLuce()
        model = self._model
        ranks = {1: [0, 1], 0: [0, 0], -1: [1, 0]}[result]
        [[new_a], [new_b]] = model.rate([[model.create_rating(list(a))], [model.create_rating(list(b))]], ranks=ranks)
        return (new_a.mu, new_a.sigma), (new_b.mu, new_b.sigma)

    def learner_against(self, rating: Rating, result: int) -> Rating:
        """Rate the learner after a game of ``result`` against a snapshot rated ``rating``: the
        snapshot's new rating."""
        self.learner, rating = self.rate(self.learner, rating, result)
        return rating

    def learner_against_fixed(self, name: str, result: int, games: int = 1) -> None:
        """Rate the learner after ``games`` games of ``result`` against the fixed player ``name``,
        whose rating stays where it starts."""
        anchor = self.fixed.setdefault(name, START_RATING)
        for _ in range(games):
            self.learner, _ = self.rate(self.learner, anchor, result)

    def metrics(self) -> dict[str, float]:
        """``ratings/learner`` and ``ratings/<fixed player>``, as ordinals."""
        return {"ratings/learner": ordinal(self.learner)} | {
            f"ratings/{name}": ordinal(rating) for name, rating in self.fixed.items()
        }

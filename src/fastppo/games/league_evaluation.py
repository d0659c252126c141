"""The league's evaluation games (--self-play.eval-every): the learner, deterministic, against each
fixed player --self-play.eval-opponents names (random, OpenSpiel's MCTS, minimax), with seats
swapped, seeded by the iteration so that a resumed run plays the same games."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from fastppo.agents.agent import Agent
from fastppo.games.game_env import make_game
from fastppo.games.matches import GameResults, play_games
from fastppo.games.players import AgentPlayer, Player, player_from_spec


def fixed_player(spec: str, env_id: str, seed: int = 0, flag: str = "--self-play.eval-opponents") -> Player:
    """The fixed player ``flag`` (--self-play.eval-opponents, --self-play.fixed-opponents) names
    (``player_from_spec``: a class of the user's too, once a resume has checked that the command
    line names it, ``check_folder_players``), or a one-line FastPPOError (mcts:0, minimax off
    tic-tac-toe, ...)."""
    return player_from_spec(spec, env_id, seed, flag=flag)


class FixedPlayerGames:
    """``games`` games of the learner against each of the fixed players ``specs`` name, on the
    game ``game`` (with ``env_kwargs``), seeded by ``seed`` plus the iteration."""

    def __init__(self, specs: Sequence[str], game: str, env_kwargs: dict[str, Any], games: int, seed: int):
        self.specs, self.games, self.seed = list(specs), games, seed
        self.players = [fixed_player(spec, game, seed) for spec in self.specs]
        self.make = partial(make_game, game, env_kwargs)

    def play(self, learner: Agent, iteration: int) -> list[tuple[str, GameResults]]:
        """Each fixed player's spec and the learner's results against it."""
        player = AgentPlayer(learner, deterministic=True, name="learner")
        return [
            (spec, play_games(self.make, (player, fixed), self.games, seed=self.seed + iteration))
            for spec, fixed in zip(self.specs, self.players)
        ]


def game_rates(against: str, results: Sequence[int]) -> dict[str, float]:
    """``self_play/{win,draw,loss}_vs_<against>`` of the learner's training game ``results`` (+1,
    0, -1) against one opponent (the pool, random, a fixed player); none without games."""
    if not results:
        return {}
    played = np.asarray(results)
    return {
        f"self_play/{name}_vs_{against}": float(np.mean(played == value))
        for name, value in (("win", 1), ("draw", 0), ("loss", -1))
    }


def results_metrics(spec: str, results: GameResults) -> dict[str, float]:
    """``eval/<spec>/win_rate``, ``draw_rate`` and ``loss_rate`` of ``results``."""
    total = results.total
    games = max(total.games, 1)
    return {
        f"eval/{spec}/win_rate": total.wins / games,
        f"eval/{spec}/draw_rate": total.draws / games,
        f"eval/{spec}/loss_rate": total.losses / games,
    }

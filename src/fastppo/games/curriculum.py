"""A curriculum against fixed players (--self-play.fixed-opponents, --self-play.fixed-share,
--self-play.fixed-schedule): a share of the league's training games, constant or falling linearly
to 0 over training (fastppo.core.schedules), is played against one of a list of fixed players
(random, OpenSpiel's MCTS, minimax, another run's agent), drawn uniformly per game. The learner's
seat alone is trained in such a game, and its result rates the learner against the player's
rating, which never moves (fastppo.games.ratings).

A fixed player sees the game itself and every move played so far (``Player.act``), as in
``fastppo eval``: the league hands it the env's copy and that copy's history
(``TurnBasedVecEnv.history``). Each move is played on the seed of its game (drawn by the
league's RNG when the game starts) plus the moves before it, so a player's move is a function of
the checkpointed state alone and a resumed run plays the same games."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo.config import SelfPlayConfig
from fastppo.core.schedules import schedule_progress, scheduled
from fastppo.envs.turn_based import TurnBasedVecEnv
from fastppo.games.league_evaluation import fixed_player, game_rates
from fastppo.games.ratings import Ratings

FIXED = -3
"""A copy's opponent id when it plays ``fixed_opponents[k]``: ``FIXED - k`` (the league's LATEST
is -1, RANDOM -2, a snapshot its iteration)."""
MAX_GAME_SEED = 2**31 - 1
FLAG = "--self-play.fixed-opponents"


class FixedOpponents:
    """The fixed players of a league's curriculum and each copy's game seed (module docstring)."""

    def __init__(self, cfg: SelfPlayConfig, game: str, copies: int, num_iterations: int, envs: TurnBasedVecEnv | None):
        self.specs: list[str] = list(cfg.fixed_opponents)
        self.players = [fixed_player(spec, game, flag=FLAG) for spec in self.specs]
        self.start, self.schedule, self.num_iterations = cfg.fixed_share, cfg.fixed_schedule, num_iterations
        self.envs = envs
        self.game_seed = np.zeros(copies, dtype=np.int64)
        self._results: dict[str, list[int]] = {spec: [] for spec in self.specs}

    def share(self, iteration: int) -> float:
        """The share of new games against a fixed player during ``iteration`` (1-based)."""
        progress = schedule_progress(min(iteration, self.num_iterations), self.num_iterations)
        return scheduled(self.schedule, self.start, progress)

    def draw(self, rng: np.random.Generator, copy: int, iteration: int) -> int | None:
        """The opponent id of the game ``copy`` starts in ``iteration``, when it is a fixed
        player's (one draw of ``rng`` whatever the share, so a share that falls to 0 leaves the
        other draws where they were), else None."""
        if rng.random() >= self.share(iteration):
            return None
        self.game_seed[copy] = rng.integers(MAX_GAME_SEED)
        return FIXED - int(rng.integers(len(self.players)))

    def act(self, opponent: int, copies: np.ndarray) -> np.ndarray:
        """The moves of the fixed player ``opponent`` (an id) in ``copies``, each the seat to move."""
        assert self.envs is not None  # check_league: a curriculum needs a turn-based game
        player, moves = self.players[FIXED - opponent], []
        for copy in copies.tolist():
            env, history = self.envs.envs[copy], self.envs.history[copy]
            player.reset(int(self.game_seed[copy]) + len(history))
            moves.append(player.act(env, env.agent_selection, history))
        return np.asarray(moves)

    def game_over(self, opponent: int, result: int, ratings: Ratings) -> None:
        """The learner's ``result`` (+1, 0, -1) against the fixed player ``opponent`` (an id)."""
        spec = self.specs[FIXED - opponent]
        self._results[spec].append(result)
        ratings.learner_against_fixed(spec, result)

    def metrics(self, iteration: int) -> dict[str, float]:
        """This iteration's share and the learner's results against each fixed player it played,
        ``self_play/{win,draw,loss}_vs_<spec>``; the results start over."""
        metrics = {"self_play/fixed_share": self.share(iteration)}
        for spec, results in self._results.items():
            metrics |= game_rates(spec, results)
        self._results = {spec: [] for spec in self.specs}
        return metrics

    def ids(self) -> set[int]:
        """Every fixed player's opponent id."""
        return {FIXED - k for k in range(len(self.players))}

    def state(self) -> dict[str, Any]:
        return {"game_seed": self.game_seed.tolist()}

    def parse(self, meta: Any) -> np.ndarray:
        """``state()``'s game seeds, or a ValueError saying what is wrong with them."""
        seeds = meta["game_seed"]
        if not (
            isinstance(seeds, list)
            and len(seeds) == self.game_seed.size
            and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_GAME_SEED for s in seeds)
        ):
            raise ValueError(f"holds the fixed players' game seeds {seeds!r}, not one seed per copy")
        return np.asarray(seeds, dtype=np.int64)

"""Self-play in turn-based games: the pool of the learner's past snapshots it plays against, how
each game's opponent is drawn, the opponents' moves, and the ratings (--self-play.*).

The league is the turn-based env's ``Opponents`` (fastppo.envs.turn_based): at each new game it
decides whether the learner plays every seat (a game against its latest self, each seat
trained) or one seat against a snapshot, whose moves the env asks for in batches. A snapshot is
the learner's weights (and observation statistics) at an iteration; the pool keeps the newest
``pool_size``. Each snapshot keeps the learner's record against it (wins, draws, losses), which
the prioritised sampling reads, and an openskill rating: every finished game against the pool
rates the learner and that snapshot, a new snapshot starts from the learner's rating, and the
evaluation games against fixed players (random, OpenSpiel's MCTS) anchor the scale.

Everything here is part of the run's state: ``state()`` goes into each checkpoint (the snapshots'
weights as tensors, the rest as JSON) and ``load`` restores it, so that a resumed run draws the
same opponents and plays the same games.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fastppo.agents.agent import Agent
from fastppo.config import SelfPlayConfig
from fastppo.errors import FastPPOError

LATEST = -1
"""A copy's opponent id when the learner plays every seat."""
START_RATING = (25.0, 25.0 / 3.0)
"""openskill's default (mu, sigma)."""


@dataclass
class Snapshot:
    """One past learner in the pool: its weights, statistics and record."""

    iteration: int
    policy: torch.nn.Module
    obs_rms: Any
    record: list[int] = field(default_factory=lambda: [0, 0, 0])
    """The learner's wins, draws and losses against it."""
    rating: tuple[float, float] = START_RATING

    def learner_score(self) -> float:
        """The learner's mean score against it (win 1, draw 0.5), 0.5 before any game."""
        wins, draws, losses = self.record
        games = wins + draws + losses
        return 0.5 if games == 0 else (wins + 0.5 * draws) / games


class NoLeague:
    """Training without a league: nothing to snapshot, rate or save."""

    def after_update(self, iteration: int, metrics: dict[str, float]) -> None:
        pass

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
        return {}, None

    def load(self, tensors: dict[str, torch.Tensor], meta: Any) -> None:
        pass


class League:
    """The self-play pool of one run (module docstring); ``Opponents`` of its turn-based env."""

    def __init__(self, cfg: SelfPlayConfig, learner: Agent, copies: int, seats: int, seed: int):
        if cfg.pool_size and seats != 2:
            raise FastPPOError(f"--self-play.pool-size needs a two-seat game (the learner in one seat, a snapshot in the other), and this one has {seats} seats: drop it to train by self-play alone")
        self.cfg, self.learner, self.seats = cfg, learner, seats
        self.snapshots: dict[int, Snapshot] = {}  # by iteration: the pool's and any a game in flight still plays
        self.pool_ids: list[int] = []  # the pool, oldest first: what new games draw from
        self.opponent = np.full(copies, LATEST)  # the pool snapshot (its iteration) each copy plays, or LATEST
        self.learner_seat = np.zeros(copies, dtype=int)
        self.rng = np.random.default_rng(seed)
        self.learner_rating = START_RATING
        self.fixed_ratings: dict[str, tuple[float, float]] = {}
        self._results: list[int] = []  # this iteration's learner results against the pool: +1, 0, -1
        self._model: Any = None

    # The env's Opponents: ------------------------------------------------------------------------

    @property
    def pool(self) -> list[Snapshot]:
        return [self.snapshots[i] for i in self.pool_ids]

    def _forget_unused(self) -> None:
        """Drop the snapshots that left the pool once no game plays them any more."""
        used = set(self.pool_ids) | set(self.opponent.tolist())
        self.snapshots = {i: s for i, s in self.snapshots.items() if i in used}

    def new_game(self, copy: int) -> np.ndarray:
        seats = np.ones(self.seats, dtype=bool)
        if not self.pool_ids or self.rng.random() < self.cfg.latest_share:
            self.opponent[copy] = LATEST
            self._forget_unused()
            return seats
        self.opponent[copy] = self._draw().iteration
        self.learner_seat[copy] = self.rng.integers(self.seats)
        seats[:] = False
        seats[self.learner_seat[copy]] = True
        self._forget_unused()
        return seats

    def _draw(self) -> Snapshot:
        if self.cfg.sampling == "latest":
            return self.pool[-1]
        if self.cfg.sampling == "uniform":
            return self.pool[self.rng.integers(len(self.pool))]
        weights = np.array([(1.0 - s.learner_score()) ** 2 for s in self.pool]) + 1e-3  # every snapshot keeps a chance
        return self.pool[self.rng.choice(len(self.pool), p=weights / weights.sum())]

    def act(self, copies: np.ndarray, rows: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
        actions = np.zeros(len(copies), dtype=np.int64)
        for iteration in np.unique(self.opponent[copies]):
            at = np.flatnonzero(self.opponent[copies] == iteration)
            snapshot = self.snapshots[int(iteration)]
            obs = torch.as_tensor(rows[at])
            if snapshot.obs_rms is not None:
                obs = snapshot.obs_rms.normalize(obs, self.learner.config.env.clip_obs)
            mask = None if masks is None else torch.as_tensor(masks[at])
            with torch.inference_mode():  # the actor alone: the sample act() draws, without the critic's forward
                action, _ = snapshot.policy.predict(obs.to(self.learner.device), None if mask is None else mask.to(self.learner.device))
            actions[at] = action.cpu().numpy()
        return actions

    def game_over(self, copy: int, returns: np.ndarray) -> None:
        if self.opponent[copy] == LATEST:
            return
        mine = float(returns[self.learner_seat[copy]])
        result = int(np.sign(mine))
        snapshot = self.snapshots[int(self.opponent[copy])]
        snapshot.record[1 - result] += 1  # +1 -> wins, 0 -> draws, -1 -> losses
        self._results.append(result)
        self.learner_rating, snapshot.rating = self.rate(self.learner_rating, snapshot.rating, result)

    # Ratings: ------------------------------------------------------------------------------------

    def rate(self, a: tuple[float, float], b: tuple[float, float], result: int) -> tuple[tuple[float, float], tuple[float, float]]:
        """(a, b)'s openskill ratings after a game that ``a`` won (1), drew (0) or lost (-1)."""
        if self._model is None:
            try:
                from openskill.models import PlackettLuce
            except ImportError:
                raise FastPPOError("self-play ratings need openskill: pip install 'fastppo[games]'") from None
            self._model = PlackettLuce()
        model = self._model
        ranks = {1: [0, 1], 0: [0, 0], -1: [1, 0]}[result]
        [[new_a], [new_b]] = model.rate([[model.create_rating(list(a))], [model.create_rating(list(b))]], ranks=ranks)
        return (new_a.mu, new_a.sigma), (new_b.mu, new_b.sigma)

    # Each iteration: -----------------------------------------------------------------------------

    def after_update(self, iteration: int, metrics: dict[str, float]) -> None:
        """Log the iteration's games and ratings into ``metrics``; snapshot the learner when due."""
        if self._results:
            results = np.asarray(self._results)
            metrics |= {f"self_play/{name}_vs_pool": float(np.mean(results == value)) for name, value in (("win", 1), ("draw", 0), ("loss", -1))}
            self._results = []
        if self.cfg.pool_size and iteration % self.cfg.snapshot_every == 0:
            self.snapshots[iteration] = Snapshot(iteration, self._frozen(self.learner.policy), copy.deepcopy(self.learner.obs_rms), rating=self.learner_rating)
            self.pool_ids = [*self.pool_ids, iteration][-self.cfg.pool_size :]
            self._forget_unused()
        metrics["self_play/pool_size"] = float(len(self.pool_ids))
        metrics["ratings/learner"] = ordinal(self.learner_rating)
        for name, rating in self.fixed_ratings.items():
            metrics[f"ratings/{name}"] = ordinal(rating)

    def _frozen(self, policy: torch.nn.Module) -> torch.nn.Module:
        frozen = copy.deepcopy(policy).eval()
        frozen.requires_grad_(False)
        return frozen

    # Checkpoints: --------------------------------------------------------------------------------

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """(tensors, JSON) of the whole league, for a checkpoint."""
        tensors: dict[str, torch.Tensor] = {}
        for s in self.snapshots.values():
            tensors |= {f"pool.{s.iteration}.policy.{k}": v.detach().cpu().contiguous() for k, v in s.policy.state_dict().items()}
            if s.obs_rms is not None:
                tensors |= {f"pool.{s.iteration}.obs_rms.{k}": v.detach().cpu().contiguous() for k, v in s.obs_rms.state_dict().items()}
        meta = {
            "snapshots": [{"iteration": s.iteration, "record": list(s.record), "rating": list(s.rating)} for s in self.snapshots.values()],
            "pool": list(self.pool_ids),
            "opponent": self.opponent.tolist(),
            "learner_seat": self.learner_seat.tolist(),
            "rng": self.rng.bit_generator.state,
            "learner_rating": list(self.learner_rating),
            "fixed_ratings": {k: list(v) for k, v in self.fixed_ratings.items()},
        }
        return tensors, meta

    def load(self, tensors: dict[str, torch.Tensor], meta: Any) -> None:
        """``state()``'s output back; a damaged or foreign one is one FastPPOError, the league unchanged."""
        if meta is None:
            raise FastPPOError("the checkpoint holds no self-play pool, and this run plays a turn-based game with one: resume the run that wrote it")
        try:
            snapshots = {s.iteration: s for s in (self._snapshot_of(entry, tensors) for entry in meta["snapshots"])}
            pool_ids = [int(i) for i in meta["pool"]]
            if not set(pool_ids) <= set(snapshots) or len(pool_ids) > max(self.cfg.pool_size, 0):
                raise ValueError(f"its pool {pool_ids} is not among its snapshots or holds more than --self-play.pool-size {self.cfg.pool_size}")
            opponent, seats = np.asarray(meta["opponent"], dtype=int), np.asarray(meta["learner_seat"], dtype=int)
            if opponent.shape != self.opponent.shape or seats.shape != self.learner_seat.shape:
                raise ValueError(f"it plays {opponent.size} copies, this run {self.opponent.size}")
            if not set(opponent.tolist()) <= {LATEST, *snapshots}:
                raise ValueError("a copy plays a snapshot the pool lacks")
            rng = np.random.default_rng()
            rng.bit_generator.state = meta["rng"]
            learner_rating = _rating(meta["learner_rating"])
            fixed = {str(k): _rating(v) for k, v in meta["fixed_ratings"].items()}
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise FastPPOError(f"the checkpoint's self-play pool is damaged ({exc}): resume from another checkpoint") from None
        self.snapshots, self.pool_ids, self.opponent, self.learner_seat, self.rng = snapshots, pool_ids, opponent, seats, rng
        self.learner_rating, self.fixed_ratings = learner_rating, fixed

    def _snapshot_of(self, entry: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Snapshot:
        iteration = int(entry["iteration"])
        policy = self._frozen(self.learner.policy)
        prefix = f"pool.{iteration}.policy."
        policy.load_state_dict({k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)})  # RuntimeError on a missing or misshapen tensor
        obs_rms = copy.deepcopy(self.learner.obs_rms)
        if obs_rms is not None:
            prefix = f"pool.{iteration}.obs_rms."
            obs_rms.load_state_dict({k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)})
        record = [int(x) for x in entry["record"]]
        if len(record) != 3 or min(record) < 0:
            raise ValueError(f"snapshot {iteration}'s record {record} is not three counts")
        return Snapshot(iteration, policy, obs_rms, record, _rating(entry["rating"]))


def _rating(value: Any) -> tuple[float, float]:
    mu, sigma = (float(x) for x in value)
    if not (np.isfinite(mu) and np.isfinite(sigma) and sigma > 0):
        raise ValueError(f"rating {value} is not (mu, sigma > 0)")
    return mu, sigma


def ordinal(rating: tuple[float, float]) -> float:
    """openskill's conservative single figure, mu - 3 sigma."""
    return rating[0] - 3.0 * rating[1]

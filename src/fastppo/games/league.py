"""Self-play: the league of a game's run, which draws each game's opponent from the pool of the
learner's past snapshots (fastppo.games.pool), plays the opponents' moves, and reports the games
and ratings (fastppo.games.ratings, fastppo.games.league_evaluation) each iteration (--self-play.*).

The league is its env's ``Opponents`` (fastppo.envs.opponents): at each new game (episode) it
decides whether the learner plays every row (a game against its latest self, each seat
trained) or one side against a snapshot (or, --self-play.random-share, uniform legal moves),
whose moves the env asks for in batches. A side is a seat of a turn-based game
(fastppo.envs.turn_based) or one of the two agent groups of a Parallel env
(fastppo.envs.pettingzoo_vec). A snapshot is the learner's weights (and observation statistics)
at an iteration; the pool keeps the newest ``pool_size``. Each snapshot keeps the learner's
record against it (wins, draws, losses), which the prioritised sampling reads, and an openskill
rating: every finished game against the pool rates the learner and that snapshot, a new snapshot
starts from the learner's rating, and the games against fixed players (random, OpenSpiel's MCTS)
rate the learner alone, against the player's rating that never moves: those anchor the scale.
A curriculum plays a share of the games against fixed players (--self-play.fixed-opponents:
fastppo.games.curriculum), rated as the evaluation games are.
In a small two-player zero-sum OpenSpiel game the league also logs the learner's exploitability
(--self-play.exploitability-every: fastppo.games.exploitability), and with --self-play.average-policy
that of its pool's time-average policy (fastppo.games.average). With --self-play.magnet-coef the
league keeps the magnet of magnetic mirror descent (fastppo.games.magnet): its log-probabilities
join each update's batch, and it follows the learner after each update.

Everything here is part of the run's state: ``state()`` goes into each checkpoint (the snapshots'
weights as tensors, the rest as JSON) and ``load`` restores it, so that a resumed run draws the
same opponents and plays the same games.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from fastppo.agents.agent import Agent
from fastppo.config import Config, SelfPlayConfig
from fastppo.env_ids import is_pettingzoo
from fastppo.envs.pettingzoo_vec import AgentSpaces, PettingZooVecEnv
from fastppo.envs.turn_based import TurnBasedVecEnv, is_game
from fastppo.envs.vector import VecEnv
from fastppo.errors import FastPPOError
from fastppo.games.average import PoolAverage
from fastppo.games.curriculum import FIXED, FixedOpponents
from fastppo.games.exploitability import AgentExploitability, scored_game
from fastppo.games.league_evaluation import FixedPlayerGames, fixed_player, game_rates, results_metrics
from fastppo.games.magnet import Magnet, magnet_tensors
from fastppo.games.pool import Pool, Snapshot, frozen, load_snapshot, snapshot_tensors
from fastppo.games.ratings import Rating, Ratings

LATEST = -1
"""A copy's opponent id when the learner plays every seat."""
RANDOM = -2
"""A copy's opponent id when the other side plays uniform legal moves (--self-play.random-share)."""


class Damaged(ValueError):
    """What a league's checkpoint JSON gets wrong, phrased after "trainer.json's self_play"."""


def check_league(config: Config, envs: VecEnv, processes: int) -> None:
    """Refuse, once the envs are built, what a league cannot do (``Config.validate`` checks the
    flags alone): --self-play.* where they would be ignored, a pool of other than two sides or
    over several processes, memory, and a --run.stop-return that no game would ever reach."""
    sp = config.self_play
    turn_based = is_game(envs)
    if sp == SelfPlayConfig() and not turn_based:
        return
    if not turn_based:
        _check_parallel_league(config, envs)
    if sp.magnet_coef and config.multi_agent.policies != "shared":
        raise FastPPOError(
            f"--self-play.magnet-coef pulls the one shared policy toward its magnet, and --multi-agent.policies "
            f"{config.multi_agent.policies} trains several: drop one of them"
        )
    if config.policy.memory != "none" and turn_based:
        # A seat's rows are decisions on its turns only, and a state restarts after every row that is none.
        raise FastPPOError(
            "--policy.memory on a turn-based game would carry nothing from one of a seat's turns to the next: drop "
            f"--policy.memory {config.policy.memory}"
        )
    if config.policy.memory != "none":
        raise FastPPOError(
            "a self-play pool's snapshots act on one observation at a time, without memory: drop --policy.memory "
            f"{config.policy.memory}"
        )
    spaces: AgentSpaces | None = getattr(envs, "spaces", None)  # a game's seats, a Parallel env's agents
    seats = len(spaces.agents) if turn_based and spaces is not None else 0
    if sp.pool_size and turn_based and seats != 2:
        raise FastPPOError(
            "--self-play.pool-size needs a two-seat game (the learner in one seat, a snapshot in the other), and this "
            f"one has {seats} seats: drop it to train by self-play alone"
        )
    if sp.pool_size and processes > 1:
        raise FastPPOError(
            "a self-play pool trains in one process: drop --self-play.pool-size or train without torchrun"
        )
    if (
        turn_based
        and config.run.stop_return is not None
        and (not sp.pool_size or sp.latest_share == 1.0)
        and not sp.random_share
        and not sp.fixed_share
    ):
        # fastppo.envs.turn_based.game_episodes: a game against itself has no return of the learner's.
        raise FastPPOError(
            "--run.stop-return reads the learner's return in games against its past snapshots, and this run plays "
            "none: give --self-play.pool-size N and --self-play.latest-share below 1, --self-play.random-share or "
            "--self-play.fixed-share"
        )
    named = sp.eval_every or sp.eval_opponents != SelfPlayConfig.eval_opponents  # a game of 3 seats has no default
    for spec in (
        sp.eval_opponents if turn_based and named else ()
    ):  # checked even unused (--self-play.eval-every 0): the config saves them
        fixed_player(spec, config.env.env_id)
    if sp.fixed_opponents and turn_based and seats != 2:
        raise FastPPOError(
            f"--self-play.fixed-opponents play one seat against the learner in the other, and this game has {seats} "
            "seats: drop them"
        )
    if sp.exploitability_every:
        try:
            scored_game(config.env.env_id)
        except FastPPOError as exc:
            raise FastPPOError(f"--self-play.exploitability-every: {exc}") from None


def _check_parallel_league(config: Config, envs: VecEnv) -> None:
    """A Parallel env plays a pool side against side: its agent groups are the two sides."""
    sp, env_id = config.self_play, config.env.env_id
    if not isinstance(envs, PettingZooVecEnv):
        what = "a Parallel env on the async backend" if is_pettingzoo(env_id) else "not a PettingZoo env"
        raise FastPPOError(
            "--self-play.* flags apply to PettingZoo games and Parallel envs stepped in the training process, and "
            f"{env_id} is {what}: drop them, or use --backend sync"
        )
    if sp.eval_every or sp.random_share or sp.fixed_opponents:
        flag = (
            "--self-play.eval-every"
            if sp.eval_every
            else "--self-play.random-share"
            if sp.random_share
            else "--self-play.fixed-opponents"
        )
        raise FastPPOError(
            f"{flag} plays games against fixed players (random, MCTS), which need a turn-based game, and {env_id} is a "
            "Parallel env: drop it"
        )
    if sp.magnet_coef:
        raise FastPPOError(
            f"--self-play.magnet-coef pulls the learner of a turn-based game toward its magnet, and {env_id} is a "
            "Parallel env: drop it"
        )
    if not sp.pool_size:
        raise FastPPOError(
            "on a Parallel env the learner already plays every agent: --self-play.* flags need a pool, "
            f"--self-play.pool-size N, for {env_id}"
        )
    groups = envs.spaces.group_names
    if len(groups) != 2:
        raise FastPPOError(
            f"--self-play.pool-size on a Parallel env plays one group of agents against the other, and {env_id}'s "
            f"agents form {len(groups)} group(s) ({', '.join(groups)}): a pool needs two, e.g. adversary_* | agent_* "
            "in pz:mpe2.simple_tag_v3"
        )


class NoLeague:
    """Training without a league: nothing to snapshot, rate or save."""

    def magnet_log_probs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {}

    def after_update(self, iteration: int) -> dict[str, float]:
        return {}

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
        return {}, None

    def expected_tensors(self, meta: Any) -> dict[str, torch.Tensor]:
        if meta is not None:
            raise Damaged("is there, and this run has no self-play league")
        return {}

    def load(self, tensors: dict[str, torch.Tensor], meta: Any) -> None:
        pass


class League:
    """The self-play league of one run (module docstring); ``Opponents`` of its env."""

    def __init__(
        self,
        cfg: SelfPlayConfig,
        learner: Agent,
        copies: int,
        sides: int | Sequence[int],
        seed: int,
        game: str = "",
        env_kwargs: dict[str, Any] | None = None,
        envs: TurnBasedVecEnv | None = None,
        num_iterations: int = 1,
    ):
        """``sides``: a game's number of seats, or the side of each agent of a Parallel env (its
        group); ``check_league`` has passed: with a pool, two sides. ``game`` and ``env_kwargs``
        build the game the evaluation games (``--self-play.eval-every``) are played on; the fixed
        players of a curriculum play on ``envs``, their share scheduled over ``num_iterations``."""
        self.sides = np.arange(sides) if isinstance(sides, int) else np.asarray(sides)
        self.seats = int(self.sides.max()) + 1  # sides to draw the learner's from (learner_seat: its side)
        self.cfg, self.learner = cfg, learner
        self.fixed_games = (
            FixedPlayerGames(cfg.eval_opponents, game, env_kwargs or {}, cfg.eval_games, seed)
            if cfg.eval_every
            else None
        )
        self.fixed = FixedOpponents(cfg, game, copies, num_iterations, envs) if cfg.fixed_opponents else None
        self.iteration = 0  # the last iteration done: new games belong to the next
        self.pool = Pool(cfg.pool_size, cfg.sampling)
        self.ratings = Ratings()
        self.exploitability = AgentExploitability(game) if cfg.exploitability_every else None
        self.average = PoolAverage(game, learner) if cfg.average_policy else None
        self.magnet = Magnet(learner.policy, cfg.magnet_rate) if cfg.magnet_coef else None
        self.opponent = np.full(copies, LATEST)  # the pool snapshot (its iteration) each copy plays, or LATEST
        self.learner_seat = np.zeros(copies, dtype=int)
        self.rng = np.random.default_rng(seed)
        self._results: list[int] = []  # this iteration's learner results against the pool: +1, 0, -1
        self._random_results: list[int] = []  # and against uniform legal moves

    # The env's Opponents: ------------------------------------------------------------------------

    def _forget_unused(self) -> None:
        self.pool.forget_unused(set(self.opponent.tolist()))

    def new_game(self, copy: int) -> np.ndarray:
        fixed = None if self.fixed is None else self.fixed.draw(self.rng, copy, self.iteration + 1)
        if fixed is not None:
            self.opponent[copy] = fixed
        elif self.cfg.random_share and self.rng.random() < self.cfg.random_share:
            self.opponent[copy] = RANDOM
        elif not self.pool.ids or self.rng.random() < self.cfg.latest_share:
            self.opponent[copy] = LATEST
            self._forget_unused()
            return np.ones(len(self.sides), dtype=bool)
        else:
            self.opponent[copy] = self.pool.draw(self.rng).iteration
        self.learner_seat[copy] = self.rng.integers(self.seats)
        self._forget_unused()
        return self.sides == self.learner_seat[copy]

    def act(self, copies: np.ndarray, rows: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
        actions: np.ndarray | None = None
        for iteration in np.unique(self.opponent[copies]):
            at = np.flatnonzero(self.opponent[copies] == iteration)
            if iteration == RANDOM:  # a uniform legal move each (every move where the rows carry no mask)
                moves = self.learner.action_space
                assert isinstance(moves, gym.spaces.Discrete)  # a game's moves (fastppo.envs.turn_based.check_game)
                allowed = np.ones((at.size, int(moves.n)), dtype=bool) if masks is None else masks[at]
                action = np.array([self.rng.choice(np.flatnonzero(legal)) for legal in allowed])
                actions = np.zeros(len(copies), dtype=action.dtype) if actions is None else actions
                actions[at] = action
                continue
            if iteration <= FIXED:
                assert self.fixed is not None  # only a curriculum's league draws a fixed player
                action = self.fixed.act(int(iteration), copies[at])
                actions = np.zeros(len(copies), dtype=action.dtype) if actions is None else actions
                actions[at] = action
                continue
            snapshot = self.pool.snapshots[int(iteration)]
            obs = torch.as_tensor(rows[at])
            if snapshot.obs_rms is not None:
                obs = snapshot.obs_rms.normalize(obs, self.learner.config.env.clip_obs)
            mask = None if masks is None else torch.as_tensor(masks[at])
            with torch.inference_mode():  # the actor alone: the sample act() draws, without the critic's forward
                chosen, _ = snapshot.policy.predict(
                    obs.to(self.learner.device), None if mask is None else mask.to(self.learner.device)
                )
            action = snapshot.policy.action_head.env_action(chosen).cpu().numpy()
            actions = np.zeros((len(copies), *action.shape[1:]), dtype=action.dtype) if actions is None else actions
            actions[at] = action
        assert actions is not None  # the env asks for the moves of at least one row
        return actions

    def game_over(self, copy: int, returns: np.ndarray) -> None:
        if self.opponent[copy] == LATEST:
            return
        # A side wins when its return beats the other side's (games.matches scores games alike).
        mine = float(returns[self.sides == self.learner_seat[copy]].sum())
        theirs = float(returns[self.sides != self.learner_seat[copy]].sum())
        result = int(np.sign(mine - theirs))
        if self.opponent[copy] <= FIXED:
            assert self.fixed is not None
            self.fixed.game_over(int(self.opponent[copy]), result, self.ratings)
            return
        if self.opponent[copy] == RANDOM:  # rated as the evaluation games rate the fixed player 'random'
            self._random_results.append(result)
            self.ratings.learner_against_fixed("random", result)
            return
        snapshot = self.pool.snapshots[int(self.opponent[copy])]
        snapshot.record[1 - result] += 1  # +1 -> wins, 0 -> draws, -1 -> losses
        self._results.append(result)
        snapshot.rating = self.ratings.learner_against(snapshot.rating, result)

    # Each iteration: -----------------------------------------------------------------------------

    def magnet_log_probs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The magnet's log-probabilities on the update's batch, the field the loss's KL to it reads
        (fastppo.games.magnet); none without a magnet."""
        return {} if self.magnet is None else self.magnet.log_probs(batch)

    def after_update(self, iteration: int) -> dict[str, float]:
        """The iteration's games and ratings, for the run to log; snapshots the learner when due
        and plays the evaluation games."""
        metrics = game_rates("pool", self._results) | game_rates("random", self._random_results)
        self._results, self._random_results = [], []
        if self.fixed is not None:
            metrics |= self.fixed.metrics(iteration)
        self.iteration = iteration
        if self.magnet is not None:
            self.magnet.follow(self.learner.policy)
        if self.cfg.pool_size and iteration % self.cfg.snapshot_every == 0:
            learner = self.learner
            self.pool.add(
                Snapshot(iteration, frozen(learner.policy), copy.deepcopy(learner.obs_rms), rating=self.ratings.learner)
            )
            self._forget_unused()
        if self.fixed_games is not None and iteration % self.cfg.eval_every == 0:
            # Every game rates the learner against the player's fixed rating, which anchors the
            # pool's ratings to players that do not change (random, MCTS-N).
            for spec, games in self.fixed_games.play(self.learner, iteration):
                total = games.total
                for result, count in ((1, total.wins), (0, total.draws), (-1, total.losses)):
                    self.ratings.learner_against_fixed(spec, result, count)
                metrics |= results_metrics(spec, games)
        if self.exploitability is not None and iteration % self.cfg.exploitability_every == 0:
            metrics["eval/exploitability"] = self.exploitability(self.learner)
            if self.average is not None and self.pool.ids:
                metrics["eval/exploitability_average"] = self.average(self.pool.members)
        return metrics | {"self_play/pool_size": float(len(self.pool.ids))} | self.ratings.metrics()

    # Checkpoints: --------------------------------------------------------------------------------

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """(tensors, JSON) of the whole league, for a checkpoint."""
        tensors: dict[str, torch.Tensor] = {}
        for s in self.pool.snapshots.values():
            tensors |= s.tensors()
        if self.magnet is not None:
            tensors |= self.magnet.tensors()
        meta = {
            "snapshots": [
                {"iteration": s.iteration, "record": list(s.record), "rating": list(s.rating)}
                for s in self.pool.snapshots.values()
            ],
            "pool": list(self.pool.ids),
            "opponent": self.opponent.tolist(),
            "learner_seat": self.learner_seat.tolist(),
            "rng": self.rng.bit_generator.state,
            "learner_rating": list(self.ratings.learner),
            "fixed_ratings": {k: list(v) for k, v in self.ratings.fixed.items()},
            "iteration": self.iteration,
        }
        if self.fixed is not None:
            meta["curriculum"] = self.fixed.state()
        return tensors, meta

    def expected_tensors(self, meta: Any) -> dict[str, torch.Tensor]:
        """The tensors a checkpoint whose league JSON is ``meta`` holds (each snapshot's weights
        and statistics, and the magnet's weights, shaped as the learner's), for ``check_fits_run``
        to check them with the run's others; ``Damaged`` if ``meta`` is."""
        saved = self._parse(meta)
        return {
            name: t
            for entry in saved["snapshots"]
            for name, t in snapshot_tensors(entry["iteration"], self.learner.policy, self.learner.obs_rms).items()
        } | ({} if self.magnet is None else magnet_tensors(self.learner.policy))

    def load(self, tensors: dict[str, torch.Tensor], meta: Any) -> None:
        """``state()``'s output back, once ``expected_tensors`` has passed (then it cannot fail)."""
        saved = self._parse(meta)
        self.pool.snapshots = {
            e["iteration"]: load_snapshot(
                e["iteration"],
                frozen(self.learner.policy),
                copy.deepcopy(self.learner.obs_rms),
                tensors,
                e["record"],
                e["rating"],
            )
            for e in saved["snapshots"]
        }
        self.pool.ids, self.opponent, self.learner_seat, self.rng = (
            saved["pool"],
            saved["opponent"],
            saved["learner_seat"],
            saved["rng"],
        )
        self.ratings.learner, self.ratings.fixed = saved["learner_rating"], saved["fixed_ratings"]
        self.iteration = saved["iteration"]
        if self.fixed is not None:
            self.fixed.game_seed = saved["game_seed"]
        if self.magnet is not None:
            self.magnet.load(tensors)

    def _parse(self, meta: Any) -> dict[str, Any]:
        """``state()``'s JSON as values, or ``Damaged``."""
        if meta is None:
            raise Damaged("is missing (every checkpoint of a turn-based game's run holds its league)")
        try:
            snapshots = [
                {
                    "iteration": _iteration(e["iteration"]),
                    "record": _record(e["record"]),
                    "rating": _rating(e["rating"]),
                }
                for e in meta["snapshots"]
            ]
            iterations = [e["iteration"] for e in snapshots]
            pool_ids = [_iteration(i) for i in meta["pool"]]
            if len(set(iterations)) != len(iterations) or len(set(pool_ids)) != len(pool_ids):
                raise Damaged(f"lists a snapshot twice ({iterations}, pool {pool_ids})")
            if not set(pool_ids) <= set(iterations):
                raise Damaged(f"keeps {pool_ids} in its pool, not all among its snapshots {iterations}")
            if len(pool_ids) > self.cfg.pool_size:
                raise Damaged(
                    f"keeps {len(pool_ids)} snapshots in its pool, more than --self-play.pool-size {self.cfg.pool_size}"
                )
            opponent, seats = _integers(meta["opponent"], "opponents"), _integers(meta["learner_seat"], "learner seats")
            if opponent.shape != self.opponent.shape or seats.shape != self.learner_seat.shape:
                raise Damaged(f"plays {opponent.size} game copies, this run {self.opponent.size}")
            fixed_ids = set() if self.fixed is None else self.fixed.ids()
            if not set(opponent.tolist()) <= {LATEST, RANDOM, *fixed_ids, *iterations}:
                raise Damaged(
                    f"has a copy play a snapshot it lacks (opponents {opponent.tolist()}, snapshots {iterations})"
                )
            if not ((seats >= 0) & (seats < self.seats)).all():
                raise Damaged(f"seats the learner at {seats.tolist()}, in a game of {self.seats} seats")
            rng = np.random.default_rng()
            rng.bit_generator.state = meta["rng"]
            fixed = {str(k): _rating(v) for k, v in meta["fixed_ratings"].items()}
            learner_rating = _rating(meta["learner_rating"])
            iteration = meta.get("iteration", 0)  # a checkpoint before curricula: its league never read it
            if not (isinstance(iteration, int) and not isinstance(iteration, bool) and iteration >= 0):
                raise Damaged(f"is at iteration {iteration!r}, not a count")
            game_seed = None if self.fixed is None else self.fixed.parse(meta["curriculum"])
            return {
                "iteration": iteration,
                "game_seed": game_seed,
                "snapshots": snapshots,
                "pool": pool_ids,
                "opponent": opponent,
                "learner_seat": seats,
                "rng": rng,
                "learner_rating": learner_rating,
                "fixed_ratings": fixed,
            }
        except Damaged:
            raise
        except KeyError as exc:
            raise Damaged(f"lacks {exc}") from None
        except (TypeError, ValueError, AttributeError) as exc:  # from int(), numpy, the RNG state's setter
            raise Damaged(f"is malformed ({str(exc).splitlines()[0]})") from None


def _iteration(value: Any) -> int:
    """A snapshot's iteration as JSON holds it: an integer >= 1, never a string or float coerced."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise Damaged(f"names a snapshot by {value!r}, not by its iteration")
    return value


def _integers(values: Any, what: str) -> np.ndarray:
    if not (isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in values)):
        raise Damaged(f"holds the {what} {values!r}, not a list of integers")
    return np.asarray(values, dtype=int)


def _record(value: Any) -> list[int]:
    if not (isinstance(value, list) and len(value) == 3 and all(isinstance(x, int) and x >= 0 for x in value)):
        raise Damaged(f"holds the record {value}, not three counts")
    return list(value)


def _rating(value: Any) -> Rating:
    if not (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(x, (int, float)) and np.isfinite(x) for x in value)
        and value[1] > 0
    ):
        raise Damaged(f"holds the rating {value}, not (mu, sigma > 0)")
    return float(value[0]), float(value[1])


def make_league(config: Config, envs: VecEnv, learner: Agent, seed: int) -> NoLeague | League:
    """The run's league, set as its envs' opponents: every turn-based game has one (the learner
    plays every seat, and with a pool its snapshots); a Parallel env with a pool plays one of its
    two agent groups (sides) against a snapshot playing the other; any other run has none."""
    spaces = cast(AgentSpaces, getattr(envs, "spaces", None))
    if is_game(envs):
        sides: int | list[int] = len(spaces.agents)
    elif isinstance(envs, PettingZooVecEnv) and config.self_play.pool_size:
        sides = [spaces.group_names.index(group) for group in spaces.agent_groups]
    else:
        return NoLeague()
    league = League(
        config.self_play,
        learner,
        config.env.num_envs,
        sides,
        seed,
        config.env.env_id,
        config.env.env_kwargs,
        cast(TurnBasedVecEnv, envs) if is_game(envs) else None,
        config.num_iterations,
    )
    cast(TurnBasedVecEnv | PettingZooVecEnv, envs).opponents = league  # the envs that ask Opponents
    return league

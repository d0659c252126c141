"""PettingZoo AEC (turn-based) envs behind the torch VecEnv interface: a row per seat per copy,
and in each copy only the seat to move is a decision.

``pz:pettingzoo.classic.connect_four_v3`` names a module with only an ``env()``: its copies make
``copies * seats`` rows laid out as the Parallel envs' (``fastppo.envs.pettingzoo_vec``: row
``copy * seats + i`` for ``possible_agents[i]``, the same ``AgentSpaces`` rows, so a trained agent
acts through the same dict API). Each step the seat to move takes the action of its row; the
other rows are not ``live`` (no decision: GAE and the loss skip them) but still hold their seat's
current observation (``env.observe``), which a rollout that ends mid-game bootstraps from.

Credit: every reward PettingZoo gives a seat lands on that seat's row at the step it is given,
whoever moved, and ``fastppo.core.compute_decision_gae`` sums a seat's rewards from one of its
decisions to the next: the result of a game that the opponent's move ends belongs to the seat's
last move, and gamma discounts per move of the seat, not per step of the copy.

Opponents: a copy's seats are the learner's (its rows are decisions) or an opponent's
(``Opponents``, e.g. a past snapshot from the self-play pool, ``fastppo.training.self_play``).
An opponent's moves are played inside ``step``, batched over the copies waiting for one, so each
step returns with every copy at a learner's turn or over. By default the learner plays every seat.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from fastppo.config import MultiAgentConfig
from fastppo.envs.pettingzoo_vec import AgentSpaces
from fastppo.envs.vector import Episodes, HostCopies, StepResult


class Opponents(Protocol):
    """Who plays the seats the learner does not (see the module docstring)."""

    def new_game(self, copy: int) -> np.ndarray:
        """bool [seats]: the seats the learner plays in the game copy ``copy`` starts now."""
        ...

    def act(self, copies: np.ndarray, rows: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
        """Actions [k] of the opponents to move in ``copies`` [k], from their rows [k, width]."""
        ...

    def game_over(self, copy: int, returns: np.ndarray) -> None:
        """The game in ``copy`` ended with ``returns`` [seats]."""
        ...


class LearnerEverywhere:
    """Self-play against itself alone: the learner plays every seat of every game."""

    def __init__(self, seats: int):
        self.seats = seats

    def new_game(self, copy: int) -> np.ndarray:
        return np.ones(self.seats, dtype=bool)

    def act(self, copies: np.ndarray, rows: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
        raise AssertionError("the learner plays every seat: no opponent moves")

    def game_over(self, copy: int, returns: np.ndarray) -> None:
        pass


GameRecord = tuple[np.ndarray, np.ndarray, int]
"""(the learner's seats, each seat's return, moves) of a finished game."""


class TurnBasedVecEnv(HostCopies):
    """``len(env_fns)`` copies of a PettingZoo AECEnv as ``copies * seats`` rows (module docstring)."""

    CHECKPOINTED = ("envs", "_finished", "_returns", "_lengths", "_learner", "_games")
    """What ``fastppo.envs.snapshot.snapshot_envs`` saves: the copies and the games in flight."""

    def __init__(self, env_fns: list[Callable[[], Any]], cfg: MultiAgentConfig, device: torch.device):
        self.envs = [fn() for fn in env_fns]
        self.spaces = AgentSpaces(self.envs[0], cfg)
        self.agents = self.spaces.agents
        seats = len(self.agents)
        self.num_envs = len(self.envs) * seats
        self.single_observation_space = self.spaces.observation_space
        self.single_action_space = self.spaces.action_space
        self.layout = self.spaces.layout
        self.device = device
        self.opponents: Opponents = LearnerEverywhere(seats)
        self._finished = np.zeros(len(self.envs), dtype=bool)  # copies that start a new game on their next step
        self._returns = np.zeros((len(self.envs), seats))
        self._lengths = np.zeros(len(self.envs), dtype=int)
        self._learner = np.ones((len(self.envs), seats), dtype=bool)  # the seats the learner plays, per copy
        self._games: list[GameRecord] = []

    def _seat(self, c: int) -> int:
        return self.agents.index(self.envs[c].agent_selection)

    def _start(self, c: int, seed: int | None) -> None:
        self.envs[c].reset(seed=seed)
        self._finished[c] = False
        self._returns[c] = 0.0
        self._lengths[c] = 0
        self._learner[c] = self.opponents.new_game(c)

    def _play(self, c: int, action: Any, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        """One move in copy ``c``; every seat's reward of it joins ``reward[c]``; a game that ends
        sets the flags and is recorded."""
        env = self.envs[c]
        env.step(action)
        rewards = env.rewards
        step_rewards = np.array([float(rewards.get(agent, 0.0)) for agent in self.agents])
        reward[c] += step_rewards
        self._returns[c] += step_rewards
        self._lengths[c] += 1
        over = not env.agents or all(env.terminations.get(a, False) or env.truncations.get(a, False) for a in env.agents)
        if over:
            truncated[c] = [bool(env.truncations.get(a, False)) and not env.terminations.get(a, False) for a in self.agents]
            terminated[c] = ~truncated[c]
            self._games.append((self._learner[c].copy(), self._returns[c].copy(), int(self._lengths[c])))
            self.opponents.game_over(c, self._returns[c].copy())
            self._finished[c] = True

    def _opponent_to_move(self) -> np.ndarray:
        return np.array([not self._finished[c] and not self._learner[c, self._seat(c)] for c in range(len(self.envs))], dtype=bool)

    def _opponents_move(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        """Play the opponents' moves, all waiting copies in one batch each round, until every copy
        waits for the learner or is over."""
        waiting = np.flatnonzero(self._opponent_to_move())
        while waiting.size:
            rows = self.spaces.blank_rows(waiting.size)
            masks = []
            for k, c in enumerate(waiting):
                copy_masks = self._observe(c, rows[k])
                masks.append(None if copy_masks is None else copy_masks[self._seat(c)])
            seats = np.array([self._seat(c) for c in waiting])
            seat_rows = rows[np.arange(waiting.size), seats]
            actions = self.opponents.act(waiting, seat_rows, None if masks[0] is None else np.stack(masks))
            for c, action in zip(waiting, actions):
                self._play(c, action, reward, terminated, truncated)
            waiting = np.flatnonzero(self._opponent_to_move())

    def _observe(self, c: int, rows: np.ndarray) -> np.ndarray | None:
        """Fills ``rows`` [seats, width] with each seat's current observation; returns the masks
        [seats, actions] (or None): only the seat to move has its legal moves, the others' are
        all allowed (they choose nothing, and an empty mask has no distribution)."""
        env = self.envs[c]
        observations = {agent: env.observe(agent) for agent in env.agents}
        masks = self.spaces.rows(env, observations, {}, rows)
        if masks is not None:
            to_move = self._seat(c) if env.agents and not self._finished[c] else -1
            masks[np.arange(len(self.agents)) != to_move] = True
        return masks

    def _rows(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        rows = self.spaces.blank_rows(len(self.envs))
        masks = [self._observe(c, rows[c]) for c in range(len(self.envs))]
        live = np.zeros((len(self.envs), len(self.agents)), dtype=bool)
        for c in range(len(self.envs)):
            if not self._finished[c]:
                live[c, self._seat(c)] = True  # the opponents have moved: a learner's seat
        joined = None if masks[0] is None else np.concatenate(masks)
        return rows.reshape(self.num_envs, -1), joined, live.ravel()

    def reset(self, seed: int | None = None) -> StepResult:
        rows, masks, live = self.reset_host(seed)
        return self.first_step(rows, masks, live=live)

    def reset_host(self, seed: int | None = None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """``reset``'s (rows, masks, live) as numpy; copy ``c`` is seeded ``seed + c``."""
        for c in range(len(self.envs)):
            self._start(c, None if seed is None else seed + c)
        shape = (len(self.envs), len(self.agents))
        self._opponents_move(np.zeros(shape), np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool))
        return self._rows()

    def step(self, actions: torch.Tensor) -> StepResult:
        return self.to_device(*self.step_host(self.to_host(actions)))

    def step_host(self, host: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
        """``step`` on numpy: the action of each copy's seat to move in, (rows, reward,
        terminated, truncated, masks, live) out. A finished copy starts its next game (its reset
        row: actions ignored, reward 0)."""
        seats = len(self.agents)
        host = host.reshape(len(self.envs), seats, *host.shape[1:])
        reward = np.zeros((len(self.envs), seats), dtype=np.float32)
        terminated = np.zeros((len(self.envs), seats), dtype=bool)
        truncated = np.zeros((len(self.envs), seats), dtype=bool)
        for c in range(len(self.envs)):
            if self._finished[c]:
                self._start(c, None)
            else:
                self._play(c, host[c, self._seat(c)], reward, terminated, truncated)
        self._opponents_move(reward, terminated, truncated)
        rows, masks, live = self._rows()
        return rows, reward.ravel(), terminated.ravel(), truncated.ravel(), masks, live

    def pop_games(self) -> list[GameRecord]:
        """The games that ended since the last call, in the order they ended."""
        games, self._games = self._games, []
        return games

    def pop_episodes(self) -> Episodes:
        return game_episodes(self.pop_games(), self.agents)

    def render(self) -> Any:
        return self.envs[0].render()

    def close(self) -> None:
        for env in self.envs:
            env.close()


def game_episodes(games: list[GameRecord], agents: list[str]) -> Episodes:
    """Each seat's returns under ``by_agent``, and as the headline ``returns`` the learner's return
    in each game it played against an opponent (one seat: games against itself tell nothing)."""
    by_agent = {agent: [float(g[1][i]) for g in games] for i, agent in enumerate(agents)}
    against = [float(returns[learner].sum()) for learner, returns, _ in games if learner.sum() == 1]
    return Episodes(against, [g[2] for g in games], by_agent)

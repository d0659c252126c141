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
last move, and gamma discounts per move of the seat, not per step of the copy. A seat bootstraps
from its own value at its own turn only: ``live`` says whose turn a row's observation is, and on
a truncated game's final observation it marks the seat the game names to move (no decision, the
game is over, but the value that seat's last transition bootstraps from).

Opponents: a copy's seats are the learner's (its rows are decisions) or an opponent's
(``Opponents``, e.g. a past snapshot from the self-play pool, ``fastppo.games.league``).
An opponent's moves are played inside ``step``, batched over the copies waiting for one, so each
step returns with every copy at a learner's turn or over. By default the learner plays every seat;
with a fixed player at every seat (``fastppo.games.players.SeatedPlayers``) a whole game is
played inside ``reset``, as ``fastppo.games.matches.play_games`` plays them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from fastppo.config import MultiAgentConfig
from fastppo.envs.opponents import LearnerEverywhere, Opponents
from fastppo.envs.pettingzoo_vec import ACTION_MASK_KEY, AgentSpaces, copies_problem, is_count, is_row, is_turn_based
from fastppo.envs.vector import Episodes, HostCopies, StepResult
from fastppo.errors import FastPPOError

GameRecord = tuple[np.ndarray, np.ndarray, int]
"""(the learner's seats, each seat's return, moves) of a finished game."""


class TurnBasedVecEnv(HostCopies):
    """``len(env_fns)`` copies of a PettingZoo AECEnv as ``copies * seats`` rows (module
    docstring)."""

    CHECKPOINTED = ("envs", "_finished", "_returns", "_lengths", "_learner", "_games", "_legal", "history")
    """What ``fastppo.envs.snapshot.snapshot_envs`` saves: the copies and the games in flight."""

    def __init__(self, env_fns: Sequence[Callable[[], Any]], cfg: MultiAgentConfig, device: torch.device):
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
        self.history: list[list[int]] = [[] for _ in self.envs]
        """Each copy's moves so far in its game, both seats', in order: what a search player
        (fastppo.games.players.Player) among the opponents rebuilds the position from."""
        self._seat_of = {agent: i for i, agent in enumerate(self.agents)}
        action_space = self.single_action_space
        discrete = isinstance(action_space, gym.spaces.Discrete)
        self._direct = [discrete and only_checking_wrappers(env) for env in self.envs]
        # Each seat's own actions.
        self._moves = [int(space.n) for space in self.spaces.action_spaces] if discrete else []
        # The legal moves of each copy's seat to move, as its latest observation gave them (none
        # known: all False); a direct copy plays a move found here on the game itself.
        moves = int(action_space.n) if isinstance(action_space, gym.spaces.Discrete) else 0
        self._legal = np.zeros((len(self.envs), moves), dtype=bool)
        # A seat's row is its own observation alone unless the rows carry a state: an opponent's
        # move then needs only the observation of the seat to move.
        self._observe_alone = not self.spaces.state_size
        self._blank = self.spaces.blank_rows(len(self.envs))

    def _new_rows(self, copies: int) -> np.ndarray:
        """Blank rows [copies, seats, width] (``AgentSpaces.blank_rows``), fresh each time: the
        device tensor may share their memory (numpy_to_device on CPU)."""
        return self._blank[:copies].copy()

    def _game_objects(self) -> list[Any]:
        """What each copy is read (and, for a legal move, stepped) through: the game itself where
        the wrappers only check (``only_checking_wrappers``), else the env as built."""
        return [env.unwrapped if direct else env for env, direct in zip(self.envs, self._direct)]

    def _to_move(self, games: list[Any]) -> np.ndarray:
        """Each copy's seat to move (a finished copy's: whatever its game names)."""
        return np.array([self._seat_of[game.agent_selection] for game in games])

    def _start(self, c: int, seed: int | None) -> None:
        self.envs[c].reset(seed=seed)
        self._finished[c] = False
        self._returns[c] = 0.0
        self._lengths[c] = 0
        self.history[c] = []
        self._learner[c] = self.opponents.new_game(c)

    def _play(
        self, c: int, game: Any, action: Any, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> None:
        """One move in copy ``c`` (its ``game``, see ``_game_objects``); every seat's reward of it joins
        ``reward[c]``; a game that ends sets the flags and is recorded."""
        env = game
        if not self._direct[c] or not self._is_legal(c, game, action):
            env = self.envs[c]  # the wrappers' checks: an illegal move loses, one out of bounds asserts
        env.step(action)
        self.history[c].append(int(action))
        self._legal[c] = False
        rewards = game.rewards
        step_rewards = np.array([float(rewards.get(agent, 0.0)) for agent in self.agents])
        reward[c] += step_rewards
        self._returns[c] += step_rewards
        self._lengths[c] += 1
        terminations, truncations = game.terminations, game.truncations
        over = not game.agents or all(terminations.get(a, False) or truncations.get(a, False) for a in game.agents)
        if over:
            truncated[c] = [bool(truncations.get(a, False)) and not terminations.get(a, False) for a in self.agents]
            terminated[c] = ~truncated[c]
            self._games.append((self._learner[c].copy(), self._returns[c].copy(), int(self._lengths[c])))
            self.opponents.game_over(c, self._returns[c].copy())
            self._finished[c] = True

    def _is_legal(self, c: int, game: Any, action: Any) -> bool:
        """Whether ``action`` is a legal move, in bounds, of copy ``c``'s seat to move, which is
        in play: then PettingZoo's checking wrappers pass it to the game unchanged."""
        agent = game.agent_selection
        if game.terminations[agent] or game.truncations[agent] or not isinstance(action, (int, np.integer)):
            return False
        return bool(0 <= action < self._moves[self._seat_of[agent]]) and bool(self._legal[c, action])

    def _opponents_move(
        self, games: list[Any], reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> None:
        """Play the opponents' moves, all waiting copies in one batch each round, until every copy
        waits for the learner or is over."""
        while True:
            to_move = self._to_move(games)
            waiting = np.flatnonzero(~self._finished & ~self._learner[np.arange(len(self.envs)), to_move])
            if not waiting.size:
                return
            rows = self._new_rows(waiting.size)
            seats = to_move[waiting]
            masks = []
            for k, (c, seat) in enumerate(zip(waiting.tolist(), seats)):
                copy_masks = self._observe(c, games[c], rows[k], seat, alone=self._observe_alone)
                masks.append(None if copy_masks is None else copy_masks[seat])
            seat_rows = rows[np.arange(waiting.size), seats]
            # Every copy's mask or none (a game's seats to move all publish them: check_to_move).
            joined = None if masks[0] is None else np.stack(cast(list[np.ndarray], masks))
            actions = self.opponents.act(waiting, seat_rows, joined)
            for c, action in zip(waiting.tolist(), actions):
                self._play(c, games[c], action, reward, terminated, truncated)

    def _observe(self, c: int, game: Any, rows: np.ndarray, to_move: int, alone: bool = False) -> np.ndarray | None:
        """Fills ``rows`` [seats, width] with the current observation of each seat in play (or,
        ``alone``, of the seat ``to_move``); returns the masks [seats, actions] (or None): only
        the seat to move has its legal moves, the others' are all allowed (they choose nothing,
        and an empty mask has no distribution)."""
        agents = [self.agents[to_move]] if alone else game.agents
        observations = {agent: game.observe(agent) for agent in agents}
        masks = self.spaces.rows(game, observations, {}, rows)
        if not game.agents or self._finished[c]:
            to_move = -1
        else:
            # A game that stops publishing its legal moves mid-game.
            if masks is None or not masks[to_move].any():
                check_to_move(
                    f"after {self._lengths[c]} moves, observe",
                    self.agents[to_move],
                    game.observation_space(self.agents[to_move]),
                    observations[self.agents[to_move]],
                )
            if self._direct[c]:
                self._keep_legal(c, observations.get(self.agents[to_move]), self._moves[to_move])
        if masks is not None:
            masks[np.arange(len(self.agents)) != to_move] = True
        return masks

    def _keep_legal(self, c: int, observation: Any, moves: int) -> None:
        """Keeps the legal moves of the seat to move where its observation carries them, as
        PettingZoo's illegal-move check reads them (``observation["action_mask"]``)."""
        self._legal[c] = False
        mask = observation.get(ACTION_MASK_KEY) if isinstance(observation, dict) else None
        if mask is not None:
            legal = np.asarray(mask[:moves], dtype=bool)
            self._legal[c, : legal.size] = legal

    def _rows(self, games: list[Any]) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        rows = self._new_rows(len(self.envs))
        to_move = self._to_move(games)
        masks = [self._observe(c, game, rows[c], to_move[c]) for c, game in enumerate(games)]
        live = np.zeros((len(self.envs), len(self.agents)), dtype=bool)
        playing = np.flatnonzero(~self._finished)
        live[playing, to_move[playing]] = True  # the opponents have moved: a learner's seat
        joined = None if masks[0] is None else np.concatenate(cast(list[np.ndarray], masks))
        return rows.reshape(self.num_envs, -1), joined, live.ravel()

    def reset(self, seed: int | None = None) -> StepResult:
        rows, masks, live = self.reset_host(seed)
        return self.first_step(rows, masks, live=live)

    def reset_host(self, seed: int | None = None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """``reset``'s (rows, masks, live) as numpy; copy ``c`` is seeded ``seed + c``."""
        for c in range(len(self.envs)):
            self._start(c, None if seed is None else seed + c)
        shape, games = (len(self.envs), len(self.agents)), self._game_objects()
        self._opponents_move(games, np.zeros(shape), np.zeros(shape, dtype=bool), np.zeros(shape, dtype=bool))
        return self._rows(games)

    def step(self, actions: torch.Tensor) -> StepResult:
        return self.to_device(*self.step_host(self.to_host(actions)))

    def step_host(
        self, host: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
        """``step`` on numpy: the action of each copy's seat to move in, (rows, reward,
        terminated, truncated, masks, live) out. A finished copy starts its next game (its reset
        row: actions ignored, reward 0)."""
        seats = len(self.agents)
        host = host.reshape(len(self.envs), seats, *host.shape[1:])
        reward = np.zeros((len(self.envs), seats), dtype=np.float32)
        terminated = np.zeros((len(self.envs), seats), dtype=bool)
        truncated = np.zeros((len(self.envs), seats), dtype=bool)
        games = self._game_objects()
        to_move = self._to_move(games)
        for c, game in enumerate(games):
            if self._finished[c]:
                self._start(c, None)
            else:
                self._play(c, game, host[c, to_move[c]], reward, terminated, truncated)
        self._opponents_move(games, reward, terminated, truncated)
        rows, masks, live = self._rows(games)
        # A truncated game's final observation is the turn of the seat it names to move: that
        # seat may bootstrap from it, the others may not (fastppo.core.open_decisions).
        to_move = self._to_move(games)
        cut = np.flatnonzero(truncated[np.arange(len(self.envs)), to_move])
        live.reshape(len(self.envs), seats)[cut, to_move[cut]] = True
        return rows, reward.ravel(), terminated.ravel(), truncated.ravel(), masks, live

    def restored_problem(self) -> str | None:
        """What makes the state a snapshot restored (``fastppo.envs.snapshot.restore_envs``) one
        these copies cannot go on from, else None: each game's agents and seat to move, and the
        finished games' records."""
        seats, games = len(self.agents), self._game_objects()

        def is_record(g: Any) -> bool:  # a GameRecord
            return (
                isinstance(g, tuple)
                and len(g) == 3
                and is_row(g[0], "b", seats)
                and is_row(g[1], "fiu", seats)
                and is_count(g[2])
            )

        if not all(is_record(game) for game in self._games):
            return f"holds finished games that are not (learner's seats, {seats} seats' returns, moves)"
        if len(self.history) != len(self.envs) or not all(
            isinstance(moves, list) and all(is_count(move) for move in moves) for moves in self.history
        ):
            return f"holds move histories that are not a list of moves for each of its {len(self.envs)} copies"
        # A game that keeps its own record (an OpenSpiel game's moves) checks it too.
        checked = ((c, game.restored_problem()) for c, game in enumerate(games) if hasattr(game, "restored_problem"))
        if (damaged := next(((c, problem) for c, problem in checked if problem is not None), None)) is not None:
            return f"gives copy {damaged[0]} a game that {damaged[1]}"
        moving = next((c for c, game in enumerate(games) if game.agent_selection not in self.agents), None)
        if moving is not None:
            return (
                f"gives copy {moving} the seat to move {games[moving].agent_selection!r}, "
                f"not one of the env's {self.agents}"
            )
        return copies_problem(games, self.agents)

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


def check_game(env: Any, name: str) -> None:
    """A one-line FastPPOError unless ``env`` (an AECEnv, which this resets) gives what a
    turn-based game's training and play need: a Discrete action space for every seat, and for the
    seat to move an observation ``{'observation': ..., 'action_mask': ...}``, as its observation
    space (a Dict) declares, with at least one legal move."""
    for seat in env.possible_agents:
        if not isinstance(space := env.action_space(seat), gym.spaces.Discrete):
            raise FastPPOError(
                f"{name}: action_space({seat!r}) is {space}: a turn-based game's moves are Discrete "
                "(a number per move, the legal ones marked in the observation's action_mask)"
            )
    env.reset(seed=0)
    seat = env.agent_selection
    check_to_move(f"{name}: on reset, observe", seat, env.observation_space(seat), env.observe(seat))


def check_to_move(where: str, seat: str, space: gym.Space, observation: Any) -> None:
    """``check_game``'s check of the observation of ``seat``, the seat to move (``where``: the
    message's start, e.g. ``<game>: on reset, observe``)."""
    shape = "{'observation': ..., 'action_mask': ...} (the mask 1 for each legal move)"
    if not isinstance(observation, dict) or ACTION_MASK_KEY not in observation:
        what = (
            f"a dict of {sorted(observation)}" if isinstance(observation, dict) else f"a {type(observation).__name__}"
        )
        raise FastPPOError(
            f"{where}({seat!r}), the seat to move, gave {what}, with no action_mask: "
            f"a turn-based game's observe(seat) returns {shape}"
        )
    if not isinstance(space, gym.spaces.Dict):
        raise FastPPOError(
            f"{where}({seat!r}) gave a dict, and observation_space({seat!r}) says {space}: "
            f"declare spaces.Dict for {shape}"
        )
    if not np.asarray(observation[ACTION_MASK_KEY]).any():
        raise FastPPOError(
            f"{where}({seat!r}) gave the seat to move no legal move (its action_mask is all 0): "
            "a seat to move needs at least one, or the game is over"
        )


def is_game(env: Any) -> bool:
    """Whether ``env`` is a turn-based game: a built PettingZoo env that is an AECEnv, or the
    ``TurnBasedVecEnv`` of such a game's copies. The one place fastppo asks."""
    return isinstance(env, TurnBasedVecEnv) or is_turn_based(env)


def game_episodes(games: list[GameRecord], agents: list[str]) -> Episodes:
    """Each seat's returns under ``by_agent``, and as the headline ``returns`` the learner's return
    in each game it played against an opponent (one seat: games against itself tell nothing)."""
    by_agent = {agent: [float(g[1][i]) for g in games] for i, agent in enumerate(agents)}
    against = [float(returns[learner].sum()) for learner, returns, _ in games if learner.sum() == 1]
    return Episodes(against, [g[2] for g in games], by_agent)


def only_checking_wrappers(env: Any) -> bool:
    """Whether ``env``'s wrappers are PettingZoo's order, bounds and illegal-move checks alone
    (classic games' ``env()``): for a legal move in bounds they pass the step to the game
    unchanged, and every attribute read goes down to it, so those can skip their layers."""
    from pettingzoo.utils.wrappers import AssertOutOfBoundsWrapper, OrderEnforcingWrapper, TerminateIllegalWrapper

    checking = (OrderEnforcingWrapper, AssertOutOfBoundsWrapper, TerminateIllegalWrapper)
    layer, game = env, env.unwrapped
    while layer is not game:
        if type(layer) not in checking:
            return False
        layer = layer.env
    return True

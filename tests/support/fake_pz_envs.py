"""Tiny PettingZoo envs for the multi-agent tests, named as ``pz:tests.support.fake_pz_envs``: the
Parallel env Relay below, the turn-based (AEC) games Race (``pz:tests.support.fake_pz_envs:race``) and
TakeAway (``pz:tests.support.fake_pz_envs:take_away``), variants of Race that each break one rule of a
turn-based game, and a fixed player of any game, FirstLegal.

Three agents (``agents``, by default agent_0..2) walk a counter; the second finishes at step
``die_at`` (terminated) while the others play on until ``length`` (truncated). With ``join_at`` > 1
the last agent is absent at reset and joins late, as the Parallel API allows: its first action is
the one of step ``join_at``. Observations carry the step and the agent's index, so a test can tell
every row apart; the reward is 1 when an agent's action equals its index
modulo the number of actions (a policy can learn it), and ``state()`` is the step and the
agents' last actions.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils import AgentSelector

AGENTS = ("agent_0", "agent_1", "agent_2")


class Relay(ParallelEnv):
    metadata = {"name": "relay_v0", "render_modes": ["rgb_array"], "render_fps": 5}
    fastppo_plain_state = True  # its state is plain attributes: checkpoints snapshot it (exact resume)

    def __init__(
        self,
        die_at: int = 2,
        length: int = 5,
        actions: tuple[int, ...] = (3, 3, 3),
        obs_sizes: tuple[int, ...] = (2, 2, 2),
        agents: tuple[str, ...] = AGENTS,
        render_mode: str | None = None,
        join_at: int = 0,
    ):
        self.possible_agents = list(agents)
        self.die_at, self.length, self.render_mode, self.join_at = die_at, length, render_mode, join_at
        self._actions = dict(zip(agents, actions))
        self._obs_sizes = dict(zip(agents, obs_sizes))
        self.state_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.t = 0
        self.last = np.zeros(3, dtype=np.float32)
        self.agents: list[str] = []

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, (self._obs_sizes[agent],), np.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(self._actions[agent])

    def _obs(self, agent: str) -> np.ndarray:
        obs = np.full(self._obs_sizes[agent], float(self.possible_agents.index(agent)), dtype=np.float32)
        obs[0] = float(self.t)
        return obs

    def state(self) -> np.ndarray:
        return np.concatenate([[float(self.t)], self.last]).astype(np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.t = 0
        self.last = np.zeros(3, dtype=np.float32)
        self.agents = list(self.possible_agents)
        if self.join_at > 1:
            self.agents.pop()
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict):
        assert set(actions) == set(self.agents), (sorted(actions), self.agents)
        self.t += 1
        rewards, terms, truncs = {}, {}, {}
        for agent, action in actions.items():
            index = self.possible_agents.index(agent)
            assert 0 <= int(action) < self._actions[agent]
            self.last[index] = float(action)
            rewards[agent] = float(int(action) == index % self._actions[agent])
            terms[agent] = index == 1 and self.t >= self.die_at
            truncs[agent] = self.t >= self.length and not terms[agent]
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        joining = [self.possible_agents[-1]] if self.t + 1 == self.join_at else []
        self.agents += joining
        observations = {a: self._obs(a) for a in [*actions, *joining]}
        infos = {a: {} for a in observations}
        return observations, rewards, terms, truncs, infos

    def render(self) -> np.ndarray:
        frame = np.zeros((16, 16, 3), dtype=np.uint8)
        frame[:, : self.t] = 255
        return frame


def parallel_env(**kwargs) -> Relay:
    return Relay(**kwargs)


class ImageRelay(Relay):
    """Relay whose agents observe 8x8 RGB frames (multi-agent rows refuse images)."""

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(0, 255, (8, 8, 3), np.uint8)


def image_relay(**kwargs) -> ImageRelay:
    return ImageRelay(**kwargs)


class Race(AECEnv):
    """A turn-based race to ``goal``: the seats take turns adding 1 (action 0) or 2 (action 1) to a
    shared count, and the seat that brings it to ``goal`` wins (+1, every other seat -1); adding 2
    past the goal is illegal (the observation's ``action_mask``). A move that adds 2 hands the next
    seat a consolation of ``BONUS`` at once: a reward on another seat's move, mid-game. After
    ``max_moves`` moves without a winner the game is truncated, reward 0. Each seat observes
    [count, 1 if it is to move]; the agents stay in ``agents`` once the game is over (as
    PettingZoo's classic games do), so their final observations can be read."""

    metadata = {"name": "race_v0", "render_modes": ["ansi"], "is_parallelizable": False}
    fastppo_plain_state = True  # its state is plain attributes: checkpoints snapshot it (exact resume)
    BONUS = 0.25

    def __init__(self, goal: int = 5, seats: int = 2, max_moves: int = 100, render_mode: str | None = None):
        self.goal, self.max_moves, self.render_mode = goal, max_moves, render_mode
        self.possible_agents = [f"player_{i}" for i in range(seats)]
        self.agents: list[str] = []
        self.count = self.moves = 0
        self._selector = AgentSelector(self.possible_agents)
        observation = {
            "observation": spaces.Box(0.0, float(goal), (2,), np.float32),
            "action_mask": spaces.Box(0, 1, (2,), np.int8),
        }
        self.observation_spaces = {agent: spaces.Dict(observation) for agent in self.possible_agents}
        self.action_spaces = {agent: spaces.Discrete(2) for agent in self.possible_agents}

    def observation_space(self, agent: str) -> spaces.Dict:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Discrete:
        return self.action_spaces[agent]

    def observe(self, agent: str) -> dict:
        to_move = agent == self.agent_selection
        mask = np.array([1, self.count + 2 <= self.goal], dtype=np.int8) if to_move else np.zeros(2, dtype=np.int8)
        return {"observation": np.array([self.count, to_move], dtype=np.float32), "action_mask": mask}

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.agents = list(self.possible_agents)
        self.count = self.moves = 0
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {agent: {} for agent in self.agents}
        self._selector.reinit(self.agents)
        self.agent_selection = self._selector.reset()

    def step(self, action: int) -> None:
        mover = self.agent_selection
        if self.terminations[mover] or self.truncations[mover]:
            return self._was_dead_step(action)  # PettingZoo's way out of a finished game (fastppo never takes it)
        assert self.observe(mover)["action_mask"][int(action)], f"illegal move {action} at count {self.count}"
        self._cumulative_rewards[mover] = 0.0
        self._clear_rewards()
        self.count += int(action) + 1
        self.moves += 1
        self.agent_selection = self._selector.next()
        if self.count == self.goal:
            self.rewards = {agent: 1.0 if agent == mover else -1.0 for agent in self.agents}
            self.terminations = dict.fromkeys(self.agents, True)
        elif self.moves >= self.max_moves:
            self.truncations = dict.fromkeys(self.agents, True)
        elif action == 1:
            self.rewards[self.agent_selection] = self.BONUS
        self._accumulate_rewards()

    def render(self) -> str:
        return f"count {self.count} of {self.goal}, {self.agent_selection} to move"

    def close(self) -> None:
        pass


def race(**kwargs) -> Race:
    return Race(**kwargs)


class TakeAway(AECEnv):
    """A take-away game (Nim with one pile): two seats take turns taking 1 (action 0) or 2
    (action 1) stones from a pile of 1 to ``most`` stones (drawn at reset), and the seat that takes
    the last stone wins (+1, the other -1). The seat to move wins by leaving a multiple of 3: its
    optimal move is to take ``pile % 3`` stones, and with a multiple of 3 before it, it loses. Each
    seat observes the pile alone (one-hot), never whose turn it is: a seat's value of a position
    where the other seat is to move has the sign of the mover's, flipped."""

    metadata = {"name": "take_away_v0", "render_modes": ["ansi"], "is_parallelizable": False}
    fastppo_plain_state = True  # plain attributes and a numpy generator: checkpoints snapshot it

    def __init__(self, most: int = 9, render_mode: str | None = None):
        self.most, self.render_mode = most, render_mode
        self.possible_agents = ["player_0", "player_1"]
        self.agents: list[str] = []
        self.pile = 0
        self.rng = np.random.default_rng()
        self._selector = AgentSelector(self.possible_agents)
        observation = {
            "observation": spaces.Box(0.0, 1.0, (most + 1,), np.float32),
            "action_mask": spaces.Box(0, 1, (2,), np.int8),
        }
        self.observation_spaces = {agent: spaces.Dict(observation) for agent in self.possible_agents}
        self.action_spaces = {agent: spaces.Discrete(2) for agent in self.possible_agents}

    def observation_space(self, agent: str) -> spaces.Dict:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Discrete:
        return self.action_spaces[agent]

    def observe(self, agent: str) -> dict:
        board = np.zeros(self.most + 1, dtype=np.float32)
        board[self.pile] = 1.0
        legal = agent == self.agent_selection and self.pile > 0
        return {"observation": board, "action_mask": np.array([legal, legal and self.pile >= 2], dtype=np.int8)}

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.pile = int(self.rng.integers(1, self.most + 1))
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {agent: {} for agent in self.agents}
        self._selector.reinit(self.agents)
        self.agent_selection = self._selector.reset()

    def step(self, action: int) -> None:
        mover = self.agent_selection
        if self.terminations[mover] or self.truncations[mover]:
            return self._was_dead_step(action)
        assert self.observe(mover)["action_mask"][int(action)], f"illegal move {action} at pile {self.pile}"
        self._cumulative_rewards[mover] = 0.0
        self._clear_rewards()
        self.pile -= int(action) + 1
        self.agent_selection = self._selector.next()
        if self.pile == 0:
            self.rewards = {agent: 1.0 if agent == mover else -1.0 for agent in self.agents}
            self.terminations = dict.fromkeys(self.agents, True)
        self._accumulate_rewards()

    def render(self) -> str:
        return f"{self.pile} stones, {self.agent_selection} to move"

    def close(self) -> None:
        pass


def take_away(**kwargs) -> TakeAway:
    return TakeAway(**kwargs)


# Games that break what a turn-based game must give (fastppo.envs.turn_based.check_game), each
# one way, for the one-line errors before training:


class BoxMoves(Race):
    """Moves as a Box, not Discrete."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.action_spaces = {agent: spaces.Box(-1.0, 1.0, (2,), np.float32) for agent in self.possible_agents}


class UndeclaredDict(Race):
    """Declares a Box observation space, and observe() returns Race's dict."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_spaces = {
            agent: spaces.Box(0.0, float(self.goal), (2,), np.float32) for agent in self.possible_agents
        }


class Unmasked(Race):
    """No action_mask: its observation is the count alone; adding 2 past the goal adds 1."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_spaces = {
            agent: spaces.Dict({"observation": spaces.Box(0.0, float(self.goal), (2,), np.float32)})
            for agent in self.possible_agents
        }

    def observe(self, agent: str) -> dict:
        return {"observation": super().observe(agent)["observation"]}

    def step(self, action: int) -> None:
        super().step(0 if self.count + 2 > self.goal else action)


class Stuck(Race):
    """From the count ``stuck_at`` on, the seat to move has no legal move (an all-zero mask)."""

    stuck_at = 2

    def observe(self, agent: str) -> dict:
        observation = super().observe(agent)
        if self.count >= self.stuck_at:
            observation["action_mask"][:] = 0
        return observation


class Broken(Race):
    """Its constructor raises."""

    def __init__(self, **kwargs):
        raise ValueError("the board is missing")


def box_moves(**kwargs) -> BoxMoves:
    return BoxMoves(**kwargs)


def undeclared_dict(**kwargs) -> UndeclaredDict:
    return UndeclaredDict(**kwargs)


def unmasked(**kwargs) -> Unmasked:
    return Unmasked(**kwargs)


def stuck(**kwargs) -> Stuck:
    return Stuck(**kwargs)


def broken(**kwargs) -> Broken:
    return Broken(**kwargs)


class FirstLegal:
    """A player of any turn-based game (fastppo.games.players.Player): the lowest legal move,
    always (no chance), for ``--opponent tests.support.fake_pz_envs:FirstLegal``."""

    name = "first legal"

    def reset(self, seed: int) -> None:
        pass

    def act(self, env, agent: str, history: list[int]) -> int:
        return int(np.flatnonzero(env.observe(agent)["action_mask"])[0])

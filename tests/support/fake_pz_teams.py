"""A tiny competitive PettingZoo Parallel env, named as ``pz:tests.support.fake_pz_teams``: two groups
with opposite rewards, whose returns a test can work out by hand.

Agents adversary_0, adversary_1 | agent_0 play ``length`` steps (3: all truncated together). At
step t (1, 2, 3) each adversary is rewarded +t and each agent -t, whatever they do: an episode's
returns are adversary 2 x 6 = 12, agent -6, and their sum (the team's) 6. With ``masked`` the
observations are PettingZoo's Dict of 'observation' and 'action_mask', the mask allowing one
action, (t + index) % 3, and a masked action taken is an error.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

AGENTS = ("adversary_0", "adversary_1", "agent_0")


class Chase(ParallelEnv):
    metadata = {"name": "chase_v0", "render_modes": []}
    fastppo_plain_state = True  # its state is plain attributes: checkpoints snapshot it (exact resume)

    def __init__(self, length: int = 3, masked: bool = False, agents: tuple[str, ...] = AGENTS):
        self.possible_agents = list(agents)
        self.length, self.masked = length, masked
        self.t = 0
        self.agents: list[str] = []

    def observation_space(self, agent: str) -> spaces.Space:
        observation = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        return (
            spaces.Dict({"observation": observation, "action_mask": spaces.Box(0, 1, (3,), np.int8)})
            if self.masked
            else observation
        )

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(3)

    def _allowed(self, agent: str) -> int:
        return (self.t + self.possible_agents.index(agent)) % 3

    def _obs(self, agent: str):
        observation = np.array([self.t, self.possible_agents.index(agent)], dtype=np.float32)
        if not self.masked:
            return observation
        mask = np.zeros(3, dtype=np.int8)
        mask[self._allowed(agent)] = 1
        return {"observation": observation, "action_mask": mask}

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict):
        assert set(actions) == set(self.agents), (sorted(actions), self.agents)
        assert not self.masked or all(int(actions[a]) == self._allowed(a) for a in actions), "a masked action was taken"
        self.t += 1
        rewards = {a: float(self.t if a.startswith("adversary") else -self.t) for a in actions}
        terms = {a: False for a in actions}
        truncs = {a: self.t >= self.length for a in actions}
        observations = {a: self._obs(a) for a in actions}
        self.agents = [] if self.t >= self.length else self.agents
        return observations, rewards, terms, truncs, {a: {} for a in actions}


def parallel_env(**kwargs) -> Chase:
    return Chase(**kwargs)

"""Tiny envs that go bad after a while, for the non-finite guard tests
(``tests.support.nonfinite_envs:NaNRewardEnv``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

BAD_AFTER = 100
"""Steps (per env instance, across episodes) before the env starts returning NaN."""


class _GoesBad(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)
    bad = "reward"

    def __init__(self, render_mode=None):
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        self.steps += 1
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        reward = float(action)
        if self.steps > BAD_AFTER:
            reward = self.spoil(obs, reward)
        return obs, reward, self.t >= 10, False, {}

    def spoil(self, obs: np.ndarray, reward: float) -> float:
        """The step's reward once the env has gone bad (``obs`` spoiled in place, if that is what goes bad)."""
        if self.bad == "reward":
            return float("nan")
        obs[1] = np.inf
        return reward


class NaNRewardEnv(_GoesBad):
    bad = "reward"


class InfObservationEnv(_GoesBad):
    bad = "observation"

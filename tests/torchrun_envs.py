"""Envs that go wrong on torchrun's rank 1 only, for the error-reporting tests of tests/test_distributed.py
(``tests.torchrun_envs:NaNRewardOnRank1Env``)."""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np

FAULT_AT = 100
"""Steps (per env instance, across episodes) before rank 1's envs go wrong."""
STALL_S = 8.0
"""How long rank 1 stalls in an env step, once: longer than the tests' --collective-timeout."""


class _Rank1Fault(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.steps = 0
        self.faulty = os.environ.get("RANK") == "1"

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        self.steps += 1
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        reward = self.fault(float(action)) if self.faulty and self.steps >= FAULT_AT else float(action)
        return obs, reward, self.t >= 10, False, {}

    def fault(self, reward: float) -> float:
        raise NotImplementedError


class NaNRewardOnRank1Env(_Rank1Fault):
    def fault(self, reward: float) -> float:
        return float("nan")


class StallOnRank1Env(_Rank1Fault):
    stalled = False  # once per process, not once per env

    def fault(self, reward: float) -> float:
        if not StallOnRank1Env.stalled:
            StallOnRank1Env.stalled = True
            time.sleep(STALL_S)
        return reward

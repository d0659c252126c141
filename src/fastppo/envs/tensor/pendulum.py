"""Pendulum-v1 as batched torch ops.

Mirrors ``gymnasium/envs/classic_control/pendulum.py`` (gymnasium 1.4): torque clipped to +-2,
cost ``angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2`` on the state *before* the step, semi-
implicit Euler with g=10, m=l=1, dt=0.05, speed clipped to +-8, no termination, observation
(cos th, sin th, thdot), initial state U(-pi, pi) x U(-1, 1), and the 200-step limit of the
``Pendulum-v1`` registration. Like gymnasium, the stored angle is never wrapped; only the cost
normalises it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from fastppo.envs.tensor.base import TensorEnv


def angle_normalize(x: Tensor) -> Tensor:
    """Map angles to [-pi, pi), as pendulum.py's ``angle_normalize`` (a floored modulo)."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


class Pendulum(TensorEnv):
    """State columns: angle (0 = upright), angular velocity. Actions: ``[N, 1]`` torques."""

    # Constants of PendulumEnv.__init__ (default g=10.0).
    MAX_SPEED = 8.0
    MAX_TORQUE = 2.0
    DT = 0.05
    G = 10.0
    M = 1.0
    L = 1.0

    _high = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)
    single_observation_space = spaces.Box(-_high, _high, dtype=np.float32)
    single_action_space = spaces.Box(-MAX_TORQUE, MAX_TORQUE, shape=(1,), dtype=np.float32)
    max_episode_steps = 200

    def _reset_state(self) -> Tensor:
        return torch.cat((self._uniform(-math.pi, math.pi), self._uniform(-1.0, 1.0)), dim=1)

    def _dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        th, thdot = state.unbind(1)
        u = actions[:, 0].to(state.dtype).clamp(-self.MAX_TORQUE, self.MAX_TORQUE)
        costs = angle_normalize(th).square() + 0.1 * thdot.square() + 0.001 * u.square()
        g, m, length, dt = self.G, self.M, self.L, self.DT
        newthdot = thdot + (3 * g / (2 * length) * torch.sin(th) + 3.0 / (m * length**2) * u) * dt
        newthdot = newthdot.clamp(-self.MAX_SPEED, self.MAX_SPEED)
        newth = th + newthdot * dt
        terminated = torch.zeros_like(th, dtype=torch.bool)
        return torch.stack((newth, newthdot), dim=1), -costs, terminated

    def _observe(self, state: Tensor) -> Tensor:
        th, thdot = state.unbind(1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), dim=1)

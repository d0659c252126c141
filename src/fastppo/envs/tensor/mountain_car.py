"""MountainCar-v0 as batched torch ops.

Mirrors ``gymnasium/envs/classic_control/mountain_car.py`` (gymnasium 1.4): velocity update with
force 0.001 and gravity 0.0025, clipping of velocity to +-0.07 and position to [-1.2, 0.6], the
inelastic left wall, reward -1 per step, termination at position >= 0.5 with velocity >= 0
(``goal_velocity=0``), initial position U(-0.6, -0.4) at rest, and the 200-step limit of the
``MountainCar-v0`` registration.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from fastppo.envs.tensor.base import TensorEnv


class MountainCar(TensorEnv):
    """State columns: position, velocity."""

    # Constants of MountainCarEnv.__init__.
    MIN_POSITION = -1.2
    MAX_POSITION = 0.6
    MAX_SPEED = 0.07
    GOAL_POSITION = 0.5
    GOAL_VELOCITY = 0.0
    FORCE = 0.001
    GRAVITY = 0.0025

    single_observation_space = spaces.Box(
        np.array([MIN_POSITION, -MAX_SPEED], dtype=np.float32),
        np.array([MAX_POSITION, MAX_SPEED], dtype=np.float32),
        dtype=np.float32,
    )
    single_action_space = spaces.Discrete(3)
    max_episode_steps = 200

    def _reset_state(self) -> Tensor:
        position = self._uniform(-0.6, -0.4)
        return torch.cat((position, torch.zeros_like(position)), dim=1)

    def _dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        position, velocity = state.unbind(1)
        push = actions.to(state.dtype) - 1
        velocity = velocity + (push * self.FORCE + torch.cos(3 * position) * (-self.GRAVITY))
        velocity = velocity.clamp(-self.MAX_SPEED, self.MAX_SPEED)
        position = (position + velocity).clamp(self.MIN_POSITION, self.MAX_POSITION)
        velocity = torch.where((position == self.MIN_POSITION) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.GOAL_POSITION) & (velocity >= self.GOAL_VELOCITY)
        reward = torch.full_like(position, -1.0)
        return torch.stack((position, velocity), dim=1), reward, terminated

    def _observe(self, state: Tensor) -> Tensor:
        return state.clone()

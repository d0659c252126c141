"""CartPole-v1 as batched torch ops.

Mirrors ``gymnasium/envs/classic_control/cartpole.py`` (gymnasium 1.4) term by term, so that in
float64 mode it agrees with gymnasium to rounding: Euler integration, +1 reward on every step
including the terminating one, termination when |x| > 2.4 or |theta| > 12 degrees, initial state
U(-0.05, 0.05)^4, and the 500-step limit of the ``CartPole-v1`` registration.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from fastppo.envs.tensor.base import TensorEnv


class CartPole(TensorEnv):
    """State columns: cart position, cart velocity, pole angle, pole angular velocity."""

    # Constants of CartPoleEnv.__init__.
    GRAVITY = 9.8
    MASS_CART = 1.0
    MASS_POLE = 0.1
    TOTAL_MASS = MASS_POLE + MASS_CART
    LENGTH = 0.5  # half the pole's length
    POLEMASS_LENGTH = MASS_POLE * LENGTH
    FORCE_MAG = 10.0
    TAU = 0.02
    THETA_THRESHOLD = 12 * 2 * math.pi / 360
    X_THRESHOLD = 2.4

    _high = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], dtype=np.float32)
    single_observation_space = spaces.Box(-_high, _high, dtype=np.float32)
    single_action_space = spaces.Discrete(2)
    max_episode_steps = 500

    def _reset_state(self) -> Tensor:
        return self._uniform(-0.05, 0.05, columns=4)

    def _dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x, x_dot, theta, theta_dot = state.unbind(1)
        force = torch.where(actions == 1, self.FORCE_MAG, -self.FORCE_MAG).to(state.dtype)
        costheta = torch.cos(theta)
        sintheta = torch.sin(theta)
        temp = (force + self.POLEMASS_LENGTH * theta_dot.square() * sintheta) / self.TOTAL_MASS
        thetaacc = (self.GRAVITY * sintheta - costheta * temp) / (
            self.LENGTH * (4.0 / 3.0 - self.MASS_POLE * costheta.square() / self.TOTAL_MASS)
        )
        xacc = temp - self.POLEMASS_LENGTH * thetaacc * costheta / self.TOTAL_MASS
        x = x + self.TAU * x_dot
        x_dot = x_dot + self.TAU * xacc
        theta = theta + self.TAU * theta_dot
        theta_dot = theta_dot + self.TAU * thetaacc
        terminated = (x.abs() > self.X_THRESHOLD) | (theta.abs() > self.THETA_THRESHOLD)
        reward = torch.ones_like(x)
        return torch.stack((x, x_dot, theta, theta_dot), dim=1), reward, terminated

    def _observe(self, state: Tensor) -> Tensor:
        return state.clone()

"""CartPole-v1 as batched torch ops.

Mirrors ``gymnasium/envs/classic_control/cartpole.py`` (gymnasium 1.4) term by term, so that in
float64 mode it agrees with gymnasium to rounding: Euler integration, +1 reward on every step
including the terminating one, termination when |x| > 2.4 or |theta| > 12 degrees, initial state
U(-0.05, 0.05)^4, and the 500-step limit of the ``CartPole-v1`` registration.
"""

from __future__ import annotations

import math
from typing import Any

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

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # TensorEnv's
        super().__init__(*args, **kwargs)
        # Constants as tensors: on CPU a tensor-tensor op skips wrapping a Python scalar, which is
        # half the cost of an op on these small batches. Indexed by the action: force / total mass.
        self._force_over_mass = self._tensor([-self.FORCE_MAG / self.TOTAL_MASS, self.FORCE_MAG / self.TOTAL_MASS])
        self._four_thirds_length = self._tensor(4.0 / 3.0 * self.LENGTH)
        self._thresholds = self._tensor([self.X_THRESHOLD, self.THETA_THRESHOLD])

    def _reset_state(self) -> Tensor:
        return self._uniform(-0.05, 0.05, columns=4)

    def _dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # gymnasium's formulas, each folded into as few fused torch ops as its terms allow (the
        # batch is small on CPU, so the op count sets the cost); the reassociated constants move
        # results by rounding only (float64 agrees with gymnasium to 1e-12, tests/envs/test_tensor_envs.py).
        x_dot, theta, theta_dot = state[:, 1], state[:, 2], state[:, 3]
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        # temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
        temp = torch.addcmul(
            self._force_over_mass[actions], theta_dot.square(), sintheta, value=self.POLEMASS_LENGTH / self.TOTAL_MASS
        )
        # thetaacc = (gravity * sintheta - costheta * temp) / (length * (4/3 - masspole * costheta**2 / total_mass))
        thetaacc = torch.addcmul(torch.mul(sintheta, self.GRAVITY), costheta, temp, value=-1.0) / torch.addcmul(
            self._four_thirds_length, costheta, costheta, value=-self.LENGTH * self.MASS_POLE / self.TOTAL_MASS
        )
        # xacc = temp - polemass_length * thetaacc * costheta / total_mass
        xacc = torch.addcmul(temp, thetaacc, costheta, value=-self.POLEMASS_LENGTH / self.TOTAL_MASS)
        # Euler: x += tau * x_dot, x_dot += tau * xacc, theta += tau * theta_dot, theta_dot += tau * thetaacc
        next_state = torch.add(state, torch.stack((x_dot, xacc, theta_dot, thetaacc), dim=1), alpha=self.TAU)
        # |x| > x_threshold or |theta| > theta_threshold
        terminated = (next_state[:, 0::2].abs() > self._thresholds).any(dim=1)
        return next_state, torch.ones_like(temp), terminated

    def _observe(self, state: Tensor) -> Tensor:
        return state.clone()


class CartPoleNoVelocity(CartPole):
    """``CartPoleNoVelocity-v1`` (see ``fastppo.envs.partial``): CartPole-v1 observing only cart
    position and pole angle, state columns 0 and 2; the state and dynamics are CartPole's."""

    single_observation_space = spaces.Box(-CartPole._high[0::2], CartPole._high[0::2], dtype=np.float32)

    def _observe(self, state: Tensor) -> Tensor:
        return state[:, 0::2].clone()  # a contiguous copy, not a view of state

"""Acrobot-v1 as batched torch ops.

Mirrors ``gymnasium/envs/classic_control/acrobot.py`` (gymnasium 1.4) with its defaults: the
book's dynamics (``book_or_nips = "book"``), no torque noise, one fourth-order Runge-Kutta step of
dt = 0.2 per action, angles wrapped to [-pi, pi] and velocities bounded to +-4 pi and +-9 pi after
the step, reward -1 per step and 0 on the terminating one, termination when the free end is above
the bar (``-cos(t1) - cos(t1 + t2) > 1``), initial state U(-0.1, 0.1)^4, and the 500-step limit
of the ``Acrobot-v1`` registration.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium import spaces
from torch import Tensor

from fastppo.envs.tensor.base import TensorEnv


def wrap(x: Tensor, low: float, high: float) -> Tensor:
    """acrobot.py's ``wrap``: shift ``x`` by whole periods into [low, high] (a value at a bound
    stays), the while-loops of the original turned into a count of periods."""
    period = high - low
    x = x - period * torch.ceil((x - high) / period).clamp(min=0)
    return x + period * torch.ceil((low - x) / period).clamp(min=0)


class Acrobot(TensorEnv):
    """State columns: theta1, theta2 (relative to link 1), dtheta1, dtheta2."""

    # Class constants of AcrobotEnv.
    DT = 0.2
    LINK_LENGTH_1 = 1.0
    LINK_MASS_1 = 1.0
    LINK_MASS_2 = 1.0
    LINK_COM_POS_1 = 0.5
    LINK_COM_POS_2 = 0.5
    LINK_MOI = 1.0
    MAX_VEL_1 = 4 * math.pi
    MAX_VEL_2 = 9 * math.pi
    G = 9.8

    _high = np.array([1.0, 1.0, 1.0, 1.0, MAX_VEL_1, MAX_VEL_2], dtype=np.float32)
    single_observation_space = spaces.Box(low=-_high, high=_high, dtype=np.float32)
    single_action_space = spaces.Discrete(3)
    max_episode_steps = 500

    def _reset_state(self) -> Tensor:
        return self._uniform(-0.1, 0.1, columns=4)

    def _dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        # AVAIL_TORQUE = [-1.0, 0.0, +1] indexed by the action is exactly action - 1.
        torque = actions.to(state.dtype) - 1
        dt = self.DT
        # rk4(self._dsdt, s_augmented, [0, dt]): the torque is constant over the step.
        k1 = self._dsdt(state, torque)
        k2 = self._dsdt(state + dt / 2.0 * k1, torque)
        k3 = self._dsdt(state + dt / 2.0 * k2, torque)
        k4 = self._dsdt(state + dt * k3, torque)
        ns = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        theta1, theta2, dtheta1, dtheta2 = ns.unbind(1)
        theta1 = wrap(theta1, -math.pi, math.pi)
        theta2 = wrap(theta2, -math.pi, math.pi)
        dtheta1 = dtheta1.clamp(-self.MAX_VEL_1, self.MAX_VEL_1)
        dtheta2 = dtheta2.clamp(-self.MAX_VEL_2, self.MAX_VEL_2)
        terminated = -torch.cos(theta1) - torch.cos(theta2 + theta1) > 1.0
        reward = torch.where(terminated, 0.0, -1.0).to(state.dtype)
        return torch.stack((theta1, theta2, dtheta1, dtheta2), dim=1), reward, terminated

    def _dsdt(self, s: Tensor, a: Tensor) -> Tensor:
        """Time derivative of the state, AcrobotEnv._dsdt with the book's ddtheta2."""
        m1, m2 = self.LINK_MASS_1, self.LINK_MASS_2
        l1 = self.LINK_LENGTH_1
        lc1, lc2 = self.LINK_COM_POS_1, self.LINK_COM_POS_2
        I1 = I2 = self.LINK_MOI
        g = self.G
        theta1, theta2, dtheta1, dtheta2 = s.unbind(1)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta2)) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta2)) + I2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * torch.sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * torch.sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2)
            + phi2
        )
        ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * torch.sin(theta2) - phi2) / (
            m2 * lc2**2 + I2 - d2**2 / d1
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), dim=1)

    def _observe(self, state: Tensor) -> Tensor:
        theta1, theta2, dtheta1, dtheta2 = state.unbind(1)
        columns = (torch.cos(theta1), torch.sin(theta1), torch.cos(theta2), torch.sin(theta2), dtheta1, dtheta2)
        return torch.stack(columns, dim=1)

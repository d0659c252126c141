"""Partially observed variants of gymnasium envs: the same env, with only some observation entries.

``CartPoleNoVelocity-v1`` (registered by ``fastppo.envs.make.register_envs``) is CartPole-v1
observing only ``[x, theta]``, cart position and pole angle: the dynamics, rewards, termination
and 500-step limit are CartPole-v1's, but the velocities must be inferred from the history of
observations, so a memoryless (MLP) policy cannot balance the pole as well as a recurrent one.
``fastppo.envs.tensor.cartpole.CartPoleNoVelocity`` is its tensor-backend twin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from fastppo.errors import FastPPOError

CARTPOLE_NO_VELOCITY = "CartPoleNoVelocity-v1"
CARTPOLE_OBSERVED = (0, 2)
"""The CartPole observation entries ``CartPoleNoVelocity-v1`` keeps: cart position, pole angle."""


class KeepObservationEntries(gym.ObservationWrapper):
    """Observe only the entries ``indices`` (in that order) of a 1-D Box observation; the
    observation space keeps those entries' bounds and the dtype."""

    def __init__(self, env: gym.Env, indices: Sequence[int]) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise FastPPOError(f"KeepObservationEntries needs a 1-D Box observation space, got {space}")
        self.indices = np.asarray(indices, dtype=np.intp)
        if self.indices.ndim != 1 or not np.all((self.indices >= 0) & (self.indices < space.shape[0])):
            raise FastPPOError(f"observation indices {list(indices)} are not entries of a {space.shape[0]}-vector")
        self.observation_space = gym.spaces.Box(space.low[self.indices], space.high[self.indices], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[self.indices]  # integer indexing copies, keeping the dtype


def cartpole_no_velocity(**kwargs: Any) -> gym.Env:
    """Entry point of ``CartPoleNoVelocity-v1``: CartPole (``kwargs`` such as ``render_mode`` go to
    it) observing ``[x, theta]``; ``gym.make`` adds the TimeLimit of the registration."""
    return KeepObservationEntries(CartPoleEnv(**kwargs), CARTPOLE_OBSERVED)

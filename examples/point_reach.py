"""Your own batched simulator as a fastppo tensor env: a point mass pushed towards a goal.

    python examples/point_reach.py                     # trains, then evaluates: ~10 s on 2 CPU cores
    fastppo train examples/point_reach.py:PointReach --backend tensor --num-envs 256 --num-steps 16 \\
        --update-epochs 4 --num-minibatches 4 --learning-rate 3e-3 --total-timesteps 200000

Everything is a [num_envs, ...] torch op, so the same class runs thousands of envs on a GPU
(``--device cuda``). The base class (``fastppo.envs.tensor.TensorEnv``) adds the autoreset, the
time limit, seeding and episode statistics; a subclass writes only the physics below.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from fastppo.envs.tensor import TensorEnv


class PointReach(TensorEnv):
    """A point on the plane moves by the commanded velocity (an action in [-1, 1]^2, times 0.1)
    towards a goal; the reward is minus the remaining distance; 50 steps an episode. State
    columns: position (2), goal (2); the policy sees the goal's offset."""

    single_observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
    single_action_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
    max_episode_steps = 50

    STEP = 0.1

    def _reset_state(self) -> Tensor:
        return self._uniform(-1.0, 1.0, columns=4)

    def _dynamics(self, state: Tensor, actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        position = state[:, 0:2] + self.STEP * actions.to(state.dtype).clamp(-1.0, 1.0)
        reward = -torch.linalg.vector_norm(state[:, 2:4] - position, dim=1)
        return torch.cat([position, state[:, 2:4]], dim=1), reward, torch.zeros_like(reward, dtype=torch.bool)

    def _observe(self, state: Tensor) -> Tensor:
        return state[:, 2:4] - state[:, 0:2]


SETTINGS = dict(
    num_envs=256, num_steps=16, update_epochs=4, num_minibatches=4, learning_rate=3e-3, total_timesteps=200_000
)
"""CleanRL's continuous-control setup (normalised observations and rewards) on 256 envs, with
fewer, larger minibatch steps: about 1.5 s on one CPU core."""


def main() -> None:
    import fastppo

    first = fastppo.train(PointReach, seed=1, progress=False, **{**SETTINGS, "total_timesteps": 4096})
    agent = fastppo.train(PointReach, seed=1, **SETTINGS)
    print(f"after one update: {fastppo.evaluate(first, episodes=64, seed=0)}")
    print(f"trained:          {fastppo.evaluate(agent, episodes=64, deterministic=True, seed=0)}")


if __name__ == "__main__":
    main()

"""The vector-environment interface the trainer sees: torch tensors in, torch tensors out.

Every backend (gymnasium sync/async, EnvPool, batched tensor envs) presents this interface and
the same autoreset rule, gymnasium's NEXT_STEP: the step after an episode ends is a *reset row*
that ignores its action and returns the first observation of the next episode with reward 0 and
both flags false. The rollout masks those rows out of GAE and the loss, and in exchange the
observation that step t produced is always the next row's observation, so a truncated episode
bootstraps from the value of its real final observation without a second forward pass.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import gymnasium as gym
from torch import Tensor
import torch


class StepResult(NamedTuple):
    """One vector step, every field a tensor on the env's device with leading dim num_envs."""

    obs: Tensor
    reward: Tensor  # float32
    terminated: Tensor  # bool
    truncated: Tensor  # bool
    action_mask: Tensor | None = None  # bool [N, n_logits] where the env publishes one


class Episodes(NamedTuple):
    """Episodes finished since the last ``pop_episodes``: undiscounted raw return and length."""

    returns: list[float]
    lengths: list[int]


class VecEnv(Protocol):
    num_envs: int
    single_observation_space: gym.Space
    single_action_space: gym.Space
    device: torch.device

    def reset(self, seed: int | None = None) -> StepResult:
        """Reset all envs (reward 0, flags false); seeded envs are reproducible."""

    def step(self, actions: Tensor) -> StepResult:
        """Step all envs with NEXT_STEP autoreset (see the module docstring)."""

    def pop_episodes(self) -> Episodes:
        """Return and forget the finished episodes' statistics (called once per iteration)."""

    def close(self) -> None: ...

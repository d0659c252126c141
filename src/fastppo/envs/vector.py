"""The vector-environment interface the trainer sees: torch tensors in, torch tensors out.

Every backend (gymnasium sync/async, EnvPool, batched tensor envs) presents this interface and
the same autoreset rule, gymnasium's NEXT_STEP: the step after an episode ends is a *reset row*
that ignores its action and returns the first observation of the next episode with reward 0 and
both flags false. The rollout masks those rows out of GAE and the loss, and in exchange the
observation that step t produced is always the next row's observation, so a truncated episode
bootstraps from the value of its real final observation without a second forward pass.
"""

from __future__ import annotations

import functools
from contextlib import AbstractContextManager, nullcontext
from typing import NamedTuple, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from fastppo.envs.layout import ObservationLayout
from fastppo.profiling import SectionTimer


class StepResult(NamedTuple):
    """One vector step, every field a tensor on the env's device with leading dim num_envs."""

    obs: Tensor
    reward: Tensor  # float32
    terminated: Tensor  # bool
    truncated: Tensor  # bool
    action_mask: Tensor | None = None  # bool [N, n_logits] where the env publishes one
    live: Tensor | None = None
    """bool [N], multi-agent envs only: whether the row's agent is in play (it acts on this
    observation); false for an agent that had already finished while its team plays on, or that
    has not joined yet: no observation, and the row is no decision (fastppo.envs.pettingzoo_vec).
    In a turn-based game, whether it is the row's seat's turn; on a truncated game's final
    observation, that of the seat named to move (fastppo.envs.turn_based)."""


class Episodes(NamedTuple):
    """Episodes finished since the last ``pop_episodes``: undiscounted raw return and length (a
    multi-agent env's headline return, --multi-agent.headline: none at all when its agents are
    not one team; each agent's own under ``by_agent``, each group's under ``by_group``)."""

    returns: list[float]
    lengths: list[int]
    by_agent: dict[str, list[float]] | None = None
    rows: list[int] | None = None
    """The env row each episode ran in (tensor envs: a stack of seeds splits them by seed)."""
    by_group: dict[str, list[float]] | None = None
    """Multi-agent envs: each agent group's returns, the sum of its agents'
    (fastppo.envs.pettingzoo_vec.agent_group)."""


class VecEnv(Protocol):
    num_envs: int
    device: torch.device
    layout: ObservationLayout
    """What the observation columns are (fastppo.envs.layout); all observation but for multi-agent rows."""

    # Read-only, so that an env may declare a narrower space (a tensor env's class, a Box).
    @property
    def single_observation_space(self) -> gym.Space: ...

    @property
    def single_action_space(self) -> gym.Space: ...

    def reset(self, seed: int | None = None) -> StepResult:
        """Reset all envs (reward 0, flags false); seeded envs are reproducible."""

    def step(self, actions: Tensor) -> StepResult:
        """Step all envs with NEXT_STEP autoreset (see the module docstring)."""

    def pop_episodes(self) -> Episodes:
        """Return and forget the finished episodes' statistics (called once per iteration)."""

    def close(self) -> None: ...


@runtime_checkable
class SteppedInParts(Protocol):
    """A vector env whose rows step in ``parts`` that take turns (the ale backend's halves,
    ``--env.step-in-halves``): ``send`` starts a part's step and returns at once, ``recv`` waits
    for its result, so the policy acts on one part while the env threads step another. A part's
    steps follow the rules of ``VecEnv.step``; its rows are those of ``parts[part]``."""

    parts: tuple[slice, ...]

    def send(self, actions: Tensor, part: int) -> None: ...

    def recv(self, part: int) -> StepResult: ...


class WholeSteps:
    """Any VecEnv as one part, all its rows: ``recv`` steps the actions ``send`` gave."""

    parts: tuple[slice, ...] = (slice(None),)

    def __init__(self, envs: VecEnv):
        self.envs = envs
        self._actions: Tensor | None = None

    def send(self, actions: Tensor, part: int) -> None:
        self._actions = actions

    def recv(self, part: int) -> StepResult:
        assert self._actions is not None, "recv before send"
        return self.envs.step(self._actions)


def in_parts(envs: VecEnv) -> SteppedInParts:
    """``envs`` as parts that take turns: its own, or all its rows as one (``WholeSteps``)."""
    if isinstance(envs, SteppedInParts):
        return envs
    return WholeSteps(envs)


NUMPY_DTYPES = {torch.float32: np.float32, torch.bool: np.bool_, torch.uint8: np.uint8}


def numpy_to_device(array: np.ndarray, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A numpy env's array as a tensor of ``dtype`` on ``device``: zero-copy when it already is one
    (the numpy vector envs hand out fresh arrays every step). numpy casts (float64 observations
    and rewards) ~3x cheaper than torch's ``.to`` on a few values (1.1 vs 2.9 us)."""
    tensor = torch.from_numpy(np.asarray(array, dtype=NUMPY_DTYPES[dtype]))
    return tensor if device.type == "cpu" else tensor.to(device, non_blocking=True)


class FinishedEpisodes:
    """What the gymnasium, EnvPool and ale vec envs share: the returns and lengths of the episodes
    they finished, kept in ``_returns`` and ``_lengths`` until the trainer pops them."""

    _returns: list[float]
    _lengths: list[int]

    def pop_episodes(self) -> Episodes:
        episodes = Episodes(self._returns, self._lengths)
        self._returns, self._lengths = [], []
        return episodes


class HostCopies:
    """What the numpy-backed VecEnvs (gymnasium, EnvPool, PettingZoo) share: actions go to the
    host as numpy (clipped to a Box action space), step results come back as tensors on the
    training device, and both copies are timed as "copy" in ``timer`` when the trainer sets one
    (reported as ``time/copy``, apart from the env's own ``time/env``)."""

    num_envs: int
    device: torch.device
    single_observation_space: gym.Space
    single_action_space: gym.Space
    layout: ObservationLayout = ObservationLayout()
    timer: SectionTimer | None = None

    @functools.cached_property
    def _action_clip(self) -> tuple[np.ndarray, np.ndarray] | None:
        space = self.single_action_space
        return (space.low, space.high) if isinstance(space, gym.spaces.Box) else None

    @functools.cached_property
    def _obs_dtype(self) -> torch.dtype:
        return torch.uint8 if self.single_observation_space.dtype == np.uint8 else torch.float32

    def copying(self) -> AbstractContextManager:
        return nullcontext() if self.timer is None else self.timer.section("copy")

    def to_host(self, actions: Tensor) -> np.ndarray:
        with self.copying():
            action = actions.cpu().numpy()
        # The policy's raw Gaussian sample stays in the buffer; only the env sees it clipped
        # (two ufuncs: np.clip's wrapper costs more than they do on a few values).
        if self._action_clip is None:
            return action
        low, high = self._action_clip
        return np.minimum(np.maximum(action, low), high)

    def first_step(
        self, obs: np.ndarray, action_mask: np.ndarray | None = None, live: np.ndarray | None = None
    ) -> StepResult:
        """``reset``'s result: the first observations, reward 0, neither flag set."""
        no = np.zeros(self.num_envs, dtype=bool)
        return self.to_device(obs, np.zeros(self.num_envs, dtype=np.float32), no, no.copy(), action_mask, live)

    def to_device(
        self,
        obs: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        action_mask: np.ndarray | None = None,
        live: np.ndarray | None = None,
    ) -> StepResult:
        with self.copying():
            return StepResult(
                numpy_to_device(obs, self._obs_dtype, self.device),
                numpy_to_device(reward, torch.float32, self.device),
                numpy_to_device(terminated, torch.bool, self.device),
                numpy_to_device(truncated, torch.bool, self.device),
                None
                if action_mask is None
                else numpy_to_device(np.asarray(action_mask, dtype=bool), torch.bool, self.device),
                None if live is None else numpy_to_device(live, torch.bool, self.device),
            )

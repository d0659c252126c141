"""What the columns of a flat observation row are, for the policy and the normaliser."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np


@dataclass(frozen=True)
class ObservationLayout:
    """A multi-agent row is ``[global state | the agent's observation | agent-id one-hot]``
    (fastppo.envs.pettingzoo_vec): the critic reads the whole row (MAPPO's agent-specific
    global state, Yu et al. 2022), the actor skips the ``critic_only`` leading columns, and the
    ``raw`` trailing one-hot columns stay out of the normalisation statistics (a normalised
    one-hot would still be one-hot in sign only). A gymnasium env's row is all observation:
    the default, zeros."""

    critic_only: int = 0
    raw: int = 0
    groups: tuple[int, ...] = ()
    """With one policy per agent group: each agent's group index (agents in id order); empty when
    one policy serves every row."""
    board: tuple[int, ...] = ()
    """When the agent's observation is a board: its (height, width, planes), whose columns follow
    the ``critic_only`` ones (a board encoder reads them as one, ``fastppo.policies.board``);
    empty for any other observation."""
    board_planes_first: bool = False
    """Whether the board's columns are planes x height x width in C order (OpenSpiel's tensors),
    not height x width x planes (PettingZoo's classic games)."""

    def actor_space(self, space: gym.Space) -> gym.Space:
        """The observation space of the columns the actor reads (the policy's, the ONNX input)."""
        if not self.critic_only:
            return space
        assert space.shape is not None  # agent rows: a flat Box
        return gym.spaces.Box(-np.inf, np.inf, (space.shape[0] - self.critic_only,), np.float32)

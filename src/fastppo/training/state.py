"""What a run carries from one iteration to the next: the state a checkpoint saves and restores."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fastppo.agents.agent import Agent
from fastppo.core import RewardScaler
from fastppo.training.rollout import EnvCursor


@dataclass
class TrainState:
    """Everything a run carries from one iteration to the next (and what a checkpoint holds)."""

    agent: Agent
    optimizer: torch.optim.Optimizer
    reward_scaler: RewardScaler | None
    cursor: EnvCursor
    iteration: int = 0
    global_step: int = 0
    kl_beta: float | list[float] = 1.0
    """PPO-KL's adaptive penalty coefficient; a stack of seeds: each seed's."""
    schedule_anchor: tuple[int, float] = (0, 0.0)
    """Where the lr/clip/entropy schedules' line starts (core.schedule_progress); moved by a resume
    that changes total_timesteps."""
    world_size: int = 1
    """Ranks training together (torchrun); a resume needs as many."""

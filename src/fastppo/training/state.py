"""What a run carries from one iteration to the next, and how many iterations it has."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastppo.agents.agent import Agent
from fastppo.config import Config
from fastppo.core import RewardScaler
from fastppo.errors import FastPPOError
from fastppo.games.league import League, NoLeague
from fastppo.training.optim import Optimizer
from fastppo.training.rollout import EnvCursor


@dataclass
class TrainState:
    """Everything a run carries from one iteration to the next (and what a checkpoint holds)."""

    agent: Agent
    optimizer: Optimizer
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
    league: League | NoLeague = field(default_factory=NoLeague)
    """A turn-based game's self-play league (fastppo.games.league.League): its pool is part of the run."""


def planned_iterations(config: Config, world_size: int) -> int:
    """Iterations of the run: --total-timesteps counts the steps of every rank's envs together."""
    iterations = config.num_iterations // world_size
    if iterations < 1:
        raise FastPPOError(
            f"--total-timesteps {config.ppo.total_timesteps} is less than one batch of the {world_size} ranks "
            f"({world_size} x {config.batch_size} steps): raise it or shrink the batch"
        )
    return iterations

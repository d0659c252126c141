"""The self-play pool: the learner's past snapshots (its weights and observation statistics at an
iteration), the newest ``pool_size`` of them, each with the learner's record against it and its
rating, and how a new game draws one (--self-play.sampling)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch

from fastppo.core.normalize import RunningMeanStd
from fastppo.games.ratings import START_RATING, Rating
from fastppo.policies import ActorCritic
from fastppo.policies.population import GroupedActorCritic

POOL_TENSORS = "pool."
"""The pool's tensors in a checkpoint: ``pool.<iteration>.policy.<name>`` and ``pool.<iteration>.obs_rms.<name>``."""


@dataclass
class Snapshot:
    """One past learner in the pool: its weights, statistics and record."""

    iteration: int
    policy: ActorCritic | GroupedActorCritic
    obs_rms: RunningMeanStd | None
    record: list[int] = field(default_factory=lambda: [0, 0, 0])
    """The learner's wins, draws and losses against it."""
    rating: Rating = START_RATING

    def learner_score(self) -> float:
        """The learner's mean score against it (win 1, draw 0.5), 0.5 before any game."""
        wins, draws, losses = self.record
        games = wins + draws + losses
        return 0.5 if games == 0 else (wins + 0.5 * draws) / games

    def tensors(self) -> dict[str, torch.Tensor]:
        """Its weights and statistics as a checkpoint names them."""
        return snapshot_tensors(self.iteration, self.policy, self.obs_rms)


class Pool:
    """The snapshots new games draw from, oldest first, and those a game in flight still plays."""

    def __init__(self, size: int, sampling: str):
        self.size, self.sampling = size, sampling
        self.snapshots: dict[int, Snapshot] = {}  # by iteration: the pool's and any a game in flight still plays
        self.ids: list[int] = []  # the pool, oldest first: what new games draw from

    @property
    def members(self) -> list[Snapshot]:
        return [self.snapshots[i] for i in self.ids]

    def add(self, snapshot: Snapshot) -> None:
        """The newest snapshot joins; the oldest leaves beyond ``size`` (a game may still play it)."""
        self.snapshots[snapshot.iteration] = snapshot
        self.ids = [*self.ids, snapshot.iteration][-self.size :]

    def forget_unused(self, playing: set[int]) -> None:
        """Drop the snapshots that left the pool once no game (``playing``: their iterations) plays them."""
        used = set(self.ids) | playing
        self.snapshots = {i: s for i, s in self.snapshots.items() if i in used}

    def draw(self, rng: np.random.Generator) -> Snapshot:
        """A snapshot for a new game: the newest, one at random, or prioritised by how badly the
        learner scores against it."""
        members = self.members
        if self.sampling == "latest":
            return members[-1]
        if self.sampling == "uniform":
            return members[rng.integers(len(members))]
        weights = np.array([(1.0 - s.learner_score()) ** 2 for s in members]) + 1e-3  # every snapshot keeps a chance
        return members[rng.choice(len(members), p=weights / weights.sum())]


def frozen(policy: torch.nn.Module) -> ActorCritic | GroupedActorCritic:
    """A frozen copy of a learner's policy (a game's or a Parallel env's: never a stack of seeds)."""
    assert isinstance(policy, (ActorCritic, GroupedActorCritic))
    copied = copy.deepcopy(policy).eval()
    copied.requires_grad_(False)
    return copied


def snapshot_tensors(
    iteration: int, policy: torch.nn.Module, obs_rms: RunningMeanStd | None
) -> dict[str, torch.Tensor]:
    """A snapshot's weights and statistics as a checkpoint names them."""
    tensors = {
        f"{POOL_TENSORS}{iteration}.policy.{k}": v.detach().cpu().contiguous() for k, v in policy.state_dict().items()
    }
    if obs_rms is not None:
        tensors |= {
            f"{POOL_TENSORS}{iteration}.obs_rms.{k}": v.detach().cpu().contiguous()
            for k, v in obs_rms.state_dict().items()
        }
    return tensors


def load_snapshot(
    iteration: int,
    policy: ActorCritic | GroupedActorCritic,
    obs_rms: RunningMeanStd | None,
    tensors: dict[str, torch.Tensor],
    record: list[int],
    rating: Rating,
) -> Snapshot:
    """The snapshot of ``iteration`` from a checkpoint's ``tensors``, into ``policy`` and
    ``obs_rms`` (frozen copies of the learner's, shaped as the checkpoint's)."""
    for name, module in (("policy", policy), ("obs_rms", obs_rms)):
        if module is not None:
            prefix = f"{POOL_TENSORS}{iteration}.{name}."
            module.load_state_dict({k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)})
    return Snapshot(iteration, policy, obs_rms, record, rating)

"""The magnet of magnetic mirror descent (--self-play.magnet-coef): a slowly moving copy of the
learner's policy that the PPO loss pulls the learner toward.

Self-play against its own latest self leaves a policy-gradient learner circling an equilibrium of
a poker game; magnetic mirror descent (S. Sokota et al., "A Unified Approach to Reinforcement
Learning, Quantal Response Equilibria, and Two-Player Zero-Sum Games", ICLR 2023) makes its last
iterate converge instead, by adding to each update ``magnet_coef * KL(pi || magnet)``, the reverse
KL toward a magnet policy: against a fixed magnet the learner converges to the game's quantal
response equilibrium regularised toward it, and a magnet that follows the learner slowly moves
that equilibrium toward a Nash equilibrium. Here the magnet's weights are an exponential moving
average of the learner's (each iteration they move ``magnet_rate`` of the way), the magnet starting
as the learner's first policy; the KL is exact (``fastppo.core.categorical_kl``), over the legal
moves, on each minibatch's observations, with the magnet's log-probabilities computed once per
update on the batch (``log_probs``). Its weights are part of the run's state, in every checkpoint
(``tensors``, ``load``), so that a resumed run continues exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fastppo.games.pool import frozen
from fastppo.policies.distributions import CategoricalHead

MAGNET_TENSORS = "magnet."
"""The magnet's weights in a checkpoint: ``magnet.<name>``, named as the learner's policy's."""
MAGNET_LOG_PROBS = "magnet_log_probs"
"""The batch field of the magnet's log-probability of every move on each row (``log_probs``)."""


class Magnet:
    """The magnet policy of one run (module docstring)."""

    def __init__(self, policy: torch.nn.Module, rate: float):
        self.policy, self.rate = frozen(policy), rate

    @torch.no_grad()
    def log_probs(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """The batch field of the magnet's log-probability of every move (``[rows, moves]``) on
        the batch's observations, with its masks."""
        head = self.policy.action_head
        assert isinstance(head, CategoricalHead)  # a game's moves are Discrete (fastppo.envs.turn_based.check_game)
        masks = batch.get("action_masks")
        return {MAGNET_LOG_PROBS: head.log_probs(self.policy(batch["obs"])[0], masks)}

    @torch.no_grad()
    def follow(self, policy: torch.nn.Module) -> None:
        """Move the magnet's weights ``rate`` of the way toward ``policy``'s (after each update)."""
        for magnet, learner in zip(self.policy.parameters(), policy.parameters(), strict=True):
            magnet.lerp_(learner, self.rate)

    def tensors(self) -> dict[str, Tensor]:
        """Its weights as a checkpoint names them."""
        return magnet_tensors(self.policy)

    def load(self, tensors: dict[str, Tensor]) -> None:
        """Its weights from a checkpoint's ``tensors`` (checked to be shaped as ``tensors()``)."""
        self.policy.load_state_dict(
            {k.removeprefix(MAGNET_TENSORS): v for k, v in tensors.items() if k.startswith(MAGNET_TENSORS)}
        )


def magnet_tensors(policy: torch.nn.Module) -> dict[str, Tensor]:
    """A magnet's weights (or the learner's ``policy``'s, shaped as a magnet's) as a checkpoint names them."""
    return {f"{MAGNET_TENSORS}{k}": v.detach().cpu().contiguous() for k, v in policy.state_dict().items()}

"""The rollout's forward pass with the actor and critic MLPs merged into one stack of matmuls.

Parameters do not change while a rollout is collected, so once per rollout (``refresh``) the two
networks are merged into wider layers: the first layer stacks both nets' rows (both read the
observation), deeper layers are block-diagonal (each half reads its own features), and the last
layer maps ``[actor features | critic features]`` to ``[action-head params | value]``. One
``addmm`` and one activation per layer then replace two of each plus ~15 module calls: about
half the cost of ``ActorCritic.act`` for the small batches of a CPU rollout. The zero blocks add
exact zeros, so the result equals the unfused forward up to float summation order. A tanh MLP
also has its tanh turned into sigmoid by rescaling the merged weights (``tanh_as_sigmoid``).

The zero blocks are work, though: a block-diagonal 128 x 128 layer costs twice the two 64 x 64
layers it stands for. From ``SPLIT_ROWS`` rows on, where the matmuls outweigh the per-op cost (a
tensor-env rollout's 1 024 envs), each deeper hidden layer runs as its two halves, written side by
side into one output: 398 -> 258 us for 1 024 rows.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fastppo.policies.actor_critic import ActorCritic
from fastppo.policies.mlp_autograd import mlp_layers

Activation = Callable[[Tensor], Tensor]

SPLIT_ROWS = 128
"""From this many rows on, a deeper hidden layer runs as its actor and critic halves (see the
module docstring): 53 -> 47 us at 128 rows, 30 -> 33 us at 64 (measured on the 2-core machine)."""


def linear_layout(weight: Tensor) -> Tensor:
    """An ``[in, out]`` weight stored as ``F.linear`` keeps it: a transposed view of a contiguous
    ``[out, in]`` tensor. The same values; MKL's sgemm is up to 4x faster so for a narrow output
    (a 1 024-row rollout's head, 128 -> 3: 185 -> 43 us; 8 rows 3.7 -> 2.8 us)."""
    return weight.t().contiguous().t()


def tanh_as_sigmoid(layers: list[tuple[Tensor, Tensor]]) -> list[tuple[Tensor, Tensor]]:
    """The same MLP with every tanh replaced by one sigmoid: ``[in, out]`` weights rescaled.

    tanh(z) = 2 sigmoid(2z) - 1, and the affine maps around each activation absorb the 2s and the
    -1: a hidden layer computes s = sigmoid(x (2W) + 2b), and the layer after it reads h = 2s - 1
    as h W + b = s (2W) + (b - sum of W's rows). CPU torch's sigmoid is several times faster than
    its tanh (benchmarks/README.md, "tanh") and this needs no extra op, unlike ``activations.tanh``.
    """
    folded = []
    for depth, (weight, bias) in enumerate(layers):
        if depth > 0:  # reads 2s - 1 of the layer before
            weight, bias = 2.0 * weight, bias - weight.sum(0)
        if depth < len(layers) - 1:  # feeds a sigmoid standing for tanh: pre-activation 2z
            weight, bias = 2.0 * weight, 2.0 * bias
        folded.append((weight, bias))
    return folded


class FusedActorCritic:
    """``policy.act`` for MLP policies, computed with merged weights (see the module docstring).

    ``FusedActorCritic.build(policy)`` returns None for policies it does not cover (CNN
    encoders, unusual modules); the rollout then calls ``policy.act``.
    """

    def __init__(
        self, policy: ActorCritic, actor: list[nn.Linear], critic: list[nn.Linear] | None, activation: str | None
    ):
        self.policy = policy
        self._actor, self._critic = actor, critic  # critic None: shared trunk
        # A tanh MLP runs as a sigmoid one on rescaled weights (tanh_as_sigmoid, in refresh).
        self._fold_tanh = activation == "tanh"
        self._activation: Activation | None = (
            torch.sigmoid if self._fold_tanh else (torch.relu if activation == "relu" else None)
        )
        self._layers: list[tuple[Tensor, Tensor]] = []
        # Per layer, its actor and critic halves where it is block-diagonal (deeper hidden layers).
        self._halves: list[tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]] | None] = []

    @classmethod
    def build(cls, policy: nn.Module) -> FusedActorCritic | None:
        if not isinstance(policy, ActorCritic):  # one policy per agent group: each runs its own forward
            return None
        actor = mlp_layers(policy.actor_encoder)
        if actor is None or policy.recurrent:
            return None
        if policy.shared_trunk:
            return cls(policy, actor[0], None, actor[1])
        critic = mlp_layers(policy.critic_encoder)
        if critic is None or len(critic[0]) != len(actor[0]) or critic[1] != actor[1]:
            return None
        return cls(policy, actor[0], critic[0], actor[1])

    @torch.no_grad()
    def refresh(self) -> None:
        """Merge the current parameters; call after every update, before the next rollout."""
        heads = (self.policy.action_head.linear, self.policy.value_head)
        layers: list[tuple[Tensor, Tensor]] = []
        if self._critic is None:  # shared trunk: one MLP, then both heads read its features
            layers = [(layer.weight, layer.bias) for layer in self._actor]
            layers.append((torch.cat([h.weight for h in heads]), torch.cat([h.bias for h in heads])))
        else:
            pairs = list(zip(self._actor, self._critic)) + [heads]
            for depth, (a, c) in enumerate(pairs):
                # Both halves read the observation at depth 0 (or the observation itself feeds
                # both heads when there are no hidden layers); after that each reads its own half.
                # The actor's first layer gets zero columns for the rows' critic-only columns (MAPPO).
                weight = (
                    torch.cat([F.pad(a.weight, (self.policy.critic_only, 0)), c.weight])
                    if depth == 0
                    else torch.block_diag(a.weight, c.weight)
                )
                layers.append((weight, torch.cat([a.bias, c.bias])))
        # As [in, out] so that each layer is one addmm(bias, x, weight).
        layers = [(w.t(), b) for w, b in layers]
        if self._fold_tanh:
            layers = tanh_as_sigmoid(layers)
        self._layers = [(w.contiguous(), b.clone()) for w, b in layers]
        # From SPLIT_ROWS rows on: the same weights in F.linear's layout, deeper layers as halves.
        # Below, the layout above: a narrow batch's results stay those of the code before (the
        # pinned runs: a different sgemm rounds differently, and MuJoCo's chaos makes that 2%).
        self._wide_layers = [(linear_layout(w), b) for w, b in self._layers]
        self._halves = [None] * len(layers)
        if self._critic is not None:
            for depth in range(1, len(layers) - 1):  # the block-diagonal hidden layers
                (weight, bias), rows, columns = (
                    self._layers[depth],
                    self._actor[depth].in_features,
                    self._actor[depth].out_features,
                )
                self._halves[depth] = (
                    (linear_layout(weight[:rows, :columns]), bias[:columns]),
                    (linear_layout(weight[rows:, columns:]), bias[columns:]),
                )

    def __call__(self, obs: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        x = obs.flatten(1)
        wide = x.shape[0] >= SPLIT_ROWS
        layers = self._wide_layers if wide else self._layers
        for (weight, bias), halves in zip(layers[:-1], self._halves):
            if wide and halves is not None:
                (actor_weight, actor_bias), (critic_weight, critic_bias) = halves
                out, rows = x.new_empty(x.shape[0], weight.shape[1]), actor_weight.shape[0]
                torch.addmm(actor_bias, x[:, :rows], actor_weight, out=out[:, : actor_weight.shape[1]])
                torch.addmm(critic_bias, x[:, rows:], critic_weight, out=out[:, actor_weight.shape[1] :])
            else:
                out = torch.addmm(bias, x, weight)
            assert self._activation is not None  # a hidden layer has one (mlp_layers)
            x = self._activation(out)
        out = torch.addmm(layers[-1][1], x, layers[-1][0])
        action, logprob = self.policy.action_head.sample(out[:, :-1], action_mask)
        return action, logprob, out[:, -1]

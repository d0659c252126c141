"""The rollout's forward pass with the actor and critic MLPs merged into one stack of matmuls.

Parameters do not change while a rollout is collected, so once per rollout (``refresh``) the two
networks are merged into wider layers: the first layer stacks both nets' rows (both read the
observation), deeper layers are block-diagonal (each half reads its own features), and the last
layer maps ``[actor features | critic features]`` to ``[action-head params | value]``. One
``addmm`` and one activation per layer then replace two of each plus ~15 module calls: about
half the cost of ``ActorCritic.act`` for the small batches of a CPU rollout. The zero blocks add
exact zeros, so the result equals the unfused forward up to float summation order. A tanh MLP
also has its tanh turned into sigmoid by rescaling the merged weights (``tanh_as_sigmoid``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from fastppo.policies.actor_critic import ActorCritic
from fastppo.policies.mlp_autograd import mlp_layers

Activation = Callable[[Tensor], Tensor]


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

    def __init__(self, policy: ActorCritic, actor: list[nn.Linear], critic: list[nn.Linear] | None, activation: str | None):
        self.policy = policy
        self._actor, self._critic = actor, critic  # critic None: shared trunk
        # A tanh MLP runs as a sigmoid one on rescaled weights (tanh_as_sigmoid, in refresh).
        self._fold_tanh = activation == "tanh"
        self._activation: Activation | None = torch.sigmoid if self._fold_tanh else (torch.relu if activation == "relu" else None)
        self._layers: list[tuple[Tensor, Tensor]] = []

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
                weight = torch.cat([F.pad(a.weight, (self.policy.critic_only, 0)), c.weight]) if depth == 0 else torch.block_diag(a.weight, c.weight)
                layers.append((weight, torch.cat([a.bias, c.bias])))
        # Stored as [in, out] so that each layer is one addmm(bias, x, weight).
        layers = [(w.t(), b) for w, b in layers]
        if self._fold_tanh:
            layers = tanh_as_sigmoid(layers)
        self._layers = [(w.contiguous(), b.clone()) for w, b in layers]

    def __call__(self, obs: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        x = obs.flatten(1)
        for weight, bias in self._layers[:-1]:
            x = self._activation(torch.addmm(bias, x, weight))  # type: ignore[misc]: hidden layers imply one
        out = torch.addmm(self._layers[-1][1], x, self._layers[-1][0])
        action, logprob = self.policy.action_head.sample(out[:, :-1], action_mask)
        return action, logprob, out[:, -1]

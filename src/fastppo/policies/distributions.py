"""Action distributions per action space, on raw tensors.

The rollout calls ``sample`` once per env step, so these work on logits/means directly instead of
building ``torch.distributions`` objects each step. Each head owns its output layer.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import TypeVar, cast

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from fastppo.core.categorical import categorical_logprob_entropy, log_softmax
from fastppo.errors import FastPPOError

_Layer = TypeVar("_Layer", nn.Linear, nn.Conv2d)


def layer_init(layer: _Layer, gain: float, bias: float = 0.0) -> _Layer:
    """Orthogonal weights, constant bias (Engstrom et al. 2020; CleanRL's layer_init)."""
    nn.init.orthogonal_(layer.weight, gain)
    if layer.bias is not None:  # a Conv2d's is optional; ours all have one
        nn.init.constant_(layer.bias, bias)
    return layer


def _mask_logits(logits: Tensor, action_mask: Tensor | None) -> Tensor:
    # The most negative finite float rather than -inf: probability exactly 0, and p * log p
    # stays 0 in the entropy instead of 0 * -inf = nan.
    if action_mask is None:
        return logits
    return logits.masked_fill(~action_mask, torch.finfo(logits.dtype).min)


class Noise:
    """Where the heads' random draws come from: torch's global generator here (a run of one seed);
    one generator per seed for a stack of seeds (``fastppo.training.seed_stack.SeedNoise``), so
    that each seed draws what it would draw alone."""

    def exponential(self, like: Tensor) -> Tensor:
        return torch.empty_like(like).exponential_()

    def normal(self, like: Tensor) -> Tensor:
        return torch.randn_like(like)

    def uniform(self, like: Tensor) -> Tensor:
        return torch.rand_like(like)


GLOBAL_NOISE = Noise()


def _categorical_sample(logits: Tensor, noise: Noise = GLOBAL_NOISE) -> Tensor:
    # Gumbel-max, argmax(logits + G) with G = -log(E), E ~ Exp(1): the same law as
    # Categorical.sample() without normalising; an exponential draw instead of
    # -log(-log(uniform)) saves 2 ops per rollout step. The clamp keeps a draw of exactly 0
    # from giving G = +inf, which would beat even a masked logit.
    return (logits - noise.exponential(logits).clamp_(min=1e-20).log_()).argmax(dim=-1)


class ActionHead(nn.Module):
    """Maps features to distribution parameters and samples/scores actions from them."""

    linear: nn.Linear  # the output layer, each head's own

    def forward(self, features: Tensor) -> Tensor:
        return self.linear(features)

    @abstractmethod
    def sample(
        self, params: Tensor, action_mask: Tensor | None = None, noise: Noise = GLOBAL_NOISE
    ) -> tuple[Tensor, Tensor]:
        """(action, logprob of that action): the rollout's hot path, so no entropy. ``params`` may
        carry leading batch dims (a stack of seeds: ``[seeds, rows, ...]``)."""

    @abstractmethod
    def logprob_entropy(
        self, params: Tensor, action: Tensor, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """(logprob, entropy) of ``action`` under the distribution ``params``, summed over dims."""

    @abstractmethod
    def mode(self, params: Tensor, action_mask: Tensor | None = None) -> Tensor:
        """The most likely action (deterministic evaluation)."""

    def env_action(self, action: Tensor) -> Tensor:
        """The action to hand the env for a sampled one: the heads work in indices 0..n-1 (what
        the rollout stores and the update scores); categorical heads add the space's ``start``."""
        return action


class IndexHead(ActionHead):
    """A categorical head over ``Discrete``/``MultiDiscrete`` indices, whose env actions start at
    the space's ``start`` (e.g. Discrete(3, start=-1) takes -1, 0, 1)."""

    start: Tensor | None

    def __init__(self, start: np.ndarray | int):
        super().__init__()
        offsets = torch.as_tensor(np.asarray(start, dtype=np.int64))
        # Not persistent: it follows the module to its device but derives from the space, not the weights.
        self.register_buffer("start", offsets if bool(offsets.any()) else None, persistent=False)

    def env_action(self, action: Tensor) -> Tensor:
        return action if self.start is None else action + self.start


class CategoricalHead(IndexHead):
    def __init__(self, in_features: int, n: int, start: int = 0):
        super().__init__(start)
        self.linear = layer_init(nn.Linear(in_features, n), gain=0.01)

    def sample(
        self, params: Tensor, action_mask: Tensor | None = None, noise: Noise = GLOBAL_NOISE
    ) -> tuple[Tensor, Tensor]:
        # One log_softmax serves the draw and the logprob, no entropy.
        logp_all = log_softmax(_mask_logits(params, action_mask))
        action = _categorical_sample(logp_all, noise)
        return action, logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)

    def logprob_entropy(
        self, params: Tensor, action: Tensor, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        return categorical_logprob_entropy(_mask_logits(params, action_mask), action)

    def log_probs(self, params: Tensor, action_mask: Tensor | None = None) -> Tensor:
        """The log-probability of every action, ``[..., n]`` (a masked action's: the most negative
        float or below, its probability exactly 0)."""
        return log_softmax(_mask_logits(params, action_mask))

    def mode(self, params: Tensor, action_mask: Tensor | None = None) -> Tensor:
        return _mask_logits(params, action_mask).argmax(dim=-1)


class MultiCategoricalHead(IndexHead):
    """Independent categoricals, one per MultiDiscrete dimension; logprobs and entropies add."""

    def __init__(self, in_features: int, nvec: list[int], start: np.ndarray | int = 0):
        super().__init__(start)
        self.nvec = [int(n) for n in nvec]
        self.linear = layer_init(nn.Linear(in_features, sum(self.nvec)), gain=0.01)

    def _split(self, params: Tensor, action_mask: Tensor | None) -> tuple[Tensor, ...]:
        return torch.split(_mask_logits(params, action_mask), self.nvec, dim=-1)

    def sample(
        self, params: Tensor, action_mask: Tensor | None = None, noise: Noise = GLOBAL_NOISE
    ) -> tuple[Tensor, Tensor]:
        action = torch.stack([_categorical_sample(lg, noise) for lg in self._split(params, action_mask)], dim=-1)
        return action, self.logprob_entropy(params, action, action_mask)[0]

    def logprob_entropy(
        self, params: Tensor, action: Tensor, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        parts = [
            categorical_logprob_entropy(lg, action[..., i]) for i, lg in enumerate(self._split(params, action_mask))
        ]
        # sum() starts from the int 0, which a tensor absorbs: each sum is a Tensor.
        return cast(Tensor, sum(p[0] for p in parts)), cast(Tensor, sum(p[1] for p in parts))

    def mode(self, params: Tensor, action_mask: Tensor | None = None) -> Tensor:
        return torch.stack([lg.argmax(dim=-1) for lg in self._split(params, action_mask)], dim=-1)


class BernoulliHead(ActionHead):
    """Independent Bernoullis for MultiBinary."""

    def __init__(self, in_features: int, n: int):
        super().__init__()
        self.linear = layer_init(nn.Linear(in_features, n), gain=0.01)

    def sample(
        self, params: Tensor, action_mask: Tensor | None = None, noise: Noise = GLOBAL_NOISE
    ) -> tuple[Tensor, Tensor]:
        action = (noise.uniform(params) < torch.sigmoid(params)).to(params.dtype)
        return action, self.logprob_entropy(params, action)[0]

    def logprob_entropy(
        self, params: Tensor, action: Tensor, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        # log p(a) = a*log(sigmoid(x)) + (1-a)*log(sigmoid(-x)) = -BCE(x, a)
        logprob = -nn.functional.binary_cross_entropy_with_logits(
            params, action.to(params.dtype), reduction="none"
        ).sum(-1)
        p = torch.sigmoid(params)
        entropy = nn.functional.binary_cross_entropy_with_logits(params, p, reduction="none").sum(-1)
        return logprob, entropy

    def mode(self, params: Tensor, action_mask: Tensor | None = None) -> Tensor:
        return (params > 0).to(params.dtype)


class GaussianHead(ActionHead):
    """Diagonal Gaussian with a state-independent log-std (Schulman et al. 2017's MuJoCo setup).
    The log-prob is of the raw sample; clipping to the action bounds happens at the env boundary."""

    def __init__(self, in_features: int, dim: int, init_log_std: float = 0.0):
        super().__init__()
        self.linear = layer_init(nn.Linear(in_features, dim), gain=0.01)
        self.log_std = nn.Parameter(torch.full((dim,), float(init_log_std)))

    def sample(
        self, params: Tensor, action_mask: Tensor | None = None, noise: Noise = GLOBAL_NOISE
    ) -> tuple[Tensor, Tensor]:
        # The log-density of mean + std * eps needs only eps.
        eps = noise.normal(params)
        action = torch.addcmul(params, self.log_std.exp(), eps)
        logprob = (-0.5 * eps.square() - self.log_std).sum(-1) - 0.5 * math.log(2 * math.pi) * params.shape[-1]
        return action, logprob

    def logprob_entropy(
        self, params: Tensor, action: Tensor, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        log_std = self.log_std.expand_as(params)
        logprob = (-0.5 * ((action - params) / log_std.exp()).square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        entropy = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
        return logprob, entropy

    def mode(self, params: Tensor, action_mask: Tensor | None = None) -> Tensor:
        return params


def make_action_head(space: gym.Space, in_features: int, init_log_std: float = 0.0) -> ActionHead:
    """The head for an action space, or a FastPPOError naming the unsupported space."""
    if isinstance(space, gym.spaces.Discrete):
        return CategoricalHead(in_features, int(space.n), int(space.start))
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise FastPPOError(f"MultiDiscrete action spaces must be 1-D, got nvec shape {space.nvec.shape}")
        return MultiCategoricalHead(in_features, space.nvec.tolist(), space.start)
    if isinstance(space, gym.spaces.MultiBinary):
        return BernoulliHead(in_features, int(np.prod(space.shape)))
    if isinstance(space, gym.spaces.Box):
        if len(space.shape) != 1:
            raise FastPPOError(
                f"Box action spaces must be 1-D, got shape {space.shape}: flatten the actions in a wrapper"
            )
        return GaussianHead(in_features, space.shape[0], init_log_std)
    raise FastPPOError(
        f"unsupported action space {space}: fastppo handles Discrete, MultiDiscrete, MultiBinary and 1-D Box"
    )

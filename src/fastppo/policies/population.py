"""A population axis over the one actor-critic definition: M ``ActorCritic``s of one architecture
run as one batched call, PyTorch's model ensembling (``torch.func.functional_call`` of the
definition with each member's weights, ``torch.func.vmap`` over the member axis).

Two populations use it, and a new policy part written in ``ActorCritic`` works in both:

- a stack of seeds (``StackedActorCritic``, ``fastppo train --backend tensor --seeds 1-64``): S
  members whose weights are views of one ``[S, P]`` parameter (seed s's row its policy's
  parameters in ``ActorCritic.parameters()`` order), each member reading its own block of rows;
- agent groups (``GroupedActorCritic``, ``--multi-agent.policies group``): G members, one per agent
  group, each run on every row, each row keeping its own group's outputs.

What stays outside vmap, as a layer of its own: sampling (random ops are refused under vmap, and a
stack draws seed s's numbers from seed s's generator: ``SeedNoise``), so the members compute their
distribution parameters ``[M, n, ...]`` and values and the head's sampling and log-prob math runs
on those; and the one-node MLP backward (``mlp_autograd``, a custom autograd node vmap cannot
batch), which takes stacked weights itself and keeps a CPU update of separate MLPs as fast as the
hand-written stack was. A population of one group is its ``ActorCritic`` (its speed layers,
nn.LSTM), bit for bit.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TypeVar

import gymnasium as gym
import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from fastppo.config import Config, PolicyConfig
from fastppo.envs.layout import ObservationLayout
from fastppo.policies.activations import IN_PLACE_ACTIVATIONS
from fastppo.policies.actor_critic import ActorCritic
from fastppo.policies.distributions import ActionHead, GaussianHead, Noise
from fastppo.policies.memory import RecurrentCore
from fastppo.policies.mlp_autograd import affine, mlps_one_node

Outputs = tuple[Tensor, Tensor, Tensor | None]
"""(distribution parameters [M, n, ...], values [M, n], final states [M, B, state_size] or None)."""

_MaybeTensor = TypeVar("_MaybeTensor", Tensor, Tensor | None)


def _stacked_mlp(x: Tensor, layers: list[tuple[Tensor, Tensor]], activation: str | None) -> Tensor:
    """act(... act(x W^T + b)) of an MLP encoder's stacked ``[M, out, in]`` weights on ``x``
    [M, n, in]."""
    for weight, bias in layers:
        assert activation is not None  # a hidden layer has one (mlp_layers)
        x = IN_PLACE_ACTIVATIONS[activation](affine(bias, x, weight))  # over its fresh product
    return x


class _Member(nn.Module):
    """One of ``ActorCritic``'s plain-op parts (``part``, a method name) as a module call, which
    ``functional_call`` makes."""

    def __init__(self, policy: ActorCritic, part: str):
        super().__init__()
        self.policy = policy
        self.part = part

    def forward(self, *args: Tensor | tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        return getattr(self.policy, self.part)(*args)


class Population(nn.Module, ABC):
    """Members of ``template``'s architecture whose weights ``weights()`` gives stacked, ``[M, *shape]``
    per parameter name. Subclasses store the weights and route rows to members."""

    # Plain attributes (set with object.__setattr__ in __init__), not registered modules.
    _parts: dict[str, _Member]
    _template: ActorCritic
    _head_math: ActionHead

    def __init__(self, template: ActorCritic):
        super().__init__()
        # Plain attributes: the definition whose modules functional_call runs, not registered weights.
        object.__setattr__(
            self, "_parts", {part: _Member(template, part) for part in ("layers_forward", "features", "heads")}
        )
        object.__setattr__(self, "_template", template)
        self.recurrent, self.state_size = template.recurrent, template.state_size
        names = {id(p): name for name, p in template.named_parameters()}
        # The one-node speed layer's nets as parameter names (ActorCritic decides where it applies).
        self._one_node: tuple[list[list[tuple[str, str]]], str | None] | None = None
        if template._mlps is not None:
            nets, activation = template._mlps
            self._one_node = (
                [[(names[id(layer.weight)], names[id(layer.bias)]) for layer in net] for net in nets],
                activation,
            )
        # The recurrent cores, stepped outside vmap on stacked weights (``_recurrent_outputs``), and
        # the MLP encoders and heads around them (None: other encoders, which run under vmap).
        self._cores: list[tuple[RecurrentCore, list[str]]] = (
            [(core, [names[id(w)] for w in core.weights()]) for core in template.cores] if template.recurrent else []
        )
        self._around_cores: tuple[list[list[tuple[str, str]]], list[tuple[str, str]], str | None] | None = None
        if template._recurrent_mlps is not None:
            encoders, heads, activation = template._recurrent_mlps
            self._around_cores = (
                [[(names[id(layer.weight)], names[id(layer.bias)]) for layer in net] for net in encoders],
                [(names[id(layer.weight)], names[id(layer.bias)]) for layer in heads],
                activation,
            )
        # The head's math (sampling, log-probs) on [M, n, ...] parameters; its weights are the members'.
        head = copy.deepcopy(template.action_head)
        del head.linear
        if isinstance(head, GaussianHead):
            del head.log_std  # bound to the members' (or rows') log-std at each use: ``_head``
        object.__setattr__(self, "_head_math", head)

    @property
    @abstractmethod
    def members(self) -> int:
        """How many networks."""

    @abstractmethod
    def weights(self) -> dict[str, Tensor]:
        """Each parameter of the members as one ``[M, *shape]`` tensor, by ``ActorCritic`` name."""

    def _outputs(
        self, weights: dict[str, Tensor], obs: Tensor, state: Tensor | None, keep: Tensor | None, shared_rows: bool
    ) -> Outputs:
        """Every member's outputs for its rows: ``obs`` [M, n, ...] (and ``state``, ``keep``), or
        the same [n, ...] rows for every member with ``shared_rows``."""
        if state is None and self._one_node is not None and not torch.jit.is_tracing():
            # Separate MLPs: batched matmuls with their activations written over them (the rollout),
            # and one autograd node (the update), in about two thirds of vmap's time.
            x = obs.flatten(1).expand(self.members, -1, -1) if shared_rows else obs.flatten(2)
            nets, activation = self._one_node
            params, value = mlps_one_node(x, [[(weights[w], weights[b]) for w, b in net] for net in nets], activation)
            return params, value.squeeze(-1), None
        if state is not None:
            return self._recurrent_outputs(weights, obs, state, keep, shared_rows)
        member = vmap(self._call("layers_forward"), in_dims=(0, None if shared_rows else 0))
        params, value = member(weights, obs)
        return params, value, None

    def _recurrent_outputs(
        self, weights: dict[str, Tensor], obs: Tensor, state: Tensor, keep: Tensor | None, shared_rows: bool
    ) -> Outputs:
        """``_outputs`` with memory, every member's cores' cells (``RecurrentCore.cell_steps``)
        stepped on stacked weights as batched matmuls, outside vmap: under vmap each small op of a
        cell step paid vmap's dispatch at every time step. MLP encoders and the heads around the
        cores run as batched matmuls too (the definition's layers, ``ActorCritic._recurrent_mlps``),
        other encoders under vmap (``ActorCritic.features``). A 16-seed LSTM stack on one core:
        rollout step 1.8 -> 0.9 ms, update 41-48 -> 33 ms, as the hand-written stack before it."""
        if shared_rows:
            obs, state = obs.expand(self.members, *obs.shape), state.expand(self.members, *state.shape)
            keep = None if keep is None else keep.expand(self.members, *keep.shape)
        if self._around_cores is None:
            inputs = vmap(self._call("features"))(weights, obs)
        else:
            encoders, heads, activation = self._around_cores
            inputs = tuple(
                _stacked_mlp(obs.flatten(2), [(weights[w], weights[b]) for w, b in net], activation) for net in encoders
            )
        states = state.split(self._cores[0][0].state_size, dim=-1)
        runs = [
            core.cell_steps(x, s, keep, tuple(weights[name] for name in names))
            for (core, names), x, s in zip(self._cores, inputs, states)
        ]
        outputs = tuple(out for out, _ in runs)
        if self._around_cores is None:
            params, value = vmap(self._call("heads"))(weights, outputs)
        else:
            (action_w, action_b), (value_w, value_b) = heads
            params, value = (
                affine(weights[action_b], outputs[0], weights[action_w]),
                affine(weights[value_b], outputs[-1], weights[value_w]).squeeze(-1),
            )
        return params, value, torch.cat([s for _, s in runs], dim=-1)

    def _call(self, part: str) -> Callable[..., tuple[Tensor, ...]]:
        """``ActorCritic``'s method ``part`` as a function of the members' weights, to vmap."""
        module = self._parts[part]

        def call(weights: dict[str, Tensor], *args: Tensor | tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            return functional_call(module, {f"policy.{name}": w for name, w in weights.items()}, args)

        return call

    def _head(self, log_std: Tensor | None) -> ActionHead:
        """The head's math, a Gaussian's bound to ``log_std`` (broadcasting over its parameters)."""
        if log_std is not None:
            self._head_math.log_std = log_std
        return self._head_math


class SeedNoise(Noise):
    """The heads' draws for a ``[seeds, ...]`` tensor, block s from seed s's generator (the
    draws seed s's single run makes from torch's global generator), and each seed's permutations."""

    def __init__(self, generators: list[torch.Generator]):
        self.generators = generators

    def _draw(self, like: Tensor, fill: str) -> Tensor:
        """A tensor like ``like`` whose block s is filled in place by ``fill`` from generator s."""
        out = torch.empty_like(like)
        for block, generator in zip(out, self.generators):
            getattr(block, fill)(generator=generator)
        return out

    def exponential(self, like: Tensor) -> Tensor:
        return self._draw(like, "exponential_")

    def normal(self, like: Tensor) -> Tensor:
        return self._draw(like, "normal_")

    def uniform(self, like: Tensor) -> Tensor:
        return self._draw(like, "uniform_")

    def randperm(self, n: int, seed_index: int, device: torch.device) -> Tensor:
        return torch.randperm(n, generator=self.generators[seed_index], device=device)


def seed_policy(
    config: Config, seed: int, observation_space: gym.Space, action_space: gym.Space, device: torch.device
) -> tuple[ActorCritic, torch.Generator]:
    """The policy a single run of ``seed`` starts with, and a generator standing where torch's
    global one stands in that run once the policy is built."""
    torch.manual_seed(seed)
    policy = ActorCritic(observation_space, action_space, config.policy).to(device)
    generator = torch.Generator(device=device)
    if device.type == "cpu":
        generator.set_state(torch.get_rng_state())  # after the initialisation's draws
    else:
        generator.manual_seed(seed)  # a single run's device generator: seeded, nothing drawn yet
    return policy, generator


class StackedActorCritic(Population):
    """S seeds' actor-critics as one population whose weights are views of one ``[S, P]``
    parameter ``flat`` (the only parameter: one Adam per seed over it, ``optim.FusedAdam(members=S)``).

    Takes rows seed-major, flat (``[S * n, ...]``, the rollout's env rows) or stacked
    (``[S, n, ...]``, the update's minibatches), and returns per-row outputs of the same layout.
    A recurrent stack's cores step their cells (``RecurrentCore.cell_steps``) over the time steps
    of a minibatch's sequences with the state zeroed after each row that is no real transition:
    the rule the single run's ``memory.Segments`` applies by cutting the rows into episodes.
    """

    action_head: ActionHead  # the head's math, set past nn.Module's registry (no weights of its own)

    def __init__(self, policies: list[ActorCritic], generators: list[torch.Generator]):
        super().__init__(policies[0])
        self.seeds = len(policies)
        self._shapes = {name: p.shape for name, p in policies[0].named_parameters()}
        self.flat = nn.Parameter(
            torch.stack([torch.cat([p.detach().reshape(-1) for p in policy.parameters()]) for policy in policies])
        )
        object.__setattr__(self, "action_head", self._head_math)  # the rollout's ``env_action``; no weights of its own
        self.noise = SeedNoise(generators)

    @property
    def members(self) -> int:
        return self.seeds

    def weights(self) -> dict[str, Tensor]:
        """Each parameter of the seeds' policies as a ``[S, *shape]`` view of ``flat``, from one
        split: its backward writes the gradient of ``flat`` in one concatenation, where a slice per
        parameter would each backpropagate a zero-filled ``[S, P]`` gradient, summed one by one
        (64-seed CartPole update on one core: 0.68-0.72 -> 0.64-0.65 s per iteration)."""
        parts = self.flat.split([math.prod(shape) for shape in self._shapes.values()], dim=1)
        return {name: part.view(self.seeds, *shape) for (name, shape), part in zip(self._shapes.items(), parts)}

    def _seed_head(self, weights: dict[str, Tensor]) -> ActionHead:
        log_std = weights.get("action_head.log_std")
        return self._head(None if log_std is None else log_std.unsqueeze(1))  # [S, 1, A]: broadcasts over rows

    def _stacked(self, rows: _MaybeTensor) -> _MaybeTensor:
        return None if rows is None else rows.view(self.seeds, -1, *rows.shape[1:])

    def act(self, obs: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """The rollout step on flat rows: (action, logprob, value) per row."""
        return self.step(obs, None, action_mask)[:3]

    def step(
        self, obs: Tensor, state: Tensor | None, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """The rollout step on flat rows (and, recurrent, their states): (action, logprob, value,
        next state) per row."""
        weights = self.weights()
        params, value, state = self._outputs(weights, self._stacked(obs), self._stacked(state), None, shared_rows=False)
        action, logprob = self._seed_head(weights).sample(params, self._stacked(action_mask), self.noise)
        return (
            action.flatten(0, 1),
            logprob.flatten(0, 1),
            value.flatten(0, 1),
            None if state is None else state.flatten(0, 1),
        )

    def get_value(self, obs: Tensor, state: Tensor | None = None) -> Tensor:
        return self._outputs(self.weights(), self._stacked(obs), self._stacked(state), None, shared_rows=False)[
            1
        ].flatten(0, 1)

    def evaluate(
        self,
        obs: Tensor,
        action: Tensor,
        action_mask: Tensor | None = None,
        state: Tensor | None = None,
        keep: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The update's forward on stacked minibatch rows ``[S, n, ...]`` (recurrent: time-major
        sequences from ``state`` [S, B, state_size], reset after the rows ``keep`` marks false):
        (logprob, entropy, value), each ``[S, n]``."""
        weights = self.weights()
        params, value, _ = self._outputs(weights, obs, state, keep, shared_rows=False)
        logprob, entropy = self._seed_head(weights).logprob_entropy(params, action, action_mask)
        return logprob, entropy, value

    def initial_state(self, batch_size: int) -> Tensor | None:
        """Zeros for ``batch_size`` flat rows (None without memory)."""
        return torch.zeros(batch_size, self.state_size, device=self.flat.device) if self.recurrent else None

    def keep(self, indices: list[int]) -> None:
        """Keep only the seeds at ``indices`` (in that order): their rows of ``flat``, as a new
        parameter (the optimizer follows with ``FusedAdam.keep``), and their generators."""
        self.flat = nn.Parameter(self.flat.detach()[indices])
        self.seeds = len(indices)
        self.noise.generators = [self.noise.generators[i] for i in indices]

    @torch.no_grad()
    def load_member(self, index: int, policy: nn.Module) -> None:
        """The inverse of ``unstack``: ``policy``'s weights (seed ``index``'s single run's) into its row of ``flat``."""
        self.flat[index] = torch.cat([p.reshape(-1) for p in policy.parameters()])

    @torch.no_grad()
    def unstack(self, index: int, into: ActorCritic | None = None) -> ActorCritic:
        """Seed ``index``'s policy as an ordinary ``ActorCritic`` (a copy of its current weights),
        written into ``into`` (an earlier ``unstack``'s: no new module, whose deepcopy costs ~1 ms)."""
        policy, weights = into or copy.deepcopy(self._template), self.weights()
        for name, p in policy.named_parameters():
            p.copy_(weights[name][index])
        return policy


class GroupedActorCritic(Population):
    """One ``ActorCritic`` per agent group (``--multi-agent.policies group``), behind ActorCritic's
    interface; row r is acted on by the member of its agent's group.

    A multi-agent row ends in its agent's one-hot id (fastppo.envs.layout, never normalised), so the
    group of every row is data the policy reads, whatever the shuffling of the update or the
    time-major order of recurrent sequences. Every member runs on all rows (vmap over the
    members, the rows shared) and each row keeps its own group's outputs: no gather/scatter
    bookkeeping, and the other groups' outputs get no gradient. A recurrent row's state slot only
    ever holds its own group's state, since a row never changes agent. The members stay modules
    of their own (``policies.<k>.<name>`` in the state dict, as saved run folders hold them),
    stacked at each call; the rows then sample once each, from their own group's distribution.
    """

    agent_group: Tensor  # a buffer: each agent's group

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, cfg: PolicyConfig, layout: ObservationLayout):
        policies = [ActorCritic(obs_space, action_space, cfg, layout) for _ in range(max(layout.groups) + 1)]
        super().__init__(policies[0])  # the template is member 0 itself: it moves with the module
        self.policies = nn.ModuleList(policies)
        self.register_buffer("agent_group", torch.tensor(layout.groups, dtype=torch.long))
        self.num_agents = layout.raw
        self.critic_only = policies[0].critic_only

    @property
    def action_head(self) -> ActionHead:
        """For ``env_action``, the same for every group (they share the action space)."""
        return self._template.action_head

    @property
    def members(self) -> int:
        return len(self.policies)

    def weights(self) -> dict[str, Tensor]:
        members = [dict(policy.named_parameters()) for policy in self.policies]
        return {name: torch.stack([m[name] for m in members]) for name in members[0]}

    def initial_state(self, batch_size: int) -> Tensor | None:
        return self._template.initial_state(batch_size)

    def _rows(
        self, obs: Tensor, state: Tensor | None = None, keep: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None, ActionHead]:
        """(each row's distribution parameters, value and final state, the head to sample them)."""
        if len(self.policies) == 1:  # a population of one is its ActorCritic, speed layers and all
            policy = self._template
            params, value, final = (*policy(obs), None) if state is None else policy.recurrent_forward(obs, state, keep)
            return params, value, final, policy.action_head
        weights = self.weights()
        params, value, final = self._outputs(weights, obs, state, keep, shared_rows=True)
        group = self.agent_group[obs[:, -self.num_agents :].argmax(1)]
        rows = torch.arange(obs.shape[0], device=obs.device)
        # Sequences' final states are per sequence: row b of the last time step is sequence b's.
        final = None if final is None or keep is not None else final[group[-final.shape[1] :], rows[: final.shape[1]]]
        log_std = weights.get("action_head.log_std")
        return params[group, rows], value[group, rows], final, self._head(None if log_std is None else log_std[group])

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        return self._rows(obs)[:2]

    def act(self, obs: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        params, value, _, head = self._rows(obs)
        return (*head.sample(params, action_mask), value)

    def step(
        self, obs: Tensor, state: Tensor, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        params, value, final, head = self._rows(obs, state)
        return (*head.sample(params, action_mask), value, final)

    def get_value(self, obs: Tensor, state: Tensor | None = None) -> Tensor:
        return self._rows(obs, state)[1]

    def evaluate(
        self,
        obs: Tensor,
        action: Tensor,
        action_mask: Tensor | None = None,
        state: Tensor | None = None,
        keep: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        params, value, _, head = self._rows(obs, state, keep)
        return (*head.logprob_entropy(params, action, action_mask), value)

    @torch.inference_mode()
    def predict(
        self, obs: Tensor, action_mask: Tensor | None = None, deterministic: bool = False, state: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        params, _, state, head = self._rows(obs, state)
        return (head.mode(params, action_mask) if deterministic else head.sample(params, action_mask)[0]), state

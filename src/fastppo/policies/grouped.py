"""One actor-critic per agent group (``--multi-agent.policies group``), behind ActorCritic's interface.

A multi-agent row ends in its agent's one-hot id (fastppo.envs.layout, never normalised), so the
group of every row is data the policy reads, whatever the shuffling of the update or the
time-major order of recurrent sequences. Each group's network runs on all rows and each row keeps
its own group's outputs: G forward passes instead of one, for no gather/scatter bookkeeping, and
the other groups' outputs get no gradient. A recurrent row's state slot only ever holds its own
group's state, since a row never changes agent.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import Tensor, nn

from fastppo.config import PolicyConfig
from fastppo.envs.layout import ObservationLayout
from fastppo.policies.actor_critic import ActorCritic
from fastppo.policies.distributions import ActionHead


class GroupedActorCritic(nn.Module):
    """``len(set(layout.groups))`` ActorCritics; row r is acted on by the one of its agent's group."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, cfg: PolicyConfig, layout: ObservationLayout):
        super().__init__()
        self.policies = nn.ModuleList(ActorCritic(obs_space, action_space, cfg, layout) for _ in range(max(layout.groups) + 1))
        self.register_buffer("agent_group", torch.tensor(layout.groups, dtype=torch.long))
        self.num_agents = layout.raw
        self.recurrent = self.policies[0].recurrent
        self.critic_only = self.policies[0].critic_only

    @property
    def action_head(self) -> ActionHead:
        """For ``env_action``, the same for every group (they share the action space)."""
        return self.policies[0].action_head

    @property
    def state_size(self) -> int:
        return self.policies[0].state_size

    def initial_state(self, batch_size: int) -> Tensor | None:
        return self.policies[0].initial_state(batch_size)

    def _select(self, obs: Tensor, outputs: list[tuple[Tensor | None, ...]]) -> tuple[Tensor | None, ...]:
        """Each row's own group's outputs (every output has one entry per row, or is None)."""
        group = self.agent_group[obs[:, -self.num_agents :].argmax(1)]
        selected = []
        for values in zip(*outputs):
            out = values[0]
            if out is None:  # predict's state without memory
                selected.append(None)
                continue
            for k, value in enumerate(values[1:], start=1):
                out = torch.where((group == k).view(-1, *([1] * (value.dim() - 1))), value, out)
            selected.append(out)
        return tuple(selected)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        return self._select(obs, [policy(obs) for policy in self.policies])  # type: ignore[return-value]

    def act(self, obs: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        return self._select(obs, [policy.act(obs, action_mask) for policy in self.policies])  # type: ignore[return-value]

    def step(self, obs: Tensor, state: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return self._select(obs, [policy.step(obs, state, action_mask) for policy in self.policies])  # type: ignore[return-value]

    def get_value(self, obs: Tensor, state: Tensor | None = None) -> Tensor:
        return self._select(obs, [(policy.get_value(obs, state),) for policy in self.policies])[0]  # type: ignore[return-value]

    def evaluate(self, obs: Tensor, action: Tensor, action_mask: Tensor | None = None, state: Tensor | None = None, keep: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        return self._select(obs, [policy.evaluate(obs, action, action_mask, state, keep) for policy in self.policies])  # type: ignore[return-value]

    @torch.inference_mode()
    def predict(self, obs: Tensor, action_mask: Tensor | None = None, deterministic: bool = False, state: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        return self._select(obs, [policy.predict(obs, action_mask, deterministic, state) for policy in self.policies])  # type: ignore[return-value]

"""Actor-critic networks: an observation encoder (shared or one per head), an action head and a
value head, with CleanRL's orthogonal initialisation."""

from __future__ import annotations

from typing import overload

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from fastppo.config import PolicyConfig
from fastppo.envs.layout import ObservationLayout
from fastppo.errors import FastPPOError
from fastppo.policies.activations import ACTIVATIONS
from fastppo.policies.distributions import layer_init, make_action_head
from fastppo.policies.memory import RecurrentCore, Segments
from fastppo.policies.mlp_autograd import mlp_layers, mlps_one_node, one_node_pays


def mlp(in_features: int, hidden_sizes: tuple[int, ...], activation: str) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Flatten()]
    for width in hidden_sizes:
        layers += [layer_init(nn.Linear(in_features, width), gain=np.sqrt(2)), ACTIVATIONS[activation]()]
        in_features = width
    return nn.Sequential(*layers)


def make_encoder(
    obs_space: gym.Space, cfg: PolicyConfig, layout: ObservationLayout | None = None, board_start: int = 0
) -> tuple[nn.Module, int]:
    """An encoder for a Box observation space and the number of features it outputs. A board
    encoder finds its board through ``layout``, from column ``board_start`` of these rows."""
    if not isinstance(obs_space, gym.spaces.Box):
        raise FastPPOError(f"unsupported observation space {obs_space}: expected Box after flattening")
    if cfg.activation not in ACTIVATIONS:
        raise FastPPOError(f"unknown activation {cfg.activation!r}: choose one of {sorted(ACTIVATIONS)}")
    is_image = obs_space.dtype == np.uint8 and len(obs_space.shape) == 3
    kind = ("cnn" if is_image else "mlp") if cfg.encoder == "auto" else cfg.encoder
    if kind == "mlp":
        if not cfg.hidden_sizes:
            return nn.Flatten(), int(np.prod(obs_space.shape))
        return mlp(int(np.prod(obs_space.shape)), cfg.hidden_sizes, cfg.activation), cfg.hidden_sizes[-1]
    if kind == "cnn":
        from fastppo.policies.cnn import NatureCNN

        encoder = NatureCNN(obs_space.shape, precision=cfg.precision)
        return encoder, encoder.out_features
    if kind == "board":
        from fastppo.policies.board import BoardEncoder, board_columns

        columns = board_columns(obs_space, layout or ObservationLayout(), board_start)
        inputs = BoardEncoder.tower_features(columns, cfg.board_channels) + columns.others
        head, features = (
            (mlp(inputs, cfg.hidden_sizes, cfg.activation), cfg.hidden_sizes[-1])
            if cfg.hidden_sizes
            else (nn.Identity(), inputs)
        )
        return BoardEncoder(columns, cfg.board_channels, cfg.board_blocks, head, features), features
    raise FastPPOError(f"unknown encoder {cfg.encoder!r}: choose mlp, cnn, board or auto")


class ActorCritic(nn.Module):
    """pi(a|s) and V(s). ``act`` is the fused rollout forward, ``evaluate`` the update forward."""

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        cfg: PolicyConfig | None = None,
        layout: ObservationLayout | None = None,
    ):
        super().__init__()
        cfg = cfg or PolicyConfig()
        # The actor skips the leading columns only a centralised critic reads (MAPPO, see fastppo.envs.layout).
        layout = layout or ObservationLayout()
        self.critic_only = layout.critic_only
        if self.critic_only and cfg.shared_trunk:
            raise FastPPOError(
                "a centralised critic (--multi-agent.algorithm mappo) reads more than the actor: "
                "drop --policy.shared-trunk"
            )
        self.actor_encoder, features = make_encoder(layout.actor_space(obs_space), cfg, layout)
        if cfg.shared_trunk:
            # A plain attribute, not a second registered submodule: the state dict then holds each
            # shared weight once, which safetensors requires (it refuses aliased tensors).
            object.__setattr__(self, "critic_encoder", self.actor_encoder)
        else:
            self.critic_encoder = make_encoder(obs_space, cfg, layout, board_start=layout.critic_only)[0]
        self.shared_trunk = cfg.shared_trunk
        self.recurrent = cfg.memory != "none"
        if cfg.memory != "none":
            self.actor_memory = RecurrentCore(cfg.memory, features, cfg.memory_size)
            if cfg.shared_trunk:
                object.__setattr__(self, "critic_memory", self.actor_memory)  # as critic_encoder above
            else:
                self.critic_memory = RecurrentCore(cfg.memory, features, cfg.memory_size)
            features = cfg.memory_size
        self.action_head = make_action_head(action_space, features, cfg.init_log_std)
        self.value_head = layer_init(nn.Linear(features, 1), gain=1.0)
        # Separate MLP trunks and their heads train as one autograd node (mlp_autograd); a plain
        # attribute, the layers are not registered a second time.
        actor, critic = mlp_layers(self.actor_encoder), mlp_layers(self.critic_encoder)
        self._mlps: tuple[list[list[nn.Linear]], str | None] | None = None
        if (
            not cfg.shared_trunk
            and not self.recurrent
            and not self.critic_only
            and actor is not None
            and critic is not None
            and actor[1] == critic[1]
        ):
            self._mlps = ([actor[0] + [self.action_head.linear], critic[0] + [self.value_head]], actor[1])
        # A recurrent policy's MLP encoders (one under a shared trunk) and its heads' Linear layers,
        # which a population runs on stacked weights around its cores (policies.population).
        self._recurrent_mlps: tuple[list[list[nn.Linear]], list[nn.Linear], str | None] | None = None
        if (
            self.recurrent
            and not self.critic_only
            and actor is not None
            and critic is not None
            and actor[1] == critic[1]
        ):
            self._recurrent_mlps = (
                [actor[0]] if cfg.shared_trunk else [actor[0], critic[0]],
                [self.action_head.linear, self.value_head],
                actor[1],
            )

    @property
    def state_size(self) -> int:
        """Width of the flat recurrent state (0 without memory): the actor core's, then the critic's."""
        if not self.recurrent:
            return 0
        return self.actor_memory.state_size * (1 if self.shared_trunk else 2)

    def initial_state(self, batch_size: int) -> Tensor | None:
        """Zeros for ``batch_size`` fresh episodes (None without memory)."""
        if not self.recurrent:
            return None
        return torch.zeros(batch_size, self.state_size, device=self.value_head.weight.device)

    @property
    def cores(self) -> tuple[RecurrentCore, ...]:
        """The recurrent cores, each reading one of ``features``' tensors: one under a shared trunk."""
        return (self.actor_memory,) if self.shared_trunk else (self.actor_memory, self.critic_memory)

    @overload
    def recurrent_forward(self, obs: Tensor, state: Tensor, keep: None = None) -> tuple[Tensor, Tensor, Tensor]: ...
    @overload
    def recurrent_forward(
        self, obs: Tensor, state: Tensor, keep: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]: ...
    def recurrent_forward(
        self, obs: Tensor, state: Tensor, keep: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """(distribution parameters, value, final state) for ``obs`` rows that are T steps of B
        sequences in time-major order (row t * B + b), starting from ``state`` [B, state_size].

        Without ``keep`` the sequences run on unbroken (a rollout step, evaluation). With
        ``keep`` (rows, bool: the update) the state is zeroed after each row that is not a real
        transition, as ``memory.carry`` does in the rollout, and no final state is returned."""
        batch = state.shape[0]
        inputs = self.features(obs)
        states = state.split(self.actor_memory.state_size, dim=-1)
        if keep is None:
            runs = [core(x.view(-1, batch, x.shape[-1]), s) for core, x, s in zip(self.cores, inputs, states)]
            outputs = tuple(out.reshape(-1, out.shape[-1]) for out, _ in runs)
            final: Tensor | None = torch.cat([s for _, s in runs], dim=-1)
        else:
            segments = Segments.from_keep(keep.view(-1, batch))
            outputs = tuple(core.sequences(x, s, segments) for core, x, s in zip(self.cores, inputs, states))
            final = None
        return (*self.heads(outputs), final)

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """(distribution parameters, value) in one pass; the trunk runs once when shared."""
        if self._mlps is not None and one_node_pays(obs.flatten(1)):  # the CPU update's forward
            params, value = mlps_one_node(obs.flatten(1), *self._mlps)
            return params, value.squeeze(-1)
        return self.layers_forward(obs)

    def layers_forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """``forward`` through the modules themselves, without the one-node speed layer (which
        a population under vmap cannot run): plain tensor ops only, what ``policies.population``
        vmaps over its members' weights."""
        return self.heads(self.features(obs))

    def features(self, obs: Tensor) -> tuple[Tensor, ...]:
        """The encoders' features: the actor's and the critic's, or the shared trunk's alone. With
        memory, what the ``cores`` read."""
        actor_features = self.actor_encoder(self.actor_input(obs))
        return (actor_features,) if self.shared_trunk else (actor_features, self.critic_encoder(obs))

    def heads(self, features: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
        """(distribution parameters, value) of ``features`` as ``features`` gives them (with
        memory, the cores' outputs): the action head reads the first, the value head the last."""
        return self.action_head(features[0]), self.value_head(features[-1]).squeeze(-1)

    def actor_input(self, obs: Tensor) -> Tensor:
        """The columns of the observation rows the actor reads."""
        return obs[:, self.critic_only :] if self.critic_only else obs

    def get_value(self, obs: Tensor, state: Tensor | None = None) -> Tensor:
        if state is not None:
            return self.recurrent_forward(obs, state)[1]
        return self.value_head(self.critic_encoder(obs)).squeeze(-1)

    def act(self, obs: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Sample for the rollout: (action, logprob, value)."""
        params, value = self(obs)
        action, logprob = self.action_head.sample(params, action_mask)
        return action, logprob, value

    def step(
        self, obs: Tensor, state: Tensor, action_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """A recurrent policy's rollout step: (action, logprob, value, next state)."""
        params, value, state = self.recurrent_forward(obs, state)
        action, logprob = self.action_head.sample(params, action_mask)
        return action, logprob, value, state

    def evaluate(
        self,
        obs: Tensor,
        action: Tensor,
        action_mask: Tensor | None = None,
        state: Tensor | None = None,
        keep: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Score stored actions for the update: (newlogprob, entropy, newvalue). A recurrent
        policy re-runs its core over the rows as sequences from ``state`` (see ``recurrent_forward``)."""
        params, value = self(obs) if state is None else self.recurrent_forward(obs, state, keep)[:2]
        logprob, entropy = self.action_head.logprob_entropy(params, action, action_mask)
        return logprob, entropy, value

    @torch.no_grad()  # not inference_mode: a caller may edit the returned state in place (zero a finished row)
    def predict(
        self, obs: Tensor, action_mask: Tensor | None = None, deterministic: bool = False, state: Tensor | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """(actions, next state) for a batch of (already normalised) observations; the state is
        None without memory."""
        if state is None:
            params = self.action_head(self.actor_encoder(self.actor_input(obs)))
        else:
            params, _, state = self.recurrent_forward(obs, state)
        if deterministic:
            return self.action_head.mode(params, action_mask), state
        return self.action_head.sample(params, action_mask)[0], state

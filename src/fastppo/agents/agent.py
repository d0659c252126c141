"""A trained policy with what it needs to act: observation statistics (frozen), spaces, config."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from fastppo.agents.agent_rows import PettingZooAgents
from fastppo.agents.space_data import spaces_from_data, spaces_to_data
from fastppo.config import Config
from fastppo.core.normalize import RunningMeanStd
from fastppo.env_ids import folder_env_id, is_openspiel, names_user_code
from fastppo.envs.layout import ObservationLayout
from fastppo.envs.openspiel_env import check_trained_tensor, load_game, tensor_kind
from fastppo.errors import FastPPOError
from fastppo.files.checksums import CHECKSUMS_FILE, checksum_problem, write_checksums
from fastppo.files.run_folder import AGENT_FILE, POLICY_FILE
from fastppo.policies import ActorCritic
from fastppo.policies.population import GroupedActorCritic, StackedActorCritic

AGENT_FILES = (POLICY_FILE, AGENT_FILE)
"""What ``Agent.save`` writes (with their checksums)."""
FINAL_EPISODES = 20
"""The last training episodes a run's final return averages (``Agent.final_return``; the run's
summary line and each seed's line of ``--seeds`` report the same figure)."""


@dataclass
class Agent:
    """What ``fastppo.train`` returns and ``fastppo.load`` restores."""

    policy: ActorCritic | GroupedActorCritic | StackedActorCritic  # a stack only while its seeds train
    config: Config
    """The run's hyperparameters, every section (``agent.config.ppo.learning_rate``...)."""
    observation_space: gym.spaces.Box
    """The rows the policy acts on (flattened; multi-agent rows: see ``layout``)."""
    action_space: gym.Space
    obs_rms: RunningMeanStd | None = None
    history: list[dict[str, float]] = field(default_factory=list)
    """Every logged metric, one dict per iteration (CleanRL's names: ``charts/episodic_return``...);
    an iteration that finished no episode has no return in it."""
    episode_returns: list[float] = field(default_factory=list)
    """The headline returns of the training episodes (a multi-agent run's: --multi-agent.headline)."""
    group_returns: dict[str, list[float]] = field(default_factory=dict)
    """A multi-agent run's training episodes: each agent group's returns (this process's, not a checkpoint's)."""
    run_dir: Path | None = None
    """The run folder the agent was trained into or loaded from (None for an agent built in memory)."""
    action_masks: bool = False
    """Trained on an env that publishes action masks: ``act`` then needs one per observation."""
    layout: ObservationLayout = field(default_factory=ObservationLayout)
    """What the observation columns are (multi-agent rows: fastppo.envs.layout)."""
    interrupted_by: signal.Signals | None = None
    """The signal (SIGINT, SIGTERM) that stopped ``fastppo.train`` before its total_timesteps, after
    saving a checkpoint to resume from; None when training ran to its end (and after ``load``)."""
    from_folder: bool = False
    """Read from a run folder (``load_agent``): its config is the folder's word, so the env it
    names is built only if that imports no user code (fastppo.env_ids.folder_env_id)."""
    pettingzoo: PettingZooAgents | None = None
    """A multi-agent policy's PettingZoo agents: ``act`` and ``step`` then take a dict of their own observations."""

    @property
    def final_return(self) -> float | None:
        """The mean return of the last ``FINAL_EPISODES`` (20) training episodes, as the run's
        summary line reports it; None when no episode finished (or none is known: an agent
        ``fastppo.load`` read from a folder's final files). Unlike ``history[-1]``, it does not
        depend on an episode ending in the last iteration."""
        recent = self.episode_returns[-FINAL_EPISODES:]
        return float(np.mean(recent)) if recent else None

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return tuple(self.observation_space.shape)

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as the policy saw them in training (statistics frozen)."""
        if self.obs_rms is None:
            return obs.float() if obs.dtype != torch.uint8 else obs
        # The statistics may live on the CPU beside a GPU policy (host envs: envs.make.rollout_device).
        stats_device = self.obs_rms.mean.device
        return self.obs_rms.normalize(obs.to(stats_device).float(), self.config.env.clip_obs).to(obs.device)

    def act(self, obs: Any, deterministic: bool = False, action_mask: Any = None) -> Any:
        """Actions for one observation or a batch (numpy or tensor); same leading shape back.

        ``action_mask`` (bool, one row per observation, True = allowed) is the env's
        ``info['action_mask']`` (or its Dict observation's ``'action_mask'``); an agent trained with
        masks needs it. Actions are the env's own (a Discrete space's ``start`` included).

        A multi-agent policy also takes PettingZoo's own observations, ``{agent: observation}``
        as ``reset`` and ``step`` return them (any subset of its agents), and gives
        ``{agent: action}`` back; a Dict observation's ``'action_mask'`` is honoured, and masks an
        env publishes in ``infos`` come as ``action_mask={agent: mask}``."""
        if self.policy.recurrent:
            raise ValueError(
                "this agent has a recurrent policy: carry its state, state = agent.initial_state(batch_size) at "
                "episode start, then action, state = agent.step(obs, state)"
            )
        if isinstance(obs, Mapping):
            names, obs, action_mask = self._agent_rows(obs, action_mask)
            return dict(zip(names, self.act(obs, deterministic, action_mask))) if names else {}
        obs_t, mask_t, single = self._inputs(obs, action_mask)
        return self._env_actions(self._player.predict(obs_t, mask_t, deterministic)[0], single)

    @property
    def _player(self) -> ActorCritic | GroupedActorCritic:
        """The policy that acts: a stack of seeds is split into one agent per seed before any plays."""
        assert not isinstance(self.policy, StackedActorCritic)
        return self.policy

    def initial_state(self, batch_size: int | Iterable[str] = 1) -> Any:
        """A recurrent agent's state for ``batch_size`` fresh episodes (zeros); for a multi-agent
        policy given agent names, ``{agent: state}`` for ``step``'s dict form."""
        if not self.policy.recurrent:
            raise ValueError("this agent has no recurrent policy: use agent.act(obs)")
        if isinstance(batch_size, int):
            return self.policy.initial_state(batch_size)
        names = list(batch_size)
        state = self.policy.initial_state(len(names))
        assert state is not None  # a recurrent policy's
        return dict(zip(names, state.unbind()))

    def step(self, obs: Any, state: Any, deterministic: bool = False, action_mask: Any = None) -> tuple[Any, Any]:
        """A recurrent agent's ``act``: (actions, next state) for one observation or a batch and
        the state from ``initial_state`` or the previous step (a tensor or array, cast to the
        policy's float type); start each episode from ``initial_state`` again. The returned state
        is an ordinary tensor: when row ``i`` of a batch finishes its episode, ``state[i] = 0``
        starts that row afresh. A multi-agent policy's dict form: ``{agent: observation}`` and
        ``{agent: state}`` (``initial_state(agent names)``) in, ``{agent: action}`` and
        ``{agent: next state}`` out."""
        if not self.policy.recurrent:
            raise ValueError("this agent has no recurrent policy: use agent.act(obs)")
        if isinstance(obs, Mapping):
            names, rows, masks = self._agent_rows(obs, action_mask)
            if not names:
                return {}, {}
            missing = [name for name in names if name not in state]
            if missing:
                raise ValueError(
                    f"agent.step got no state for {missing[0]!r}: start each agent's episode from "
                    "agent.initial_state(env.possible_agents)"
                )
            actions, states = self.step(
                rows,
                torch.stack([torch.as_tensor(state[name], device=self.device) for name in names]),
                deterministic,
                masks,
            )
            return dict(zip(names, actions)), dict(zip(names, states.unbind()))
        obs_t, mask_t, single = self._inputs(obs, action_mask)
        state = torch.as_tensor(state, dtype=next(self.policy.parameters()).dtype, device=self.device)
        if tuple(state.shape) != (obs_t.shape[0], self.policy.state_size):
            raise ValueError(
                f"agent.step got a state of shape {tuple(state.shape)} for {obs_t.shape[0]} observations; "
                f"expected {(obs_t.shape[0], self.policy.state_size)}"
            )
        action, state = self._player.predict(obs_t, mask_t, deterministic, state)
        return self._env_actions(action, single), state

    def _agent_rows(
        self, observations: Mapping[str, Any], action_mask: Any
    ) -> tuple[list[str], np.ndarray, np.ndarray | None]:
        """``act``'s dict form: (agent names, their rows, their masks) as training built them."""
        if self.pettingzoo is None:
            raise ValueError(
                "agent.act takes a dict of observations for a policy trained on a PettingZoo env (pz:<module>) only"
                if self.layout == ObservationLayout()
                else "this agent does not know its PettingZoo agents' spaces (saved by an older fastppo): pass "
                "the rows training built, or train it again"
            )
        if action_mask is not None and not isinstance(action_mask, Mapping):
            raise ValueError("with a dict of observations, give the masks as a dict too: action_mask={agent: mask}")
        names, rows, masks = self.pettingzoo.rows(self.config.multi_agent, observations, action_mask)
        if self.action_masks and masks is None:
            raise ValueError(
                "this agent was trained with action masks: give each agent's, in its Dict observation's "
                "'action_mask' or as action_mask={agent: infos[agent]['action_mask']}"
            )
        return names, rows, masks

    def _inputs(self, obs: Any, action_mask: Any) -> tuple[torch.Tensor, torch.Tensor | None, bool]:
        """(normalised [B, ...] observations, [B, n] mask or None, whether one observation came)."""
        obs_t = torch.as_tensor(np.asarray(obs), device=self.device)
        single = tuple(obs_t.shape) == self.obs_shape
        if not single and tuple(obs_t.shape[1:]) != self.obs_shape:
            raise ValueError(
                f"agent.act got an observation of shape {tuple(obs_t.shape)}; this agent takes {self.obs_shape} "
                f"(one) or [batch, *{self.obs_shape}]"
            )
        if single:
            obs_t = obs_t.unsqueeze(0)
        mask_t = None
        if action_mask is not None:
            mask_t = torch.as_tensor(np.asarray(action_mask, dtype=bool), device=self.device)
            mask_t = mask_t.unsqueeze(0) if single else mask_t
            if mask_t.shape[0] != obs_t.shape[0]:
                raise ValueError(f"agent.act got {mask_t.shape[0]} action masks for {obs_t.shape[0]} observations")
            if not (
                allowed := mask_t.flatten(1).any(dim=1)
            ).all():  # a masked softmax of no action would still sample one
                raise ValueError(
                    "agent.act got an action mask that allows no action (row "
                    f"{int((~allowed).nonzero()[0, 0])}): a mask needs at least one True, the legal moves"
                )
        elif self.action_masks:
            raise ValueError(
                "this agent was trained with action masks: pass the env's mask, agent.act(obs, "
                "action_mask=info['action_mask'])"
            )
        return self.normalize(obs_t), mask_t, single

    def _env_actions(self, action: torch.Tensor, single: bool) -> np.ndarray:
        actions = self.policy.action_head.env_action(action).cpu().numpy()
        return actions[0] if single else actions

    def save(self, directory: str | Path) -> None:
        """policy.safetensors (weights + obs statistics) and agent.json (config and spaces, as
        data: loading rebuilds the policy without the env), no pickle, and SHA256SUMS, their
        checksums, which loading verifies.

        Each file is written under a temporary name and renamed into place, so an interrupted
        save leaves the previous file whole; the old checksums go first, so that it never leaves
        checksums of other files (a folder without them is read unchecked)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CHECKSUMS_FILE).unlink(missing_ok=True)
        # clone: during training the weights are views of one flat buffer (fastppo.training.update), which
        # safetensors would refuse as shared memory.
        tensors = {f"policy.{k}": v.detach().cpu().clone() for k, v in self.policy.state_dict().items()}
        if self.obs_rms is not None:
            tensors |= {f"obs_rms.{k}": v.cpu() for k, v in self.obs_rms.state_dict().items()}
        tmp = directory / f".{POLICY_FILE}.tmp-{os.getpid()}"
        save_file(tensors, str(tmp))
        os.replace(tmp, directory / POLICY_FILE)
        meta = {
            "config": self.config.to_dict(),
            "obs_shape": list(self.obs_shape),
            "action_masks": self.action_masks,
            "spaces": spaces_to_data(self.observation_space, self.action_space, self.layout),
        }
        if self.pettingzoo is not None and (agents := self.pettingzoo.to_data()) is not None:
            meta["agents"] = agents
        if is_openspiel(self.config.env.env_id):  # the tensor its seats observed (fastppo.envs.openspiel_env)
            meta["openspiel_tensor"] = tensor_kind(load_game(self.config.env.env_id))
        tmp = directory / f".{AGENT_FILE}.tmp-{os.getpid()}"
        tmp.write_text(json.dumps(meta, indent=2))
        os.replace(tmp, directory / AGENT_FILE)
        write_checksums(directory, AGENT_FILES)


def build_agent(
    config: Config,
    observation_space: gym.Space,
    action_space: gym.Space,
    device: torch.device,
    layout: ObservationLayout | None = None,
    statistics_device: torch.device | None = None,
) -> Agent:
    """A fresh agent, its policy on ``device`` and its observation statistics on
    ``statistics_device`` (default: the same), where training's rollout keeps them."""
    layout = layout or ObservationLayout()
    policy_class = GroupedActorCritic if layout.groups else ActorCritic
    policy = policy_class(observation_space, action_space, config.policy, layout).to(device)
    box = cast(gym.spaces.Box, observation_space)  # the policy refuses any other (policies.actor_critic.make_encoder)
    shape = box.shape
    # The trailing raw columns (agent ids) have no statistics: RunningMeanStd passes them through.
    obs_rms = (
        RunningMeanStd((shape[0] - layout.raw,) if layout.raw else shape, statistics_device or device)
        if config.env.normalize_obs
        else None
    )
    return Agent(
        policy=policy,
        config=config,
        observation_space=box,
        action_space=action_space,
        obs_rms=obs_rms,
        layout=layout,
    )


def load_agent(directory: str | Path, device: str | torch.device = "cpu", env_id: str | None = None) -> Agent:
    """Load ``Agent.save`` output: a run directory (its final agent, else its newest checkpoint) or
    a checkpoint folder. A missing or damaged file is a FastPPOError, not a traceback; only
    safetensors and JSON are read, never pickle, and no code the folder names is imported: the
    policy's spaces are data in agent.json. ``env_id`` (the caller's, trusted) rebuilds them for a
    folder saved before they were stored there, whose env is user code."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FastPPOError(f"{directory} is not a directory: give a run directory (runs/...) or a checkpoint folder")
    if not (directory / AGENT_FILE).exists():
        from fastppo.files.run_folder import find_checkpoint, seed_folders

        if (directory / "checkpoints").is_dir():
            directory = find_checkpoint(directory)
        elif seeds := seed_folders(directory):
            raise FastPPOError(
                f"{directory} holds the runs of {len(seeds)} seeds (--seeds), one agent each: give one of them, "
                f"e.g. {seeds[0]}"
            )
    try:
        meta = json.loads((directory / AGENT_FILE).read_text())
        config = Config.from_dict(meta["config"])
        spaces = spaces_from_data(meta["spaces"]) if "spaces" in meta else None
        pettingzoo = PettingZooAgents.from_data(meta["agents"]) if "agents" in meta else None
        tensors = load_file(str(directory / POLICY_FILE), device=str(device))
    except FileNotFoundError as exc:
        raise FastPPOError(
            f"no saved agent in {directory}: {Path(exc.filename or POLICY_FILE).name} is missing (train with "
            "--run-dir, or give a checkpoint folder)"
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError, SafetensorError, OSError) as exc:
        raise FastPPOError(
            f"cannot read the agent in {directory}: damaged or foreign file "
            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ) from None
    if is_openspiel(config.env.env_id):
        check_trained_tensor(config.env.env_id, directory, meta.get("openspiel_tensor"))
    observation_space, action_space, layout = spaces or _env_spaces(config, directory, env_id)
    agent = build_agent(config, observation_space, action_space, torch.device(device), layout)
    agent.action_masks = bool(meta.get("action_masks", False))
    agent.from_folder = True
    agent.pettingzoo = pettingzoo
    try:
        agent.policy.load_state_dict(
            {k.removeprefix("policy."): v for k, v in tensors.items() if k.startswith("policy.")}
        )
        if agent.obs_rms is not None:
            agent.obs_rms.load_state_dict(
                {k.removeprefix("obs_rms."): v for k, v in tensors.items() if k.startswith("obs_rms.")}
            )
    except (RuntimeError, KeyError) as exc:
        raise FastPPOError(
            f"the weights in {directory / POLICY_FILE} do not fit the saved config: {exc}".splitlines()[0]
        ) from None
    # Last: a file that does not parse or fit says how above; this finds what reads as valid (a flipped
    # bit in a weight).
    if (problem := checksum_problem(directory, AGENT_FILES)) is not None:
        raise FastPPOError(f"the agent in {directory} is damaged: {problem}")
    agent.run_dir = directory
    return agent


def _env_spaces(config: Config, directory: Path, env_id: str | None) -> tuple[gym.Space, gym.Space, ObservationLayout]:
    """The spaces of a folder saved without them, from its env: the folder's own when building it
    imports no user code, else the one the caller names (``env_id``)."""
    from fastppo.envs.make import policy_spaces

    folder_env = config.env.env_id
    fix = (
        f"if you trust it, name it yourself: fastppo eval {directory} --env-id {folder_env}, or in Python "
        f"fastppo.load('{directory}', env_id='{folder_env}') (then agent.save() stores the spaces this older "
        "folder lacks, and no command needs the env to read it)"
    )
    env_id = env_id if env_id is not None and names_user_code(folder_env) else folder_env_id(folder_env, directory, fix)
    return policy_spaces(dataclasses.replace(config, env=dataclasses.replace(config.env, env_id=env_id)))

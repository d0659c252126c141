"""A trained multi-agent policy acting on PettingZoo's own per-agent observations (``Agent.act``
with a dict): the rows are built by the code that built them in training
(``fastppo.envs.pettingzoo_vec.AgentSpaces``) from the agents' spaces, which agent.json stores as
data, so that no env is built (nor its code imported) to act."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fastppo.agents.space_data import space_from_data, space_to_data
from fastppo.config import MultiAgentConfig
from fastppo.envs.pettingzoo_vec import ACTION_MASK_KEY, AgentSpaces


@dataclass
class PettingZooAgents:
    """The agents a multi-agent policy was trained on: names in row order, each one's spaces as
    the env gives them, and the size of the env's ``state()`` (0: none, MAPPO's rows then hold the
    observations concatenated)."""

    names: tuple[str, ...]
    observation_spaces: tuple[gym.Space, ...]
    action_spaces: tuple[gym.Space, ...]
    state_size: int = 0
    _built: tuple[MultiAgentConfig, _SpacesOnly, AgentSpaces] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @classmethod
    def of(cls, spaces: AgentSpaces) -> PettingZooAgents:
        return cls(
            tuple(spaces.agents),
            tuple(spaces.observation_spaces),
            tuple(spaces.action_spaces),
            spaces.state_size if spaces.env_state else 0,
        )

    def to_data(self) -> dict[str, Any] | None:
        """agent.json's ``agents``; None when an observation space is none that fastppo stores
        (a Dict or Tuple other than PettingZoo's observation + action_mask)."""
        try:
            observations = [_observation_to_data(space) for space in self.observation_spaces]
            actions = [space_to_data(space) for space in self.action_spaces]
        except ValueError:
            return None
        return {
            "names": list(self.names),
            "observations": observations,
            "actions": actions,
            "state_size": self.state_size,
        }

    @classmethod
    def from_data(cls, data: Any) -> PettingZooAgents:
        """``to_data``'s output back; ValueError naming the bad field."""
        if not isinstance(data, dict) or set(data) != {"names", "observations", "actions", "state_size"}:
            raise ValueError("agents must be an object with names, observations, actions and state_size")
        names, observations, actions = data["names"], data["observations"], data["actions"]
        if not (
            isinstance(names, list)
            and names
            and all(isinstance(n, str) for n in names)
            and len(set(names)) == len(names)
        ):
            raise ValueError("agents.names must be a list of distinct agent names")
        if not (
            isinstance(observations, list)
            and isinstance(actions, list)
            and len(observations) == len(actions) == len(names)
        ):
            raise ValueError("agents.observations and agents.actions must hold one space per agent")
        state_size = data["state_size"]
        if not isinstance(state_size, int) or isinstance(state_size, bool) or state_size < 0:
            raise ValueError(f"agents.state_size must be a non-negative integer, got {state_size!r}")
        return cls(
            tuple(names),
            tuple(_observation_from_data(o, f"agents.observations[{i}]") for i, o in enumerate(observations)),
            tuple(space_from_data(a, f"agents.actions[{i}]") for i, a in enumerate(actions)),
            state_size,
        )

    def rows(
        self, cfg: MultiAgentConfig, observations: Mapping[str, Any], action_mask: Mapping[str, Any] | None
    ) -> tuple[list[str], np.ndarray, np.ndarray | None]:
        """(the names of the agents observed, in row order; their rows [k, width]; their masks
        [k, actions] or None) as training built them. ``action_mask``: masks an env publishes in
        ``infos[agent]['action_mask']`` (a Dict observation's own are read from it)."""
        unknown = [name for name in list(observations) + list(action_mask or {}) if name not in self.names]
        if unknown:
            raise ValueError(
                f"agent.act got observations or masks of {unknown[0]!r}, an agent the policy was not trained on "
                f"(its agents: {', '.join(self.names)})"
            )
        if self._built is None or self._built[0] != cfg:  # built once: act is called every env step
            env = _SpacesOnly(self)
            self._built = (cfg, env, AgentSpaces(env, cfg))
        _, env, spaces = self._built
        # A Dict observation's inner 'observation' alone is taken too (its mask then given apart).
        observations = {
            name: {"observation": obs}
            if isinstance(env.observation_space(name), gym.spaces.Dict) and not isinstance(obs, Mapping)
            else obs
            for name, obs in observations.items()
        }
        rows = spaces.blank_rows(1)[0]
        infos = {name: {ACTION_MASK_KEY: mask} for name, mask in (action_mask or {}).items()}
        masks = spaces.rows(env, observations, infos, rows)
        observed = [i for i, name in enumerate(self.names) if name in observations]
        return [self.names[i] for i in observed], rows[observed], None if masks is None else masks[observed]


class _SpacesOnly:
    """What ``AgentSpaces`` reads of an env, from the stored spaces: a ``state()`` of zeros, since
    the actor never reads the state columns (``ObservationLayout.critic_only``)."""

    def __init__(self, agents: PettingZooAgents):
        self.possible_agents = list(agents.names)
        self._observations = dict(zip(agents.names, agents.observation_spaces))
        self._actions = dict(zip(agents.names, agents.action_spaces))
        self._state_size = agents.state_size
        if agents.state_size:
            self.state_space = gym.spaces.Box(-np.inf, np.inf, (agents.state_size,), np.float32)

    def observation_space(self, agent: str) -> gym.Space:
        return self._observations[agent]

    def action_space(self, agent: str) -> gym.Space:
        return self._actions[agent]

    def state(self) -> np.ndarray:
        return np.zeros(self._state_size, dtype=np.float32)


def _observation_to_data(space: gym.Space) -> dict[str, Any]:
    """An agent's observation space; PettingZoo's masked Dict as its two parts."""
    if isinstance(space, gym.spaces.Dict) and "observation" in space.spaces:
        mask = space.spaces.get(ACTION_MASK_KEY)
        return {
            "observation": space_to_data(space["observation"]),
            ACTION_MASK_KEY: None if mask is None else space_to_data(mask),
        }
    return {"observation": space_to_data(space)}


def _observation_from_data(data: Any, what: str) -> gym.Space:
    if not isinstance(data, dict) or set(data) not in ({"observation"}, {"observation", ACTION_MASK_KEY}):
        raise ValueError(f"{what} must be an object with observation (and action_mask)")
    observation = space_from_data(data["observation"], f"{what}.observation")
    if set(data) == {"observation"}:
        return observation
    parts = {"observation": observation}
    if data[ACTION_MASK_KEY] is not None:
        parts[ACTION_MASK_KEY] = space_from_data(data[ACTION_MASK_KEY], f"{what}.{ACTION_MASK_KEY}")
    return gym.spaces.Dict(parts)

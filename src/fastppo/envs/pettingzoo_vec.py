"""PettingZoo Parallel envs behind the torch VecEnv interface: agents are extra batch rows.

``pz:mpe2.simple_spread_v3`` names a module whose ``parallel_env(**env_kwargs)`` builds the env.
``num_envs`` copies of it make ``num_envs * num_agents`` rows, row ``copy * num_agents + i``
for ``possible_agents[i]``, so the trainer, GAE, the loss and every speed layer see one ordinary
batch and one shared policy (IPPO/MAPPO with parameter sharing, Yu et al. 2022).

A row's observation is ``[global state | the agent's observation | agent-id one-hot]``
(``fastppo.envs.layout.ObservationLayout``); the global state is there for MAPPO only: the env's
``state()``, or all agents' observations concatenated when it has none. An mpe2 env's
``state()`` *is* its agents' observations concatenated; for those the rows build it from the
observations the step returned rather than have the env compute them all again, and their step
skips PettingZoo's per-agent AEC round trip; simple_spread's and simple_speaker_listener's
copies step all at once (``fastppo.envs.mpe``, the same values).

The rows follow the single-agent NEXT_STEP rule (fastppo.envs.vector) and add one more kind of
non-decision row: a row is ``live`` when its agent is in ``env.agents`` as the policy acts on it,
so it has an observation and the env takes its action. An agent that finished while its team
plays on (a *dead* agent), or one that has not joined yet (the Parallel API lets an agent appear
after reset), gets a zero observation, reward 0, no flags and ``live`` false, so the rollout masks
its rows out of GAE and the loss instead of training on garbage; a joining agent's first live row
is the one that carries its first observation. A copy whose agents have all finished resets on
its next step (a reset row for every agent, as a gymnasium env's).
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from fastppo.config import EnvConfig, MultiAgentConfig
from fastppo.env_ids import PREFIX, is_openspiel, named_object, split_spec
from fastppo.envs import mpe
from fastppo.envs.layout import ObservationLayout
from fastppo.envs.opponents import LearnerEverywhere, Opponents
from fastppo.envs.vector import Episodes, HostCopies, StepResult
from fastppo.errors import FastPPOError, install_extra

ACTION_MASK_KEY = "action_mask"
MAX_FLAT_BOARD = 16_384
"""The most inputs a PettingZoo observation of 3 or more dimensions and no pixels (uint8) may
flatten to: a board's planes (go 19x19x17: 6 137), not a frame."""
MASKS_SOMETIMES = (
    "the PettingZoo env published action masks at some steps and not at others: "
    "publish one for every agent at every step"
)


def make_pettingzoo(env_id: str, env_kwargs: dict[str, Any], render_mode: str | None = None) -> Any:
    """The PettingZoo env ``env_id`` names, built with ``env_kwargs``: a ParallelEnv, or an AECEnv
    for a turn-based game (``fastppo.envs.turn_based``); else a one-line FastPPOError.
    ``pz:<module>`` builds ``<module>.parallel_env(**env_kwargs)``, or ``<module>.env()`` for a
    module with no parallel_env (PettingZoo's classic games); ``pz:<module>:<function>`` or
    ``pz:<path/file.py>:<function>`` calls that function; ``openspiel:<game>`` builds OpenSpiel's game
    as an AECEnv (``fastppo.envs.openspiel_env``)."""
    if is_openspiel(env_id):
        from fastppo.envs.openspiel_env import make_openspiel_env  # OpenSpiel, imported when a game asks for it

        return make_openspiel_env(env_id, env_kwargs, render_mode)
    maker, module = _env_maker(env_id)
    _check_kwarg_types(env_id, env_kwargs, maker, module)
    kwargs = dict(env_kwargs) | ({"render_mode": render_mode} if render_mode else {})
    try:
        env = maker(**kwargs)
    except (TypeError, ValueError, AssertionError) as exc:  # a kwarg it does not know, or a value it refuses
        if env_kwargs:
            raise FastPPOError(f"{env_id} rejected --env-kwargs {env_kwargs}: {_one_line(exc)}") from None
        raise FastPPOError(
            f"{env_id} raised {type(exc).__name__} as it was built (no --env-kwargs given): {_one_line(exc)}"
        ) from None
    except ImportError as exc:  # PettingZoo's DeprecatedEnv, or a dependency imported on construction
        raise _import_error(env_id, exc) from None
    except gym.error.DependencyNotInstalled as exc:
        raise FastPPOError(f"{env_id} needs a package that is not installed: {_one_line(exc)}") from None
    if not callable(getattr(env, "step", None)) or not hasattr(env, "possible_agents"):
        raise FastPPOError(
            f"{env_id} built a {type(env).__name__}, not a PettingZoo ParallelEnv or AECEnv: "
            f"return one from {env_id.removeprefix(PREFIX)}"
        )
    return env


def make_parallel_env(env_id: str, env_kwargs: dict[str, Any], render_mode: str | None = None) -> Any:
    """``make_pettingzoo`` for a ParallelEnv only (worker processes, whose copies act at once)."""
    env = make_pettingzoo(env_id, env_kwargs, render_mode)
    if is_turn_based(env):
        env.close()
        raise FastPPOError(
            f"{env_id} built an AECEnv (PettingZoo's turn-based API) where a ParallelEnv was expected: "
            "turn-based games train with --backend sync"
        )
    return env


def _env_maker(env_id: str) -> tuple[Callable[..., Any], Any]:
    """(what builds ``env_id``'s env, the module it comes from, or None for a named function)."""

    target = env_id.removeprefix(PREFIX)
    if not target or target.startswith("."):  # else importlib's ValueError/TypeError
        raise FastPPOError(
            f"{env_id} names no module: write pz:<package.module>, e.g. pz:mpe2.simple_spread_v3, "
            "or pz:<module or file.py>:<function>"
        )
    spec = split_spec(target)
    if spec is not None:
        maker = named_object(target, "the PettingZoo env")
        if not callable(maker):
            module_name, name = spec
            what = f"defines no '{name}'" if maker is None else f"defines '{name}' as a {type(maker).__name__}"
            raise FastPPOError(
                f"{module_name} {what}: name a function that returns a PettingZoo ParallelEnv after the colon"
            )
        return maker, None
    module = _import_env_module(env_id, target)
    if callable(getattr(module, "parallel_env", None)):
        return module.parallel_env, module
    if callable(getattr(module, "env", None)):  # PettingZoo's AEC-only modules (classic board games)
        return module.env, module
    raise FastPPOError(
        f"{target} has neither parallel_env() nor env(): name a PettingZoo env module, "
        "e.g. pz:mpe2.simple_spread_v3, or pz:<module>:<function> for your own"
    )


def is_turn_based(env: Any) -> bool:
    """Whether a built PettingZoo env is an AECEnv (turn-based: one agent acts at a time): the test
    beneath ``fastppo.envs.turn_based.is_game``, which everything above this module asks."""
    try:
        from pettingzoo import AECEnv
    except ImportError:
        return False
    return isinstance(env, AECEnv)


def _import_env_module(env_id: str, module_name: str) -> Any:
    """The module of ``pz:<module>``, PettingZoo's stand-in for an old version of an env (its
    ``parallel_env`` says which version replaced it), or a one-line FastPPOError."""
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        if getattr(exc, "name", None) != module_name:
            raise _import_error(env_id, exc) from None
        stand_in = _old_version(module_name)  # the module itself is missing: an env version PettingZoo replaced?
        if stand_in is None:
            raise _no_module(env_id, module_name, exc) from None
        return stand_in
    except gym.error.DependencyNotInstalled as exc:
        raise FastPPOError(f"{env_id} needs a package that is not installed: {_one_line(exc)}") from None


def _old_version(module_name: str) -> Any:
    """What the parent package answers for the missing ``module_name``: a PettingZoo family's
    ``__getattr__`` gives an old env version a stand-in module; None for anything else."""
    parent, _, leaf = module_name.rpartition(".")
    try:
        return getattr(importlib.import_module(parent), leaf) if parent else None
    except (ImportError, AttributeError):
        return None


def _no_module(env_id: str, module_name: str, exc: ImportError) -> FastPPOError:
    return FastPPOError(f"cannot import the PettingZoo module '{module_name}' of {env_id}: {exc}")


def _import_error(env_id: str, exc: ImportError) -> FastPPOError:
    """An import that failed on the way to ``env_id``'s env, in PettingZoo's own words where it has some."""
    missing = getattr(exc, "name", None)
    module_name = env_id.removeprefix(PREFIX)
    if missing is None:  # no module missing: PettingZoo's DeprecatedEnv, or an error inside the module
        return FastPPOError(f"cannot build {env_id}: {_one_line(exc)}")
    family = (
        module_name.split(".")[1] if module_name.startswith("pettingzoo.") and module_name.count(".") >= 2 else None
    )
    if missing.split(".")[0] in ("pettingzoo", "mpe2") and module_name.startswith(missing):
        extra = (
            "games" if family == "classic" else "multiagent"
        )  # games: its pool's ratings and opponents need more than PettingZoo
        return FastPPOError(
            f"cannot import the PettingZoo module '{module_name}' of {env_id}: {exc} ({install_extra(extra)})"
        )
    if module_name.startswith(f"{missing}.") or module_name == missing:
        return _no_module(env_id, module_name, exc)
    if family == "classic":
        fix = install_extra("games")
    else:
        fix = f"pip install 'pettingzoo[{family}]'" if family else f"install the package that provides '{missing}'"
    return FastPPOError(f"{env_id} needs the module '{missing}', which is not installed: {fix}")


def _one_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _check_kwarg_types(env_id: str, env_kwargs: dict[str, Any], maker: Callable[..., Any], module: Any) -> None:
    """Refuse an ``--env-kwargs`` value of another kind (number, bool, text) than the default of
    the parameter it sets, before the env takes it in and fails at some step far from the cause
    (MPE's ``max_cycles: "abc"``). PettingZoo's ``parallel_env`` takes ``**kwargs`` for its
    module's ``raw_env``, whose signature has the defaults."""
    defaults: dict[str, Any] = {}
    for source in (getattr(module, "raw_env", None), maker):
        try:
            parameters = inspect.signature(source).parameters.values() if source is not None else ()
        except (TypeError, ValueError):  # no signature to read (a builtin)
            continue
        defaults |= {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
    for name, value in env_kwargs.items():
        if (
            name in defaults
            and _kind(value) != _kind(defaults[name])
            and None not in (_kind(value), _kind(defaults[name]))
        ):
            raise FastPPOError(
                f"--env-kwargs {env_kwargs}: {name} of {env_id} is {_kind(defaults[name])} "
                f"(its default is {defaults[name]!r}), not {value!r}: give {_kind(defaults[name])}"
            )


def _kind(value: Any) -> str | None:
    """A JSON value's kind as a parameter's default declares it; None for any other default."""
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    return None


def _flat_size(space: gym.Space, agent: str) -> int:
    if isinstance(space, gym.spaces.Dict) and "observation" in space.spaces:  # PettingZoo's masked observations
        space = space["observation"]
    if (
        isinstance(space, gym.spaces.Box)
        and len(space.shape) >= 3
        and (space.dtype == np.uint8 or int(np.prod(space.shape)) > MAX_FLAT_BOARD)
    ):
        # A row per agent is one flat vector: [state | observation | id] for an MLP; frames would
        # be hundreds of thousands of inputs (cooperative_pong: 403 k), and ids do not fit an image.
        # A board game's planes are small and not pixels (tic-tac-toe 3x3x2 int8, chess 8x8x111).
        raise FastPPOError(
            f"agent {agent} observes images ({space.shape} {space.dtype}), "
            "and fastppo's multi-agent rows are flat vectors for an MLP: "
            "PettingZoo envs with image observations are not supported yet; train one whose agents observe vectors "
            "(the MPE envs, pz:pettingzoo.sisl.multiwalker_v9, "
            "pz:pettingzoo.butterfly.knights_archers_zombies_v11 with its default vector observations)"
        )
    try:
        return int(gym.spaces.flatdim(space))
    except (NotImplementedError, TypeError, ValueError):
        raise FastPPOError(
            f"unsupported agent observation space {space}: "
            "fastppo handles Box, Discrete, MultiDiscrete and Dict/Tuple of those"
        ) from None


def _board(spaces: list[gym.Space]) -> tuple[int, ...]:
    """The (height, width, planes) every agent observes when their observations are one board
    (PettingZoo's classic games: connect four 6x7x2, chess 8x8x111), else ()."""
    inner = [s["observation"] if isinstance(s, gym.spaces.Dict) and "observation" in s.spaces else s for s in spaces]
    shapes = {s.shape if isinstance(s, gym.spaces.Box) else None for s in inner}
    shape = shapes.pop() if len(shapes) == 1 else None
    return tuple(int(n) for n in shape) if shape is not None and len(shape) == 3 else ()


def _flatten(space: gym.Space, obs: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """(flat observation, the action mask it carries or None) of one agent."""
    if type(space) is gym.spaces.Box and space.dtype == np.float32:  # flat already: no dispatch, no copies
        return np.ravel(obs), None
    mask = None
    if isinstance(space, gym.spaces.Dict) and "observation" in space.spaces:
        mask = None if ACTION_MASK_KEY not in obs else np.asarray(obs[ACTION_MASK_KEY], dtype=bool)
        space, obs = space["observation"], obs["observation"]
    if type(space) is gym.spaces.Box:  # gym.spaces.flatten's Box case without its dispatch (a board's planes)
        return np.asarray(obs, dtype=space.dtype).astype(np.float32).ravel(), mask
    return np.asarray(gym.spaces.flatten(space, obs), dtype=np.float32), mask


HostStep = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]
"""One step of copies on the host: observation rows, reward, terminated, truncated, masks, live."""

FinishedEpisode = tuple[float, int, np.ndarray]
"""(team return, length, each agent's return) of an episode, in the order the episodes ended."""


def is_row(value: Any, dtype_kinds: str, size: int) -> bool:
    """Whether ``value`` (restored from a snapshot) is an array of ``size`` values of ``dtype_kinds`` ("b", "fiu")."""
    return isinstance(value, np.ndarray) and value.dtype.kind in dtype_kinds and value.shape == (size,)


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def copies_problem(copies: list[Any], agents: list[str]) -> str | None:
    """Where a restored copy's agents (``agents`` of a PettingZoo env, and of the game it wraps)
    are not all of ``agents``, its possible ones: a line naming it, else None."""
    for c, env in enumerate(copies):
        for holder in (env, env.unwrapped):  # a wrapper may keep a list of its own (aec_to_parallel_wrapper)
            if not all(agent in agents for agent in holder.agents):
                return f"gives copy {c} the agents {holder.agents!r}, not among the env's {agents}"
    return None


def agent_group(agent: str) -> str:
    """An agent's group: its name without the trailing ``_<n>`` (adversary_0 -> adversary)."""
    return re.sub(r"_\d+$", "", agent)


def policy_groups(policies: str, agents: list[str], agent_groups: list[str], group_names: list[str]) -> tuple[int, ...]:
    """Each agent's policy (``ObservationLayout.groups``) under --multi-agent.policies: none apart
    (shared), its group's, or its own (seat: a turn-based game's seats, which may play unlike
    sides, e.g. the bettor and the caller, each learn their own network)."""
    if policies == "group":
        return tuple(group_names.index(name) for name in agent_groups)
    return tuple(range(len(agents))) if policies == "seat" else ()


def headline_of(headline: str, groups: list[str]) -> str | None:
    """What --multi-agent.headline names for agents in ``groups``: "team", one group, or None
    (auto with several groups: they may play against each other, so no sum stands for the run)."""
    if headline == "auto":
        return "team" if len(groups) == 1 else None
    if headline != "team" and headline not in groups:
        raise FastPPOError(
            f"--multi-agent.headline {headline} is no group of this env's agents ({', '.join(groups)}): "
            "give one of them, team (their sum) or auto"
        )
    return headline


def team_episodes(episodes: list[FinishedEpisode], spaces: AgentSpaces) -> Episodes:
    """Lengths, each agent's and each group's returns (a group's: the sum of its agents'), and as
    ``returns`` the headline's (``spaces.headline``: the team's sum, a group's, or none)."""
    by_agent = {agent: [float(e[2][i]) for e in episodes] for i, agent in enumerate(spaces.agents)}
    members = np.asarray(spaces.agent_groups)
    by_group = {group: [float(e[2][members == group].sum()) for e in episodes] for group in spaces.group_names}
    headline = spaces.headline
    if headline == "team":
        returns = [e[0] for e in episodes]
    else:  # a group's, or none's
        returns = by_group.get(headline, []) if headline is not None else []
    return Episodes(returns, [e[1] for e in episodes], by_agent, by_group=by_group)


class AgentSpaces:
    """The agents' spaces as one batch row sees them, checked once from a built env."""

    def __init__(self, env: Any, cfg: MultiAgentConfig):
        self.agents: list[str] = list(env.possible_agents)
        if not self.agents:
            raise FastPPOError("the PettingZoo env has no possible_agents")
        self.observation_spaces = [env.observation_space(a) for a in self.agents]
        self.action_spaces = action_spaces = [env.action_space(a) for a in self.agents]
        sizes = [_flat_size(s, a) for s, a in zip(self.observation_spaces, self.agents)]
        self.obs_size = max(sizes)
        if len(set(sizes)) > 1 and not cfg.pad:
            raise FastPPOError(
                f"the agents' observations differ in size ({dict(zip(self.agents, sizes))}): "
                "add --multi-agent.pad to zero-pad them to the largest, or train each kind of agent in its own env"
            )
        first = action_spaces[0]
        if isinstance(first, gym.spaces.Discrete) and all(isinstance(s, gym.spaces.Discrete) for s in action_spaces):
            counts = [int(s.n) for s in action_spaces]
            if len(set(counts)) > 1 and not cfg.pad:
                raise FastPPOError(
                    f"the agents' numbers of actions differ ({dict(zip(self.agents, counts))}): "
                    "add --multi-agent.pad to give all agents the largest action space with the missing actions masked"
                )
            if any(int(s.start) != 0 for s in action_spaces):
                raise FastPPOError("agents' Discrete action spaces must start at 0")
            self.action_space: gym.Space = gym.spaces.Discrete(max(counts))
            # Padding actions are masked per agent; None when every agent has every action.
            self.padding_mask = (
                None if len(set(counts)) == 1 else np.arange(max(counts))[None, :] < np.asarray(counts)[:, None]
            )
        elif all(s == first for s in action_spaces):
            self.action_space, self.padding_mask = first, None
        else:
            raise FastPPOError(
                f"the agents' action spaces differ ({dict(zip(self.agents, map(str, action_spaces)))}): "
                "only Discrete spaces of different sizes can be padded (--multi-agent.pad)"
            )
        self.state_size = 0
        self.env_state = False
        self.state_from_observations = False
        if cfg.algorithm == "mappo":
            state_space = getattr(env, "state_space", None)
            self.env_state = isinstance(state_space, gym.spaces.Box)
            self.state_size = (
                int(np.prod(state_space.shape))
                if isinstance(state_space, gym.spaces.Box)
                else self.obs_size * len(self.agents)
            )
            # MPE's state() computes every agent's observation again (a fifth of MAPPO's env time
            # on simple_spread): the same values come from the observations the step returned.
            self.state_from_observations = (
                self.env_state and mpe.state_is_observations(env) and self.state_size == sum(sizes)
            )
        self.ids = len(self.agents) if cfg.agent_ids else 0
        # adversary_0, adversary_1 | agent_0: groups by name, in order of appearance
        self.agent_groups = [agent_group(agent) for agent in self.agents]
        self.group_names = list(dict.fromkeys(self.agent_groups))
        self.headline = headline_of(cfg.headline, self.group_names)
        groups = policy_groups(cfg.policies, self.agents, self.agent_groups, self.group_names)
        self.layout = ObservationLayout(
            critic_only=self.state_size, raw=self.ids, groups=groups, board=_board(self.observation_spaces)
        )
        self.observation_space = gym.spaces.Box(
            -np.inf, np.inf, (self.state_size + self.obs_size + self.ids,), np.float32
        )

    def blank_rows(self, copies: int) -> np.ndarray:
        """[copies, n, width] rows before any observation: zeros and every agent's id one-hot."""
        rows = np.zeros((copies, len(self.agents), self.observation_space.shape[0]), dtype=np.float32)
        if self.ids:
            rows[:, :, -self.ids :] = np.eye(self.ids, dtype=np.float32)
        return rows

    def rows(
        self, env: Any, observations: dict[str, Any], infos: dict[str, Any], rows: np.ndarray
    ) -> np.ndarray | None:
        """Fills ``rows`` [n, width] (blank, see ``blank_rows``: an absent agent's row stays so)
        with one copy's observations and state; returns its masks [n, actions] or None."""
        n = len(self.agents)
        masks = None if self.padding_mask is None else self.padding_mask.copy()
        own = slice(self.state_size, self.state_size + self.obs_size)
        flats = []
        for i, (agent, space) in enumerate(zip(self.agents, self.observation_spaces)):
            if agent not in observations:
                continue
            flat, mask = _flatten(space, observations[agent])
            flats.append(flat)
            mask = mask if mask is not None else infos.get(agent, {}).get(ACTION_MASK_KEY)
            if mask is not None:
                if masks is None:
                    assert isinstance(self.action_space, gym.spaces.Discrete)  # masks are over Discrete moves
                    masks = np.ones((n, self.action_space.n), dtype=bool)
                masks[i, : len(mask)] &= np.asarray(mask, dtype=bool)
            rows[i, self.state_size : self.state_size + flat.shape[0]] = flat
        if self.state_from_observations and len(flats) == n:
            rows[:, : self.state_size] = np.concatenate(flats)
        elif self.state_size:
            rows[:, : self.state_size] = (
                np.asarray(env.state(), dtype=np.float32).ravel() if self.env_state else rows[:, own].ravel()
            )
        return masks

    def rows_of_arrays(self, observations: list[np.ndarray], rows: np.ndarray, copies: np.ndarray) -> None:
        """Fills the blank ``rows`` [all copies, agents, width] of ``copies`` from each agent's
        flat float32 observations [copies, size], for copies whose state, if the rows hold one, is
        those concatenated (``state_from_observations``)."""
        for i, observation in enumerate(observations):
            rows[copies, i, self.state_size : self.state_size + observation.shape[1]] = observation
        if self.state_size:
            rows[copies, :, : self.state_size] = np.concatenate(observations, axis=1)[:, None]


class PettingZooVecEnv(HostCopies):
    """``len(env_fns)`` copies of a PettingZoo ParallelEnv as ``copies * agents`` rows (see the module
    docstring)."""

    CHECKPOINTED = ("envs", "_finished", "_returns", "_lengths", "_episodes", "_masked", "_learner", "_shown")
    """What ``fastppo.envs.snapshot.snapshot_envs`` saves: the copies and the episodes in flight."""

    def __init__(self, env_fns: Sequence[Callable[[], Any]], cfg: MultiAgentConfig, device: torch.device):
        self.envs = [fn() for fn in env_fns]
        self.spaces = AgentSpaces(self.envs[0], cfg)
        self.agents = self.spaces.agents
        self.num_envs = len(self.envs) * len(self.agents)
        self.single_observation_space = self.spaces.observation_space
        self.single_action_space = self.spaces.action_space
        self.layout = self.spaces.layout
        self.device = device
        n = len(self.agents)
        self._finished = np.zeros(len(self.envs), dtype=bool)  # copies that reset on their next step
        self._returns = np.zeros((len(self.envs), n))
        self._lengths = np.zeros(len(self.envs), dtype=int)
        self._episodes: list[FinishedEpisode] = []
        self._masked: bool | None = None
        # mpe2 envs step without PettingZoo's per-agent AEC round trip (fastppo.envs.mpe: same values)
        self._direct = [mpe.simple_env(env) is not None for env in self.envs]
        # simple_spread's and speaker-listener's copies step all at once (mpe.BatchedWorlds: same values)
        rows_ok = not self.spaces.state_size or self.spaces.state_from_observations
        self._batched = mpe.BatchedWorlds.of(self.envs) if rows_ok else None
        self._blank = self.spaces.blank_rows(len(self.envs))
        # Self-play (fastppo.games.league): the agents the learner plays in each copy; the
        # others act through ``opponents`` on the rows and masks the last step showed.
        self.opponents: Opponents = LearnerEverywhere(n)
        self._learner = np.ones((len(self.envs), n), dtype=bool)
        self._shown: tuple[np.ndarray, np.ndarray | None] | None = None

    def _new_rows(self) -> np.ndarray:
        """A step's observation rows [copies, agents, width], blank: fresh each step, since the
        device tensor may share its memory (numpy_to_device on CPU)."""
        return self._blank.copy()

    def _rows(self, env: Any, observations: dict, infos: dict, rows: np.ndarray) -> np.ndarray | None:
        masks = self.spaces.rows(env, observations, infos, rows)
        if self._masked is None:
            self._masked = masks is not None
        elif (masks is not None) != self._masked:
            raise FastPPOError(MASKS_SOMETIMES)
        return masks

    def reset(self, seed: int | None = None) -> StepResult:
        rows, masks, live = self.reset_host(seed)
        return self.first_step(rows, masks, live=live)

    def reset_host(self, seed: int | None = None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """``reset``'s (observation rows, action masks, live) as numpy; copy ``c`` is seeded
        ``seed + c``."""
        rows = self._new_rows()
        masks = tuple(self._reset_copy(c, None if seed is None else seed + c, rows[c]) for c in range(len(self.envs)))
        live = np.stack([self._in_play(env) for env in self.envs])
        for c in range(len(self.envs)):
            self._learner[c] = self.opponents.new_game(c)
        return self._shown_to_learner(rows, self._join(masks), live)

    def _shown_to_learner(
        self, rows: np.ndarray, masks: np.ndarray | None, live: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """What a step returns: the opponents' agents are no decisions of the learner's."""
        self._shown = (rows, masks)
        return rows.reshape(self.num_envs, -1), masks, (live & self._learner).ravel()

    def _with_opponents(self, host: np.ndarray) -> np.ndarray:
        """``host`` [copies, agents, ...] with the opponents' actions in their agents' places,
        chosen on the rows and masks the last step showed."""
        playing = ~self._learner & ~self._finished[:, None]
        if not playing.any():
            return host
        copies, agents = np.nonzero(playing)
        assert self._shown is not None  # every reset and step shows rows
        rows, masks = self._shown
        shown_masks = None if masks is None else masks.reshape(len(self.envs), len(self.agents), -1)[copies, agents]
        host = host.copy()
        host[copies, agents] = self.opponents.act(copies, rows[copies, agents], shown_masks)
        return host

    def _in_play(self, env: Any) -> np.ndarray:
        """[agents]: which agents act on the copy's next step (``env.agents``): its live rows."""
        acting = set(env.agents)
        return np.array([agent in acting for agent in self.agents])

    def _reset_copy(self, c: int, seed: int | None, rows: np.ndarray) -> np.ndarray | None:
        observations, infos = self.envs[c].reset(seed=seed)
        self._finished[c] = False
        self._returns[c] = 0.0
        self._lengths[c] = 0
        return self._rows(self.envs[c], observations, infos, rows)

    def _join(self, masks: tuple[np.ndarray | None, ...]) -> np.ndarray | None:
        # Every copy's or none (``_rows`` refuses masks at some steps only).
        return None if masks[0] is None else np.concatenate(cast(tuple[np.ndarray, ...], masks))

    def step(self, actions: torch.Tensor) -> StepResult:
        return self.to_device(*self.step_host(self.to_host(actions)))

    def step_host(self, host: np.ndarray) -> HostStep:
        """``step`` on numpy: actions [rows, ...] in, (rows, reward, terminated, truncated, masks,
        live) out; batched MPE copies keep every agent in play (``BatchedWorlds.playable``)."""
        n = len(self.agents)
        host = self._with_opponents(host.reshape(len(self.envs), n, *host.shape[1:]))
        rows, all_masks = self._new_rows(), []
        reward = np.zeros((len(self.envs), n), dtype=np.float32)
        terminated = np.zeros((len(self.envs), n), dtype=bool)
        truncated = np.zeros((len(self.envs), n), dtype=bool)
        live = np.ones((len(self.envs), n), dtype=bool)
        batched = self._batched_copies(host)
        if batched.size and self._batched is not None:
            arrays, reward[batched] = self._batched.step(batched, host[batched])
            self.spaces.rows_of_arrays(arrays, rows, batched)
            self._returns[batched] += reward[batched]
            self._lengths[batched] += 1
        stepped = set(batched.tolist())
        for c, env in enumerate(self.envs):
            if c in stepped:
                all_masks.append(self.spaces.padding_mask)
                continue
            if self._finished[c]:  # the reset row: actions ignored, first observations, reward 0
                masks = self._reset_copy(c, None, rows[c])
                live[c] = self._in_play(env)
                self._learner[c] = self.opponents.new_game(c)
            else:
                acting = set(env.agents)
                actions = {a: host[c, i] for i, a in enumerate(self.agents) if a in acting}
                observations, rewards, terms, truncs, infos = (
                    mpe.parallel_step(env, actions) if self._direct[c] else env.step(actions)
                )
                masks = self._rows(env, observations, infos, rows[c])
                live[c] = self._in_play(env)
                for i, agent in enumerate(self.agents):
                    if agent not in acting:  # dead for a while, or not joined yet: no flags
                        continue
                    reward[c, i] = rewards.get(agent, 0.0)
                    truncated[c, i] = bool(truncs.get(agent, False))
                    # An agent that leaves without a flag has ended all the same: no bootstrap.
                    terminated[c, i] = bool(terms.get(agent, False)) or (
                        agent not in env.agents and not truncated[c, i]
                    )
                self._returns[c] += reward[c]
                self._lengths[c] += 1
                if not env.agents:
                    self._episodes.append(
                        (float(self._returns[c].sum()), int(self._lengths[c]), self._returns[c].copy())
                    )
                    self.opponents.game_over(c, self._returns[c].copy())
                    self._finished[c] = True
            all_masks.append(masks)
        rows, masks, live = self._shown_to_learner(rows, self._join(tuple(all_masks)), live)
        return rows, reward.ravel(), terminated.ravel(), truncated.ravel(), masks, live

    def _batched_copies(self, host: np.ndarray) -> np.ndarray:
        """The copies ``mpe.BatchedWorlds`` steps now (``playable`` ones not about to reset)."""
        if self._batched is None or host.dtype.kind not in "iu":
            return np.empty(0, dtype=int)
        return np.flatnonzero(self._batched.playable(host) & ~self._finished)

    def restored_problem(self) -> str | None:
        """What makes the state a snapshot restored (``fastppo.envs.snapshot.restore_envs``) one
        these copies cannot go on from, else None: the copies' agents and the pending episodes'
        records."""
        n = len(self.agents)

        def is_episode(e: Any) -> bool:  # a FinishedEpisode
            return (
                isinstance(e, tuple)
                and len(e) == 3
                and isinstance(e[0], (int, float))
                and not isinstance(e[0], bool)
                and is_count(e[1])
                and is_row(e[2], "fiu", n)
            )

        if not all(is_episode(episode) for episode in self._episodes):
            return f"holds pending episodes that are not (return, length, {n} agents' returns)"
        return copies_problem(self.envs, self.agents)

    def pop_finished(self) -> list[FinishedEpisode]:
        """The episodes that ended since the last call, in the order they ended."""
        episodes = self._episodes
        self._episodes = []
        return episodes

    def pop_episodes(self) -> Episodes:
        return team_episodes(self.pop_finished(), self.spaces)

    def render(self) -> Any:
        return self.envs[0].render()

    def close(self) -> None:
        for env in self.envs:
            env.close()


def pettingzoo_spaces(cfg: EnvConfig, multi_agent: MultiAgentConfig) -> AgentSpaces:
    env = make_pettingzoo(cfg.env_id, cfg.env_kwargs)
    try:
        return AgentSpaces(env, multi_agent)
    finally:
        env.close()

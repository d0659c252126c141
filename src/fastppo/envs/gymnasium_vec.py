"""gymnasium.vector envs (sync or async) behind the torch VecEnv interface."""

from __future__ import annotations

import importlib
import os
import re
import traceback
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
import torch

from fastppo.env_ids import ale_installed, file_spec, named_object, spelled_as_atari
from fastppo.envs.tensor.base import TensorEnv
from fastppo.envs.vector import FinishedEpisodes, HostCopies, StepResult
from fastppo.errors import FastPPOError

ACTION_MASK_KEY = "action_mask"


class ActionMaskFromObs(gym.ObservationWrapper):
    """Moves a Dict observation's 'action_mask' entry into ``info`` so that the policy sees the
    rest of the observation and the trainer finds every mask in one place."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Dict)  # flatten_if_needed wraps Dict spaces only
        rest = {k: v for k, v in space.spaces.items() if k != ACTION_MASK_KEY}
        self.observation_space = gym.spaces.Dict(rest)

    def observation(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obs.items() if k != ACTION_MASK_KEY}

    def _with_mask(self, obs: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
        return {**info, ACTION_MASK_KEY: np.asarray(obs[ACTION_MASK_KEY], dtype=bool)}

    def reset(self, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        return self.observation(obs), self._with_mask(obs, info)

    def step(self, action: Any) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self.observation(obs), reward, terminated, truncated, self._with_mask(obs, info)


def published_action_mask(
    info: dict, expected: bool | None, call: str, num_envs: int | None = None
) -> np.ndarray | None:
    """The action mask(s) in ``info`` (one env's, or a vector env's with ``num_envs``), checked
    against what the env published before: an env that publishes masks must do so from ``reset``
    and from every ``step``, for every env, or an observation would be acted on unmasked (and
    scored masked, or the other way round, in the update). ``expected`` is None on the first
    reset (it decides), else whether that reset published one. Inconsistency is a FastPPOError."""
    mask = info.get(ACTION_MASK_KEY)
    if mask is None and not expected:  # the common case, checked first: no env publishes masks
        return None
    present = np.asarray(
        mask is not None if num_envs is None else info.get(f"_{ACTION_MASK_KEY}", np.zeros(num_envs, dtype=bool))
    )
    if mask is not None and present.all() and expected is not False:
        return np.asarray(mask, dtype=bool)
    if not present.any() and not expected:
        return None
    fix = (
        "publish it from reset() and from every step() (info['action_mask'] of the observation returned), "
        "or put it in a Dict observation under 'action_mask'"
    )
    if expected is None:
        raise FastPPOError(f"only some envs published info['action_mask'] from reset(): {fix}")
    if expected:
        raise FastPPOError(f"the env published info['action_mask'] from reset() but not from {call}: {fix}")
    raise FastPPOError(
        f"the env published info['action_mask'] from {call} but not from reset(), "
        f"so first observations would be acted on unmasked: {fix}"
    )


def resolve_env_id(env_id: str) -> str:
    """'package.module:EnvClass' (or 'path/to/file.py:EnvClass') registers the class under a
    fastppo/ id; gymnasium ids, and gymnasium's own 'module:Id' (import the module, which
    registers Id), pass through."""
    target = named_object(env_id, "env")
    if target is None:
        return env_id
    module_name, attr = env_id.rsplit(":", 1)
    if isinstance(target, type) and issubclass(target, gym.Env):
        # The module in the id keeps same-named classes of different modules apart.
        registered = f"fastppo/{re.sub(r'[^A-Za-z0-9_]', '_', module_name)}_{attr}-v0"
        if registered not in gym.registry:
            # A class is an entry point gymnasium takes, which its EnvCreator protocol does not spell.
            gym.register(id=registered, entry_point=target)  # type: ignore[arg-type]
        return registered
    if file_spec(env_id) is None and attr in gym.registry:  # gymnasium's 'module:Id': the import registered Id
        return env_id
    if isinstance(target, type) and issubclass(target, TensorEnv):
        raise FastPPOError(f"'{attr}' in {module_name} is a TensorEnv: train it with --backend tensor")
    what = "a class" if isinstance(target, type) else f"a {type(target).__name__}"
    raise FastPPOError(
        f"{module_name} defines '{attr}', but it is {what}, not a gymnasium.Env or TensorEnv subclass: "
        "name your env class after the colon"
    )


def _registering_module_hint(env_id: str) -> str:
    """Where to look for an unknown id: a package whose ids start with its name (popgym's
    'popgym-RepeatPreviousEasy-v0') registers them when imported, which 'module:id' does. Only an
    installed distribution that requires gymnasium is imported here (never a module the id merely
    names, such as the standard library's), to see that it does register this id."""
    package = re.split(r"[-/]", env_id, maxsplit=1)[0]
    distributions = metadata.packages_distributions().get(package, []) if ":" not in env_id else []
    requirements = [r for d in distributions for r in metadata.requires(d) or []]
    if any(re.match(r"gymnasium\b", r, re.IGNORECASE) for r in requirements):
        try:
            importlib.import_module(package)
        except Exception:  # noqa: BLE001 - a package that fails to import gives no hint, the id stays unknown
            pass
        if env_id in gym.registry:
            return f"{package} registers it when imported: give '{package}:{env_id}'"
    return "see gymnasium.pprint_registry()"


def gym_make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` of ``env_id`` (resolved by :func:`resolve_env_id`), or a one-line FastPPOError
    saying why the id does not work."""
    try:
        resolved = resolve_env_id(env_id)
        if resolved not in gym.registry:
            from fastppo.env_ids import register_ale_envs  # ale-py's ids, only when an id needs them

            register_ale_envs()
        return gym.make(resolved, **kwargs)
    except gym.error.DependencyNotInstalled as exc:
        raise FastPPOError(f"env '{env_id}' needs an extra dependency: {exc}") from None
    except gym.error.Error as exc:
        if spelled_as_atari(env_id) and not ale_installed():
            raise FastPPOError(
                f"env '{env_id}' is an Atari game, and ale-py (which plays them) is not installed: "
                "pip install 'fastppo[atari]'"
            ) from None
        raise FastPPOError(f"unknown env id '{env_id}': {exc} ({_registering_module_hint(env_id)})") from None
    except Exception as exc:
        # MuJoCo loads the OpenGL backend MUJOCO_GL names when imported, rendering or not: a headless
        # machine without it (no libEGL for egl, say) fails every MuJoCo env with a deep traceback.
        backend = os.environ.get("MUJOCO_GL")
        if backend and any("mujoco" in Path(frame.filename).parts for frame in traceback.extract_tb(exc.__traceback__)):
            raise FastPPOError(
                f"env '{env_id}': MuJoCo could not load the MUJOCO_GL={backend} renderer "
                f"({type(exc).__name__}: {exc}): unset MUJOCO_GL to train (it only matters for rendering), "
                "or install that backend's libraries"
            ) from None
        raise


def flatten_if_needed(env: gym.Env) -> gym.Env:
    """Discrete observations become one-hot vectors and Dict/Tuple ones a flat vector; spaces
    with no fixed-size vector form get a clear error."""
    space = env.observation_space
    if isinstance(space, gym.spaces.Dict) and ACTION_MASK_KEY in space.spaces:
        env = ActionMaskFromObs(env)
        space = env.observation_space
    if isinstance(space, gym.spaces.Box):
        return env
    if isinstance(
        space,
        (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary, gym.spaces.Dict, gym.spaces.Tuple),
    ):
        try:
            gym.spaces.flatten_space(space)
        except (NotImplementedError, TypeError, ValueError):
            pass
        else:
            return gym.wrappers.FlattenObservation(env)
    raise FastPPOError(
        f"unsupported observation space {space}: fastppo handles Box, Discrete, MultiDiscrete, MultiBinary "
        "and Dict/Tuple of those"
    )


EnvFactory = Callable[[], gym.Env]


class GymnasiumVecEnv(FinishedEpisodes, HostCopies):
    """Wraps a gymnasium vector env (NEXT_STEP autoreset) so it speaks torch tensors."""

    def __init__(self, env_fns: Sequence[EnvFactory], asynchronous: bool, device: torch.device):
        vector_cls = gym.vector.AsyncVectorEnv if asynchronous else gym.vector.SyncVectorEnv
        self.envs = vector_cls(env_fns, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
        self.num_envs = self.envs.num_envs
        self.single_observation_space = self.envs.single_observation_space
        self.single_action_space = self.envs.single_action_space
        self.device = device
        self._returns: list[float] = []
        self._lengths: list[int] = []
        self._masked = False  # whether reset() published action masks (then every step must)

    def reset(self, seed: int | None = None) -> StepResult:
        obs, info = self.envs.reset(seed=seed)
        mask = published_action_mask(info, None, "reset()", self.num_envs)
        self._masked = mask is not None
        return self.first_step(obs, mask)

    def step(self, actions: torch.Tensor) -> StepResult:
        obs, reward, terminated, truncated, info = self.envs.step(self.to_host(actions))
        if "episode" in info:
            done = info["_episode"]
            self._returns += info["episode"]["r"][done].astype(float).tolist()
            self._lengths += info["episode"]["l"][done].astype(int).tolist()
        # NEXT_STEP reset rows carry their reset()'s info, so every row must have a mask.
        mask = published_action_mask(info, self._masked, "step()", self.num_envs)
        return self.to_device(obs, reward, terminated, truncated, mask)

    def close(self) -> None:
        self.envs.close()

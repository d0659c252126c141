"""EnvPool (C++ batched envs) behind the torch VecEnv interface: ``--env.backend envpool``.

EnvPool already follows NEXT_STEP autoreset: the step after ``terminated`` or ``truncated``
ignores its action and returns the first observation of the next episode with reward 0 and both
flags false, exactly fastppo's reset row, so its outputs pass through unchanged.

Same semantics as the gymnasium backend:
- Atari ids (``ALE/Pong-v5``, ``PongNoFrameskip-v4``) map to EnvPool's ``Pong-v5`` with the
  standard preprocessing switched on to match fastppo.envs.atari (noop 30, skip 4 with max-pool,
  episodic life, fire reset, sign-clipped rewards, 84x84 gray, --env.frame-stack frames stacked)
  and the id's own sticky-action probability and episode frame limit.
- Episodic returns are the raw, unclipped score of a whole game (EnvPool's ``info["reward"]``
  summed until ``info["terminated"]``, its real game-over flag, or truncation), and lengths count
  agent steps, as RecordEpisodeStatistics does below EpisodicLife in the gymnasium stack.
- Continuous actions are clipped to the action bounds at the env boundary.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from fastppo.config import EnvConfig
from fastppo.env_ids import is_atari
from fastppo.envs.atari import FRAME_SKIP, NOOP_MAX, SCREEN_SIZE
from fastppo.envs.vector import FinishedEpisodes, HostCopies, StepResult
from fastppo.errors import FastPPOError

ATARI_SUFFIXES = ("NoFrameskip", "Deterministic")


def import_envpool() -> ModuleType:
    try:
        import envpool
    except ImportError:
        raise FastPPOError("envpool is not installed: pip install envpool (or use --env.backend sync/async)") from None
    return envpool


def envpool_task(env_id: str, frame_stack: int) -> tuple[str, dict]:
    """EnvPool's task id and options for a gymnasium id (Atari frames stacked ``frame_stack``
    deep), or a FastPPOError naming the fix."""
    envpool = import_envpool()
    if is_atari(env_id):
        spec = gym.spec(env_id)
        name = spec.name
        for suffix in ATARI_SUFFIXES:
            name = name.removesuffix(suffix)
        frames = spec.kwargs.get("max_num_frames_per_episode") or (spec.max_episode_steps or 108_000)
        task = f"{name}-v5"
        options = dict(
            episodic_life=True,
            reward_clip=True,
            use_fire_reset=True,
            noop_max=NOOP_MAX,
            frame_skip=FRAME_SKIP,
            stack_num=frame_stack,
            img_height=SCREEN_SIZE,
            img_width=SCREEN_SIZE,
            gray_scale=True,
            repeat_action_probability=float(spec.kwargs.get("repeat_action_probability", 0.0)),
            full_action_space=bool(spec.kwargs.get("full_action_space", False)),
            max_episode_steps=int(frames) // FRAME_SKIP,
        )
    else:
        task, options = env_id, {}
    if task not in envpool.list_all_envs():
        raise FastPPOError(
            f"EnvPool has no env '{task}' (from '{env_id}'): use --env.backend sync, or one of envpool.list_all_envs()"
        )
    return task, options


def _float32_box(space: gym.spaces.Box) -> gym.spaces.Box:
    if space.dtype == np.uint8:
        return space
    return gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32)


class EnvPoolVecEnv(FinishedEpisodes, HostCopies):
    """A synchronous EnvPool batch speaking torch tensors. EnvPool seeds its envs when it builds
    them, so the pool is built at the first ``reset(seed)`` (and rebuilt for a new seed)."""

    def __init__(self, task: str, num_envs: int, options: dict, device: torch.device):
        envpool = import_envpool()
        spec = envpool.make_spec(task, num_envs=num_envs, **options)
        self.task, self.options, self.num_envs, self.device = task, options, num_envs, device
        self.single_observation_space = _float32_box(spec.gymnasium_observation_space)
        self.single_action_space = spec.gymnasium_action_space
        if isinstance(self.single_action_space, gym.spaces.Box):
            self.single_action_space = _float32_box(self.single_action_space)
        self._pool: Any = None  # an envpool env (untyped), built at the first reset
        self._seed: int | None = None
        self._reset_row = np.zeros(num_envs, dtype=bool)
        self._ep_return = np.zeros(num_envs, dtype=np.float64)
        self._ep_length = np.zeros(num_envs, dtype=np.int64)
        self._returns: list[float] = []
        self._lengths: list[int] = []

    def reset(self, seed: int | None = None) -> StepResult:
        if seed is None:
            # A fresh SeedSequence draws an int entropy (numpy types it as what one may pass in).
            seed = self._seed if self._seed is not None else int(cast(int, np.random.SeedSequence().entropy) % 2**31)
        if self._pool is None or seed != self._seed:
            envpool = import_envpool()
            if self._pool is not None:
                self._pool.close()
            # EnvPool seeds env i with seed + i, as gymnasium's vector envs do.
            self._pool = envpool.make(
                self.task, env_type="gymnasium", num_envs=self.num_envs, seed=seed, **self.options
            )
            self._seed = seed
        obs, _ = self._pool.reset()
        self._reset_row[:] = False
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self.first_step(obs)

    def step(self, actions: torch.Tensor) -> StepResult:
        if self._pool is None:
            raise RuntimeError("call reset() before step()")
        obs, reward, terminated, truncated, info = self._pool.step(self.to_host(actions))
        self._record_episodes(reward, terminated, truncated, info)
        return self.to_device(obs, reward, terminated, truncated)

    def _record_episodes(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, info: dict) -> None:
        real = ~self._reset_row  # reset rows hold no transition
        raw = np.asarray(info.get("reward", reward), dtype=np.float64)
        self._ep_return[real] += raw[real]
        self._ep_length[real] += 1
        # With episodic life, ``terminated`` also marks lost lives; info["terminated"] is the game's end.
        game_end = truncated | (np.asarray(info["terminated"], dtype=bool) if "terminated" in info else terminated)
        done = game_end & real
        self._returns += self._ep_return[done].tolist()
        self._lengths += self._ep_length[done].tolist()
        self._ep_return[done] = 0.0
        self._ep_length[done] = 0
        self._reset_row = terminated | truncated

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def make_envpool_env(cfg: EnvConfig, device: torch.device) -> EnvPoolVecEnv:
    """The EnvPool VecEnv for ``cfg`` (``env.backend: envpool``)."""
    task, options = envpool_task(cfg.env_id, cfg.frame_stack)
    return EnvPoolVecEnv(task, cfg.num_envs, options, device)

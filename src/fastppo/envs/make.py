"""Build the vector env a config asks for."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import gymnasium as gym
import torch

from fastppo.config import EnvConfig
from fastppo.envs.gymnasium_vec import GymnasiumVecEnv, check_env_id, flatten_if_needed, resolve_env_id
from fastppo.envs.vector import VecEnv
from fastppo.errors import FastPPOError


def make_single_env(env_id: str, video_dir: Path | None = None, render_mode: str | None = None) -> gym.Env:
    """One gymnasium env with fastppo's standard wrappers: episode statistics recorded on the raw
    rewards, optional video, observations flattened to a vector where needed."""
    if video_dir is not None:
        render_mode = "rgb_array"
    env = gym.make(resolve_env_id(env_id), render_mode=render_mode)
    if video_dir is not None:
        env = gym.wrappers.RecordVideo(env, str(video_dir), disable_logger=True)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    return flatten_if_needed(env)


def make_vec_env(cfg: EnvConfig, device: torch.device, video_dir: Path | None = None) -> VecEnv:
    """A VecEnv for ``cfg`` on ``device``; seeding happens at the first ``reset``."""
    if cfg.backend == "tensor":
        from fastppo.envs.tensor import make_tensor_env

        return make_tensor_env(cfg.env_id, cfg.num_envs, device=device)
    if cfg.backend == "envpool":
        from fastppo.envs.envpool_vec import make_envpool_env

        return make_envpool_env(cfg, device)
    if cfg.backend not in ("sync", "async"):
        raise FastPPOError(f"unknown env backend '{cfg.backend}': choose sync, async, tensor or envpool")
    check_env_id(cfg.env_id).close()
    env_fns = [partial(make_single_env, cfg.env_id, video_dir if (i == 0 and cfg.capture_video) else None) for i in range(cfg.num_envs)]
    return GymnasiumVecEnv(env_fns, asynchronous=cfg.backend == "async", device=device)

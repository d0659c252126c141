"""The Python API: ``fastppo.train``, ``fastppo.load`` and the config builder the CLI shares."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import gymnasium as gym

from fastppo.agent import Agent, load_agent
from fastppo.config import Config, apply_overrides, load_preset, preset_for_env
from fastppo.envs.gymnasium_vec import check_env_id


def make_config(env_id: str, preset: str | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Defaults <- preset (named, or the env's own, or CleanRL's for the action type) <- overrides."""
    overrides = dict(overrides or {})
    backend = str(overrides.get("backend", overrides.get("env.backend", "sync")))
    if preset is None:
        continuous = False
        if backend in ("sync", "async"):
            env = check_env_id(env_id)
            continuous = isinstance(env.action_space, gym.spaces.Box)
            env.close()
        elif backend == "tensor":
            continuous = env_id.startswith("Pendulum")
        preset = preset_for_env(env_id, continuous)
    config = Config()
    apply_overrides(config, load_preset(preset))
    apply_overrides(config, {"env.env_id": env_id, **overrides})
    return config.validate()


def default_run_dir(config: Config) -> Path:
    """runs/<env>__<exp>__<seed>__<timestamp>, CleanRL's naming."""
    env = config.env.env_id.replace("/", "_").replace(":", "_")
    return Path(config.run.run_root) / f"{env}__{config.run.exp_name}__{config.run.seed}__{int(time.time())}"


def train(env_id: str, *, preset: str | None = None, run_dir: str | Path | None = None, **overrides: Any) -> Agent:
    """Train on ``env_id`` and return the agent (``agent.history`` holds the logged metrics).

    Keyword arguments override hyperparameters by name, e.g. ``total_timesteps=100_000, seed=1,
    learning_rate=1e-3`` or ``**{"ppo.clip_coef": 0.1}``. Files are written only if ``run_dir``
    is given.
    """
    from fastppo.trainer import train as run_training

    config = make_config(env_id, preset, overrides)
    return run_training(config, Path(run_dir) if run_dir is not None else None)


def resume(run_dir: str | Path, **overrides: Any) -> Agent:
    """Continue the run in ``run_dir`` from its newest checkpoint, with its saved config.

    Only ``total_timesteps`` and the output settings (``progress``, ``tensorboard``,
    ``checkpoint_every``, ``keep_checkpoints``, ``torch_threads``) may be overridden.
    """
    from fastppo.trainer import resume_config
    from fastppo.trainer import train as run_training

    config, checkpoint = resume_config(run_dir, overrides)
    return run_training(config, Path(run_dir), checkpoint)


def load(run_dir: str | Path, device: str = "cpu") -> Agent:
    """The agent saved in a run directory (its final agent, else its newest checkpoint), or in a
    checkpoint folder (``RUN_DIR/checkpoints/000050``)."""
    return load_agent(run_dir, device)

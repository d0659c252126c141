"""The config an env trains with: defaults <- its preset (named, or the env's own, or CleanRL's for
the action type) <- overrides. Shared by the Python API and the CLI."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from fastppo.config import (
    BOARD_SETTINGS,
    POOL_SETTINGS,
    Config,
    EnvConfig,
    PolicyConfig,
    SelfPlayConfig,
    apply_overrides,
    load_preset,
    preset_for_env,
    resolve_key,
)
from fastppo.env_ids import absolute_spec, is_atari
from fastppo.envs.make import policy_spaces
from fastppo.envs.tensor import TensorEnv, user_tensor_env


def make_config(env_id: str | type, preset: str | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Defaults <- preset (named, or the env's own, or CleanRL's for the action type) <- overrides
    (``resolved_config``, without the preset's name)."""
    return resolved_config(env_id, preset, overrides)[0]


def resolved_config(
    env_id: str | type, preset: str | None = None, overrides: dict[str, Any] | None = None
) -> tuple[Config, str]:
    """The config (defaults <- preset <- overrides) and the preset it used: ``preset``, or the
    env's own, or CleanRL's for the action type.

    ``env_id`` may also be the class of your own env, ``gymnasium.Env`` or ``TensorEnv``; the config
    stores it as ``module:Class``, the name a resumed or evaluated run imports it by (a
    ``file.py:Class`` with the file's absolute path). A ``TensorEnv``, by class or by name, picks
    ``backend="tensor"``.
    """
    overrides = dict(overrides or {})
    env_class: type | None
    if isinstance(env_id, type):
        env_class, env_id = env_id, f"{env_id.__module__}:{env_id.__qualname__}"
    else:
        env_id = absolute_spec(env_id)
        env_class = user_tensor_env(env_id)
    if (
        env_class is not None
        and issubclass(env_class, TensorEnv)
        and "backend" not in overrides
        and "env.backend" not in overrides
    ):
        overrides["backend"] = "tensor"
    if preset is None:
        # Atari games act discretely: no env is built to ask (the gymnasium stack needs OpenCV, the
        # ale backend does not).
        preset = preset_for_env(
            env_id, continuous=not is_atari(env_id) and isinstance(action_space(env_id, overrides), gym.spaces.Box)
        )
    config = Config()
    preset_values = load_preset(preset)
    apply_overrides(config, preset_values)
    apply_overrides(config, {"env.env_id": env_id, **overrides})
    given = {resolve_key(config, key) for key in overrides}
    from_preset = {resolve_key(config, key) for key in preset_values} - given
    if config.self_play.pool_size == 0:  # the user turned the preset's pool off: its settings of a pool go with it
        for name in POOL_SETTINGS:
            if f"self_play.{name}" in from_preset:
                setattr(config.self_play, name, getattr(SelfPlayConfig, name))
    if config.policy.encoder != "board":  # the user chose another encoder than the preset's board encoder
        for name in BOARD_SETTINGS:
            if f"policy.{name}" in from_preset:
                setattr(config.policy, name, getattr(PolicyConfig, name))
    return config.validate(
        minibatches_from=f"the {preset} preset's" if "ppo.num_minibatches" in from_preset else None
    ), preset


def action_space(env_id: str, overrides: dict[str, Any]) -> gym.Space:
    """The action space of the env (or of a PettingZoo env's agents) as ``overrides`` build it;
    before ``Config.validate``, so with the default frame stack (it changes no action space)."""
    config = apply_overrides(Config(), {"env.env_id": env_id, **overrides})
    config.env.frame_stack = EnvConfig.frame_stack
    return policy_spaces(config)[1]

"""Build the vector env a config asks for."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import gymnasium as gym
import torch

from fastppo.config import Config, EnvConfig, MultiAgentConfig, available_cpus
from fastppo.env_ids import is_atari, is_pettingzoo
from fastppo.envs.atari import make_atari_env
from fastppo.envs.gymnasium_vec import GymnasiumVecEnv, flatten_if_needed, gym_make
from fastppo.envs.layout import ObservationLayout
from fastppo.envs.partial import CARTPOLE_NO_VELOCITY
from fastppo.envs.pettingzoo_vec import PettingZooVecEnv, make_parallel_env, make_pettingzoo
from fastppo.envs.pettingzoo_workers import PettingZooWorkers
from fastppo.envs.turn_based import TurnBasedVecEnv, check_game, is_game
from fastppo.envs.vector import VecEnv
from fastppo.envs.video import RecordEpisodeVideo
from fastppo.errors import FastPPOError

LUNAR_LANDER_CONTINUOUS = "LunarLanderContinuous-v3"


def register_envs() -> None:
    """Ids fastppo adds to gymnasium's registry: LunarLanderContinuous-v3
    (gymnasium 1.x spells it ``LunarLander-v3`` with ``continuous=True``; EnvPool keeps the name,
    so one id serves both backends and picks its own preset), and CartPoleNoVelocity-v1
    (CartPole-v1 observing ``[x, theta]`` only, for recurrent policies; see fastppo.envs.partial).
    ale-py's Atari games are registered when an id first needs them (``atari.register_ale_envs``)."""
    if LUNAR_LANDER_CONTINUOUS not in gym.registry and "LunarLander-v3" in gym.registry:
        base = gym.spec("LunarLander-v3")
        gym.register(
            id=LUNAR_LANDER_CONTINUOUS,
            entry_point=base.entry_point,
            max_episode_steps=base.max_episode_steps,
            reward_threshold=base.reward_threshold,
            kwargs={**base.kwargs, "continuous": True},
        )
    if CARTPOLE_NO_VELOCITY not in gym.registry:
        base = gym.spec("CartPole-v1")
        gym.register(
            id=CARTPOLE_NO_VELOCITY,
            entry_point="fastppo.envs.partial:cartpole_no_velocity",
            max_episode_steps=base.max_episode_steps,
            reward_threshold=base.reward_threshold,
        )


def make_single_env(
    env_id: str,
    video_dir: Path | None = None,
    render_mode: str | None = None,
    for_eval: bool = False,
    frame_stack: int = EnvConfig.frame_stack,
) -> gym.Env:
    """One gymnasium env with fastppo's standard wrappers: episode statistics recorded on the raw
    rewards, optional video, observations flattened to a vector where needed.

    Atari ids get the standard Atari stack (fastppo.envs.atari) of ``frame_stack`` frames;
    ``for_eval=True`` builds its evaluation variant (full games, raw score: no episodic life, no
    reward clipping). Other families have no training-only wrappers and no frame stack, so
    ``for_eval`` and ``frame_stack`` change nothing for them.
    """
    if is_atari(env_id):
        return make_atari_env(env_id, frame_stack, render_mode=render_mode, video_dir=video_dir, for_eval=for_eval)
    if video_dir is not None:
        render_mode = "rgb_array"
    # Only pass render_mode when asked: a user's env need not accept it.
    env = gym_make(env_id, **({"render_mode": render_mode} if render_mode else {}))
    if video_dir is not None:
        env = RecordEpisodeVideo(env, video_dir)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    return flatten_if_needed(env)


def env_spaces(env_id: str, backend: str, frame_stack: int = EnvConfig.frame_stack) -> tuple[gym.Space, gym.Space]:
    """The (observation, action) spaces of one env as the policy sees them, without a vector env:
    a tensor env declares them on its class (a user's may have no gymnasium twin). A saved agent
    passes its config's ``frame_stack``, so an Atari policy gets the channels it was trained on."""
    if backend == "tensor":
        from fastppo.envs.tensor import tensor_env_class

        env_class = tensor_env_class(env_id)
        return env_class.single_observation_space, env_class.single_action_space
    if backend == "ale" and is_atari(env_id):
        from fastppo.envs.ale_vec import ale_spaces

        return ale_spaces(env_id, frame_stack)
    env = make_single_env(env_id, for_eval=True, frame_stack=frame_stack)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def policy_spaces(config: Config) -> tuple[gym.Space, gym.Space, ObservationLayout]:
    """(observation, action, layout) of the rows a run's policy acts on: one env's spaces, or a
    PettingZoo env's agent rows (fastppo.envs.pettingzoo_vec)."""
    if is_pettingzoo(config.env.env_id):
        from fastppo.envs.pettingzoo_vec import pettingzoo_spaces

        spaces = pettingzoo_spaces(config.env, config.multi_agent)
        return spaces.observation_space, spaces.action_space, spaces.layout
    return *env_spaces(config.env.env_id, config.env.backend, config.env.frame_stack), ObservationLayout()


def rollout_device(cfg: EnvConfig, device: torch.device) -> torch.device:
    """Where a run's rollout lives (env steps, running statistics, the rollout buffer): tensor
    envs stay on the training device; numpy-backed ones (gymnasium, EnvPool, PettingZoo) hand
    their steps over on the CPU, and their bookkeeping stays there. On a GPU each step then costs
    one copy to the policy and one back, not ~50 tiny kernels (HalfCheetah on an H200: 62% of an
    iteration was that bookkeeping, benchmarks/README.md); the update gets the rollout in one copy."""
    return device if cfg.backend == "tensor" and not is_pettingzoo(cfg.env_id) else torch.device("cpu")


def make_vec_env(
    cfg: EnvConfig,
    device: torch.device,
    video_dir: Path | None = None,
    multi_agent: MultiAgentConfig | None = None,
    seed_blocks: int = 1,
) -> VecEnv:
    """A VecEnv for ``cfg`` on ``device``; seeding happens at the first ``reset``. A PettingZoo
    env (``pz:<module>``) makes ``num_envs`` copies of agent rows as ``multi_agent`` says.
    ``seed_blocks`` > 1 (tensor envs only): that many blocks of ``num_envs`` envs, each with its
    own random stream, for a stack of seeds (fastppo.training.seed_stack)."""
    # Here, not in Config.validate, which checks values without looking envs up.
    if cfg.frame_stack != EnvConfig.frame_stack and not is_atari(cfg.env_id):
        raise FastPPOError(
            f"--env.frame-stack {cfg.frame_stack} applies to Atari ids only, and {cfg.env_id} is not one: "
            f"leave it at {EnvConfig.frame_stack}"
        )
    if not is_pettingzoo(cfg.env_id):  # else they would be ignored without a word
        if cfg.env_kwargs:
            raise FastPPOError(
                f"--env-kwargs applies to PettingZoo envs (pz:<module>) only, and {cfg.env_id} is not one: drop it"
            )
        if multi_agent not in (None, MultiAgentConfig()):
            raise FastPPOError(
                f"--multi-agent.* flags apply to PettingZoo envs (pz:<module>) only, and {cfg.env_id} is not one: "
                "drop them"
            )
    if seed_blocks != 1 and (cfg.backend != "tensor" or is_pettingzoo(cfg.env_id)):
        raise FastPPOError(
            f"seeds train as stacks on tensor envs only, not on the {cfg.backend} backend: "
            "train one run per seed on another --backend (sync, async)"
        )
    if is_pettingzoo(cfg.env_id):
        return make_pettingzoo_env(cfg, multi_agent or MultiAgentConfig(), device)
    if cfg.backend == "tensor":
        from fastppo.envs.tensor import make_tensor_env

        return make_tensor_env(cfg.env_id, cfg.num_envs * seed_blocks, device=device, seed_blocks=seed_blocks)
    if cfg.backend == "envpool":
        from fastppo.envs.envpool_vec import make_envpool_env

        return make_envpool_env(cfg, device)
    if cfg.backend == "ale":
        from fastppo.envs.ale_vec import make_ale_env

        return make_ale_env(cfg, device, cpus=available_cpus())
    if cfg.backend not in ("sync", "async"):
        raise FastPPOError(f"unknown env backend '{cfg.backend}': choose sync, async, tensor, envpool or ale")
    gym_make(cfg.env_id).close()  # a bad id fails here in one line, not in every worker
    env_fns = [
        partial(
            make_single_env,
            cfg.env_id,
            video_dir if (i == 0 and cfg.capture_video) else None,
            frame_stack=cfg.frame_stack,
        )
        for i in range(cfg.num_envs)
    ]
    return GymnasiumVecEnv(env_fns, asynchronous=cfg.backend == "async", device=device)


# Registered on import, as gymnasium registers its own envs, so that every id above resolves in
# gym_make before any env is built (fastppo.envs imports this module first).
register_envs()


def make_pettingzoo_env(
    cfg: EnvConfig, multi_agent: MultiAgentConfig, device: torch.device, render_mode: str | None = None
) -> VecEnv:
    """``cfg.num_envs`` copies as agent rows: in this process (``sync``) or in worker processes
    (``async``, fastppo.envs.pettingzoo_workers)."""
    first = make_pettingzoo(cfg.env_id, cfg.env_kwargs, render_mode)
    if is_game(first):
        if cfg.backend != "sync":
            first.close()
            raise FastPPOError(
                f"{cfg.env_id} is a turn-based game, whose copies step in the training process: "
                f"use --backend sync, not {cfg.backend}"
            )
        try:
            check_game(first, cfg.env_id)
        except FastPPOError:
            first.close()
            raise
        return TurnBasedVecEnv(
            [lambda: first] + [partial(make_pettingzoo, cfg.env_id, cfg.env_kwargs, render_mode)] * (cfg.num_envs - 1),
            multi_agent,
            device,
        )
    first.close()
    env_fns = [partial(make_parallel_env, cfg.env_id, cfg.env_kwargs, render_mode) for _ in range(cfg.num_envs)]
    if cfg.backend == "async":
        return PettingZooWorkers(env_fns, multi_agent, device, cpus=available_cpus())
    return PettingZooVecEnv(env_fns, multi_agent, device)

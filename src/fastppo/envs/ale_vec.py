"""ale-py's own vector env behind the torch VecEnv interface: ``--env.backend ale``, the Atari
presets' backend.

``ale_py.vector_env.AtariVectorEnv`` steps its games in C++ threads with the standard
preprocessing built in, and it ships inside the ale-py wheel (no other package to install).
It is set up to match fastppo.envs.atari, the gymnasium stack:

- noop reset (up to 30 no-op frames), FIRE on reset in games that have it, each step the action
  repeated 4 frames with the last two max-pooled, 84x84 grayscale, the newest ``frame_stack``
  frames stacked, uint8 throughout; the id's own sticky-action probability and frame limit.
- Rewards: the C++ env hands out the raw score; training sees its sign, and the episode
  statistics sum the raw score of a *whole game* (all lives), with lengths in agent steps.
- A lost life ends the training episode (``terminated``) but not the game (the C++ env's
  ``life_loss_info``). Its next step is fastppo's NEXT_STEP reset row (fastppo.envs.vector),
  which the trainer masks out: this env plays FIRE there (NOOP in games without FIRE) whatever
  the policy chose, as the gymnasium stack presses FIRE in its reset after a lost life, and
  reports reward 0 (the raw score of that step still counts in the game's return).
- A game over or a truncation (the frame limit) is the C++ env's own NEXT_STEP autoreset.

Differences from the gymnasium stack, none of which changes what a policy learns from: the C++
env presses FIRE for one frame inside its reset (gymnasium: FIRE then UP, a step each), and a
lost life's reset row is one FIRE step (gymnasium: a NOOP step, then FIRE and UP).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from fastppo.config import EnvConfig
from fastppo.env_ids import is_atari
from fastppo.envs.atari import FIRE, FRAME_SKIP, NOOP_MAX, SCREEN_SIZE
from fastppo.envs.vector import FinishedEpisodes, HostCopies, StepResult
from fastppo.errors import FastPPOError

NOOP = 0
"""NOOP's index in every game's action set."""


def import_ale_vector_env() -> type:
    try:
        from ale_py.vector_env import AtariVectorEnv
    except ImportError:
        raise FastPPOError(
            "the ale backend needs ale-py 0.12 or newer: pip install 'fastppo[atari]' (or use --env.backend sync/async)"
        ) from None
    return AtariVectorEnv


def ale_vector_env(env_id: str, num_envs: int, frame_stack: int, threads: int) -> Any:
    """ale-py's ``AtariVectorEnv`` of ``env_id``'s game, set up as the module docstring says."""
    vector_env = import_ale_vector_env()
    if not is_atari(env_id):
        raise FastPPOError(
            f"the ale backend steps Atari games (ALE/Pong-v5, BreakoutNoFrameskip-v4), and {env_id} is not one: "
            "use --env.backend sync"
        )
    kwargs = gym.spec(env_id).kwargs
    return vector_env(
        kwargs["game"],
        num_envs,
        num_threads=threads,
        repeat_action_probability=float(kwargs.get("repeat_action_probability", 0.0)),
        full_action_space=bool(kwargs.get("full_action_space", False)),
        max_num_frames_per_episode=int(kwargs.get("max_num_frames_per_episode") or 108_000),
        img_height=SCREEN_SIZE,
        img_width=SCREEN_SIZE,
        grayscale=True,
        stack_num=frame_stack,
        frameskip=FRAME_SKIP,
        maxpool=True,
        noop_max=NOOP_MAX,
        episodic_life=False,  # would restart the whole game at a lost life
        life_loss_info=True,
        reward_clipping=False,
        use_fire_reset=True,
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )


def ale_spaces(env_id: str, frame_stack: int) -> tuple[gym.Space, gym.Space]:
    """One env's (observation, action) spaces as the ale backend makes them: the gymnasium
    stack's (tested), read without building it, so a machine without OpenCV trains on this backend."""
    envs = ale_vector_env(env_id, 1, frame_stack, threads=1)
    try:
        return envs.single_observation_space, envs.single_action_space
    finally:
        envs.close()


class AleVecEnv(FinishedEpisodes, HostCopies):
    """``num_envs`` copies of one Atari game in ale-py's C++ threads (module docstring). Seeded at
    ``reset(seed)``: copy i with ``seed + i``, as gymnasium's vector envs do."""

    def __init__(self, env_id: str, num_envs: int, frame_stack: int, device: torch.device, threads: int):
        self.envs = ale_vector_env(env_id, num_envs, frame_stack, threads)
        self.num_envs, self.device = num_envs, device
        self.single_observation_space = self.envs.single_observation_space
        self.single_action_space = self.envs.single_action_space
        actions = [action.name for action in self.envs.ale.get_action_set()]
        self._reset_action = actions.index(FIRE) if FIRE in actions else NOOP
        self._life_lost = np.zeros(num_envs, dtype=bool)  # the next step is a lost life's reset row
        self._real = np.ones(
            num_envs, dtype=bool
        )  # the next step is a transition of the game (not the C++ env's reset)
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._ep_return = np.zeros(num_envs, dtype=np.float64)
        self._ep_length = np.zeros(num_envs, dtype=np.int64)
        self._returns: list[float] = []
        self._lengths: list[int] = []

    def reset(self, seed: int | None = None) -> StepResult:
        obs, info = self.envs.reset(seed=seed)
        self._lives[:] = info["lives"]
        self._life_lost[:] = False
        self._real[:] = True
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self.first_step(obs)

    def step(self, actions: torch.Tensor) -> StepResult:
        action = self.to_host(actions)
        if self._life_lost.any():
            action = np.where(self._life_lost, self._reset_action, action)
        obs, raw, terminated, truncated, info = self.envs.step(action)
        lives = info["lives"]
        self._ep_return[self._real] += raw[self._real]
        self._ep_length[self._real] += 1
        life_lost = terminated & (0 < lives) & (lives < self._lives)
        game_end = (terminated & ~life_lost) | truncated
        self._returns += self._ep_return[game_end].tolist()
        self._lengths += self._ep_length[game_end].tolist()
        self._ep_return[game_end] = 0.0
        self._ep_length[game_end] = 0
        reward = np.sign(raw, dtype=np.float32)
        reward[self._life_lost] = 0.0  # a reset row's reward (the C++ env's own reset rows have 0)
        self._life_lost, self._real, self._lives = life_lost, ~game_end, lives
        return self.to_device(obs, reward, terminated, truncated)

    def close(self) -> None:
        self.envs.close()


def make_ale_env(cfg: EnvConfig, device: torch.device, threads: int) -> AleVecEnv:
    """The ale backend's VecEnv for ``cfg``, its games stepped in ``threads`` C++ threads."""
    return AleVecEnv(cfg.env_id, cfg.num_envs, cfg.frame_stack, device, threads)

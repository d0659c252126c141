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

``--env.step-in-halves``: the envs are two C++ vector envs of half the copies each, the rollout's
parts (fastppo.envs.vector.SteppedInParts): ``send`` hands one half its actions and returns while
its threads step them, and the policy acts on the other half meanwhile. Each copy's seed and
steps are those of the one-env set-up (copy i of the second half is copy n/2 + i), so each
copy's trajectory under the same actions is the same, and so are its episode statistics.

Frames reach a GPU policy in one copy per part and step: where CUDA is available they are put in
page-locked (pinned) host memory, from which that copy runs asynchronously.
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
    """``num_envs`` copies of one Atari game in ale-py's C++ threads (module docstring), as
    ``parts`` equal sets of copies, each its own C++ vector env of ``threads`` threads, that
    ``send``/``recv`` step apart and ``step`` steps together. Seeded at ``reset(seed)``: copy i
    with ``seed + i``, as gymnasium's vector envs do."""

    def __init__(
        self, env_id: str, num_envs: int, frame_stack: int, device: torch.device, threads: int, parts: int = 1
    ):
        size = num_envs // parts
        self.engines = [ale_vector_env(env_id, size, frame_stack, threads) for _ in range(parts)]
        self.parts = tuple(slice(part * size, (part + 1) * size) for part in range(parts))
        self.num_envs, self.device = num_envs, device
        self.single_observation_space = self.engines[0].single_observation_space
        self.single_action_space = self.engines[0].single_action_space
        actions = [action.name for action in self.engines[0].ale.get_action_set()]
        self._reset_action = actions.index(FIRE) if FIRE in actions else NOOP
        self._life_lost = np.zeros(num_envs, dtype=bool)  # the next step is a lost life's reset row
        # the next step is a transition of the game (not the C++ env's reset)
        self._real = np.ones(num_envs, dtype=bool)
        self._lives = np.zeros(num_envs, dtype=np.int64)
        self._ep_return = np.zeros(num_envs, dtype=np.float64)
        self._ep_length = np.zeros(num_envs, dtype=np.int64)
        self._returns: list[float] = []
        self._lengths: list[int] = []
        # Two pinned buffers a part, taken in turn: a cursor's frames stay whole until the part's
        # next step but one (the GPU copy from them has long finished by then).
        shape = (size, *self.single_observation_space.shape)  # type: ignore[misc]
        self._pinned = (
            [[torch.empty(shape, dtype=torch.uint8, pin_memory=True) for _ in range(2)] for _ in range(parts)]
            if torch.cuda.is_available()
            else None
        )
        self._turn = [0] * parts

    def reset(self, seed: int | None = None) -> StepResult:
        resets = [
            engine.reset(seed=None if seed is None else seed + part.start)
            for engine, part in zip(self.engines, self.parts)
        ]
        self._lives[:] = np.concatenate([info["lives"] for _, info in resets])
        self._life_lost[:] = False
        self._real[:] = True
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        frames = [self._frames(part, obs) for part, (obs, _) in enumerate(resets)]
        return self.first_step(frames[0] if len(frames) == 1 else np.concatenate(frames))

    def send(self, actions: torch.Tensor, part: int) -> None:
        """Start the part's step with its copies' ``actions``; returns at once."""
        action = self.to_host(actions)
        life_lost = self._life_lost[self.parts[part]]
        if life_lost.any():
            action = np.where(life_lost, self._reset_action, action)
        self.engines[part].send(action)

    def recv(self, part: int) -> StepResult:
        """The part's step that ``send`` started, once its threads are done."""
        rows = self.parts[part]
        obs, raw, terminated, truncated, info = self.engines[part].recv()
        lives = info["lives"]
        # Views of the part's rows, updated in place.
        real, was_lost = self._real[rows], self._life_lost[rows].copy()
        self._ep_return[rows][real] += raw[real]
        self._ep_length[rows][real] += 1
        life_lost = terminated & (0 < lives) & (lives < self._lives[rows])
        game_end = (terminated & ~life_lost) | truncated
        ep_return, ep_length = self._ep_return[rows], self._ep_length[rows]
        self._returns += ep_return[game_end].tolist()
        self._lengths += ep_length[game_end].tolist()
        ep_return[game_end] = 0.0
        ep_length[game_end] = 0
        reward = np.sign(raw, dtype=np.float32)
        reward[was_lost] = 0.0  # a reset row's reward (the C++ env's own reset rows have 0)
        self._life_lost[rows], self._real[rows], self._lives[rows] = life_lost, ~game_end, lives
        return self.to_device(self._frames(part, obs), reward, terminated, truncated)

    def step(self, actions: torch.Tensor) -> StepResult:
        for part, rows in enumerate(self.parts):
            self.send(actions[rows], part)
        steps = [self.recv(part) for part in range(len(self.parts))]
        if len(steps) == 1:
            return steps[0]
        return StepResult(*(torch.cat(x) for x in zip(*[step[:4] for step in steps])))  # no mask, no live rows

    def _frames(self, part: int, obs: np.ndarray) -> np.ndarray:
        """The part's frames, in its next pinned buffer where CUDA is available (module docstring)."""
        if self._pinned is None:
            return obs
        pinned = self._pinned[part][self._turn[part]]
        self._turn[part] ^= 1
        pinned.copy_(torch.from_numpy(obs))
        return pinned.numpy()

    def close(self) -> None:
        for engine in self.engines:
            engine.close()


def make_ale_env(cfg: EnvConfig, device: torch.device, cpus: int) -> AleVecEnv:
    """The ale backend's VecEnv for ``cfg``: one C++ vector env of ``cfg.num_envs`` copies, or two
    of half as many with ``--env.step-in-halves``, each stepping its copies on up to ``cpus`` threads."""
    parts = 2 if cfg.step_in_halves else 1
    threads = min(cfg.num_envs // parts, cpus)
    return AleVecEnv(cfg.env_id, cfg.num_envs, cfg.frame_stack, device, threads, parts)

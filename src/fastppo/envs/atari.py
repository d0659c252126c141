"""The standard Atari preprocessing (Mnih et al. 2015; Machado et al. 2018, section 5), as CleanRL's
ppo_atari.py and EnvPool apply it.

Training stack, innermost first:

    ALE (frameskip=1)
    AtariPreprocessing      noop reset (1..30 no-ops), repeat action 4 frames and max-pool the last
                            two, 84x84 grayscale (gymnasium's wrapper)
    RecordEpisodeStatistics raw rewards over the *whole game*: it sits below EpisodicLife, whose
                            life-loss "resets" never reach it, so the logged return is the real score
    EpisodicLife            a lost life ends the training episode (terminated=True) but not the game
    FireReset               press FIRE after every (life) reset in games that need it
    sign(reward)            reward clipping to {-1, 0, +1}
    FrameStackObservation   the last frame_stack frames (--env.frame-stack, 4 unless a recurrent
                            policy is the memory): uint8 [frame_stack, 84, 84]; the CNN divides by 255

Evaluation (``for_eval=True``) drops EpisodicLife and reward clipping, so an episode is a full game
scored in raw points, and FireReset presses FIRE after each lost life as well, so the policy meets
every new life the way it did in training.

Sticky actions follow the env id: ``ALE/<Game>-v5`` keeps ALE v5's repeat_action_probability 0.25,
``<Game>NoFrameskip-v4`` has none (CleanRL's published Atari figures use the latter). The ALE's own
frame skip is always set to 1 so that the max-pooling skip above does it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, SupportsFloat, cast

import gymnasium as gym
import numpy as np

from fastppo.envs.video import RecordEpisodeVideo
from fastppo.errors import FastPPOError

if TYPE_CHECKING:
    from ale_py.env import AtariEnv

FRAME_SKIP = 4
NOOP_MAX = 30
SCREEN_SIZE = 84
FIRE = "FIRE"


def make_atari_env(
    env_id: str, frame_stack: int, render_mode: str | None = None, video_dir: Any = None, for_eval: bool = False
) -> gym.Env:
    """One Atari env with the standard stack (module docstring) of ``frame_stack`` frames;
    ``for_eval`` plays full games."""
    try:
        import cv2  # noqa: F401  (AtariPreprocessing resizes with OpenCV)
    except ImportError:
        raise FastPPOError("Atari preprocessing needs OpenCV: pip install opencv-python-headless") from None
    env = gym.make(env_id, frameskip=1, render_mode="rgb_array" if video_dir is not None else render_mode)
    if video_dir is not None:
        # Recorded below every wrapper: full-resolution colour frames of whole games.
        env = RecordEpisodeVideo(env, video_dir)
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=NOOP_MAX,
        frame_skip=FRAME_SKIP,
        screen_size=SCREEN_SIZE,
        terminal_on_life_loss=False,
        grayscale_obs=True,
        scale_obs=False,
    )
    env = gym.wrappers.RecordEpisodeStatistics(env)
    if not for_eval:
        env = EpisodicLife(env)
    if FIRE in _game(env).get_action_meanings():
        env = FireReset(env, on_life_loss=for_eval)
    if not for_eval:
        # numpy's ufunc overloads do not match gymnasium's Callable[[SupportsFloat], SupportsFloat].
        env = gym.wrappers.TransformReward(env, np.sign)  # type: ignore[arg-type]
    return gym.wrappers.FrameStackObservation(env, frame_stack)


def _game(env: gym.Env) -> AtariEnv:
    """The ale-py game under ``env``'s wrappers (gymnasium types ``unwrapped`` as any Env)."""
    return cast("AtariEnv", env.unwrapped)


def _lives(env: gym.Env) -> int:
    return int(_game(env).ale.lives())


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (terminated=True) for value bootstrapping, but the game goes
    on: the next ``reset`` only takes a no-op step unless the game is really over (Mnih et al. 2015).
    Works with NEXT_STEP autoreset, which calls ``reset`` on the step after ``terminated``."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = _lives(self.env)
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the no-op itself ended the game
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = _lives(self.env)
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE (then UP, as the baselines wrapper does) after reset, for games that stand
    still until fired; with ``on_life_loss`` also after each lost life within a game."""

    def __init__(self, env: gym.Env, on_life_loss: bool = False):
        super().__init__(env)
        meanings = _game(env).get_action_meanings()
        if len(meanings) < 3 or meanings[1] != FIRE:
            raise FastPPOError(f"FireReset needs FIRE as action 1, got {meanings}")
        self.on_life_loss = on_life_loss
        self.lives = 0

    def _fire(self) -> tuple[Any, float, bool, bool, dict]:
        total = 0.0
        for action in (1, 2):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        obs, _, terminated, truncated, _ = self._fire()
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        self.lives = _lives(self.env)
        return obs, info

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = _lives(self.env)
        if self.on_life_loss and not (terminated or truncated) and lives < self.lives:
            obs, fire_reward, terminated, truncated, info = self._fire()
            reward = float(reward) + fire_reward
        self.lives = lives
        return obs, reward, terminated, truncated, info

"""Small envs that exercise the spaces and signals real envs rarely combine, and a user-style
tensor env."""

from __future__ import annotations

import os
import signal
import sys
import time

import gymnasium as gym
import numpy as np
import torch

from fastppo.envs.tensor import TensorEnv


class MaskedChoiceEnv(gym.Env):
    """Discrete(4) actions of which a random half are invalid each step, published in the
    observation's 'action_mask'. An invalid action raises, so training only passes if masks work."""

    observation_space = gym.spaces.Dict(
        {"obs": gym.spaces.Box(-1.0, 1.0, (4,), np.float32), "action_mask": gym.spaces.MultiBinary(4)}
    )
    action_space = gym.spaces.Discrete(4)
    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(self, render_mode: str | None = None):
        self.render_mode = render_mode

    def render(self):
        return np.zeros((16, 16, 3), dtype=np.uint8)

    def _observe(self):
        self._mask = np.zeros(4, dtype=np.int8)
        self._mask[self.np_random.choice(4, size=2, replace=False)] = 1
        return {"obs": self._mask.astype(np.float32), "action_mask": self._mask.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._observe(), {}

    strict = True
    """Raise on an invalid action (else it is just taken, as many real envs do)."""

    def step(self, action):
        if self.strict and not self._mask[action]:
            raise RuntimeError(f"invalid action {action} taken despite mask {self._mask}")
        self._t += 1
        return self._observe(), float(action), False, self._t >= 20, {}


class InfoMaskedChoiceEnv(MaskedChoiceEnv):
    """MaskedChoiceEnv with the same observation as a Box and the mask in ``info`` from both
    ``reset`` and ``step``: the same env as far as the policy can tell."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs["obs"], {"action_mask": obs["action_mask"]}

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs["obs"], reward, terminated, truncated, {"action_mask": obs["action_mask"]}


class StepOnlyMaskedChoiceEnv(InfoMaskedChoiceEnv):
    """Publishes the mask from ``step`` only: the first observation of each episode has none."""

    strict = False

    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed, options=options)[0], {}


class ResetOnlyMaskedChoiceEnv(InfoMaskedChoiceEnv):
    """Publishes the mask from ``reset`` only."""

    def step(self, action):
        return *super().step(action)[:4], {}


class CueMemoryEnv(gym.Env):
    """A two-step memory task: the first observation shows a cue (one of 2), the second shows
    nothing, and only the second action pays: 1 for naming the cue. Without memory a policy
    scores 0.5 per episode at best; with it, 1."""

    observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cue, self._t = int(self.np_random.integers(2)), 0
        obs = np.zeros(3, dtype=np.float32)
        obs[self._cue] = 1.0
        return obs, {}

    def step(self, action):
        self._t += 1
        done = self._t == 2
        reward = float(done and int(action) == self._cue)
        obs = np.zeros(3, dtype=np.float32)
        obs[2] = 1.0  # "recall now"
        return obs, reward, done, False, {}


class TargetEnv(gym.Env):
    """One-step bandit over any action space: reward 1 when the action equals a fixed target.
    Observations are a Tuple(Discrete, Box) so flattening is exercised too."""

    observation_space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)))

    def __init__(self, action_space: gym.Space | None = None):
        self.action_space = action_space or gym.spaces.MultiDiscrete([3, 2])
        self.target = self.action_space.sample() * 0 + 1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return (1, np.zeros(2, dtype=np.float32)), {}

    def step(self, action):
        reward = float(np.all(np.asarray(action) == self.target))
        return (1, np.zeros(2, dtype=np.float32)), reward, True, False, {}


class SlowToBuildEnv(TargetEnv):
    """TargetEnv that says on stdout that it is being built, then takes a minute: a signal sent on
    that line reaches the command in its start-up, whatever the machine's load."""

    def __init__(self):
        print("fastppo test: building the env", flush=True)
        time.sleep(60)
        super().__init__()


class _SignalInFinalizer:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        sys.getrecursionlimit()  # the handler runs at this call, inside the finalizer: Python drops what it raises


class SignalLosingEnv(TargetEnv):
    """TargetEnv whose building gets a SIGINT while a finalizer runs, where the KeyboardInterrupt
    its handler raises is dropped ("Exception ignored in"): a Ctrl-C that start-up loses."""

    def __init__(self):
        _SignalInFinalizer()  # collected at once
        super().__init__()


class OffsetTargetEnv(TargetEnv):
    """Discrete actions and observations whose values start away from 0: the env raises on an
    action outside its space and pays 1 for the last one (index 2 of 3)."""

    observation_space = gym.spaces.Discrete(3, start=10)

    def __init__(self, action_space: gym.Space | None = None):
        super().__init__(action_space or gym.spaces.Discrete(3, start=-1))
        self.target = np.asarray(self.action_space.start) + 2

    def reset(self, *, seed=None, options=None):
        gym.Env.reset(self, seed=seed)
        return 12, {}

    def step(self, action):
        if not self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)):
            raise RuntimeError(f"action {action} is outside {self.action_space}")
        return 12, float(np.all(np.asarray(action) == self.target)), True, False, {}


class MultiOffsetTargetEnv(OffsetTargetEnv):
    def __init__(self):
        super().__init__(gym.spaces.MultiDiscrete([3, 3], start=[-1, 5]))


class MultiBinaryTargetEnv(TargetEnv):
    def __init__(self):
        super().__init__(gym.spaces.MultiBinary(3))


class NaNRewardEnv(gym.Env):
    """Returns a NaN reward after 50 steps: the trainer must stop with a clear message."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = getattr(self, "_t", 0)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        self._t += 1
        reward = float("nan") if self._t > 50 else 1.0
        return np.zeros(2, dtype=np.float32), reward, False, self._t % 10 == 0, {}


class Clock:
    """A counter a DriftEnv holds: an object of the user's own, declared plain data too."""

    fastppo_plain_state = True

    def __init__(self) -> None:
        self.ticks = 0


class DriftEnv(gym.Env):
    """A point pushed left or right while it drifts by noise from the env's own generator (not
    np_random, which reset reseeds), with a clock that never resets and episodes of random length:
    state that only a snapshot of the whole env carries across a resume. It is plain data, and
    the class says so (``fastppo_plain_state``), so resume continues it exactly."""

    fastppo_plain_state = True
    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.noise = np.random.default_rng(7)
        self.clock = Clock()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._pos, self._limit, self._t = self.np_random.normal(size=2), int(self.np_random.integers(5, 30)), 0
        return self._observe(), {}

    def step(self, action):
        self._t += 1
        self.clock.ticks += 1
        self._pos = self._pos + self.noise.normal(0, 0.3, 2) + (0.2 if action else -0.2)
        return self._observe(), -float(np.abs(self._pos).sum()), self._t >= self._limit, False, {}

    def _observe(self) -> np.ndarray:
        return np.array([*self._pos, self.clock.ticks % 7], dtype=np.float32)


class UndeclaredDriftEnv(DriftEnv):
    """DriftEnv without the declaration: resume restarts fresh episodes."""

    fastppo_plain_state = False


class StackedDriftEnv(gym.Wrapper):
    """DriftEnv behind gymnasium's frame stack, whose deque of frames a snapshot cannot hold."""

    def __init__(self) -> None:
        super().__init__(gym.wrappers.FlattenObservation(gym.wrappers.FrameStackObservation(DriftEnv(), 2)))


class TextObsEnv(gym.Env):
    observation_space = gym.spaces.Text(5)
    action_space = gym.spaces.Discrete(2)


class MatchTensorEnv(TensorEnv):
    """A user's tensor env: each step shows one of 3 targets (one-hot) and pays 1 for naming it;
    8 steps an episode (random guessing scores 8/3)."""

    single_observation_space = gym.spaces.Box(0.0, 1.0, shape=(3,))
    single_action_space = gym.spaces.Discrete(3)
    max_episode_steps = 8

    def _reset_state(self) -> torch.Tensor:
        return self._uniform(0.0, 3.0).floor()

    def _dynamics(self, state: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        reward = (actions == state[:, 0].long()).to(state.dtype)
        return self._uniform(0.0, 3.0).floor(), reward, torch.zeros_like(reward, dtype=torch.bool)

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(state[:, 0].long(), 3).to(self.dtype)

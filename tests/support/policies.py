"""The spaces and policy shapes the policy tests run over: each action space with its action shape, and
trunks from none to three layers, separate or shared."""

import gymnasium as gym
import numpy as np

from fastppo.config import PolicyConfig

OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
ACTION_SPACES = {
    "discrete": (gym.spaces.Discrete(3), ()),
    "multidiscrete": (gym.spaces.MultiDiscrete([3, 2, 4]), (3,)),
    "multibinary": (gym.spaces.MultiBinary(5), (5,)),
    "box": (gym.spaces.Box(-2.0, 2.0, (2,), np.float32), (2,)),
}

POLICIES = {
    "separate 64-64 tanh": PolicyConfig(),
    "shared 64-64 tanh": PolicyConfig(shared_trunk=True),
    "separate 32 relu": PolicyConfig(hidden_sizes=(32,), activation="relu"),
    "separate 16-8-4": PolicyConfig(hidden_sizes=(16, 8, 4)),
    "no hidden layer": PolicyConfig(hidden_sizes=()),
}

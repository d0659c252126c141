"""Batched torch-tensor environments: thousands of envs per tensor, on CPU or CUDA.

With them the rollout never leaves the training device, as PureJaxRL does with JAX. The four
classic-control tasks re-implement gymnasium 1.4's code exactly (checked step by step against it
in ``tests/test_tensor_envs.py``); your own simulator plugs in by subclassing :class:`TensorEnv`.

    envs = make_tensor_env("CartPole-v1", num_envs=4096, device="cuda", seed=1)
    result = envs.reset()
    result = envs.step(torch.randint(0, 2, (4096,), device="cuda"))
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import torch

from fastppo.envs.tensor.acrobot import Acrobot
from fastppo.envs.tensor.base import TensorEnv
from fastppo.envs.tensor.cartpole import CartPole
from fastppo.envs.tensor.mountain_car import MountainCar
from fastppo.envs.tensor.pendulum import Pendulum
from fastppo.errors import FastPPOError

TENSOR_ENVS: Mapping[str, type[TensorEnv]] = MappingProxyType(
    {
        "CartPole-v1": CartPole,
        "Acrobot-v1": Acrobot,
        "MountainCar-v0": MountainCar,
        "Pendulum-v1": Pendulum,
    }
)
"""Gymnasium id -> tensor re-implementation (read-only)."""


def make_tensor_env(
    env_id: str,
    num_envs: int,
    device: torch.device | str = "cpu",
    seed: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> TensorEnv:
    """``num_envs`` copies of ``env_id`` as one :class:`TensorEnv` on ``device``.

    ``dtype=torch.float64`` is for checking against gymnasium; training wants float32.
    """
    if env_id not in TENSOR_ENVS:
        raise FastPPOError(
            f"no tensor env for {env_id!r}; available: {', '.join(TENSOR_ENVS)} "
            "(or subclass fastppo.envs.tensor.TensorEnv for your own)"
        )
    if num_envs < 1:
        raise FastPPOError(f"num_envs must be at least 1, got {num_envs}")
    return TENSOR_ENVS[env_id](num_envs, device=device, dtype=dtype, seed=seed)


__all__ = ["TENSOR_ENVS", "Acrobot", "CartPole", "MountainCar", "Pendulum", "TensorEnv", "make_tensor_env"]

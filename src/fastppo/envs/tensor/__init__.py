"""Batched torch-tensor environments: thousands of envs per tensor, on CPU or CUDA.

With them the rollout never leaves the training device, as PureJaxRL does with JAX. The four
classic-control tasks, and ``CartPoleNoVelocity-v1`` (CartPole observing ``[x, theta]`` only),
re-implement gymnasium 1.4's code exactly (checked step by step against it in
``tests/envs/test_tensor_envs.py``); your own simulator plugs in by subclassing :class:`TensorEnv`
and naming the class as ``module:Class`` (or ``path/to/file.py:Class``) where an env id goes:

    envs = make_tensor_env("CartPole-v1", num_envs=4096, device="cuda", seed=1)
    result = envs.reset()
    result = envs.step(torch.randint(0, 2, (4096,), device="cuda"))

    fastppo train my_sims:Reacher --backend tensor --num-envs 4096 --device cuda
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import torch

from fastppo.env_ids import is_pettingzoo, named_object
from fastppo.envs.tensor.acrobot import Acrobot
from fastppo.envs.tensor.base import TensorEnv
from fastppo.envs.tensor.cartpole import CartPole, CartPoleNoVelocity
from fastppo.envs.tensor.mountain_car import MountainCar
from fastppo.envs.tensor.pendulum import Pendulum
from fastppo.errors import FastPPOError

TENSOR_ENVS: Mapping[str, type[TensorEnv]] = MappingProxyType(
    {
        "CartPole-v1": CartPole,
        "CartPoleNoVelocity-v1": CartPoleNoVelocity,
        "Acrobot-v1": Acrobot,
        "MountainCar-v0": MountainCar,
        "Pendulum-v1": Pendulum,
    }
)
"""Gymnasium id -> tensor re-implementation (read-only)."""


def user_tensor_env(env_id: str) -> type[TensorEnv] | None:
    """The user's TensorEnv subclass that ``env_id`` names as ``module:Class``, or None when it
    names something else (a gymnasium id, a gymnasium env class, a PettingZoo module)."""
    if is_pettingzoo(env_id):
        return None
    target = named_object(env_id, "env")
    return target if isinstance(target, type) and issubclass(target, TensorEnv) else None


def tensor_env_class(env_id: str) -> type[TensorEnv]:
    """Our re-implementation of the gymnasium id ``env_id``, or the user's TensorEnv it names."""
    env_class = TENSOR_ENVS.get(env_id) or user_tensor_env(env_id)
    if env_class is None:
        raise FastPPOError(
            f"no tensor env for {env_id!r}; available: {', '.join(TENSOR_ENVS)}, "
            "or your own subclass of fastppo.envs.tensor.TensorEnv named as module:Class"
        )
    return env_class


def make_tensor_env(
    env_id: str,
    num_envs: int,
    device: torch.device | str = "cpu",
    seed: int | None = None,
    dtype: torch.dtype = torch.float32,
    seed_blocks: int = 1,
) -> TensorEnv:
    """``num_envs`` copies of ``env_id`` (see :func:`tensor_env_class`) as one :class:`TensorEnv` on ``device``.

    ``dtype=torch.float64`` is for checking against gymnasium; training wants float32.
    ``seed_blocks``: the envs form that many equal blocks, each with its own random stream (a
    stack of seeds, fastppo.training.seed_stack).
    """
    env_class = tensor_env_class(env_id)
    if num_envs < 1:
        raise FastPPOError(f"num_envs must be at least 1, got {num_envs}")
    blocks = {"seed_blocks": seed_blocks} if seed_blocks != 1 else {}  # a user's env need not take it
    return env_class(num_envs, device=device, dtype=dtype, seed=seed, **blocks)


__all__ = [
    "TENSOR_ENVS",
    "Acrobot",
    "CartPole",
    "CartPoleNoVelocity",
    "MountainCar",
    "Pendulum",
    "TensorEnv",
    "make_tensor_env",
    "tensor_env_class",
    "user_tensor_env",
]

"""A vector env's state as tensors and plain data (JSON), and back: what lets a checkpoint resume
the envs exactly where their state allows it (see ``fastppo.training.checkpoint``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fastppo.errors import FastPPOError

if TYPE_CHECKING:
    from fastppo.envs.vector import VecEnv


BOARD_GAMES = ("pettingzoo.classic.tictactoe", "pettingzoo.classic.connect_four")
"""PettingZoo's classic games whose state is a board and the agent lists (no RNG, no engine)."""
EXACT_ENV_MODULES = ("gymnasium.envs.classic_control", "gymnasium.envs.toy_text", "mpe2", *BOARD_GAMES)
"""Env modules whose whole state is plain data reachable from the env object, so ``snapshot_envs``
captures it (MPE: the world's entities, step counter, agent lists, reward dicts, np_random)."""
PLAIN_STATE_MODULES = ("mpe2", "pettingzoo.utils", "gymnasium.spaces", *BOARD_GAMES)
"""Modules whose objects a snapshot walks into: MPE's world and scenario, PettingZoo's wrappers and
agent selector, spaces (their sampling RNG). Anything else is left as the fresh env holds it (in
MPE a pygame surface and font), which is safe for the envs of ``EXACT_ENV_MODULES`` only."""
PLAIN_STATE_FLAG = "fastppo_plain_state"
"""A class attribute: True declares that the class's state is plain data (a user's or a test's
Gymnasium or PettingZoo env, a wrapper of one, or an object it holds), so that snapshots walk into
it and, on an env, resume it exactly."""
STATELESS_WRAPPER_MODULES = (
    "gymnasium.wrappers.common",  # TimeLimit, OrderEnforcing, PassiveEnvChecker, RecordEpisodeStatistics
    "gymnasium.wrappers.transform_observation",
    "gymnasium.wrappers.transform_action",
    "gymnasium.wrappers.transform_reward",
    "fastppo.",
)
"""Wrappers whose state a snapshot captures or that have none that matters: gym.make's and
fastppo's own, and gymnasium's stateless transforms (RecordEpisodeStatistics' queues only feed its
statistics). Any other wrapper (a frame stack's deque, say) keeps an env's resume fresh unless its
class sets ``fastppo_plain_state = True``."""

SIMPLE_VALUES = (type(None), bool, int, float, str)
_MAX_ARRAY = 100_000


def _plain_class(cls: type, modules: tuple[str, ...] = PLAIN_STATE_MODULES) -> bool:
    return cls.__module__.startswith(modules) or getattr(cls, PLAIN_STATE_FLAG, False) is True


def _plain(value: Any) -> bool:
    """Whether ``_encode`` knows this kind of value (a restore leaves any other as the fresh env has it)."""
    return isinstance(value, (*SIMPLE_VALUES, tuple, list, dict, np.ndarray, np.generic, np.random.Generator)) or _plain_class(type(value))


def _encode(value: Any, memo: dict[int, int]) -> Any:
    """Plain data as JSON, or ``...`` when it is not plain data. A mutable value met again is
    ``{"ref": n}`` (n its ``"id"``), so that what the env shares stays shared once restored."""
    if isinstance(value, SIMPLE_VALUES):
        return value
    if id(value) in memo:
        return {"ref": memo[id(value)]}
    mark = len(memo)
    shared = not isinstance(value, (tuple, np.generic))
    if shared:
        memo[id(value)] = mark  # before the contents, which may refer back to it
    encoded = _encode_contents(value, memo)
    if encoded is ...:
        for key in list(memo)[mark:]:  # the dropped value's contents were never written
            del memo[key]
        return ...
    return {"id": mark} | encoded if shared else encoded


def _encode_contents(value: Any, memo: dict[int, int]) -> Any:
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf" or value.size > _MAX_ARRAY:
            return ...
        return {"ndarray": value.dtype.str, "shape": list(value.shape), "data": value.ravel().tolist()}
    if isinstance(value, np.generic):
        return {"scalar": value.dtype.str, "data": value.item()} if value.dtype.kind in "biuf" else ...
    if isinstance(value, np.random.Generator):
        return {"bit_generator": value.bit_generator.state}
    if type(value) in (tuple, list, dict) and len(value) <= _MAX_ARRAY:
        if isinstance(value, dict) and not all(isinstance(key, str) for key in value):
            return ...
        items = {}
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            items[key] = _encode(item, memo)
            if items[key] is ...:  # restoring part of a container would be worse than none of it
                return ...
        return {"dict": items} if isinstance(value, dict) else {type(value).__name__: list(items.values())}
    if _plain_class(type(value)):
        return _snapshot_object(value, memo)
    return ...


def _at(container: Any, key: int | str) -> Any:
    """What the fresh env holds at ``key`` of a container being restored (None if nothing)."""
    try:
        return container[key]
    except (TypeError, KeyError, IndexError):
        return None


@dataclass
class _Restore:
    """A restore under way: the values restored so far by snapshot id, and the ids of the fresh
    env's objects already restored in place."""

    by_id: dict[int, Any] = field(default_factory=dict)
    taken: set[int] = field(default_factory=set)

    def take(self, current: Any) -> Any:
        """``current`` to restore in place, or a new instance of its class where it already stands
        for another snapshot object: the fresh env may point to a different landmark than the
        snapshot did (MPE's agent.goal_a), and the snapshot's structure is what must come back."""
        if id(current) in self.taken:
            twin = type(current).__new__(type(current))
            vars(twin).update(vars(current))  # attributes the snapshot skips (a pygame surface)
            current = twin
        self.taken.add(id(current))
        return current


def _restore(current: Any, snap: Any, restore: _Restore) -> Any:
    """The value ``snap`` encodes. Objects are restored into ``current`` (what the fresh env holds in
    their place) in place, so that references from outside the snapshot hold; data is rebuilt."""
    if not isinstance(snap, dict):
        return snap
    if "ref" in snap:
        return restore.by_id[snap["ref"]]
    if "scalar" in snap:
        return np.dtype(snap["scalar"]).type(snap["data"])
    if "tuple" in snap:
        return tuple(_restore(_at(current, i), item, restore) for i, item in enumerate(snap["tuple"]))
    if "class" in snap:
        return _restore_object(current, snap, restore)
    value: Any
    if "ndarray" in snap:
        value = np.asarray(snap["data"], dtype=np.dtype(snap["ndarray"])).reshape(snap["shape"])
    elif "bit_generator" in snap:
        value = np.random.Generator(getattr(np.random, snap["bit_generator"]["bit_generator"])())
        value.bit_generator.state = snap["bit_generator"]
    else:
        value = [] if "list" in snap else {}
    if "id" in snap:
        restore.by_id[snap["id"]] = value  # before the contents, which may refer back to it
    if isinstance(value, list):
        value.extend(_restore(_at(current, i), item, restore) for i, item in enumerate(snap["list"]))
    elif isinstance(value, dict):
        value.update({key: _restore(_at(current, key), item, restore) for key, item in snap["dict"].items()})
    return value


def _layers(env: Any) -> list[Any]:
    """The wrapper chain, outermost first, down to the unwrapped env."""
    layers = [env]
    while hasattr(layers[-1], "env") and layers[-1] is not layers[-1].unwrapped:
        layers.append(layers[-1].env)
    if layers[-1] is not env.unwrapped:
        layers.append(env.unwrapped)
    return layers


def _snapshot_object(obj: Any, memo: dict[int, int], names: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The object's class and its plain attributes (those in ``names``, when given)."""
    attrs = {}
    for name, value in vars(obj).items() if names is None else ((name, getattr(obj, name)) for name in names):
        encoded = _encode(value, memo)
        if encoded is not ...:
            attrs[name] = encoded
    return {"class": type(obj).__qualname__, "attrs": attrs}


def _restore_object(obj: Any, snap: dict[str, Any], restore: _Restore) -> Any:
    """``obj`` (or its twin, see ``_Restore.take``) with the snapshot's attributes."""
    if snap["class"] != type(obj).__qualname__:
        raise FastPPOError(f"the checkpoint's env snapshot is for {snap['class']}, the env is {type(obj).__qualname__}")
    obj = restore.take(obj)
    if "id" in snap:
        restore.by_id[snap["id"]] = obj
    current = vars(obj)
    for name, value in snap["attrs"].items():
        restored = _restore(current.get(name), value, restore)
        if name not in current or _plain(current[name]):  # never replace a pygame surface by a saved None
            current[name] = restored
    return obj


def env_is_exact(envs: VecEnv) -> bool:
    """Whether ``snapshot_envs`` captures the whole state of these envs (see the module docstring)."""
    from fastppo.envs.gymnasium_vec import GymnasiumVecEnv
    from fastppo.envs.pettingzoo_vec import PettingZooVecEnv
    from fastppo.envs.tensor import TensorEnv
    from fastppo.envs.turn_based import TurnBasedVecEnv

    if isinstance(envs, TensorEnv):
        return True
    if isinstance(envs, GymnasiumVecEnv) and isinstance(envs.envs, __import__("gymnasium").vector.SyncVectorEnv):
        return all(
            _plain_class(type(e.unwrapped), EXACT_ENV_MODULES) and all(_plain_class(type(layer), STATELESS_WRAPPER_MODULES) for layer in _layers(e)[:-1])
            for e in envs.envs.envs
        )
    if isinstance(envs, (PettingZooVecEnv, TurnBasedVecEnv)):  # the copies are walked from the outermost object
        return all(_plain_class(type(e)) and _plain_class(type(e.unwrapped), EXACT_ENV_MODULES) for e in envs.envs)
    return False


def snapshot_envs(envs: VecEnv) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None]:
    """The envs' state as (tensors, JSON), or (empty, None) when it cannot be captured exactly."""
    from fastppo.envs.pettingzoo_vec import PettingZooVecEnv
    from fastppo.envs.tensor import TensorEnv
    from fastppo.envs.turn_based import TurnBasedVecEnv

    if not env_is_exact(envs):
        return {}, None
    if isinstance(envs, TensorEnv):
        tensors = {f"env.{k}": v.detach().cpu().contiguous() for k, v in vars(envs).items() if isinstance(v, torch.Tensor)}
        tensors["env.generator"] = envs.generator.get_state()
        return tensors, {"kind": "tensor"}
    memo: dict[int, int] = {}  # one for all copies: they may share (a class-level metadata dict)
    if isinstance(envs, (PettingZooVecEnv, TurnBasedVecEnv)):
        return {}, {"kind": "pettingzoo", "vec": _snapshot_object(envs, memo, envs.CHECKPOINTED)}
    vec = envs.envs
    meta = {
        "kind": "sync",
        "autoreset": vec._autoreset_envs.tolist(),
        "envs": [[_snapshot_object(layer, memo) for layer in _layers(e)] for e in vec.envs],
    }
    return {}, meta


def restore_envs(envs: VecEnv, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    if meta["kind"] == "tensor":
        for key, value in tensors.items():
            if key == "env.generator":
                envs.generator.set_state(value)
            elif key.startswith("env."):
                setattr(envs, key.removeprefix("env."), value.to(envs.device))
        return
    restore = _Restore()
    if meta["kind"] == "pettingzoo":
        _restore_object(envs, meta["vec"], restore)
        return
    vec = envs.envs
    if len(meta["envs"]) != len(vec.envs):
        raise FastPPOError(f"the checkpoint holds {len(meta['envs'])} envs, the config makes {len(vec.envs)}")
    vec._autoreset_envs = np.asarray(meta["autoreset"], dtype=np.bool_)
    for env, layers in zip(vec.envs, meta["envs"]):
        objects = _layers(env)
        if len(objects) != len(layers):
            raise FastPPOError("the checkpoint's env wrappers differ from this env's: resume with the same fastppo version")
        for obj, snap in zip(objects, layers):
            _restore_object(obj, snap, restore)

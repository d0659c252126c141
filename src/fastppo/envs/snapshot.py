"""A vector env's state as tensors and plain data (JSON), and back: what lets a checkpoint resume
the envs exactly where their state allows it (see ``fastppo.training.checkpoint``). Back is into
the envs built from the run's config, and only into the state they have: a checkpoint's snapshot
is data that must fit them (``restore_envs``), never a way to set any attribute it names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from gymnasium.vector import SyncVectorEnv

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
Gymnasium or PettingZoo env, a wrapper of one, or an object it holds; fastppo's OpenSpiel games,
whose game in play is its moves), so that snapshots walk into it and, on an env, resume it exactly."""
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
    return isinstance(
        value, (*SIMPLE_VALUES, tuple, list, dict, np.ndarray, np.generic, np.random.Generator)
    ) or _plain_class(type(value))


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


class SnapshotMismatch(ValueError):
    """A snapshot that does not fit the env built to resume it (a damaged or crafted checkpoint)."""


def _kind(value: Any) -> str:
    """What a restored value must share with the fresh env's value in its place: numbers stay
    numbers, an array keeps its shape and holds numbers or bools, an object keeps its class."""
    if isinstance(value, (bool, np.bool_)):
        return "a bool"
    if isinstance(value, (int, float, np.number)):
        return "a number"
    if isinstance(value, str):
        return "a text"
    if isinstance(
        value, np.ndarray
    ):  # of any precision: Acrobot's state is float32 after a reset, float64 after a step
        return f"an array {list(value.shape)} of {'bools' if value.dtype.kind == 'b' else 'numbers'}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    if isinstance(value, np.random.Generator):
        return f"a {type(value.bit_generator).__name__} generator"
    return f"a {type(value).__qualname__}"


def _check_fits(current: Any, value: Any, where: str) -> None:
    """SnapshotMismatch unless ``value`` may stand where the fresh env holds ``current``: None on
    either side fits (a value an episode sets, such as CartPole's steps_beyond_terminated), and a
    tuple an array of its length (MountainCar's state: an array after a reset, a tuple after a step)."""
    if current is None or value is None or _kind(current) == _kind(value):
        return
    pair = {type(current), type(value)}
    if (
        pair == {tuple, np.ndarray}
        and np.ndim(current if isinstance(current, np.ndarray) else value) == 1
        and len(current) == len(value)
    ):
        return
    raise SnapshotMismatch(f"sets {where} to {_kind(value)} where the env has {_kind(current)}")


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
            cls: type[object] = type(current)
            twin = cls.__new__(cls)
            vars(twin).update(vars(current))  # attributes the snapshot skips (a pygame surface)
            current = twin
        self.taken.add(id(current))
        return current


def _restore(current: Any, snap: Any, restore: _Restore, where: str) -> Any:
    """The value ``snap`` encodes, checked against ``current`` (what the fresh env holds in its
    place, named ``where`` in errors). Objects are restored into ``current`` in place, so that
    references from outside the snapshot hold; data is rebuilt."""
    if isinstance(snap, dict) and "class" in snap:
        return _restore_object(current, snap, restore, where)
    value = _rebuilt(current, snap, restore, where)
    _check_fits(current, value, where)  # a container before its contents, whose errors would say less
    if not isinstance(snap, dict):
        return value
    if "id" in snap:
        restore.by_id[snap["id"]] = value  # before a container's contents, which may refer back to it
    if "list" in snap:
        value.extend(_restore(_at(current, i), item, restore, f"{where}[{i}]") for i, item in enumerate(snap["list"]))
    elif "dict" in snap:
        value.update(
            {key: _restore(_at(current, key), item, restore, f"{where}[{key!r}]") for key, item in snap["dict"].items()}
        )
    return value


def _rebuilt(current: Any, snap: Any, restore: _Restore, where: str) -> Any:
    """``_restore``'s value of a node other than an object; a list or dict still empty."""
    if not isinstance(snap, dict):
        return snap
    if "ref" in snap:
        return restore.by_id[snap["ref"]]
    if "scalar" in snap:
        return np.dtype(snap["scalar"]).type(snap["data"])
    if "tuple" in snap:
        return tuple(_restore(_at(current, i), item, restore, f"{where}[{i}]") for i, item in enumerate(snap["tuple"]))
    if "ndarray" in snap:
        return np.asarray(snap["data"], dtype=np.dtype(snap["ndarray"])).reshape(snap["shape"])
    if "bit_generator" in snap:
        generator = np.random.Generator(getattr(np.random, snap["bit_generator"]["bit_generator"])())
        generator.bit_generator.state = snap["bit_generator"]
        return generator
    return [] if "list" in snap else {}


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


def _restore_object(
    obj: Any, snap: dict[str, Any], restore: _Restore, where: str, names: tuple[str, ...] | None = None
) -> Any:
    """``obj`` (or its twin, see ``_Restore.take``) with the snapshot's attributes (of ``names``,
    when given), each of the kind the fresh ``obj`` holds. A name its class defines (``step``: a
    method the attribute would hide) is a SnapshotMismatch; one the fresh object lacks is an
    attribute the env makes as it runs (MPE's ``_skip_agent_selection``)."""
    if snap["class"] != type(obj).__qualname__:
        raise SnapshotMismatch(f"holds a {snap['class']} as {where}, where the env has a {type(obj).__qualname__}")
    obj = restore.take(obj)
    if "id" in snap:
        restore.by_id[snap["id"]] = obj
    current = vars(obj)
    for name, value in snap["attrs"].items():
        if (names is not None and name not in names) or (name not in current and hasattr(type(obj), name)):
            raise SnapshotMismatch(f"sets {where}.{name}, which is not part of the env's state")
        if name not in current or _plain(current[name]):  # never replace a pygame surface by a saved None
            current[name] = _restore(current.get(name), value, restore, f"{where}.{name}")
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
            _plain_class(type(e.unwrapped), EXACT_ENV_MODULES)
            and all(_plain_class(type(layer), STATELESS_WRAPPER_MODULES) for layer in _layers(e)[:-1])
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
        tensors = {
            f"env.{k}": v.detach().cpu().contiguous() for k, v in vars(envs).items() if isinstance(v, torch.Tensor)
        }
        tensors["env.generator"] = envs.generator.get_state()
        return tensors, {"kind": "tensor"}
    memo: dict[int, int] = {}  # one for all copies: they may share (a class-level metadata dict)
    if isinstance(envs, (PettingZooVecEnv, TurnBasedVecEnv)):
        return {}, {"kind": "pettingzoo", "vec": _snapshot_object(envs, memo, envs.CHECKPOINTED)}
    vec = _sync_vector_env(envs)
    meta = {
        "kind": "sync",
        "autoreset": vec._autoreset_envs.tolist(),
        "envs": [[_snapshot_object(layer, memo) for layer in _layers(e)] for e in vec.envs],
    }
    return {}, meta


def _sync_vector_env(envs: VecEnv) -> SyncVectorEnv:
    """The gymnasium vector env of a sync-backend VecEnv, the kind ``env_is_exact`` accepts besides
    tensor and PettingZoo envs."""
    from gymnasium.vector import SyncVectorEnv

    from fastppo.envs.gymnasium_vec import GymnasiumVecEnv

    assert isinstance(envs, GymnasiumVecEnv) and isinstance(envs.envs, SyncVectorEnv)
    return envs.envs


def restore_envs(envs: VecEnv, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    """Put ``envs`` (built and reset from the run's config) into the state ``snapshot_envs`` saved
    (tensors whose names and shapes ``check_fits_run`` has checked, and JSON that
    ``check_trainer_json`` has). The JSON is checked against the envs as it is restored: only the
    attributes they have, each of the kind and shape they hold, the same number of copies, and
    what a PettingZoo vec env checks of its restored state (``restored_problem``). A snapshot
    that does not fit is a SnapshotMismatch, and the envs, part restored, are to be discarded."""
    from fastppo.envs.pettingzoo_vec import PettingZooVecEnv
    from fastppo.envs.tensor import TensorEnv
    from fastppo.envs.turn_based import TurnBasedVecEnv

    # The snapshot's kind is these envs' (check_fits_run compared it with theirs).
    if meta["kind"] == "tensor":
        assert isinstance(envs, TensorEnv)
        for key, value in tensors.items():
            if key == "env.generator":
                envs.generator.set_state(value)
            elif key.startswith("env."):
                setattr(envs, key.removeprefix("env."), value.to(envs.device))
        return
    restore = _Restore()
    if meta["kind"] == "pettingzoo":
        assert isinstance(envs, (PettingZooVecEnv, TurnBasedVecEnv))
        copies = len(envs.envs)
        _restore_object(envs, meta["vec"], restore, type(envs).__qualname__, names=envs.CHECKPOINTED)
        problem = (
            f"holds {len(envs.envs)} copies of the env, the config makes {copies}"
            if len(envs.envs) != copies
            else envs.restored_problem()
        )
        if problem is not None:
            raise SnapshotMismatch(problem)
        return
    vec = _sync_vector_env(envs)
    if len(meta["envs"]) != len(vec.envs):
        raise SnapshotMismatch(f"holds {len(meta['envs'])} envs, the config makes {len(vec.envs)}")
    vec._autoreset_envs = np.asarray(meta["autoreset"], dtype=np.bool_)
    for index, (env, layers) in enumerate(zip(vec.envs, meta["envs"])):
        objects = _layers(env)
        if len(objects) != len(layers):
            raise SnapshotMismatch("has other env wrappers than this env: resume with the same fastppo version")
        for obj, snap in zip(objects, layers):
            _restore_object(obj, snap, restore, f"envs[{index}].{type(obj).__qualname__}")

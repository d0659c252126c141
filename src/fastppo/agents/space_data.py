"""A policy's spaces as plain JSON data in agent.json, so that loading a run folder rebuilds them
without building (and so importing) the env it was trained on.

Box bounds are stored in full (one number when every element is the same), infinities as the
strings ``"inf"`` and ``"-inf"`` (JSON has no infinity); reading checks every field and raises
ValueError naming the bad one (``load_agent`` makes it a one-line error)."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from fastppo.envs.layout import ObservationLayout

INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
BOX_DTYPES = ("float16", "float32", "float64", *INTEGER_DTYPES, "bool")
INFINITIES = {"inf": math.inf, "-inf": -math.inf}


def spaces_to_data(observation_space: gym.Space, action_space: gym.Space, layout: ObservationLayout) -> dict[str, Any]:
    """What agent.json stores as ``spaces``."""
    return {
        "observation": space_to_data(observation_space),
        "action": space_to_data(action_space),
        "layout": {
            "critic_only": layout.critic_only,
            "raw": layout.raw,
            "groups": list(layout.groups),
            "board": list(layout.board),
            "board_planes_first": layout.board_planes_first,
        },
    }


LAYOUT_KEYS = {"critic_only", "raw", "groups"}
BOARD_KEYS = {"board", "board_planes_first"}
"""Added to a layout with board encoders: an agent.json saved before has none (no board)."""


def spaces_from_data(data: Any) -> tuple[gym.Space, gym.Space, ObservationLayout]:
    """(observation space, action space, layout) from ``spaces_to_data`` output; ValueError if damaged."""
    data = _mapping(data, "spaces", {"observation", "action", "layout"})
    layout_data = data["layout"]
    with_board = isinstance(layout_data, dict) and BOARD_KEYS <= set(layout_data)
    layout_data = _mapping(layout_data, "spaces.layout", LAYOUT_KEYS | (BOARD_KEYS if with_board else set()))
    groups = layout_data["groups"]
    if not isinstance(groups, list):
        raise ValueError(f"spaces.layout.groups must be a list, got {groups!r}")
    board = _shape(layout_data.get("board", []), "spaces.layout.board")
    planes_first = layout_data.get("board_planes_first", False)
    if board and (len(board) != 3 or 0 in board) or not isinstance(planes_first, bool):
        raise ValueError(
            f"spaces.layout.board must be [] or three positive sizes, and board_planes_first true or false, got "
            f"{list(board)} and {planes_first!r}"
        )
    observation_space = space_from_data(data["observation"], "spaces.observation")
    layout = ObservationLayout(
        _count(layout_data["critic_only"], "spaces.layout.critic_only"),
        _count(layout_data["raw"], "spaces.layout.raw"),
        tuple(_count(g, "spaces.layout.groups") for g in groups),
        board,
        planes_first,
    )
    columns = layout.critic_only + layout.raw
    board_size = math.prod(board) if board else 0
    shape = observation_space.shape  # every space stored here has one
    # The rows hold the special columns and the board, or at least one column besides them.
    if (columns or board) and (shape is None or len(shape) != 1 or shape[0] < columns + max(board_size, 1)):
        named = f"{columns} special columns" + (f" and a board of {board_size} values" if board else "")
        raise ValueError(f"spaces.layout names {named} of observations shaped {observation_space.shape}")
    return observation_space, space_from_data(data["action"], "spaces.action"), layout


def space_to_data(space: gym.Space) -> dict[str, Any]:
    """Box, Discrete, MultiDiscrete or MultiBinary as JSON data (what a policy's spaces can be)."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": space.dtype.name,
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start), "dtype": space.dtype.name}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {
            "type": "MultiDiscrete",
            "nvec": space.nvec.tolist(),
            "start": space.start.tolist(),
            "dtype": space.dtype.name,
        }
    if isinstance(space, gym.spaces.MultiBinary):
        n = np.asarray(space.n)
        return {"type": "MultiBinary", "n": int(n) if n.ndim == 0 else [int(size) for size in n]}
    raise ValueError(
        f"cannot store the space {space}: a policy's spaces are Box, Discrete, MultiDiscrete or MultiBinary"
    )


def space_from_data(data: Any, what: str) -> gym.Space:
    """The space ``space_to_data`` stored; ``what`` names it in the ValueError of a bad field."""
    kind = data.get("type") if isinstance(data, dict) else None
    if kind == "Box":
        data = _mapping(data, what, {"type", "shape", "dtype", "low", "high"})
        dtype = _dtype(data["dtype"], BOX_DTYPES, what)
        shape = _shape(data["shape"], f"{what}.shape")
        low, high = (_bound_array(data[key], shape, dtype, f"{what}.{key}") for key in ("low", "high"))
        if np.any(low > high):
            raise ValueError(f"{what}: low exceeds high")
        return gym.spaces.Box(low, high, shape, dtype)
    if kind == "Discrete":
        data = _mapping(data, what, {"type", "n", "start", "dtype"})
        dtype = _dtype(data["dtype"], INTEGER_DTYPES, what)
        if not isinstance(data["n"], int) or isinstance(data["n"], bool) or data["n"] < 1:
            raise ValueError(f"{what}.n must be a positive integer, got {data['n']!r}")
        if isinstance(data["start"], list):
            raise ValueError(f"{what}.start must be an integer, got {data['start']!r}")
        return gym.spaces.Discrete(
            data["n"], start=_integers(data["start"], dtype, f"{what}.start").item(), dtype=dtype
        )
    if kind == "MultiDiscrete":
        data = _mapping(data, what, {"type", "nvec", "start", "dtype"})
        dtype = _dtype(data["dtype"], INTEGER_DTYPES, what)
        nvec, start = _integers(data["nvec"], dtype, f"{what}.nvec"), _integers(data["start"], dtype, f"{what}.start")
        if nvec.size == 0 or nvec.shape != start.shape or np.any(nvec < 1):
            raise ValueError(f"{what}: nvec must be a non-empty array of positive counts, start one of the same shape")
        return gym.spaces.MultiDiscrete(nvec, dtype=dtype, start=start)
    if kind == "MultiBinary":
        data = _mapping(data, what, {"type", "n"})
        n = data["n"]
        sizes = _shape(n, f"{what}.n") if isinstance(n, list) else (_count(n, f"{what}.n"),)
        if not sizes or 0 in sizes:
            raise ValueError(f"{what}.n must be a positive size or a list of them, got {n!r}")
        return gym.spaces.MultiBinary(n)
    raise ValueError(f"{what} has type {kind!r}: expected Box, Discrete, MultiDiscrete or MultiBinary")


def _bound(values: np.ndarray) -> Any:
    """One JSON value when all elements are equal (Atari's 0..255), else the flat list."""
    flat = values.ravel()
    if flat.size and np.all(flat == flat[0]):
        return _number(flat[0])
    return [_number(v) for v in flat]


def _number(value: np.generic) -> bool | int | float | str:
    if value.dtype.kind == "b":
        return bool(value)
    if value.dtype.kind in "iu":
        return int(value)
    number = float(value)  # a float32 widened to float64 exactly: it narrows back to itself
    return number if math.isfinite(number) else ("inf" if number > 0 else "-inf")


def _mapping(data: Any, what: str, keys: set[str]) -> dict[str, Any]:
    if not isinstance(data, dict) or set(data) != keys:
        raise ValueError(
            f"{what} must be an object with the keys {sorted(keys)}, got "
            f"{sorted(data) if isinstance(data, dict) else type(data).__name__}"
        )
    return data


def _count(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} must hold non-negative integers, got {value!r}")
    return value


MAX_ELEMENTS = 1 << 26
"""More values than any observation a policy takes (an Atari stack is 28 224): a damaged shape is
refused here, not a MemoryError when its bounds are built."""


def _shape(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a list of sizes, got {value!r}")
    shape = tuple(_count(size, what) for size in value)
    if math.prod(shape) > MAX_ELEMENTS:
        raise ValueError(f"{what} {list(shape)} holds more than {MAX_ELEMENTS} values")
    return shape


def _dtype(name: Any, allowed: tuple[str, ...], what: str) -> np.dtype:
    if name not in allowed:
        raise ValueError(f"{what}.dtype must be one of {', '.join(allowed)}, got {name!r}")
    return np.dtype(name)


def _integers(value: Any, dtype: np.dtype, what: str) -> np.ndarray:
    """An integer (or nested lists of them) that fits ``dtype``, as an array of it."""
    flat = value if isinstance(value, list) else [value]
    while flat and all(isinstance(v, list) for v in flat):
        flat = [v for row in flat for v in row]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in flat):
        raise ValueError(f"{what} must hold integers, got {value!r}")
    info = np.iinfo(dtype)
    if any(not info.min <= v <= info.max for v in flat):
        raise ValueError(f"{what} does not fit {dtype.name}: {value!r}")
    try:
        return np.array(value, dtype=dtype)
    except ValueError:  # ragged nesting
        raise ValueError(f"{what} must be a rectangular array of integers, got {value!r}") from None


def _bound_array(value: Any, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
    """A Box bound: one value or ``prod(shape)`` values (``"inf"``/``"-inf"`` for float dtypes)."""
    values = value if isinstance(value, list) else [value]
    if isinstance(value, list) and len(values) != math.prod(shape):
        raise ValueError(f"{what} has {len(values)} values for shape {list(shape)}")
    if dtype.kind in "iu":
        array = _integers(values, dtype, what)
    elif dtype.kind == "b":
        if not all(isinstance(v, bool) for v in values):
            raise ValueError(f"{what} must hold true/false, got {value!r}")
        array = np.array(values, dtype=bool)
    else:
        if not all(
            (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
            or (isinstance(v, str) and v in INFINITIES)
            for v in values
        ):
            raise ValueError(f"{what} must hold finite numbers or 'inf'/'-inf', got {value!r}")
        wide = np.array([INFINITIES[v] if isinstance(v, str) else v for v in values], dtype=np.float64)
        with np.errstate(over="ignore"):
            array = wide.astype(dtype)
        if np.any(np.isinf(array) != np.isinf(wide)):
            raise ValueError(f"{what} does not fit {dtype.name}: {value!r}")
    return array.reshape(shape) if isinstance(value, list) else np.broadcast_to(array, shape).copy()

"""What an env id names: a PettingZoo env (``pz:``), an OpenSpiel game (``openspiel:``, played as a
PettingZoo turn-based game), an Atari game (ale-py), or a user's own code
named on the command line: ``package.module:name`` or ``path/to/file.py:name``
(custom gymnasium envs, custom tensor envs, reward functions).

Only the command line (or a Python caller) may name code to import: a run folder someone sent you
is data. Its env is built by its own word only when that imports no user code
(``folder_env_id``); a ``file.py`` spec is saved with its absolute path, but never trusted."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from fastppo.errors import FastPPOError

PREFIX = "pz:"
"""A PettingZoo env's id: ``pz:<module>``, ``pz:<module or file.py>:<function>`` (fastppo.envs.pettingzoo_vec)."""
OPENSPIEL_PREFIX = "openspiel:"
"""An OpenSpiel game's id: ``openspiel:<game>[(params)]`` in OpenSpiel's game-string syntax
(fastppo.envs.openspiel_env), built as a PettingZoo AECEnv."""
ALE_ENTRY_POINT = "ale_py.env:AtariEnv"


def is_pettingzoo(env_id: str) -> bool:
    """Whether ``env_id`` trains through PettingZoo's API (agent rows): a ``pz:`` env, or an
    OpenSpiel game, which fastppo plays as a PettingZoo turn-based game."""
    return env_id.startswith(PREFIX) or is_openspiel(env_id)


def is_openspiel(env_id: str) -> bool:
    return env_id.startswith(OPENSPIEL_PREFIX)


def ale_installed() -> bool:
    try:
        import ale_py  # noqa: F401
    except ImportError:
        return False
    return True


def register_ale_envs() -> None:
    """Make ``ALE/*`` and ``*NoFrameskip-v4`` ids known to gymnasium when ale-py is installed
    (gymnasium 1.x no longer loads plugins by itself). Called for ids gymnasium does not know yet
    (``is_atari``, ``gym_make``), not on import: ale-py and its ~400 ids cost every other run
    ~30-90 ms of start-up."""
    try:
        import ale_py
    except ImportError:
        return
    import gymnasium as gym

    gym.register_envs(ale_py)


def spelled_as_atari(env_id: str) -> bool:
    """Whether ``env_id`` is spelled as ale-py names its games (``ALE/Pong-v5``,
    ``PongNoFrameskip-v4``), registered or not: what tells a missing ale-py from a typo."""
    return env_id.startswith("ALE/") or env_id.endswith("NoFrameskip-v4")


def is_atari(env_id: str) -> bool:
    """True for ids built by ale-py (ALE/Pong-v5, PongNoFrameskip-v4, ...)."""
    import gymnasium as gym  # here, not on import: config reads env ids without building envs

    if env_id not in gym.registry:
        register_ale_envs()
    try:
        spec = gym.spec(env_id)
    except gym.error.Error:
        return False
    return spec.entry_point == ALE_ENTRY_POINT


def split_spec(spec: str) -> tuple[str, str] | None:
    """``(module or file, name)`` of a ``module:name`` spec, or None when ``spec`` is not one."""
    module_name, sep, name = spec.rpartition(":")
    return (module_name, name) if sep and module_name and name else None


def file_spec(spec: str) -> tuple[str, str] | None:
    """``(file, name)`` of a ``path/to/file.py:name`` spec, or None for anything else."""
    parts = split_spec(spec)
    return parts if parts is not None and parts[0].endswith(".py") else None


def absolute_spec(spec: str) -> str:
    """A ``file.py:name`` spec (``pz:file.py:name`` too) with the file's absolute path, so a run
    that saves it loads from any working directory; other specs (and plain ids) unchanged."""
    prefix = PREFIX if spec.startswith(PREFIX) else ""
    parts = file_spec(spec.removeprefix(prefix))
    return spec if parts is None else f"{prefix}{os.path.abspath(parts[0])}:{parts[1]}"


def same_env(a: str, b: str) -> bool:
    """Whether env ids ``a`` and ``b`` name the same env: a ``file.py:name`` spec's file by its
    resolved path (a run saves it absolute; the command line may give it relative, or through a
    link), other ids as written."""
    return _resolved_spec(a) == _resolved_spec(b)


def _resolved_spec(spec: str) -> str:
    prefix = PREFIX if spec.startswith(PREFIX) else ""
    parts = file_spec(spec.removeprefix(prefix))
    return spec if parts is None else f"{prefix}{os.path.realpath(parts[0])}:{parts[1]}"


def names_user_code(env_id: str) -> bool:
    """Whether building ``env_id`` imports code that is no installed package: a ``module:name`` or
    ``file.py:name`` spec (the module may be a file in the working directory), with or without
    ``pz:``, or a ``pz:<module>`` whose top-level package no installed distribution provides.
    Gymnasium ids, fastppo's tensor envs, installed PettingZoo envs and OpenSpiel's games are not."""
    if is_openspiel(env_id):
        return False
    spec = env_id.removeprefix(PREFIX)
    if split_spec(spec) is not None:
        return True
    return env_id.startswith(PREFIX) and spec.split(".")[0] not in metadata.packages_distributions()


def folder_env_id(env_id: str, run_dir: str | Path | None, fix: str) -> str:
    """``env_id`` as a run folder names it, when fastppo may build it on the folder's word alone;
    else a FastPPOError ending in ``fix`` (how to name the env yourself)."""
    if names_user_code(env_id):
        raise FastPPOError(
            f"{run_dir} was trained on user code '{env_id}', and fastppo never imports code that a run folder names: "
            f"{fix}"
        )
    return env_id


def _import_module(module_name: str) -> Any:
    """Import a module by dotted name or ``.py`` path. The working directory is importable, as
    with ``python -m`` (a console script does not put it on sys.path). Raises ImportError."""
    if module_name.endswith(".py"):
        file_spec = importlib.util.spec_from_file_location(Path(module_name).stem, module_name)
        if file_spec is None or file_spec.loader is None or not Path(module_name).is_file():
            raise ImportError(f"no Python file at {module_name}")
        module = importlib.util.module_from_spec(file_spec)
        file_spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(module_name)


def named_object(spec: str, what: str) -> Any:
    """What a ``module:name`` spec names (None when the module has no such name), or a one-line
    FastPPOError ``cannot load <what> '<spec>': <why>`` when the module does not import, or when
    a ``file.py`` lacks the name (only a dotted module may be gymnasium's ``module:Id``, whose Id
    is registered on import rather than defined)."""
    parts = split_spec(spec)
    if parts is None:
        return None
    try:
        module = _import_module(parts[0])
    except (ImportError, FileNotFoundError) as exc:
        raise FastPPOError(f"cannot load {what} '{spec}': {exc}") from None
    except (
        SyntaxError
    ) as exc:  # not Python source (a binary file, a typo): where, not a traceback of the import machinery
        where = f" ({exc.filename}, line {exc.lineno})" if exc.lineno else f" ({exc.filename})" if exc.filename else ""
        raise FastPPOError(f"cannot load {what} '{spec}': it is not valid Python: {exc.msg}{where}") from None
    if file_spec(spec) and not hasattr(module, parts[1]):
        raise FastPPOError(
            f"cannot load {what} '{spec}': {parts[0]} defines no '{parts[1]}' (check the name after the colon)"
        )
    return getattr(module, parts[1], None)

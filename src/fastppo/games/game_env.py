"""A turn-based PettingZoo game (an AECEnv) as fastppo names it, for playing whole games outside
training: ``pz:<module>`` builds ``<module>.env()``, the module function PettingZoo's classic games
(tic-tac-toe, connect four, Leduc hold'em, chess, go) provide, with its usual wrappers (order
enforcing, illegal moves end the game).

Players and ``play_games`` (``fastppo.games.matches``) read an AECEnv the way PettingZoo's own docs
loop does: ``env.agent_iter()``, ``env.last()``, the seat to move's ``action_mask``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fastppo.env_ids import PREFIX, is_openspiel, is_pettingzoo
from fastppo.envs.pettingzoo_vec import make_pettingzoo
from fastppo.envs.turn_based import check_game, is_game
from fastppo.errors import FastPPOError

GameSource = str | Callable[[], Any]
"""A game: its fastppo env id (``pz:pettingzoo.classic.connect_four_v3``), or a function that
returns a fresh AECEnv (e.g. with keyword arguments of your own)."""


def game_module(env_id: str) -> str:
    """``pz:pettingzoo.classic.tictactoe_v3`` -> ``pettingzoo.classic.tictactoe_v3`` (``pz:<module>:<function>``
    keeps its function; an OpenSpiel game, ``openspiel:<game>``, stays as it is), or a one-line
    FastPPOError for an id that names no PettingZoo module."""
    if is_openspiel(env_id):
        return env_id
    module = env_id.removeprefix(PREFIX)
    if not env_id.startswith(PREFIX) or not module or module.startswith("."):
        raise FastPPOError(
            f"{env_id} names no turn-based PettingZoo game: write pz:<module>, e.g. "
            "pz:pettingzoo.classic.connect_four_v3"
        )
    return module


def make_game(game: GameSource, env_kwargs: dict[str, Any] | None = None) -> Any:
    """An AECEnv of ``game``, built as training builds it (``fastppo.envs.pettingzoo_vec.make_pettingzoo``:
    ``pz:<module>``, ``pz:<module>:<function>``, ``--env-kwargs``) and checked as training checks
    it (``fastppo.envs.turn_based.check_game``, which resets it: reset it again to play), or a
    one-line FastPPOError."""
    if callable(game):
        env, name = game(), getattr(game, "__name__", repr(game))
    else:
        game_module(game)  # a one-line error for an id that names no PettingZoo module
        env, name = make_pettingzoo(game, env_kwargs or {}), game
    if not is_game(env) or not all(hasattr(env, attr) for attr in ("agent_iter", "last", "observe", "possible_agents")):
        env.close()
        raise FastPPOError(
            f"{name} built a {type(env).__name__}, not a PettingZoo AECEnv (turn-based): name a game such as "
            "pz:pettingzoo.classic.tictactoe_v3"
        )
    try:
        check_game(env, name)
    except FastPPOError:
        env.close()
        raise
    return env


def names_game(env_id: str, env_kwargs: dict[str, Any] | None = None) -> bool:
    """Whether ``env_id`` names a turn-based PettingZoo game: builds its env to ask ``is_game``."""
    if not is_pettingzoo(env_id):
        return False
    env = make_pettingzoo(env_id, env_kwargs or {})
    try:
        return is_game(env)
    finally:
        env.close()


def require_two_seats(env: Any, game: str, what: str) -> None:
    """A one-line FastPPOError unless ``env`` seats two players (``what``: who needs two, for the message)."""
    seats = list(env.possible_agents)
    if len(seats) != 2:
        raise FastPPOError(f"{game} seats {len(seats)} players ({', '.join(seats)}): {what} needs a two-player game")


def legal_actions(env: Any, agent: str) -> np.ndarray:
    """The moves ``agent`` (the seat to move) may play now: its observation's ``action_mask``."""
    return np.flatnonzero(env.observe(agent)["action_mask"])

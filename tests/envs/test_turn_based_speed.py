"""TurnBasedVecEnv returns exactly what it returned before its fast paths (the direct access to
the unwrapped PettingZoo game, the observations it skips): a seeded trace of 300 steps of 4
copies of each classic game, with a scripted opponent in some seats and some illegal moves, is
compared digest by digest with the trace the plain implementation (commit 9a6bab1) produced."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from fastppo.config import MultiAgentConfig
from fastppo.envs.pettingzoo_vec import make_pettingzoo
from fastppo.envs.turn_based import TurnBasedVecEnv, game_episodes

pytest.importorskip("pettingzoo.classic")
from pettingzoo.utils.env_logger import EnvLogger
from pettingzoo.utils.wrappers import BaseWrapper

pytestmark = pytest.mark.games

STEPS = 300
COPIES = 4


class ScriptedOpponent:
    """A seeded opponent: takes one seat of most games, plays a random legal move, and keeps
    every call it got (the calls' order is part of the trace: the league draws from one rng)."""

    def __init__(self, seats: int, seed: int):
        self.seats, self.rng, self.calls = seats, np.random.default_rng(seed), []

    def new_game(self, copy: int) -> np.ndarray:
        seats = np.ones(self.seats, dtype=bool)
        if self.rng.random() < 0.7:
            seats[:] = False
            seats[self.rng.integers(self.seats)] = True
        self.calls.append(("new_game", int(copy), seats.tolist()))  # the copy as a plain int, whatever its type
        return seats

    def act(self, copies: np.ndarray, rows: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
        self.calls.append(("act", copies.tolist(), rows.tobytes(), None if masks is None else masks.tobytes()))
        return np.array([self.rng.choice(np.flatnonzero(m)) for m in masks])

    def game_over(self, copy: int, returns: np.ndarray) -> None:
        self.calls.append(("game_over", int(copy), returns.tolist()))


class OwnWrapper(BaseWrapper):
    """A wrapper the env does not know: its copies are stepped through every layer."""


def trace(module: str, seed: int = 3, wrapped: bool = False) -> dict[str, str]:
    """Digests of everything the env returned over the trace, one per kind."""
    env_id = f"pz:pettingzoo.classic.{module}"
    make = (lambda: OwnWrapper(make_pettingzoo(env_id, {}))) if wrapped else (lambda: make_pettingzoo(env_id, {}))
    envs = TurnBasedVecEnv([make] * COPIES, MultiAgentConfig(), torch.device("cpu"))
    assert envs._direct == [not wrapped] * COPIES
    opponent = envs.opponents = ScriptedOpponent(len(envs.agents), seed)
    rng = np.random.default_rng(seed + 1)
    parts: dict[str, list[bytes]] = {
        k: [] for k in ("rows", "reward", "terminated", "truncated", "masks", "live", "games", "episodes")
    }

    def keep(rows, reward, terminated, truncated, masks, live):
        for name, value in zip(parts, (rows, reward, terminated, truncated, masks, live)):
            parts[name].append(np.ascontiguousarray(value).tobytes())
        games = envs.pop_games()
        parts["games"].append(
            repr([(learner.tolist(), returns.tolist(), moves) for learner, returns, moves in games]).encode()
        )
        parts["episodes"].append(repr(tuple(game_episodes(games, envs.agents))).encode())

    rows, masks, live = envs.reset_host(seed)
    keep(
        rows,
        np.zeros(envs.num_envs, np.float32),
        np.zeros(envs.num_envs, bool),
        np.zeros(envs.num_envs, bool),
        masks,
        live,
    )
    EnvLogger.suppress_output()  # PettingZoo warns on each illegal move
    try:
        for _ in range(STEPS):
            actions = np.zeros(envs.num_envs, dtype=np.int64)
            for row in np.flatnonzero(live):
                legal = np.flatnonzero(masks[row])
                # now and then an illegal move: the game's own rule (a loss) must stay
                actions[row] = rng.integers(masks.shape[1]) if rng.random() < 0.03 else rng.choice(legal)
            rows, reward, terminated, truncated, masks, live = envs.step_host(actions)
            keep(rows, reward, terminated, truncated, masks, live)
    finally:
        EnvLogger.unsuppress_output()
    parts["calls"] = [repr(opponent.calls).encode()]
    return {name: hashlib.sha256(b"|".join(values)).hexdigest()[:16] for name, values in parts.items()}


# trace() of the plain implementation (9a6bab1); "calls" since the copies are recorded as plain ints
# (the env hands Python ints now, numpy ints before: c039d09, the last with numpy ints, traces the same)
PLAIN = {
    "tictactoe_v3": {
        "rows": "87d6d58c72522808",
        "reward": "c3a0cd08d3eff016",
        "terminated": "f8280e3e94b67ef0",
        "truncated": "1a402b783bb55e0f",
        "masks": "dd952dc885e187db",
        "live": "4e89edc597fac343",
        "games": "5c34ba00130176cf",
        "episodes": "9714ea40bfd08556",
        "calls": "249cf05bf7d8b8c3",
    },
    "connect_four_v3": {
        "rows": "3d038d85e438fc82",
        "reward": "29815f5466e330b9",
        "terminated": "c3f15f20eda02c86",
        "truncated": "1a402b783bb55e0f",
        "masks": "0f7fa93a536e8647",
        "live": "138b6853ed9ba0bf",
        "games": "2e15e46f58c9e7fb",
        "episodes": "a4b1aa7876af71f2",
        "calls": "92a46a7c21a2f3e0",
    },
    "leduc_holdem_v4": {
        "rows": "7b8118706e0bfc32",
        "reward": "b1ba96cfe0de8ba8",
        "terminated": "85b3cb3745229e61",
        "truncated": "1a402b783bb55e0f",
        "masks": "ce0d4c1db4061987",
        "live": "6e56a956c25b72b5",
        "games": "6188eb0e2caa719e",
        "episodes": "a9a8946b053e4781",
        "calls": "826814183d2eb297",
    },
}


@pytest.mark.parametrize("module", sorted(PLAIN))
def test_steps_return_what_the_plain_implementation_returned(module: str) -> None:
    if module == "leduc_holdem_v4":
        pytest.importorskip("rlcard")
    assert trace(module) == PLAIN[module]


def test_a_copy_behind_a_wrapper_of_its_own_returns_the_same() -> None:
    assert trace("tictactoe_v3", wrapped=True) == PLAIN["tictactoe_v3"]

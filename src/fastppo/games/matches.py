"""Whole games between two players on a turn-based PettingZoo game, seats swapped, with the
results per seat: what ``fastppo eval --opponent`` and the self-play ratings report.

Seats matter in turn-based games (the first mover wins tic-tac-toe and connect four more often
against a random player, and Leduc's blinds depend on the deal), so player A sits in the first seat
in even games and in the second in odd ones, and the results keep the two apart. Games ``2k`` and
``2k + 1`` start from the same env seed: in a game of chance (Leduc hold'em) the two players then
hold each deal once from each seat, which cancels much of the luck of the cards (duplicate poker).

A game is played as training plays one: on a ``TurnBasedVecEnv`` of one copy, the players seated
behind its ``Opponents`` (``SeatedPlayers``), so that every seat is an opponent's and the whole
game is played inside the env's reset; a seat's return is the sum of the rewards the game gives it."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from fastppo.agents.agent import Agent
from fastppo.config import MultiAgentConfig
from fastppo.env_ids import same_env
from fastppo.envs.turn_based import TurnBasedVecEnv
from fastppo.errors import FastPPOError
from fastppo.games.game_env import GameSource, make_game, require_two_seats
from fastppo.games.players import Player, SeatedPlayers, player_from_spec
from fastppo.games.search import agent_player


@dataclass
class SeatResults:
    """Player A's games from one seat; a game is won when A's return beats the opponent's."""

    seat: str
    games: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    total_return: float = 0.0

    @property
    def mean_return(self) -> float:
        return self.total_return / self.games if self.games else float("nan")

    def add(self, own: float, other: float) -> None:
        self.games += 1
        self.wins += own > other
        self.draws += own == other
        self.losses += own < other
        self.total_return += own


@dataclass
class GameResults:
    """``play_games``' outcome for player A against player B (the opponent)."""

    game: str
    player: str
    opponent: str
    seats: list[SeatResults]
    """A's results from each seat, in the env's ``possible_agents`` order."""
    moves: int = 0
    seconds: float = 0.0
    seed: int = 0
    """``play_games``' seed: the same games again from it."""
    total: SeatResults = field(init=False)

    def __post_init__(self) -> None:
        self.total = SeatResults("all")
        for seat in self.seats:
            for name in ("games", "wins", "draws", "losses", "total_return"):
                setattr(self.total, name, getattr(self.total, name) + getattr(seat, name))

    @property
    def games(self) -> int:
        return self.total.games

    @property
    def win_rate(self) -> float:
        return self.total.wins / self.games if self.games else float("nan")

    @property
    def games_per_second(self) -> float:
        return self.games / self.seconds if self.seconds else float("nan")

    def table(self) -> str:
        """A short text table: one line per seat and the total."""
        seat = "player's seat"
        lines = [
            f"{self.game}: player {self.player} vs opponent {self.opponent}, {self.games} games, {self.moves} "
            f"moves, {self.seconds:.1f} s ({self.games_per_second:.1f} games/s)",
            f"{seat:<16}{'games':>8}{'wins':>8}{'draws':>8}{'losses':>8}{'mean return':>13}",
        ]
        for row in (*self.seats, self.total):
            lines.append(
                f"{row.seat:<16}{row.games:>8}{row.wins:>8}{row.draws:>8}{row.losses:>8}{row.mean_return:>13.3f}"
            )
        return "\n".join(lines)

    __str__ = table

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON and metrics: the totals at the top level, each seat under ``seats``."""

        def counts(row: SeatResults) -> dict[str, Any]:
            return {k: v for k, v in asdict(row).items() if k not in ("seat", "total_return")} | {
                "mean_return": row.mean_return
            }

        return {
            "game": self.game,
            "player": self.player,
            "opponent": self.opponent,
            **counts(self.total),
            "win_rate": self.win_rate,
            "seats": {row.seat: counts(row) for row in self.seats},
            "moves": self.moves,
            "seconds": self.seconds,
            "games_per_second": self.games_per_second,
            "seed": self.seed,
        }


def play_games(
    game: GameSource, players: Sequence[Player], games: int, seed: int = 0, env_kwargs: dict[str, Any] | None = None
) -> GameResults:
    """``games`` games of ``players[0]`` (A) against ``players[1]`` (B): A in the first seat in
    even games, in the second in odd ones. Everything random follows from ``seed``: the env's
    deal (the same for games ``2k`` and ``2k + 1``) and each player's choices (``reset``).
    ``env_kwargs``: the game's keyword arguments (a run's ``--env-kwargs``)."""
    if len(players) != 2:
        raise ValueError(f"play_games takes two players (A, B), got {len(players)}")
    if games < 1:
        raise ValueError(f"play_games needs at least one game, got {games}")
    envs = game_table(game, env_kwargs)
    name = game if isinstance(game, str) else getattr(game, "__name__", "game")
    try:
        require_two_seats(envs.envs[0], name, "play_games")
        seats = envs.agents
        results = [SeatResults(seat) for seat in seats]
        moves = 0
        start = time.perf_counter()
        for index in range(games):
            a_seat = index % 2
            seated = {seats[a_seat]: players[0], seats[1 - a_seat]: players[1]}
            for k, player in enumerate(players):
                player.reset(_seed(1 + k, seed, index))
            returns, history = play_game(envs, seated, _seed(0, seed, index // 2))
            moves += len(history)
            results[a_seat].add(returns[seats[a_seat]], returns[seats[1 - a_seat]])
        seconds = time.perf_counter() - start
    finally:
        envs.close()
    return GameResults(name, players[0].name, players[1].name, results, moves, seconds, seed)


def evaluate_games(
    agent: Agent,
    env_id: str,
    opponent: str | Player = "random",
    games: int = 100,
    deterministic: bool = True,
    seed: int | None = None,
    search: int = 0,
) -> GameResults:
    """``games`` games of ``agent`` on its game ``env_id`` against ``opponent`` (a ``Player``, or
    the spec ``player_from_spec`` reads: ``random``, ``mcts:N``, ``minimax``, a run folder), seats
    swapped: what ``fastppo eval`` reports on a turn-based game. ``deterministic``: the agent's
    most likely legal move, else a sample; ``search`` N > 0: the most visited move of N PUCT
    simulations with the agent's policy and value (``fastppo.games.search``); ``seed`` None: a
    fresh one."""
    if games < 1:
        raise FastPPOError(f"--games must be >= 1, got {games}")
    if not same_env(env_id, agent.config.env.env_id):
        raise FastPPOError(
            f"the agent was trained on {agent.config.env.env_id}, not on {env_id}: a game's agent plays the game "
            "it was trained on"
        )
    player = agent_player(agent, env_id, deterministic, search)
    if not deterministic:  # said in the table's title line
        player.name += " (sampling)"
    if isinstance(opponent, str):
        opponent = player_from_spec(opponent, env_id)
    if seed is None:
        seed = int(np.random.SeedSequence().generate_state(1)[0])
    return play_games(env_id, [player, opponent], games, seed, agent.config.env.env_kwargs)


def game_table(game: GameSource, env_kwargs: dict[str, Any] | None = None) -> TurnBasedVecEnv:
    """One copy of ``game`` (``make_game``: built and checked as training builds it) as the
    ``TurnBasedVecEnv`` whole games are played on."""
    env = make_game(game, env_kwargs)
    return TurnBasedVecEnv([lambda: env], MultiAgentConfig(), torch.device("cpu"))


def play_game(
    envs: TurnBasedVecEnv, seated: Mapping[str, Player], seed: int | None
) -> tuple[dict[str, float], list[int]]:
    """One game on the one copy of ``envs``, from its reset with ``seed``, ``seated[seat]``
    choosing each move of ``seat`` (the players reset by the caller): each seat's return and
    every move played, in order."""
    envs.opponents = SeatedPlayers(envs, seated)
    envs.reset_host(seed)  # every seat an opponent's: the whole game is played here
    returns = envs.pop_episodes().by_agent
    assert returns is not None  # a game's episodes give each seat's return
    return {seat: returns[seat][0] for seat in envs.agents}, envs.history[0]


def _seed(stream: int, seed: int, index: int) -> int:
    """A 32-bit seed for game ``index`` of ``stream`` (0: the env's deals, 1 + k: player k's
    choices); distinct words give unrelated seeds (the stream comes first because SeedSequence
    ignores trailing zeros)."""
    return int(np.random.SeedSequence([stream, seed, index]).generate_state(1)[0])

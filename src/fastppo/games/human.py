"""A person at a terminal as a ``Player`` (``fastppo play``): before each of their moves the
position is drawn as text (``fastppo.games.board_text``) with the legal moves, and a move is typed
as its number. ``read`` and ``write`` are ``input`` and ``print`` by default, any callables in
tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fastppo.agents.agent import Agent
from fastppo.errors import FastPPOError
from fastppo.games.board_text import board_text
from fastppo.games.game_env import legal_actions, require_two_seats
from fastppo.games.matches import SeatResults, game_table, play_game
from fastppo.games.search import agent_player


class Quit(Exception):
    """The person typed ``q`` or closed the input (end of file)."""


class HumanPlayer:
    """Reads the moves of ``env_id``'s games from a person; an entry that is no legal move is
    asked again with a one-line reason, ``q`` or the end of input raises ``Quit``. A game without
    a text board is a one-line FastPPOError here."""

    name = "you"

    def __init__(self, env_id: str, read: Callable[[str], str] = input, write: Callable[[str], None] = print):
        self.text = board_text(env_id)
        self.read, self.write = read, write

    def reset(self, seed: int) -> None:
        pass

    def act(self, env: Any, agent: str, history: list[int]) -> int:
        self.write("")
        if history:
            self.write(f"last move: {self.text.move(history[-1])}")
        self.write(self.text.position(env, agent))
        legal = legal_actions(env, agent).tolist()
        self.write(f"your moves: {', '.join(self.text.move(move) for move in legal)}")
        typed = " ".join(str(move) for move in legal)
        while True:
            try:
                entry = self.read("your move (q quits): ").strip()
            except EOFError:
                raise Quit from None
            if entry.lower() in ("q", "quit"):
                raise Quit
            # Compared as text: str.isdigit takes '²' for a digit, and int() refuses one of more than 4300 digits.
            number = entry.lstrip("0") or "0"
            if not (entry.isascii() and entry.isdigit()):
                self.write(f"'{entry[:20]}{'...' if len(entry) > 20 else ''}' is not a move: type one of {typed}")
            elif number not in typed.split():
                self.write(
                    f"{number[:20]}{'...' if len(number) > 20 else ''} is not a legal move now: type one of {typed}"
                )
            else:
                return int(number)

    def game_over(self, env: Any, seat: str, history: list[int], own: float, other: float) -> None:
        """Show how a game the person played from ``seat`` ended: the last move, the final
        position, what was hidden, the result (their return ``own``, the opponent's ``other``)."""
        self.write("")
        self.write(f"last move: {self.text.move(history[-1])}")
        self.write(self.text.position(env, seat))
        if self.text.revealed is not None:
            self.write(self.text.revealed(env, seat))
        outcome = "you won" if own > other else "you lost" if own < other else "a draw"
        self.write(f"{outcome} (your return {own:+g})")


def play_against(
    agent: Agent,
    human: HumanPlayer,
    games: int = 1,
    seat: int | None = None,
    deterministic: bool = True,
    seed: int | None = None,
    search: int = 0,
) -> SeatResults:
    """``games`` games of a person (``human``) against ``agent`` on the agent's game: the person
    in seat ``seat`` (0: the game's first player, ``possible_agents[0]``), else in seats 0 and 1
    by turns; the agent plays its most likely move unless not ``deterministic`` (with ``search``
    N > 0: after N simulations of search, ``fastppo.games.search``); ``seed`` None:
    fresh deals and draws. After each game: how it ended and the score so far. Returns the
    person's results; ``Quit`` (``q``, end of input) ends it early and is raised on."""
    if games < 1:
        raise FastPPOError(f"--games must be >= 1, got {games}")
    opponent = agent_player(agent, agent.config.env.env_id, deterministic, search)
    envs = game_table(agent.config.env.env_id, agent.config.env.env_kwargs)
    seeds = np.random.default_rng(seed)
    score = SeatResults("you")
    try:
        require_two_seats(envs.envs[0], agent.config.env.env_id, "a game against a person")
        seats = envs.agents
        for index in range(games):
            mine = seats[index % 2 if seat is None else seat]
            game_seed = int(seeds.integers(2**32))
            opponent.reset(game_seed)
            human.write(f"game {index + 1} of {games}: you play {mine}")
            returns, history = play_game(envs, {name: human if name == mine else opponent for name in seats}, game_seed)
            own, other = returns[mine], max(value for name, value in returns.items() if name != mine)
            human.game_over(envs.envs[0], mine, history, own, other)
            score.add(own, other)
            human.write(f"score: {score.wins} won, {score.draws} drawn, {score.losses} lost")
    finally:
        envs.close()
    return score

"""Who sits at a turn-based game: a ``Player`` chooses the move of the seat to move, and
``player_from_spec`` builds one from the words a command line gives (``--opponent random``,
``mcts:100``, ``minimax``, a run folder, a player class of the user's: ``file.py:MyPlayer``).

A player sees the PettingZoo AECEnv itself (its observation of the seat it plays, the action
mask) and the moves played so far: an agent acts on its observation, a search engine (OpenSpiel's
MCTS, minimax) rebuilds the position from the history. Every move a player returns must be legal
(the seat's ``action_mask``); ``fastppo.games.matches.play_games`` checks that."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from fastppo.agents.agent import Agent, load_agent
from fastppo.config import SelfPlayConfig
from fastppo.env_ids import named_object, same_env, split_spec
from fastppo.envs.turn_based import TurnBasedVecEnv
from fastppo.errors import FastPPOError
from fastppo.games.game_env import game_module, legal_actions, make_game, require_two_seats
from fastppo.games.minimax import MinimaxPlayer
from fastppo.games.openspiel_games import MCTSPlayer, mcts_plays, simulations

PolicyFn = Callable[[str, dict[str, np.ndarray]], np.ndarray]
"""A policy as a function: (the seat's name, its PettingZoo observation ``{"observation": ...,
"action_mask": ...}``) -> the probability of each of the game's actions (0 on illegal ones)."""

TICTACTOE = "pettingzoo.classic.tictactoe_v3"


class Player(Protocol):
    """One side of a turn-based game."""

    name: str
    """How tables and logs call it (``random``, ``mcts:100``, a run folder)."""

    def reset(self, seed: int) -> None:
        """A new game starts; ``seed`` seeds the player's random choices in it."""

    def act(self, env: Any, agent: str, history: list[int]) -> int:
        """The move of ``agent``, the seat to move (``env.agent_selection == agent``), after the
        moves ``history`` (every move of this game so far, both seats', in order)."""


class RandomPlayer:
    """A uniformly random legal move: the floor every trained agent must beat."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.reset(seed)

    def reset(self, seed: int) -> None:
        self._random = np.random.default_rng(seed)

    def act(self, env: Any, agent: str, history: list[int]) -> int:
        return int(self._random.choice(legal_actions(env, agent)))


class PolicyPlayer:
    """Plays a ``PolicyFn``: samples each move from its probabilities (e.g. a tabular policy, or a
    trained agent's through ``agent_policy``), the same function an exploitability figure scores
    (``fastppo.games.leduc``)."""

    def __init__(self, policy: PolicyFn, name: str = "policy", seed: int = 0):
        self.policy = policy
        self.name = name
        self.reset(seed)

    def reset(self, seed: int) -> None:
        self._random = np.random.default_rng(seed)

    def act(self, env: Any, agent: str, history: list[int]) -> int:
        probabilities = np.asarray(self.policy(agent, env.observe(agent)), dtype=np.float64)
        return int(self._random.choice(len(probabilities), p=probabilities / probabilities.sum()))


class AgentPlayer:
    """A trained fastppo agent, through its dict API: ``agent.act({seat: observation})``, the rows
    training built (``fastppo.agents.agent_rows``). ``deterministic``: its most likely legal move
    (evaluation); else a sample, as in training.

    The same dict API in PettingZoo's own loop, the agent as X against random legal moves::

        import fastppo
        from pettingzoo.classic import tictactoe_v3

        # trained by: fastppo train pz:pettingzoo.classic.tictactoe_v3 --run-dir runs/tictactoe
        agent = fastppo.load("runs/tictactoe")
        env = tictactoe_v3.env()
        env.reset(seed=0)
        returns = dict.fromkeys(env.possible_agents, 0.0)
        for seat in env.agent_iter():
            observation, reward, termination, truncation, info = env.last()
            returns[seat] += reward
            if termination or truncation:
                action = None  # PettingZoo's turn for a seat whose game is over
            elif seat == "player_1":  # the agent: its most likely legal move (observation["action_mask"])
                action = agent.act({seat: observation}, deterministic=True)[seat]
            else:  # the other seat: here a random legal move
                action = env.action_space(seat).sample(observation["action_mask"])
            env.step(action)
        env.close()
        print(returns)  # e.g. {'player_1': 1.0, 'player_2': -1.0}: the agent won
    """

    def __init__(self, agent: Agent, deterministic: bool = True, name: str | None = None):
        if agent.policy.recurrent:
            raise FastPPOError(
                "this agent has a recurrent policy, and a game player acts on one observation at a time: train "
                "it without --policy.memory"
            )
        self.agent = agent
        self.deterministic = deterministic
        self.name = name or (str(agent.run_dir) if agent.run_dir is not None else "agent")
        self.reset(0)

    def reset(self, seed: int) -> None:
        self._torch_random = torch.Generator().manual_seed(seed).get_state()

    def act(self, env: Any, agent: str, history: list[int]) -> int:
        # A sampled move draws from torch's global generator (fastppo.policies.distributions): run
        # it on this player's own stream, so games replay from their seed and the caller's
        # generator is left as it was.
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self._torch_random)
            action = self.agent.act({agent: env.observe(agent)}, deterministic=self.deterministic)[agent]
            self._torch_random = torch.get_rng_state()
        return int(action)


class SeatedPlayers:
    """Players behind a turn-based env's ``Opponents`` (fastppo.envs.opponents): ``seated[seat]``
    plays every move of ``seat`` in each copy of ``envs``, seeing the game itself and the moves
    played so far. Every seat is a player's (a search player rebuilds the position from every
    move, which the learner's would not reach it through this protocol), so the env plays whole
    games inside its reset; every move must be legal."""

    def __init__(self, envs: TurnBasedVecEnv, seated: Mapping[str, Player]):
        if set(seated) != set(envs.agents):
            raise ValueError(f"seat a player at each of {envs.agents}, not at {sorted(seated)}")
        self.envs, self.seated = envs, seated

    def new_game(self, copy: int) -> np.ndarray:
        return np.zeros(len(self.envs.agents), dtype=bool)  # the learner plays no seat

    def act(self, copies: np.ndarray, rows: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
        return np.array([self._move(int(copy)) for copy in copies])

    def _move(self, copy: int) -> int:
        env = self.envs.envs[copy]
        seat = env.agent_selection
        player = self.seated[seat]
        action = player.act(env, seat, self.envs.history[copy])  # the env records each move played
        legal = legal_actions(env, seat)
        if action not in legal:
            raise ValueError(f"{player.name} played {action} as {seat}, an illegal move (legal: {legal.tolist()})")
        return action

    def game_over(self, copy: int, returns: np.ndarray) -> None:
        pass


def agent_policy(agent: Agent) -> PolicyFn:
    """``agent``'s action probabilities as a ``PolicyFn`` (its masked softmax, what ``act``
    samples from), for scores that need the whole distribution (exploitability)."""
    pettingzoo, action_space = agent.pettingzoo, agent.action_space
    if pettingzoo is None or agent.policy.recurrent or not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError("agent_policy takes a feed-forward agent trained on a PettingZoo game")

    @torch.no_grad()
    def probabilities(name: str, observation: dict[str, np.ndarray]) -> np.ndarray:
        _, rows, masks = pettingzoo.rows(agent.config.multi_agent, {name: observation}, None)
        n = int(action_space.n)
        obs = agent.normalize(torch.as_tensor(rows, device=agent.device)).expand(n, -1)
        mask = None if masks is None else torch.as_tensor(masks, device=agent.device).expand(n, -1)
        logprob, _, _ = agent.policy.evaluate(obs, torch.arange(n, device=agent.device), mask)
        return logprob.exp().cpu().numpy().astype(np.float64)

    return probabilities


def player_from_spec(spec: str, env_id: str, seed: int = 0, flag: str = "--opponent") -> Player:
    """The player ``--opponent SPEC`` names for the game ``env_id``: ``random``, ``mcts:N``
    (OpenSpiel's MCTS with N simulations per move; tic-tac-toe, connect four and perfect-information
    OpenSpiel games), ``minimax`` (tic-tac-toe), a run folder (its agent, trained on ``env_id``)
    or a player class of the user's named as env ids are (``module:Class``,
    ``path/to/file.py:Class``: ``user_player``; a spec a run folder names is refused before it
    comes here, ``check_folder_players``); a one-line FastPPOError ``<flag> SPEC: why`` otherwise."""
    try:
        env = make_game(env_id)
        try:
            require_two_seats(env, env_id, "a game against an opponent")
        finally:
            env.close()
        return _player(spec, env_id, seed)
    except FastPPOError as exc:
        raise FastPPOError(f"{flag} {spec or repr(spec)}: {exc}") from None


def _player(spec: str, env_id: str, seed: int) -> Player:
    kind, _, argument = spec.partition(":")
    if not spec:
        raise FastPPOError(f"an empty name names no opponent (nor the working directory): give {_players_of(env_id)}")
    if spec == "random":
        return RandomPlayer(seed)
    if spec == "minimax":
        if game_module(env_id) != TICTACTOE:
            raise FastPPOError(f"minimax plays pz:{TICTACTOE} only, not {env_id}: use {_players_of(env_id)}")
        return MinimaxPlayer(seed)
    if kind == "mcts":
        return MCTSPlayer(env_id, simulations(argument), seed)
    if Path(spec).is_dir():
        agent = load_agent(spec)
        if not same_env(agent.config.env.env_id, env_id):
            raise FastPPOError(
                f"{spec} holds an agent trained on {agent.config.env.env_id}, not on {env_id}: give an agent of "
                "this game"
            )
        return AgentPlayer(agent)
    if split_spec(spec) is not None:
        return user_player(spec, seed)
    raise FastPPOError(f"unknown opponent, and no such folder: give {_players_of(env_id)}")


def _players_of(env_id: str) -> str:
    """The players a spec may name on ``env_id``, for a message."""
    kinds = ["random", *(["mcts:N (OpenSpiel's MCTS, N simulations per move)"] if mcts_plays(env_id) else [])]
    kinds += ["minimax (perfect play)"] if game_module(env_id) == TICTACTOE else []
    kinds += ["the run folder of an agent trained on this game"]
    kinds += ["a player class of yours (file.py:Class, module:Class)"]
    return ", ".join(kinds[:-1]) + " or " + kinds[-1]


def names_user_player(spec: str) -> bool:
    """Whether ``spec`` names a player class of the user's (``module:Class``, ``file.py:Class``):
    code that is imported only when the command line names it, never because a run folder does."""
    return spec.partition(":")[0] != "mcts" and not Path(spec).is_dir() and split_spec(spec) is not None


def check_folder_players(run_dir: str | Path, self_play: SelfPlayConfig, named: set[str]) -> None:
    """The players of a run folder's config (--self-play.eval-opponents, --self-play.fixed-opponents)
    that are the user's code, refused in one line unless the command line names them again
    (``named``: the config keys it gives, ``section.field``), as env ids of user code are."""
    for name in ("eval_opponents", "fixed_opponents"):
        specs: tuple[str, ...] = getattr(self_play, name)
        mine = next((spec for spec in specs if names_user_player(spec)), None)
        if mine is not None and f"self_play.{name}" not in named:
            flag = f"--self-play.{name.replace('_', '-')}"
            raise FastPPOError(
                f"{run_dir} plays your code '{mine}' ({flag}), and fastppo never imports code that a run folder "
                f"names: if you trust it, name it yourself: fastppo train --resume {run_dir} {flag} {','.join(specs)}"
            )


def user_player(spec: str, seed: int = 0) -> Player:
    """A player class of the user's, named on the command line as env ids are (``module:Class``,
    ``path/to/file.py:Class``; only code the command line names is imported, never a run
    folder's): built with no arguments, seeded with ``reset(seed)``; it needs ``act(env, agent,
    history)`` and ``reset(seed)`` (``Player``), and is named ``spec`` unless it has a ``name``."""
    cls = named_object(spec, "the player")
    if not isinstance(cls, type):
        what = "nothing" if cls is None else f"a {type(cls).__name__}"
        raise FastPPOError(
            f"{spec} names {what}, not a player class: name a class with act(env, agent, history) -> move and "
            "reset(seed)"
        )
    try:
        player = cls()
    except Exception as exc:  # the user's constructor: its error in one line, not a traceback
        raise FastPPOError(
            f"{spec}() raised {type(exc).__name__}: {exc}; a player class is built with no arguments"
        ) from None
    missing = [method for method in ("act", "reset") if not callable(getattr(player, method, None))]
    if missing:
        raise FastPPOError(
            f"{spec} lacks {' and '.join(missing)}: a player has act(env, agent, history) -> move and reset(seed)"
        )
    if not isinstance(getattr(player, "name", None), str):
        player.name = spec
    player.reset(seed)
    return player

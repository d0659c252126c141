"""Search at play time (``fastppo eval RUN --search N``): a trained agent chooses each move by N
simulations of Monte Carlo tree search over the game itself, with its own networks in place of
random rollouts: its policy gives every position's prior over the legal moves, its value scores
every new position. This is PUCT, how AlphaZero plays (D. Silver et al., "A general reinforcement
learning algorithm that masters chess, shogi, and Go through self-play", Science 2018); the
networks are the ones PPO trained, unchanged.

Each simulation walks down the tree by the PUCT rule (``puct_scores``), steps a copy of the game
one move past the walk's end, scores the new position with the critic (or the game's own returns
where it ended) and adds the result to every move of the walk, from the view of the seat that
played it (two seats, zero-sum: what one gains the other loses). The move played is the root's
most visited, so the search is deterministic. Where the game's board has symmetries
(``fastppo.games.symmetry``: connect four's mirror image, tic-tac-toe's eight), each new position
is read in every view, its prior and value the mean of the views'.

The tree's positions are copies of the PettingZoo env itself (``snapshot``), so the agent sees
every searched position as it saw positions in training. A search needs the game's whole state
and no dice: it plays the games ``mcts:N`` plays (tic-tac-toe, connect four, perfect-information
OpenSpiel games) when they have no chance moves."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from fastppo.agents.agent import Agent
from fastppo.env_ids import is_openspiel
from fastppo.envs.openspiel_env import load_game
from fastppo.errors import FastPPOError
from fastppo.games.game_env import legal_actions
from fastppo.games.openspiel_games import check_simulations, mcts_plays
from fastppo.games.players import AgentPlayer, Player
from fastppo.games.symmetry import SYMMETRIES
from fastppo.policies.distributions import CategoricalHead

PUCT_C = 0.5
"""The weight of the prior's exploration bonus against the mean value (values in [-1, 1]). At
connect four, the preset's seed 1 against MCTS-100 (20 games) won 11, 12, 7 and 8 games with
0.25, 0.5, 1 and 5 at 200 simulations, and 7 and 9 with 2 at 100 and 400: a trained policy's
prior is sharp, and its critic's values decide better than more exploration."""


def check_search(agent: Agent, env_id: str, simulations: int) -> None:
    """A one-line FastPPOError unless ``agent`` can search ``env_id`` with ``simulations`` per move."""
    check_simulations(simulations, "--search", "e.g. --search 200")
    if not mcts_plays(env_id) or (is_openspiel(env_id) and not _deterministic(env_id)):
        raise FastPPOError(
            f"--search looks ahead in the game's whole state, move by move: {env_id} is not a game it can copy and "
            "replay (tic-tac-toe, connect four, perfect-information OpenSpiel games without chance moves)"
        )
    if agent.config.env.normalize_reward:
        raise FastPPOError(
            "--search adds the critic's values to the game's returns, and this run normalised its rewards "
            "(--env.normalize-reward): its values are on another scale"
        )


def agent_player(agent: Agent, env_id: str, deterministic: bool = True, search: int = 0) -> Player:
    """``agent`` at the game ``env_id``: its policy's moves (the most likely unless not
    ``deterministic``), or with ``search`` N > 0 the most visited move of N simulations."""
    if not search:
        return AgentPlayer(agent, deterministic)
    if not deterministic:
        raise FastPPOError("--search plays the most visited move of its search: drop --stochastic")
    return SearchPlayer(agent, env_id, search)


def _deterministic(env_id: str) -> bool:
    import pyspiel

    return bool(load_game(env_id).get_type().chance_mode == pyspiel.GameType.ChanceMode.DETERMINISTIC)


def snapshot(env: Any) -> Any:
    """A copy of the unwrapped AECEnv ``env`` that steps on its own: its attributes deep-copied
    (PettingZoo's envs pickle as their constructor's arguments, a fresh game, so ``copy.deepcopy``
    of the env itself would lose the position), its spaces shared (they never change)."""
    memo = {id(value): value for value in vars(env).values() if _is_spaces(value)}
    twin = object.__new__(type(env))
    twin.__dict__ = copy.deepcopy(vars(env), memo)
    return twin


def _is_spaces(value: Any) -> bool:
    return isinstance(value, gym.spaces.Space) or (
        isinstance(value, dict) and bool(value) and all(isinstance(v, gym.spaces.Space) for v in value.values())
    )


def puct_scores(prior: np.ndarray, visits: np.ndarray, value_sums: np.ndarray, c: float = PUCT_C) -> np.ndarray:
    """Each move's PUCT score: its mean value so far (0 before its first visit) plus
    ``c * prior * sqrt(visits of all moves) / (1 + its visits)``."""
    mean = np.divide(value_sums, visits, out=np.zeros_like(value_sums), where=visits > 0)
    return mean + c * prior * np.sqrt(visits.sum()) / (1.0 + visits)


def game_over(env: Any) -> bool:
    return all(env.terminations[seat] or env.truncations[seat] for seat in env.possible_agents)


@dataclass
class Position:
    """A node of the tree: the game at it, the seat to move, its legal moves with the policy's
    prior, and per move the visits, the sum of values (for ``seat``), the rewards its step gave
    every seat and the position it leads to (None until expanded, or when the game ended there)."""

    env: Any
    seat: str
    moves: np.ndarray
    prior: np.ndarray
    visits: np.ndarray = field(init=False)
    value_sums: np.ndarray = field(init=False)
    rewards: dict[int, dict[str, float]] = field(default_factory=dict)
    children: dict[int, Position | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.visits = np.zeros(len(self.moves))
        self.value_sums = np.zeros(len(self.moves))


class SearchPlayer:
    """A trained agent that plays each move after ``simulations`` PUCT simulations with its own
    policy and value (``fastppo.games.search``): a ``Player`` (``fastppo.games.players``), the
    one ``fastppo eval --search N`` seats. In your own matches:

        import fastppo
        from fastppo.games.matches import play_games
        from fastppo.games.minimax import MinimaxPlayer
        from fastppo.games.search import SearchPlayer

        game = "pz:pettingzoo.classic.tictactoe_v3"
        agent = fastppo.load("runs/tictactoe")
        print(play_games(game, [SearchPlayer(agent, game, 1000), MinimaxPlayer()], 10, seed=0).table())
    """

    def __init__(self, agent: Agent, env_id: str, simulations: int, name: str | None = None):
        check_search(agent, env_id, simulations)
        self.agent, self.simulations = agent, simulations
        self.symmetries = SYMMETRIES.get(env_id, [])
        self.name = f"{name or AgentPlayer(agent).name} (search {simulations})"

    def reset(self, seed: int) -> None:
        pass  # deterministic: the most visited move, ties to the first

    def act(self, env: Any, agent: str, history: list[int]) -> int:
        root = self._position(snapshot(env.unwrapped))[0]
        for _ in range(self.simulations):
            self._simulate(root)
        return int(root.moves[int(np.argmax(root.visits))])

    def _simulate(self, root: Position) -> None:
        walk: list[tuple[Position, int]] = []
        position: Position | None = root
        values: dict[str, float] = {}
        while position is not None:
            i = int(np.argmax(puct_scores(position.prior, position.visits, position.value_sums)))
            walk.append((position, i))
            if i in position.children:
                position = position.children[i]
                if position is None:  # the game ended on this move
                    values = dict.fromkeys(root.env.possible_agents, 0.0)
                continue
            env = snapshot(position.env)
            env.step(int(position.moves[i]))
            position.rewards[i] = {seat: float(env.rewards[seat]) for seat in env.possible_agents}
            if game_over(env):
                position.children[i], values = None, dict.fromkeys(env.possible_agents, 0.0)
            else:
                child, value = self._position(env)
                position.children[i] = child
                values = {seat: value if seat == child.seat else -value for seat in env.possible_agents}
            break
        for position, i in reversed(walk):  # returns from each move on: its step's rewards, then what followed
            values = {seat: position.rewards[i][seat] + v for seat, v in values.items()}
            position.visits[i] += 1
            position.value_sums[i] += values[position.seat]

    @torch.no_grad()
    def _position(self, env: Any) -> tuple[Position, float]:
        """The tree's node for ``env`` (not over) and the critic's value of it for the seat to move:
        the policy's and the critic's mean over the position and its symmetric views, in one batch."""
        agent, seat = self.agent, env.agent_selection
        assert agent.pettingzoo is not None  # a game's agent (check_search)
        observation = env.observe(seat)
        views = [observation, *(symmetry.view(observation) for symmetry in self.symmetries)]
        rows, masks = [], []
        for view in views:
            _, view_rows, view_mask = agent.pettingzoo.rows(agent.config.multi_agent, {seat: view}, None)
            rows.append(view_rows)
            masks += [] if view_mask is None else [view_mask]
        params, values = agent.policy(agent.normalize(torch.as_tensor(np.concatenate(rows), device=agent.device)))
        mask = torch.as_tensor(np.concatenate(masks), device=agent.device) if masks else None
        head = agent.policy.action_head
        assert isinstance(head, CategoricalHead)  # a game's moves are Discrete (fastppo.envs.turn_based.check_game)
        probabilities = head.log_probs(params, mask).exp().cpu().numpy().astype(np.float64)
        prior = np.mean(
            [probabilities[0], *(s.unview(p) for s, p in zip(self.symmetries, probabilities[1:], strict=True))], axis=0
        )
        moves = legal_actions(env, seat)
        return Position(env, seat, moves, prior[moves]), float(values.mean())

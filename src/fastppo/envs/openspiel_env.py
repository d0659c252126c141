"""OpenSpiel's games as PettingZoo turn-based games: ``openspiel:<game>[(params)]`` names any game
OpenSpiel registers, in OpenSpiel's own game-string syntax (``openspiel:kuhn_poker``,
``openspiel:connect_four``, ``openspiel:leduc_poker(suit_isomorphism=true)``), and
``OpenSpielGame`` plays it as an AECEnv, so that it trains, plays and is evaluated through the
same path as PettingZoo's classic games (``fastppo.envs.turn_based``: one loop, the self-play
league, ``fastppo eval --opponent``, ``fastppo play``).

- **Seats** are ``player_0``, ``player_1``, ... in OpenSpiel's player order (player 0 moves first
  where the game says so).
- **Observation** of a seat: in a game of imperfect information that provides one, OpenSpiel's
  information-state tensor of that player (everything the seat has seen, betting history
  included: a policy is a function of the information state, and an observation tensor such as
  Leduc's shows equal cards and pot for different histories); otherwise its observation tensor,
  or the information-state tensor where the game has no observation tensor (``tensor_kind`` says
  which; a perfect-information game's board stays its observation tensor). A tensor of three
  dimensions is OpenSpiel's ``[planes, rows, columns]`` with the planes moved last, as
  PettingZoo's boards are (``[rows, columns, planes]``); any other shape is kept.
- **Moves** are OpenSpiel's action numbers, ``Discrete(num_distinct_actions)``; the seat to move's
  ``action_mask`` is its ``legal_actions_mask``, the other seats' are all 0.
- **Chance nodes** are played by the env with its own random generator, seeded by
  ``reset(seed=...)`` (and continued by a reset without a seed): the same seed deals the same
  cards, dice and point cards, and a seat only ever sees a decision node or the game's end.
- **Rewards**: each step gives every seat the change of its OpenSpiel return (``state.returns()``)
  over the move and the chance nodes after it: in the usual game, each seat's result at the end.
- **Checkpoints** hold a game in play as its moves (chance outcomes included) and the env's
  generator, plain data from which OpenSpiel's state is rebuilt: a resumed run plays on exactly
  (``fastppo.envs.snapshot``), and moves that are no game of the env's are one line there.
  agent.json records ``tensor_kind``, and a folder trained on another tensor (an
  imperfect-information game's observation tensor, before 2026-11-28) is refused in one line
  (``check_trained_tensor``).

Games the turn-based env cannot play are refused in one line (``load_game``): a name OpenSpiel
does not know, simultaneous-move games (OpenSpiel's ``turn_based_simultaneous_game(game=...)``
plays them in turns, the fix the message gives), and games without a tensor to observe."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from fastppo.env_ids import OPENSPIEL_PREFIX, is_openspiel
from fastppo.errors import FastPPOError, install_extra

try:  # PettingZoo comes with the [games] extra, as OpenSpiel does: without it, make_openspiel_env says so
    from pettingzoo import AECEnv
except ImportError:  # pragma: no cover - the class is then never built
    AECEnv = object

OBSERVATION, INFORMATION_STATE = "observation", "information state"
"""The tensor a seat observes (``tensor_kind``): OpenSpiel's information-state tensor in a game of
imperfect information that has one, else its observation tensor where the game has one."""


def import_pyspiel() -> Any:
    """``pyspiel``, or a one-line FastPPOError when OpenSpiel is not installed."""
    try:
        import pyspiel
    except ImportError:
        raise FastPPOError(f"OpenSpiel games need OpenSpiel: {install_extra('games')}") from None
    return pyspiel


def game_string(env_id: str) -> str:
    """``openspiel:kuhn_poker`` -> ``kuhn_poker``: the game string OpenSpiel loads."""
    if not is_openspiel(env_id):
        raise ValueError(f"{env_id} is not an OpenSpiel id ({OPENSPIEL_PREFIX}<game>)")
    return env_id.removeprefix(OPENSPIEL_PREFIX)


def load_game(env_id: str) -> Any:
    """OpenSpiel's game of ``openspiel:<game>[(params)]``, checked to be one the turn-based env
    plays (module docstring); else a one-line FastPPOError."""
    pyspiel = import_pyspiel()
    name = game_string(env_id)
    if not name:
        raise FastPPOError(f"{env_id} names no game: write openspiel:<game>, e.g. openspiel:kuhn_poker")
    try:
        game = pyspiel.load_game(name)
    except pyspiel.SpielError as exc:
        short_name = name.split("(")[0]
        if short_name not in pyspiel.registered_names():
            raise FastPPOError(
                f"OpenSpiel has no game '{short_name}' ({env_id}): name one of pyspiel.registered_names(), e.g. "
                "openspiel:kuhn_poker, openspiel:connect_four"
            ) from None
        raise FastPPOError(f"OpenSpiel cannot load {name}: {str(exc).strip().splitlines()[0]}") from None
    kind = game.get_type()
    if kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        fix = (
            f": write {OPENSPIEL_PREFIX}turn_based_simultaneous_game(game={name}), OpenSpiel's same game played in "
            "turns (a seat does not see the moves made at the same time as its own)"
            if kind.dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS
            else ""
        )
        what = str(kind.dynamics).rsplit(".", 1)[-1].lower().replace("_", "-")
        raise FastPPOError(f"{env_id} is a {what} game, and fastppo plays games in turns{fix}")
    if not (kind.provides_observation_tensor or kind.provides_information_state_tensor):
        raise FastPPOError(
            f"{env_id} gives neither an observation tensor nor an information-state tensor, and a policy acts on "
            "one: pick a game that provides either"
        )
    return game


def is_perfect_information(game: Any) -> bool:
    """Whether every seat of ``game`` sees the whole state (what a search such as MCTS needs)."""
    return bool(game.get_type().information == import_pyspiel().GameType.Information.PERFECT_INFORMATION)


def tensor_kind(game: Any) -> str:
    """What a seat of ``game`` observes: ``INFORMATION_STATE`` for a game of imperfect information
    that provides that tensor (its observation tensor may hide the history that tells information
    states apart), else ``OBSERVATION`` where the game provides it (module docstring)."""
    kind = game.get_type()
    if kind.provides_information_state_tensor and not is_perfect_information(game):
        return INFORMATION_STATE
    return OBSERVATION if kind.provides_observation_tensor else INFORMATION_STATE


def check_trained_tensor(env_id: str, folder: object, recorded: str | None) -> None:
    """A one-line FastPPOError when the agent in ``folder``, trained on ``env_id`` and its tensor
    ``recorded`` in agent.json (None: saved before agent.json recorded it, when a game showed its
    observation tensor wherever it had one), observed another tensor than the env shows now: its
    policy would be fed numbers it never learnt. Unchecked without OpenSpiel (nothing to play)."""
    if recorded not in (None, OBSERVATION, INFORMATION_STATE):
        raise FastPPOError(f"the agent in {folder} is damaged: agent.json's openspiel_tensor is {recorded!r}")
    try:
        game = load_game(env_id)
    except FastPPOError:
        return
    trained = recorded or (OBSERVATION if game.get_type().provides_observation_tensor else INFORMATION_STATE)
    if trained != tensor_kind(game):
        raise FastPPOError(
            f"{folder} was trained on OpenSpiel's {trained} tensor of {env_id}, and fastppo now shows a seat "
            f"of this game its {tensor_kind(game)} tensor (since 2026-11-28, the "
            "moves it has seen included): retrain it with this fastppo, or use the fastppo that trained it"
        )


def observation_shape(game: Any) -> tuple[int, ...]:
    """The shape of a seat's observation: OpenSpiel's tensor's, planes last for a board."""
    shape = tuple(
        game.observation_tensor_shape() if tensor_kind(game) == OBSERVATION else game.information_state_tensor_shape()
    )
    return (*shape[1:], shape[0]) if len(shape) == 3 else shape


def observe_state(state: Any, player: int) -> dict[str, np.ndarray]:
    """What seat ``player`` observes in OpenSpiel's ``state`` (a decision node or the end), as a
    turn-based game's observation ``{"observation": tensor, "action_mask": legal moves}``: the same
    for training, play and an exploitability's policy table (``fastppo.games.exploitability``)."""
    game = state.get_game()
    if tensor_kind(game) == OBSERVATION:
        shape, tensor = game.observation_tensor_shape(), state.observation_tensor(player)
    else:
        shape, tensor = game.information_state_tensor_shape(), state.information_state_tensor(player)
    observation = np.asarray(tensor, dtype=np.float32).reshape(shape)
    if observation.ndim == 3:
        observation = np.moveaxis(observation, 0, -1)
    mask = np.zeros(game.num_distinct_actions(), dtype=np.int8)
    if not state.is_terminal() and state.current_player() == player:
        mask[:] = state.legal_actions_mask(player)
    return {"observation": observation, "action_mask": mask}


class OpenSpielGame(AECEnv):
    """An OpenSpiel game (``load_game``) as a PettingZoo AECEnv (module docstring). ``state`` is
    OpenSpiel's state of the game in play, at a decision node or the end."""

    metadata = {"name": "openspiel", "render_modes": ["ansi"], "is_parallelizable": False}
    fastppo_plain_state = True
    """A snapshot (``fastppo.envs.snapshot``) walks in: the game in play is ``_history``."""

    def __init__(self, env_id: str, render_mode: str | None = None):
        super().__init__()
        if render_mode not in (None, "ansi"):
            raise FastPPOError(f"{env_id} renders as text (render_mode 'ansi'), not {render_mode!r}")
        self.game = load_game(env_id)
        self.env_id, self.render_mode = env_id, render_mode
        self.possible_agents = [f"player_{i}" for i in range(self.game.num_players())]
        self.perfect_information = is_perfect_information(self.game)
        moves = self.game.num_distinct_actions()
        self._observation_space = gym.spaces.Dict(
            {
                "observation": gym.spaces.Box(-np.inf, np.inf, observation_shape(self.game), np.float32),
                "action_mask": gym.spaces.Box(0, 1, (moves,), np.int8),
            }
        )
        self._action_space = gym.spaces.Discrete(moves)
        self._random = np.random.default_rng()
        self.reset()

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._observation_space

    def action_space(self, agent: str) -> gym.spaces.Discrete:
        return self._action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self._random = np.random.default_rng(seed)
        self._state = self.game.new_initial_state()
        self._history: list[int] = []  # every action applied, chance outcomes included
        self._play_chance()
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos: dict[str, dict[str, Any]] = {agent: {} for agent in self.agents}
        self._skip_agent_selection = None
        self.agent_selection = self.possible_agents[max(self.state.current_player(), 0)]
        self._end_if_over()

    def _play_chance(self) -> None:
        """Plays the chance nodes ahead with the env's generator: each outcome at its probability."""
        while self.state.is_chance_node():
            outcomes, probabilities = zip(*self.state.chance_outcomes())
            self._apply(int(outcomes[self._random.choice(len(outcomes), p=probabilities)]))

    def _apply(self, action: int) -> None:
        self.state.apply_action(action)
        self._history.append(action)

    @property
    def state(self) -> Any:
        """OpenSpiel's state after ``_history``, rebuilt where a restored snapshot set the moves alone."""
        if self._state.history() != self._history:
            self._state = self.game.new_initial_state()
            for action in self._history:
                self._state.apply_action(action)
        return self._state

    def restored_problem(self) -> str | None:
        """What makes a restored ``_history`` no game this env can go on from (a move that is not
        legal where it stands, or a game left at a chance node), else None."""
        replay = self.game.new_initial_state()
        for action in self._history:
            legal = [a for a, _ in replay.chance_outcomes()] if replay.is_chance_node() else replay.legal_actions()
            if not (isinstance(action, int) and not isinstance(action, bool) and action in legal):
                return f"holds the moves {self._history}, not a game of {self.env_id} ({action!r} is no legal move)"
            replay.apply_action(action)
        if replay.is_chance_node():
            return f"holds the moves {self._history}, which leave {self.env_id} at a chance node"
        return None

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        return observe_state(self.state, self.possible_agents.index(agent))

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if action is None or int(action) not in self.state.legal_actions():
            raise ValueError(
                f"{agent} played {action} in {self.env_id}, an illegal move (legal: {self.state.legal_actions()})"
            )
        before = np.asarray(self.state.returns())
        self._apply(int(action))
        self._play_chance()
        gained = np.asarray(self.state.returns()) - before
        self._cumulative_rewards[agent] = 0.0
        self.rewards = {name: float(gained[i]) for i, name in enumerate(self.possible_agents)}
        self._accumulate_rewards()
        if self.state.is_terminal():
            # PettingZoo's classic games hand the turn on at the end: each seat then sees its result.
            self.agent_selection = self.possible_agents[(self.possible_agents.index(agent) + 1) % len(self.agents)]
        else:
            self.agent_selection = self.possible_agents[self.state.current_player()]
        self._end_if_over()

    def _end_if_over(self) -> None:
        if self.state.is_terminal():
            self.terminations = dict.fromkeys(self.agents, True)

    def text(self, agent: str) -> str:
        """The position as ``agent`` may see it, in OpenSpiel's words: the state string of a
        perfect-information game or a finished one, else the seat's own information-state string
        (what it has seen so far), or its observation string where the game has none."""
        if self.perfect_information or self.state.is_terminal():
            return str(self.state)
        player = self.possible_agents.index(agent)
        if self.game.get_type().provides_information_state_string:
            return self.state.information_state_string(player)
        return self.state.observation_string(player)

    def move_text(self, agent: str, action: int) -> str:
        """``action`` of ``agent`` in OpenSpiel's words (``state.action_to_string``)."""
        return self.state.action_to_string(self.possible_agents.index(agent), int(action))

    def render(self) -> str:
        return str(self.state)

    def close(self) -> None:
        pass


def make_openspiel_env(env_id: str, env_kwargs: dict[str, Any], render_mode: str | None = None) -> OpenSpielGame:
    """The AECEnv of ``openspiel:<game>``; its parameters go in the id, in OpenSpiel's syntax."""
    if env_kwargs:
        raise FastPPOError(
            f"--env-kwargs {env_kwargs}: an OpenSpiel game takes its parameters in its id, as OpenSpiel writes them, "
            f"e.g. {OPENSPIEL_PREFIX}kuhn_poker(players=3)"
        )
    import_pyspiel()
    if AECEnv is object:
        raise FastPPOError(
            f"OpenSpiel games play as PettingZoo games, and PettingZoo is not installed: {install_extra('games')}"
        )
    return OpenSpielGame(env_id, render_mode)

"""OpenSpiel's games as turn-based rows (fastppo.envs.openspiel_env through fastppo.envs.turn_based),
checked against pyspiel stepping the same game: a scripted sequence of moves gives the same
observations, masks, rewards, live rows and ends; chance nodes follow the env's seed, and a seeded
training plays the same games again."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

import fastppo
from fastppo.envs import make_vec_env
from fastppo.envs.openspiel_env import INFORMATION_STATE, OBSERVATION, OpenSpielGame, observe_state, tensor_kind
from fastppo.envs.snapshot import SnapshotMismatch, restore_envs, snapshot_envs
from fastppo.envs.turn_based import TurnBasedVecEnv
from fastppo.errors import FastPPOError
from fastppo.training.resume import resume_config
from fastppo.training.trainer import train
from tests.support.resume import ITERATIONS, assert_same_run, stop_after

pyspiel = pytest.importorskip("pyspiel")

pytestmark = pytest.mark.games


def game_rows(env_id: str) -> TurnBasedVecEnv:
    config = fastppo.make_config(env_id, "cleanrl-discrete", {"num_envs": 1})
    envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
    assert isinstance(envs, TurnBasedVecEnv) and envs.agents == ["player_0", "player_1"]
    return envs


def expected_row(state, player: int, tensor: str) -> np.ndarray:
    """pyspiel's own ``tensor`` of ``player`` ("observation" or "information_state"), planes last."""
    game = state.get_game()
    values = getattr(state, f"{tensor}_tensor")(player)
    shaped = np.asarray(values).reshape(getattr(game, f"{tensor}_tensor_shape")())
    return (np.moveaxis(shaped, 0, -1) if shaped.ndim == 3 else shaped).ravel()


def check_against_pyspiel(env_id: str, tensor: str, script: list[int]) -> None:
    """Steps the rows and pyspiel's state of the same game through ``script`` (the decisions),
    each seat's row checked against pyspiel's ``tensor``; pyspiel's chance nodes get the outcomes
    the env drew (its seeded draws are checked below)."""
    envs = game_rows(env_id)
    game = pyspiel.load_game(env_id.removeprefix("openspiel:"))
    size = int(np.prod(envs.envs[0].observation_space("player_0")["observation"].shape))
    step = envs.reset(seed=3)
    state = game.new_initial_state()
    for move in [None, *script]:
        if move is not None:
            step = envs.step(torch.tensor([move, move]))
            before = np.asarray(state.returns())
            state.apply_action(move)
        drawn = envs.envs[0].state.history()
        while state.is_chance_node():
            outcome = drawn[len(state.history())]
            assert outcome in [a for a, _ in state.chance_outcomes()]
            state.apply_action(outcome)
        assert envs.envs[0].state.history() == state.history()
        for player in range(2):
            np.testing.assert_array_equal(step.obs[player, :size].numpy(), expected_row(state, player, tensor))
        if move is not None:
            np.testing.assert_array_equal(step.reward.numpy(), np.asarray(state.returns()) - before)
        assert step.terminated.tolist() == [state.is_terminal()] * 2
        to_move = state.current_player()
        assert step.live.tolist() == [to_move == p for p in range(2)]
        if not state.is_terminal():
            mask = np.asarray(state.legal_actions_mask(to_move), dtype=bool)
            assert step.action_mask[to_move].tolist() == mask.tolist()
            assert step.action_mask[1 - to_move].all()  # the waiting seat chooses nothing
    assert state.is_terminal()
    assert envs.pop_episodes().by_agent == {f"player_{p}": [state.returns()[p]] for p in range(2)}


@pytest.mark.parametrize(
    ("env_id", "tensor", "script"),
    [
        ("openspiel:tic_tac_toe", "observation", [0, 3, 1, 4, 2]),  # x takes the top row
        ("openspiel:connect_four", "observation", [3, 3, 4, 4, 5, 5, 6]),  # a board, planes last; the first seat wins
        ("openspiel:kuhn_poker", "information_state", [0, 1, 1]),  # pass, bet, call: a showdown
        # raise, call, the public card dealt, check, raise, call
        ("openspiel:leduc_poker", "information_state", [2, 1, 1, 2, 1]),
        ("openspiel:turn_based_simultaneous_game(game=goofspiel(num_cards=3))", "information_state", [0, 0, 1, 2]),
    ],
)
def test_scripted_games_step_as_pyspiel_does(env_id, tensor, script):
    check_against_pyspiel(env_id, tensor, script)


def leduc_to_move(script: list[int]) -> tuple[np.ndarray, list[float]]:
    """In Leduc, after the cards 0 and 2 are dealt and ``script``: what the env shows the seat to
    move (``observe_state``, as ``OpenSpielGame.observe``), and pyspiel's observation tensor of it."""
    state = pyspiel.load_game("leduc_poker").new_initial_state()
    for move in [0, 2, *script]:
        state.apply_action(move)
    player = state.current_player()
    return observe_state(state, player)["observation"], state.observation_tensor(player)


def test_leduc_information_states_with_equal_cards_and_pot_are_different_rows():
    # the second round's first move, 3 chips each, the public card 4: reached by check, raise,
    # call or by raise, call; OpenSpiel's observation tensor shows both alike
    check_raise_call, observed_before = leduc_to_move([1, 2, 1, 4])
    raise_call, observed_after = leduc_to_move([2, 1, 4])
    assert observed_before == observed_after
    assert tensor_kind(pyspiel.load_game("leduc_poker")) == INFORMATION_STATE
    assert check_raise_call.shape == (30,)
    assert not np.array_equal(check_raise_call, raise_call)


def test_a_perfect_information_game_observes_its_board_and_one_without_an_observation_tensor_its_information_state():
    assert tensor_kind(pyspiel.load_game("connect_four")) == OBSERVATION
    game = OpenSpielGame("openspiel:sheriff")  # information-state tensor only
    assert tensor_kind(game.game) == INFORMATION_STATE
    game.reset(seed=0)
    observed = game.observe(game.agent_selection)["observation"]
    assert observed.tolist() == game.state.information_state_tensor(game.state.current_player())


def deals(seed: int | None, hands: int, env: OpenSpielGame | None = None) -> list[list[int]]:
    """The cards Kuhn poker's chance nodes deal in ``hands`` hands, the first reset with ``seed``."""
    env = env or OpenSpielGame("openspiel:kuhn_poker")
    dealt = []
    for hand in range(hands):
        env.reset(seed=seed if hand == 0 else None)
        dealt.append(env.state.history())
    return dealt


def test_chance_nodes_follow_the_seed_at_their_probabilities():
    assert deals(7, 20) == deals(7, 20)  # the same seed, the same deals, hand after hand
    assert deals(7, 20) != deals(8, 20)
    # Hanabi's first card: 25 outcomes at 0.06, 0.04 or 0.02 (three ones of a colour, two twos, ...).
    hanabi = OpenSpielGame("openspiel:hanabi")
    first = Counter(dealt[0] for dealt in deals(0, 4000, hanabi))
    for outcome, probability in hanabi.game.new_initial_state().chance_outcomes():
        assert abs(first[outcome] / 4000 - probability) < 0.015, (outcome, first[outcome], probability)


def test_rows_of_the_same_seed_play_the_same_games():
    def games(seed: int) -> list[list[int]]:
        envs = game_rows("openspiel:leduc_poker")
        step = envs.reset(seed=seed)
        played = []
        generator = torch.Generator().manual_seed(0)
        for _ in range(40):
            step = envs.step(torch.multinomial(step.action_mask.float(), 1, generator=generator).squeeze(1))
            if step.terminated.any():
                played.append(envs.envs[0].state.history())
        return played

    assert games(1) == games(1) and games(1) != games(2)


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("openspiel:no_such_game", "OpenSpiel has no game 'no_such_game' (openspiel:no_such_game)"),
        ("openspiel:kuhn_poker(colour=3)", "OpenSpiel cannot load kuhn_poker(colour=3): "),
        (
            "openspiel:goofspiel(num_cards=4)",
            "openspiel:goofspiel(num_cards=4) is a simultaneous game, and fastppo plays games in turns: write "
            "openspiel:turn_based_simultaneous_game(game=goofspiel(num_cards=4)),",
        ),
        ("openspiel:coordinated_mp", "openspiel:coordinated_mp gives neither an observation tensor nor"),
    ],
)
def test_games_the_env_cannot_play_are_one_line(env_id, message):
    with pytest.raises(FastPPOError) as error:
        OpenSpielGame(env_id)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_a_seeded_training_plays_the_same_games_again(tmp_path):
    def trained(seed: int, name: str) -> list[float]:
        agent = fastppo.train(
            "openspiel:kuhn_poker",
            run_dir=tmp_path / name,
            seed=seed,
            total_timesteps=512,
            num_envs=4,
            num_steps=32,
            progress=False,
            tensorboard=False,
            **{"self_play.exploitability_every": 1},
        )
        return [row["eval/exploitability"] for row in agent.history]

    assert trained(3, "a") == trained(3, "b") != trained(4, "c")


def test_stop_and_resume_plays_on_the_same_games(tmp_path, monkeypatch):
    """Stopped after 3 of 6 iterations of Leduc (a public card dealt mid-game) against a pool:
    the games in flight and the envs' generators come back from the checkpoint."""
    overrides = {
        "num_envs": 2, "num_steps": 7, "total_timesteps": ITERATIONS * 2 * 7, "checkpoint_every": 0,
        "progress": False, "tensorboard": False, "self_play.pool_size": 2, "self_play.snapshot_every": 1,
    }  # fmt: skip
    train(fastppo.make_config("openspiel:leduc_poker", "cleanrl-discrete", overrides), tmp_path / "one_go")
    with monkeypatch.context() as patch:
        stop_after(patch, ITERATIONS // 2)
        train(fastppo.make_config("openspiel:leduc_poker", "cleanrl-discrete", overrides), tmp_path / "split")
    resumed_config, checkpoint = resume_config(tmp_path / "split")
    assert checkpoint.meta["env"]["kind"] == "pettingzoo"
    train(resumed_config, tmp_path / "split", checkpoint)
    assert_same_run(tmp_path / "one_go", tmp_path / "split")


def test_a_snapshot_of_moves_that_are_no_game_is_refused():
    envs = game_rows("openspiel:kuhn_poker")
    envs.reset(seed=0)
    _, meta = snapshot_envs(envs)
    copy = meta["vec"]["attrs"]["envs"]["list"][0]["attrs"]
    copy["_history"]["list"] = [0, 0]  # both seats dealt the jack
    with pytest.raises(SnapshotMismatch, match=r"gives copy 0 a game that holds the moves \[0, 0\], not a game of "):
        restore_envs(game_rows("openspiel:kuhn_poker"), {}, meta)

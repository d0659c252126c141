"""A game's board symmetries (fastppo.games.symmetry) against the game itself, and the search's
prior and value as the mean over a position's symmetric views."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("pyspiel")

from fastppo.games.game_env import make_game
from fastppo.games.search import SearchPlayer, snapshot
from fastppo.games.symmetry import SYMMETRIES
from tests.support.games import untrained_agent

pytestmark = [pytest.mark.games, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
TICTACTOE = "pz:pettingzoo.classic.tictactoe_v3"
CONNECT_FOUR = "pz:pettingzoo.classic.connect_four_v3"


def test_each_game_has_its_symmetry_group_besides_the_identity():
    assert len(SYMMETRIES[CONNECT_FOUR]) == 1 and len(SYMMETRIES[TICTACTOE]) == 7
    for symmetry in SYMMETRIES[TICTACTOE]:
        assert sorted(symmetry.moves) == list(range(9)) and list(symmetry.moves) != list(range(9))
    assert len({tuple(s.moves) for s in SYMMETRIES[TICTACTOE]}) == 7
    # a quarter turn counterclockwise of the squares [[0 1 2] [3 4 5] [6 7 8]] by hand: the
    # transformed board's top row holds what was the right column
    np.testing.assert_array_equal(SYMMETRIES[TICTACTOE][1].moves, [2, 5, 8, 1, 4, 7, 0, 3, 6])


@pytest.mark.parametrize("env_id", [CONNECT_FOUR, TICTACTOE])
def test_a_symmetric_game_played_move_for_move_shows_the_symmetric_position(env_id):
    """The game played with each move renamed by a symmetry shows, at every turn and to each
    seat, the transformed observation and legal moves of the game played as is."""
    rng = np.random.default_rng(0)
    for symmetry in SYMMETRIES[env_id]:
        renamed = np.argsort(symmetry.moves)  # original move -> its name after the transform
        played, mirrored = make_game(env_id), make_game(env_id)
        played.reset(seed=0)
        mirrored.reset(seed=0)
        while not (played.terminations[played.agent_selection] or played.truncations[played.agent_selection]):
            for seat in played.possible_agents:
                expected = symmetry.view(played.observe(seat))
                seen = mirrored.observe(seat)
                np.testing.assert_array_equal(seen["observation"], expected["observation"])
                np.testing.assert_array_equal(seen["action_mask"], expected["action_mask"])
            move = int(rng.choice(np.flatnonzero(played.observe(played.agent_selection)["action_mask"])))
            played.step(move)
            mirrored.step(int(renamed[move]))
        assert played.rewards == mirrored.rewards


def test_unview_gives_each_probability_back_to_its_original_move():
    (mirror,) = SYMMETRIES[CONNECT_FOUR]
    probabilities = np.array([0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1])  # in the mirrored position
    np.testing.assert_allclose(mirror.unview(probabilities), probabilities[::-1])


@pytest.mark.parametrize("env_id", [CONNECT_FOUR, TICTACTOE])
def test_the_search_reads_a_position_as_the_mean_of_its_symmetric_views(env_id):
    torch.manual_seed(0)
    agent = untrained_agent(env_id)
    search = SearchPlayer(agent, env_id, 2)
    env = make_game(env_id)
    env.reset(seed=0)
    for move in [1, 2]:
        env.step(move)
    position, value = search._position(snapshot(env.unwrapped))
    seat = env.agent_selection
    observation = env.observe(seat)
    priors, values = [], []
    with torch.no_grad():
        for view, symmetry in [(observation, None)] + [(s.view(observation), s) for s in SYMMETRIES[env_id]]:
            _, rows, masks = agent.pettingzoo.rows(agent.config.multi_agent, {seat: view}, None)
            params, critic = agent.policy(agent.normalize(torch.as_tensor(rows)))
            p = agent.policy.action_head.log_probs(params, torch.as_tensor(masks)).exp()[0].double().numpy()
            priors.append(p if symmetry is None else symmetry.unview(p))
            values.append(float(critic[0]))
    legal = np.flatnonzero(observation["action_mask"])
    np.testing.assert_allclose(position.prior, np.mean(priors, axis=0)[legal], rtol=1e-6)
    assert value == pytest.approx(np.mean(values), rel=1e-5)
    # an untrained network is not symmetric: the views differ, so the mean is not the identity's
    assert not np.allclose(priors[0], priors[1])

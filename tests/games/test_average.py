"""The time-average policy of a self-play pool (fastppo.games.average, --self-play.average-policy):
its exploitability equal to OpenSpiel's for the same mixture, logged in training, resumed exactly,
and asked without a pool refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

import fastppo
from fastppo.errors import FastPPOError
from fastppo.games.average import PolicyTables
from fastppo.games.exploitability import AgentExploitability
from fastppo.training.resume import resume_config
from fastppo.training.trainer import train
from tests.support.games import trained_on_kuhn
from tests.support.resume import ITERATIONS, assert_same_run, stop_after

pyspiel = pytest.importorskip("pyspiel")
from open_spiel.python import policy as openspiel_policy  # noqa: E402
from open_spiel.python.algorithms import exploitability as openspiel_exploitability  # noqa: E402
from open_spiel.python.algorithms.policy_aggregator import PolicyAggregator  # noqa: E402

pytestmark = pytest.mark.games
AVERAGED = {"self_play.exploitability_every": 1, "self_play.average_policy": True, "self_play.snapshot_every": 1}


def trained(run_dir, pool_size: int, **overrides):
    return trained_on_kuhn(
        run_dir,
        seed=2,
        total_timesteps=2560,
        num_envs=16,
        **{"self_play.pool_size": pool_size, "self_play.sampling": "uniform", **AVERAGED, **overrides},
    )


@pytest.fixture(scope="module")
def kuhn_agent(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("kuhn") / "run", pool_size=1)


def random_tables(game, count: int, seed: int) -> list:
    """``count`` OpenSpiel tables of ``game``, each state's legal probabilities drawn at random."""
    rng, tables = np.random.default_rng(seed), []
    for _ in range(count):
        table = openspiel_policy.TabularPolicy(game)
        drawn = rng.dirichlet(np.ones(table.action_probability_array.shape[1]), len(table.states))
        drawn *= table.legal_actions_mask
        table.action_probability_array[:] = drawn / drawn.sum(1, keepdims=True)
        tables.append(table)
    return tables


def test_the_average_of_a_fixed_pool_is_as_exploitable_as_openspiels_mixture(kuhn_agent):
    tables = PolicyTables("openspiel:kuhn_poker", kuhn_agent)
    game = tables.table.game
    pool = random_tables(game, 3, seed=0)
    weights = np.array([0.5, 0.3, 0.2])
    # OpenSpiel's aggregator: each seat plays one policy of the pool, drawn at the start by ``weights``.
    mixture = PolicyAggregator(game).aggregate([0, 1], [pool, pool], [list(weights), list(weights)])
    expected = openspiel_exploitability.exploitability(game, mixture)
    averaged = tables.average(np.stack([t.action_probability_array for t in pool]), weights)
    assert tables.exploitability(averaged) == pytest.approx(expected, abs=1e-12)
    # not the state-by-state mean of the probabilities, which is another policy
    mean = np.einsum("k,ksa->sa", weights, np.stack([t.action_probability_array for t in pool]))
    assert tables.exploitability(mean) != pytest.approx(expected, abs=1e-3)


def test_a_policys_table_in_one_forward_is_the_one_asked_state_by_state(kuhn_agent):
    tables = PolicyTables("openspiel:kuhn_poker", kuhn_agent)
    figure = tables.exploitability(tables.probabilities(kuhn_agent.policy, kuhn_agent.obs_rms))
    # float32 probabilities: a batch of rows and a row alone may round apart in the last place
    assert figure == pytest.approx(AgentExploitability("openspiel:kuhn_poker")(kuhn_agent), abs=1e-6)


def test_a_pool_of_the_last_snapshot_averages_to_the_learner(kuhn_agent):
    """Pool size 1, a snapshot each iteration, taken before the figures: the average is the learner."""
    logged = [(r["eval/exploitability"], r["eval/exploitability_average"]) for r in kuhn_agent.history]
    assert len(logged) == 5
    assert all(learner == pytest.approx(average, abs=1e-6) for learner, average in logged)
    assert len({learner for learner, _ in logged}) == 5  # the learner moved


def test_a_pool_of_several_snapshots_averages_them(tmp_path):
    history = trained(tmp_path / "run", pool_size=4).history
    learner = [r["eval/exploitability"] for r in history]
    average = [r["eval/exploitability_average"] for r in history]
    assert average[0] == pytest.approx(learner[0], abs=1e-6)  # one snapshot so far
    assert all(a != pytest.approx(b, abs=1e-4) for a, b in zip(learner[1:], average[1:]))


def test_stop_and_resume_logs_the_same_average(tmp_path, monkeypatch):
    overrides = {
        "num_envs": 4, "num_steps": 32, "total_timesteps": ITERATIONS * 4 * 32, "checkpoint_every": 0,
        "progress": False, "tensorboard": False, "self_play.pool_size": 3, "self_play.sampling": "uniform", **AVERAGED,
    }  # fmt: skip
    train(fastppo.make_config("openspiel:kuhn_poker", "cleanrl-discrete", overrides), tmp_path / "one_go")
    with monkeypatch.context() as patch:
        stop_after(patch, ITERATIONS // 2)
        train(fastppo.make_config("openspiel:kuhn_poker", "cleanrl-discrete", overrides), tmp_path / "split")
    resumed_config, checkpoint = resume_config(tmp_path / "split")
    train(resumed_config, tmp_path / "split", checkpoint)
    assert_same_run(tmp_path / "one_go", tmp_path / "split")


@pytest.mark.parametrize(
    "overrides",
    [{"self_play.exploitability_every": 1}, {"self_play.pool_size": 2}, {}],
)
def test_an_average_without_a_pool_or_its_figures_is_one_line(overrides):
    with pytest.raises(FastPPOError, match="^--self-play.average-policy scores the average") as error:
        fastppo.make_config("openspiel:kuhn_poker", "cleanrl-discrete", {"self_play.average_policy": True, **overrides})
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_the_pools_average_is_less_exploitable_than_the_learner_in_kuhn_poker(tmp_path):
    """The benchmark's Kuhn settings (benchmarks/equilibrium.py), seed 1: the learner best-responds
    to the pool's average, which ends below the learner and far below uniform play's 0.4583."""
    agent = trained_on_kuhn(
        tmp_path / "run",
        seed=1,
        total_timesteps=131072,
        num_envs=64,
        learning_rate=3e-4,
        **{
            "ppo.ent_coef": 0.2,
            "self_play.pool_size": 64,
            "self_play.sampling": "uniform",
            "self_play.latest_share": 0.0,
            **AVERAGED,
            "self_play.exploitability_every": 8,
        },
    )
    last = agent.history[-1]
    assert last["eval/exploitability_average"] < min(0.13, last["eval/exploitability"] - 0.01), last

"""The self-play league (fastppo.games.league): how each game's opponent is drawn, the pool
and its evictions, records and ratings, its metrics; a run with a pool stopped and resumed equals
the run in one go; a damaged pool in a checkpoint and bad --self-play input are one line."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import fastppo
from fastppo.agents.agent import Agent, build_agent
from fastppo.cli.main import main
from fastppo.config import SelfPlayConfig
from fastppo.envs import make_vec_env
from fastppo.games.league import LATEST, RANDOM, League
from fastppo.games.ratings import START_RATING, ordinal
from fastppo.training.resume import resume_config
from fastppo.training.trainer import train
from tests.support.checkpoints import fields, snapshot, tensors
from tests.support.resume import ITERATIONS, assert_same_run, stop_after

pytestmark = pytest.mark.games

RACE = "pz:tests.support.fake_pz_envs:race"
TICTACTOE = "pz:pettingzoo.classic.tictactoe_v3"
TAKE_AWAY = "pz:tests.support.fake_pz_envs:take_away"
CONNECT_FOUR = "pz:pettingzoo.classic.connect_four_v3"
CHASE = "pz:tests.support.fake_pz_teams"  # adversary_0, adversary_1 | agent_0: two sides
WIN, DRAW, LOSS = 1, 0, -1


def learner(normalize_obs: bool = False) -> Agent:
    config = fastppo.make_config(RACE, "cleanrl-discrete", {"num_envs": 1, "normalize_obs": normalize_obs})
    envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
    torch.manual_seed(0)
    return build_agent(
        config, envs.single_observation_space, envs.single_action_space, torch.device("cpu"), envs.layout
    )


def league(copies: int = 1, seed: int = 0, normalize_obs: bool = False, **cfg) -> League:
    return League(SelfPlayConfig(**({"snapshot_every": 1} | cfg)), learner(normalize_obs), copies, 2, seed)


def snapshots_at(league: League, *iterations: int) -> League:
    for iteration in iterations:
        league.after_update(iteration)
    return league


def plays(league: League, action: int) -> None:
    """Make the learner play ``action`` whatever it observes (its snapshots keep what they played)."""
    head = league.learner.policy.action_head.linear
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.tensor([10.0, -10.0] if action == 0 else [-10.0, 10.0]))


def opponents_move(league: League, copies: list[int]) -> list[int]:
    rows, masks = np.zeros((len(copies), 4), dtype=np.float32), np.ones((len(copies), 2), dtype=bool)
    return league.act(np.array(copies), rows, masks).tolist()


def result(league: League, copy: int, outcome: int) -> np.ndarray:
    """A game's returns [seats] in which the learner's seat had ``outcome``."""
    returns = np.full(2, -float(outcome))
    returns[league.learner_seat[copy]] = float(outcome)
    return returns


# Drawing the opponent -------------------------------------------------------------------------


def test_latest_sampling_always_plays_the_newest_snapshot():
    sp = snapshots_at(league(pool_size=3, sampling="latest", latest_share=0.0), 1, 2, 3, 4)
    assert sp.pool.ids == [2, 3, 4] and sorted(sp.pool.snapshots) == [2, 3, 4]
    seats = [sp.new_game(0) for _ in range(40)]
    assert set(sp.opponent.tolist()) == {4}
    # One seat is the learner's, drawn at random: both come up.
    assert all(s.sum() == 1 for s in seats) and {int(np.argmax(s)) for s in seats} == {0, 1}
    snapshots_at(sp, 5)
    sp.new_game(0)
    assert sp.opponent[0] == 5


def draws(league: League, games: int) -> Counter:
    found = Counter()
    for _ in range(games):
        league.new_game(0)
        found[int(league.opponent[0])] += 1
    return found


def test_uniform_sampling_draws_every_snapshot_of_the_pool_alike():
    sp = snapshots_at(league(pool_size=3, sampling="uniform", latest_share=0.0), 1, 2, 3, 4)
    found = draws(sp, 3000)
    assert set(found) == {2, 3, 4}
    assert all(abs(n - 1000) < 100 for n in found.values()), found


class RecordedChoices:
    """A numpy Generator that records the probabilities ``choice`` is given."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.p = rng, []

    def choice(self, n: int, p: np.ndarray) -> int:
        self.p.append(p)
        return self.rng.choice(n, p=p)

    def __getattr__(self, name: str):
        return getattr(self.rng, name)


def test_prioritised_sampling_favours_the_snapshots_the_learner_scores_worst_against():
    sp = snapshots_at(league(pool_size=4, sampling="prioritised", latest_share=0.0), 1, 2, 3, 4)
    records = {1: [4, 0, 0], 2: [0, 0, 4], 3: [1, 2, 1], 4: [0, 0, 0]}  # scores 1, 0, 0.5, none yet (0.5)
    for iteration, record in records.items():
        sp.pool.snapshots[iteration].record = record
    sp.rng = recorded = RecordedChoices(sp.rng)
    found = draws(sp, 2000)
    weights = np.array([0.0, 1.0, 0.25, 0.25]) + 1e-3  # (1 - score)^2, and a floor so that each keeps a chance
    np.testing.assert_allclose(recorded.p[0], weights / weights.sum())
    assert found.most_common()[0][0] == 2 and found[1] < 20 and abs(found[3] - found[4]) < 150, found


def test_latest_share_one_plays_every_game_against_the_latest_self():
    sp = snapshots_at(league(pool_size=2, latest_share=1.0), 1, 2)
    assert all(sp.new_game(0).all() for _ in range(200)) and sp.opponent[0] == LATEST


def test_latest_share_is_the_share_of_games_against_the_latest_self():
    sp = snapshots_at(league(pool_size=2, latest_share=0.25), 1, 2)
    found = draws(sp, 2000)
    assert abs(found[LATEST] - 500) < 70, found


def test_without_a_pool_the_learner_plays_every_seat_and_nothing_is_snapshot():
    sp = snapshots_at(league(pool_size=0, latest_share=0.0), 1, 2)
    assert sp.new_game(0).all() and sp.opponent[0] == LATEST and sp.pool.snapshots == {}
    assert sp.state()[0] == {}


def test_snapshots_are_taken_every_snapshot_every_iterations_and_frozen():
    sp = league(pool_size=5, snapshot_every=2, normalize_obs=True)
    snapshots_at(sp, 1, 2, 3, 4)
    assert sp.pool.ids == [2, 4]
    frozen = {k: v.clone() for k, v in sp.pool.snapshots[4].policy.state_dict().items()}
    statistics = {k: v.clone() for k, v in sp.pool.snapshots[4].obs_rms.state_dict().items()}
    with torch.no_grad():
        for p in sp.learner.policy.parameters():
            p.add_(1.0)  # the learner trains on
    sp.learner.obs_rms.update(torch.full((8, 2), 3.0))  # and sees more observations
    assert all(torch.equal(v, frozen[k]) for k, v in sp.pool.snapshots[4].policy.state_dict().items())
    assert all(torch.equal(v, statistics[k]) for k, v in sp.pool.snapshots[4].obs_rms.state_dict().items())
    assert not any(p.requires_grad for p in sp.pool.snapshots[4].policy.parameters())


# The pool as games go on -------------------------------------------------------------------------


def test_an_evicted_snapshot_finishes_its_game_then_is_forgotten():
    sp = league(copies=2, pool_size=1, latest_share=0.0)
    plays(sp, 0)
    snapshots_at(sp, 1)
    sp.new_game(0)
    assert sp.opponent.tolist() == [1, LATEST]
    plays(sp, 1)
    snapshots_at(sp, 2)  # snapshot 1 leaves the pool while copy 0 still plays it
    assert sp.pool.ids == [2] and sorted(sp.pool.snapshots) == [1, 2]
    assert any(name.startswith("pool.1.") for name in sp.state()[0])  # a checkpoint now keeps it
    sp.new_game(1)
    assert sp.opponent.tolist() == [1, 2]
    assert opponents_move(sp, [0, 1]) == [0, 1]  # each copy against its own snapshot: 1 plays 0, 2 plays 1
    sp.game_over(0, result(sp, 0, WIN))
    assert sp.pool.snapshots[1].record == [1, 0, 0]
    sp.new_game(0)  # its next game draws from the pool: snapshot 1 is forgotten
    assert sp.opponent.tolist() == [2, 2] and sorted(sp.pool.snapshots) == [2]
    assert not any(name.startswith("pool.1.") for name in sp.state()[0])


def test_a_snapshot_plays_on_its_own_observation_statistics():
    sp = league(pool_size=1, latest_share=0.0, normalize_obs=True)
    snapshots_at(sp, 1)
    sp.learner.obs_rms.update(torch.full((4, 2), 7.0))  # the learner's statistics move on
    own, shown = sp.pool.snapshots[1].obs_rms, []
    normalize = own.normalize
    own.normalize = lambda obs, clip: shown.append(obs) or normalize(obs, clip)
    sp.new_game(0)
    opponents_move(sp, [0])
    assert shown and shown[0].shape == (1, 4)  # the row it moves on


def test_records_count_wins_draws_and_losses_from_the_learners_seat():
    sp = snapshots_at(league(pool_size=1, latest_share=0.0), 1)
    outcomes = [WIN, WIN, DRAW, LOSS, WIN, LOSS, DRAW, WIN]
    seats = []
    for outcome in outcomes:
        sp.new_game(0)
        seats.append(int(sp.learner_seat[0]))
        sp.game_over(0, result(sp, 0, outcome))
    assert set(seats) == {0, 1}  # the learner played both seats
    assert sp.pool.snapshots[1].record == [4, 2, 2]
    assert sp.pool.snapshots[1].learner_score() == (4 + 0.5 * 2) / 8


def test_a_game_against_the_latest_self_counts_for_no_record():
    sp = snapshots_at(league(pool_size=1, latest_share=1.0), 1)
    sp.new_game(0)
    sp.game_over(0, np.array([1.0, -1.0]))
    assert sp.pool.snapshots[1].record == [0, 0, 0] and sp.ratings.learner == START_RATING


def test_a_win_raises_the_learners_rating_and_a_loss_lowers_it():
    sp = snapshots_at(league(pool_size=1, latest_share=0.0), 1)
    assert sp.pool.snapshots[1].rating == START_RATING  # a new snapshot starts from the learner's rating
    learner, snapshot = ordinal(sp.ratings.learner), sp.pool.snapshots[1].rating
    sp.new_game(0)
    sp.game_over(0, result(sp, 0, WIN))
    assert ordinal(sp.ratings.learner) > learner and sp.pool.snapshots[1].rating[0] < snapshot[0]
    won = sp.ratings.learner
    sp.new_game(0)
    sp.game_over(0, result(sp, 0, LOSS))
    assert sp.ratings.learner[0] < won[0] and sp.pool.snapshots[1].rating[0] > snapshot[0] - 1e-9
    snapshots_at(sp, 2)
    assert sp.pool.snapshots[2].rating == sp.ratings.learner


def test_after_update_logs_the_iterations_games_against_the_pool_and_the_ratings():
    sp = snapshots_at(league(pool_size=2, latest_share=0.0), 1)
    for outcome in (WIN, WIN, DRAW, LOSS):
        sp.new_game(0)
        sp.game_over(0, result(sp, 0, outcome))
    metrics = sp.after_update(2)
    assert metrics == {
        "self_play/win_vs_pool": 0.5,
        "self_play/draw_vs_pool": 0.25,
        "self_play/loss_vs_pool": 0.25,
        "self_play/pool_size": 2.0,
        "ratings/learner": ordinal(sp.ratings.learner),
    }
    quiet = sp.after_update(3)  # no game against the pool since: no vs_pool figures
    assert sorted(quiet) == ["ratings/learner", "self_play/pool_size"]


def test_state_and_load_restore_the_pool_and_draw_on_alike():
    sp = league(copies=2, pool_size=2, latest_share=0.5, normalize_obs=True)
    for iteration in (1, 2, 3):
        sp.learner.obs_rms.update(torch.full((4, 2), float(iteration)))  # each snapshot its own statistics
        snapshots_at(sp, iteration)
    for _ in range(5):
        sp.new_game(0)
        sp.game_over(0, result(sp, 0, WIN))
    sp.new_game(1)
    tensors, meta = sp.state()
    twin = league(copies=2, pool_size=2, latest_share=0.5, seed=99, normalize_obs=True)
    twin.load(tensors, json.loads(json.dumps(meta)))  # as trainer.json holds it
    assert (
        twin.pool.ids == sp.pool.ids
        and twin.opponent.tolist() == sp.opponent.tolist()
        and twin.learner_seat.tolist() == sp.learner_seat.tolist()
    )
    assert {i: s.record for i, s in twin.pool.snapshots.items()} == {i: s.record for i, s in sp.pool.snapshots.items()}
    assert {i: s.rating for i, s in twin.pool.snapshots.items()} == {i: s.rating for i, s in sp.pool.snapshots.items()}
    assert twin.ratings.learner == sp.ratings.learner
    for i, s in sp.pool.snapshots.items():
        assert all(
            torch.equal(v, twin.pool.snapshots[i].policy.state_dict()[k]) for k, v in s.policy.state_dict().items()
        )
        assert all(
            torch.equal(v, twin.pool.snapshots[i].obs_rms.state_dict()[k]) for k, v in s.obs_rms.state_dict().items()
        )
    assert [tuple(twin.new_game(0)) + (twin.opponent[0],) for _ in range(20)] == [
        tuple(sp.new_game(0)) + (sp.opponent[0],) for _ in range(20)
    ]


# A run with a pool: resume, damaged checkpoints, bad input ---------------------------------------

RUN = {"num_envs": 2, "num_minibatches": 2, "update_epochs": 2, "progress": False, "tensorboard": False}
SELF_PLAY = {"self_play.pool_size": 2, "self_play.snapshot_every": 1}


def test_stop_and_resume_with_a_pool_equals_one_go(tmp_path, monkeypatch):
    """Stopped after 3 of 6 iterations: games in flight (some against snapshots), a pool of 2 of
    3 snapshots (weights and observation statistics), records, ratings and the league's RNG must
    all come back."""
    overrides = (
        RUN
        | SELF_PLAY
        | {"num_steps": 7, "total_timesteps": ITERATIONS * 2 * 7, "checkpoint_every": 0, "normalize_obs": True}
    )
    train(fastppo.make_config(TICTACTOE, "cleanrl-discrete", overrides), tmp_path / "one_go")
    with monkeypatch.context() as patch:
        stop_after(patch, ITERATIONS // 2)
        train(fastppo.make_config(TICTACTOE, "cleanrl-discrete", overrides), tmp_path / "split")
    resumed_config, checkpoint = resume_config(tmp_path / "split")
    assert checkpoint.meta["env"]["kind"] == "pettingzoo" and checkpoint.meta["self_play"]["pool"] == [2, 3]
    assert "pool.3.obs_rms.mean" in checkpoint.tensors
    train(resumed_config, tmp_path / "split", checkpoint)
    assert_same_run(tmp_path / "one_go", tmp_path / "split")
    logged = [json.loads(line) for line in (tmp_path / "one_go" / "metrics.jsonl").read_text().splitlines()]
    assert any("self_play/win_vs_pool" in m for m in logged[ITERATIONS // 2 :])  # the resumed half played the pool


@pytest.fixture(scope="module")
def pool_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("pool") / "run"
    overrides = RUN | SELF_PLAY | {"num_steps": 8, "total_timesteps": 3 * 16, "checkpoint_every": 1}
    train(fastppo.make_config(TICTACTOE, "cleanrl-discrete", overrides), run)
    return run


@pytest.fixture
def pool_copy(pool_run, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(pool_run, copy)
    shutil.rmtree(copy / "checkpoints/000003")
    return copy


RESUMED = "checkpoints/000002"
POOL_DAMAGES = {
    "no self_play": (
        fields(lambda m: m.pop("self_play")),
        "trainer.json's self_play is missing (every checkpoint of a turn-based game's run holds its league)",
    ),
    "key missing": (fields(lambda m: m["self_play"].pop("rng")), "trainer.json's self_play lacks 'rng'"),
    "pool not among snapshots": (
        fields(lambda m: m["self_play"].__setitem__("pool", [2, 7])),
        "trainer.json's self_play keeps [2, 7] in its pool, not all among its snapshots [1, 2]",
    ),
    "opponent unknown": (
        fields(lambda m: m["self_play"].__setitem__("opponent", [7, -1])),
        "trainer.json's self_play has a copy play a snapshot it lacks (opponents [7, -1], snapshots [1, 2])",
    ),
    "bad record": (
        fields(lambda m: m["self_play"]["snapshots"][0].__setitem__("record", [1, -1, 0])),
        "trainer.json's self_play holds the record [1, -1, 0], not three counts",
    ),
    "bad rating": (
        fields(lambda m: m["self_play"].__setitem__("learner_rating", [25.0, 0.0])),
        "trainer.json's self_play holds the rating [25.0, 0.0], not (mu, sigma > 0)",
    ),
    "bad rng": (
        fields(lambda m: m["self_play"]["rng"].__setitem__("bit_generator", "MT19937")),
        "trainer.json's self_play is malformed (state must be for a PCG64 RNG)",
    ),
    "iteration a string": (
        fields(lambda m: m["self_play"]["snapshots"][0].__setitem__("iteration", "1")),
        "trainer.json's self_play names a snapshot by '1', not by its iteration",
    ),
    "iteration a fraction": (
        fields(lambda m: m["self_play"]["snapshots"][1].__setitem__("iteration", 2.7)),
        "trainer.json's self_play names a snapshot by 2.7, not by its iteration",
    ),
    "pool a string": (
        fields(lambda m: m["self_play"].__setitem__("pool", [1, "2"])),
        "trainer.json's self_play names a snapshot by '2', not by its iteration",
    ),
    "opponent a float": (
        fields(lambda m: m["self_play"].__setitem__("opponent", [1.0, -1])),
        "trainer.json's self_play holds the opponents [1.0, -1], not a list of integers",
    ),
    "snapshot tensor missing": (
        tensors(lambda t: t.pop("pool.2.policy.action_head.linear.bias")),
        "trainer.safetensors lacks pool.2.policy.action_head.linear.bias",
    ),
    "snapshot tensor misshapen": (
        tensors(lambda t: t.update({"pool.2.policy.action_head.linear.bias": torch.zeros(3)})),
        "trainer.safetensors holds pool.2.policy.action_head.linear.bias as [3] float32 where this run needs "
        "[9] float32",
    ),
    "stray snapshot tensor": (
        tensors(lambda t: t.update({"pool.9.policy.action_head.linear.bias": torch.zeros(9)})),
        "trainer.safetensors holds pool.9.policy.action_head.linear.bias, which this run does not have",
    ),
}


def test_an_undamaged_pool_checkpoint_resumes(pool_copy, pool_run):
    assert main(["train", "--resume", str(pool_copy)]) == 0
    assert (pool_copy / "policy.safetensors").read_bytes() == (pool_run / "policy.safetensors").read_bytes()


@pytest.mark.parametrize("case", POOL_DAMAGES)
def test_a_damaged_pool_is_one_line_and_leaves_the_run_folder_as_it_was(pool_copy, capsys, case):
    damage, message = POOL_DAMAGES[case]
    damage(pool_copy / RESUMED)
    before = snapshot(pool_copy)
    assert main(["train", "--resume", str(pool_copy)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("fastppo: error: "), err
    assert message in err and str(pool_copy / RESUMED) in err, err
    assert snapshot(pool_copy) == before


TINY_CLI = [
    "--env.num-envs",
    "2",
    "--ppo.num-steps",
    "8",
    "--ppo.total-timesteps",
    "32",
    "--run.progress",
    "false",
    "--run.tensorboard",
    "false",
]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            [RACE, "--env-kwargs", '{"seats": 3}', "--self-play.pool-size", "2"],
            "--self-play.pool-size needs a two-seat game (the learner in one seat, a snapshot in the other), "
            "and this one has 3 seats",
        ),
        (
            ["CartPole-v1", "--self-play.pool-size", "2"],
            "--self-play.* flags apply to turn-based PettingZoo games (pz:<module>), and CartPole-v1 is not one",
        ),
        (
            ["pz:tests.support.fake_pz_envs", "--self-play.pool-size", "2"],
            "--self-play.pool-size on a Parallel env plays one group of agents against the other, and "
            "pz:tests.support.fake_pz_envs's agents form 1 group(s)",
        ),
        (
            [CHASE, "--self-play.pool-size", "2", "--env.backend", "async"],
            "--self-play.* flags apply to PettingZoo games and Parallel envs stepped in the training process, "
            "and pz:tests.support.fake_pz_teams is a Parallel env on the async backend",
        ),
        (
            [CHASE, "--self-play.pool-size", "2", "--self-play.eval-every", "2"],
            "--self-play.eval-every plays games against fixed players (random, MCTS), which need a turn-based game",
        ),
        (
            [CHASE, "--self-play.latest-share", "0.3"],
            "on a Parallel env the learner already plays every agent: --self-play.* flags need a pool",
        ),
        (
            [CHASE, "--self-play.pool-size", "2", "--self-play.random-share", "0.2"],
            "--self-play.random-share plays games against fixed players (random, MCTS), which need a turn-based game",
        ),
        ([TICTACTOE, "--self-play.random-share", "1.5"], "--self-play.random-share must be in [0, 1], got 1.5"),
        ([TICTACTOE, "--self-play.pool-size", "-1"], "--self-play.pool-size must be 0 or more, got -1"),
        (
            [TICTACTOE, "--self-play.snapshot-every", "0", "--self-play.pool-size", "1"],
            "--self-play.snapshot-every must be a positive integer, got 0",
        ),
        ([TICTACTOE, "--self-play.latest-share", "1.5"], "--self-play.latest-share must be in [0, 1], got 1.5"),
        (
            [RACE, "--self-play.sampling", "uniform"],
            "--self-play.sampling uniform needs a pool, and --self-play.pool-size is 0: give "
            "--self-play.pool-size N (N >= 1), or drop it",
        ),
        ([TICTACTOE, "--self-play.sampling", "best"], "--self-play.sampling"),
        (
            [TICTACTOE, "--env.backend", "async"],
            "pz:pettingzoo.classic.tictactoe_v3 is a turn-based game, whose copies step in the training "
            "process: use --backend sync, not async",
        ),
        (
            [RACE, "--policy.memory", "lstm"],
            "--policy.memory on a turn-based game would carry nothing from one of a seat's turns to the next",
        ),
        (
            [RACE, "--run.stop-return", "0.5"],
            "--run.stop-return reads the learner's return in games against its past snapshots, and this run plays none",
        ),
        (
            [RACE, "--run.stop-return", "0.5", "--self-play.pool-size", "1", "--self-play.latest-share", "1"],
            "and this run plays none",
        ),
        (
            [TICTACTOE, "--self-play.eval-every", "2", "--self-play.eval-opponents", "mcts:0"],
            "--self-play.eval-opponents mcts:0: MCTS needs 2 to 10000 simulations per move",
        ),
        (
            [CONNECT_FOUR, "--self-play.eval-every", "2", "--self-play.eval-opponents", "minimax"],
            "--self-play.eval-opponents minimax: minimax plays pz:pettingzoo.classic.tictactoe_v3 only",
        ),
        # one simulation: OpenSpiel's ValueError at the first evaluation game, which stopped the run before its
        # first checkpoint
        (
            [TICTACTOE, "--self-play.eval-every", "1", "--self-play.eval-opponents", "mcts:1"],
            "--self-play.eval-opponents mcts:1: MCTS needs 2 to 10000 simulations per move",
        ),
        # checked even where unused (--self-play.eval-every 0): the run's config would keep them
        (
            [TICTACTOE, "--self-play.eval-opponents", "bogus"],
            "--self-play.eval-opponents bogus: unknown opponent, and no such folder",
        ),
        (
            [TICTACTOE, "--self-play.eval-opponents", "mcts:0"],
            "--self-play.eval-opponents mcts:0: MCTS needs 2 to 10000 simulations per move",
        ),
        (
            [TICTACTOE, "--self-play.eval-opponents", "mcts:-1"],
            "--self-play.eval-opponents mcts:-1: MCTS needs 2 to 10000 simulations per move",
        ),
        (
            [TICTACTOE, "--self-play.eval-opponents", "random,,minimax"],
            "--self-play.eval-opponents has an empty entry in 'random,,minimax': separate its entries by single commas",
        ),
        (
            [TICTACTOE, "--self-play.eval-opponents", "tests.support.fake_pz_envs:NoSuchPlayer"],
            "--self-play.eval-opponents tests.support.fake_pz_envs:NoSuchPlayer: tests.support.fake_pz_envs:"
            "NoSuchPlayer names nothing, not a player class",
        ),
        (
            [RACE, "--self-play.eval-opponents", "minimax"],
            "--self-play.eval-opponents minimax: minimax plays pz:pettingzoo.classic.tictactoe_v3 only, not "
            f"{RACE}: use random, the run folder of an agent trained on this game or a player class of yours",
        ),
        # the tictactoe_v3 preset's pool is off: its pool settings go with it, and the user's own flags are what an
        # error names
        (
            [TICTACTOE, "--self-play.pool-size", "0", "--self-play.snapshot-every", "3"],
            "--self-play.snapshot-every 3 needs a pool, and --self-play.pool-size is 0",
        ),
    ],
    ids=[
        "three-seats",
        "gymnasium",
        "parallel-one-group",
        "parallel-async",
        "parallel-eval",
        "parallel-no-pool",
        "parallel-random",
        "random-share",
        "negative-pool",
        "snapshot-every-0",
        "latest-share",
        "sampling-without-pool",
        "sampling-unknown",
        "async",
        "memory",
        "stop-return-no-pool",
        "stop-return-latest-only",
        "eval-mcts-0",
        "eval-minimax-off-tictactoe",
        "eval-mcts-1",
        "unused-eval-bogus",
        "unused-eval-mcts-0",
        "unused-eval-mcts-negative",
        "eval-empty-entry",
        "eval-user-class-missing",
        "eval-minimax-off-a-user-game",
        "pool-off-snapshot-every",
    ],  # fmt: skip
)
def test_bad_self_play_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    run = tmp_path / "run"
    assert main(["train", *argv, *TINY_CLI, "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("fastppo: error: "), err
    assert message in err, err
    assert not run.exists()


def test_pool_size_0_turns_the_presets_pool_off(tmp_path):
    """tic-tac-toe's preset sets a pool up (its size, sampling, snapshot interval); --self-play.pool-size 0
    trains without it, the preset's settings of a pool back at their defaults."""
    agent = fastppo.train(
        TICTACTOE,
        run_dir=tmp_path / "run",
        total_timesteps=640,
        num_envs=2,
        num_steps=32,
        progress=False,
        tensorboard=False,
        **{"self_play.pool_size": 0},
    )
    sp = agent.config.self_play
    assert (sp.pool_size, sp.sampling, sp.snapshot_every, sp.latest_share) == (
        0,
        SelfPlayConfig.sampling,
        SelfPlayConfig.snapshot_every,
        0.3,
    )


def test_evaluation_games_rate_the_learner_against_fixed_players():
    """--self-play.eval-every: the learner (deterministic) plays each fixed player with seats
    swapped, the rates are logged, and every game rates the learner against the player's rating,
    which stays where it started (the anchor of the scale): an untrained learner never beats
    perfect play, so its rating falls."""
    config = fastppo.make_config(TICTACTOE, "cleanrl-discrete", {"num_envs": 1})
    envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
    torch.manual_seed(0)
    agent = build_agent(
        config, envs.single_observation_space, envs.single_action_space, torch.device("cpu"), envs.layout
    )
    from fastppo.agents.agent_rows import PettingZooAgents

    agent.pettingzoo = PettingZooAgents.of(envs.spaces)
    cfg = SelfPlayConfig(eval_every=2, eval_games=6, eval_opponents=("random", "minimax"))
    first, again = (League(cfg, agent, 1, 2, seed=5, game=TICTACTOE) for _ in range(2))
    assert not any(name.startswith("eval/") for name in first.after_update(1))  # not due at iteration 1
    metrics = first.after_update(2)
    for spec in ("random", "minimax"):
        rates = [metrics[f"eval/{spec}/{kind}_rate"] for kind in ("win", "draw", "loss")]
        assert sum(rates) == pytest.approx(1.0) and all(r * 6 == round(r * 6) for r in rates)
    assert metrics["eval/minimax/win_rate"] == 0.0
    assert first.ratings.fixed == {"random": START_RATING, "minimax": START_RATING} and metrics[
        "ratings/minimax"
    ] == ordinal(START_RATING)
    assert (
        ordinal(first.ratings.learner) < ordinal(START_RATING) and first.ratings.learner[1] < START_RATING[1]
    )  # rated: lower, and surer
    again_metrics = again.after_update(2)
    assert {k: v for k, v in again_metrics.items() if k.startswith("eval/")} == {
        k: v for k, v in metrics.items() if k.startswith("eval/")
    }  # seeded by the iteration


class Adversaries:
    """Opponents that play the adversaries of copy 0 (the learner the agent); copy 1 is the
    learner's alone. Plays each row's one allowed action, and records what it was shown."""

    def __init__(self):
        self.shown: list[tuple[list[int], np.ndarray]] = []
        self.ended: list[tuple[int, list[float]]] = []

    def new_game(self, copy: int) -> np.ndarray:
        return np.array([copy == 1, copy == 1, True])

    def act(self, copies, rows, masks):
        self.shown.append((copies.tolist(), rows.copy()))
        return masks.argmax(axis=1)

    def game_over(self, copy: int, returns: np.ndarray) -> None:
        self.ended.append((copy, returns.tolist()))


def test_a_parallel_env_plays_a_group_by_its_opponents_on_the_rows_it_showed():
    config = fastppo.make_config(CHASE, "cleanrl-discrete", {"num_envs": 2, "env_kwargs": json.dumps({"masked": True})})
    envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
    envs.opponents = opponents = Adversaries()
    step = envs.reset(seed=0)
    assert step.live.tolist() == [False, False, True, True, True, True]  # copy 0: the learner plays agent_0 alone
    for _ in range(3):
        shown = step.obs.view(2, 3, -1)[0, :2].numpy()
        step = envs.step(
            step.action_mask.float().argmax(1)
        )  # the learner's allowed actions; Chase asserts every action is allowed
        assert opponents.shown[-1][0] == [0, 0] and np.array_equal(opponents.shown[-1][1], shown)
    assert opponents.ended == [(0, [6.0, 6.0, -6.0]), (1, [6.0, 6.0, -6.0])]
    step = envs.step(torch.zeros(6, dtype=torch.long))  # the reset row: a new episode, sides drawn again
    assert (
        step.live.tolist() == [False, False, True, True, True, True] and len(opponents.shown) == 3
    )  # no opponent moves on a reset row


def test_a_league_on_a_parallel_env_plays_one_group_against_the_other():
    config = fastppo.make_config(CHASE, "cleanrl-discrete", {"num_envs": 1})
    envs = make_vec_env(config.env, torch.device("cpu"), multi_agent=config.multi_agent)
    torch.manual_seed(0)
    agent = build_agent(
        config, envs.single_observation_space, envs.single_action_space, torch.device("cpu"), envs.layout
    )
    league = League(SelfPlayConfig(pool_size=2, latest_share=0.0), agent, 1, [0, 0, 1], seed=0)
    league.after_update(10)
    sides = {tuple(league.new_game(0).tolist()) for _ in range(40)}
    assert sides == {(True, True, False), (False, False, True)}  # the learner is one whole group, either
    league.learner_seat[0] = 0  # the adversaries: 6 + 6 beat the agent's -6
    league.game_over(0, np.array([6.0, 6.0, -6.0]))
    assert league.pool.snapshots[10].record == [1, 0, 0]


def test_stop_and_resume_with_decisions_left_open_equals_one_go(tmp_path, monkeypatch):
    """A rollout of the learner playing both seats ends on one seat's turn: the other seat's last
    move is carried into the next rollout (its advantage waits for its own next turn). Stopped
    there, the checkpoint holds it, and the resumed run trains it as the run in one go does."""
    overrides = RUN | {
        "num_steps": 7,
        "total_timesteps": ITERATIONS * 2 * 7,
        "checkpoint_every": 0,
        "env_kwargs": json.dumps({"most": 9}),
    }
    train(fastppo.make_config(TAKE_AWAY, "cleanrl-discrete", overrides), tmp_path / "one_go")
    with monkeypatch.context() as patch:
        stop_after(patch, ITERATIONS // 2)
        train(fastppo.make_config(TAKE_AWAY, "cleanrl-discrete", overrides), tmp_path / "split")
    resumed_config, checkpoint = resume_config(tmp_path / "split", env_id=TAKE_AWAY)
    assert checkpoint.tensors["cursor.open.valid"].any()  # a seat waits for its turn
    train(resumed_config, tmp_path / "split", checkpoint)
    assert_same_run(tmp_path / "one_go", tmp_path / "split")


def test_stop_and_resume_of_a_parallel_pool_equals_one_go(tmp_path, monkeypatch):
    overrides = (
        RUN
        | SELF_PLAY
        | {"num_steps": 7, "total_timesteps": ITERATIONS * 2 * 7, "checkpoint_every": 0, "self_play.latest_share": 0.3}
    )
    train(fastppo.make_config(CHASE, "cleanrl-discrete", overrides), tmp_path / "one_go")
    with monkeypatch.context() as patch:
        stop_after(patch, ITERATIONS // 2)
        train(fastppo.make_config(CHASE, "cleanrl-discrete", overrides), tmp_path / "split")
    resumed_config, checkpoint = resume_config(tmp_path / "split", env_id=CHASE)
    assert checkpoint.meta["self_play"]["pool"] == [2, 3]
    train(resumed_config, tmp_path / "split", checkpoint)
    assert_same_run(tmp_path / "one_go", tmp_path / "split")


def test_a_random_share_plays_uniform_legal_moves_rated_as_random():
    league_ = league(copies=4, pool_size=2, random_share=0.5)
    snapshots_at(league_, 1)
    opponents = Counter()
    for _ in range(400):
        league_.new_game(0)
        opponents["random" if league_.opponent[0] == RANDOM else "other"] += 1
    assert 160 < opponents["random"] < 240  # about half
    league_.opponent[:] = RANDOM
    masks = np.zeros((4, 2), dtype=bool)
    masks[[0, 1], [0, 0]] = True
    masks[[2, 3], [1, 1]] = True
    assert league_.act(np.arange(4), np.zeros((4, 3), dtype=np.float32), masks).tolist() == [
        0,
        0,
        1,
        1,
    ]  # the one legal move
    league_.learner_seat[0] = 0
    league_.game_over(0, np.array([1.0, -1.0]))
    metrics = league_.after_update(2)
    assert (
        metrics["self_play/win_vs_random"] == 1.0 and league_.ratings.fixed["random"] == START_RATING
    )  # an anchor: it does not move
    assert league_.ratings.learner[0] > START_RATING[0]
    again = league(copies=4, pool_size=2, random_share=0.5)
    tensors, meta = league_.state()
    again.load(tensors, json.loads(json.dumps(meta)))  # a copy playing random is part of the state
    assert again.opponent.tolist() == [RANDOM] * 4


def test_a_run_with_a_random_share_trains_and_logs_its_games(tmp_path):
    run = tmp_path / "ttt"
    fastppo.train(
        TICTACTOE,
        run_dir=run,
        total_timesteps=2048,
        num_envs=8,
        num_steps=32,
        progress=False,
        tensorboard=False,
        **{"self_play.random_share": 0.5},
    )
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("self_play/win_vs_random" in m for m in logged) and any("charts/episodic_return" in m for m in logged)


def test_a_batch_with_fewer_decisions_than_minibatches_trains_without_nan(tmp_path):
    """Two copies of tic-tac-toe for 8 steps give ~16 decisions for the preset's 8 minibatches,
    some iterations fewer: no minibatch may be empty, nor one row's advantage be scaled by a NaN
    std (the run stopped on NaN parameters at its first update)."""
    argv = [
        TICTACTOE,
        "--env.num-envs",
        "2",
        "--ppo.num-steps",
        "4",
        "--ppo.total-timesteps",
        "64",
        "--run.progress",
        "false",
        "--run.tensorboard",
        "false",
    ]
    assert main(["train", *argv, "--run-dir", str(tmp_path / "run")]) == 0

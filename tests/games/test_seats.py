"""Per-seat networks (--multi-agent.policies seat): each seat of a turn-based game its own member
of the agent-group population, trained on its own seat's decisions; the self-play pool snapshots
and plays the whole per-seat set; eval, save, load and resume as with one shared network."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import fastppo
from fastppo.cli.main import main
from fastppo.policies import ActorCritic
from fastppo.policies.population import GroupedActorCritic
from fastppo.training.resume import resume_config
from fastppo.training.trainer import train
from tests.support.fixtures.pinned.make_pinned import differences
from tests.support.paths import SUPPORT
from tests.support.resume import ITERATIONS, assert_same_run, metrics, stop_after

pytestmark = pytest.mark.games

TICTACTOE = "pz:pettingzoo.classic.tictactoe_v3"
RUN = {"num_envs": 2, "num_minibatches": 2, "update_epochs": 2, "progress": False, "tensorboard": False}
OLD_GAMES = SUPPORT / "fixtures" / "old_games"
SHORT = RUN | {"num_steps": 7, "total_timesteps": ITERATIONS * 2 * 7, "checkpoint_every": 0}
SEATS = SHORT | {
    "multi_agent.policies": "seat",
    "self_play.pool_size": 2,
    "self_play.snapshot_every": 1,
    "self_play.latest_share": 0.3,
}


def weights(member: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in member.parameters()])


def test_each_seat_trains_its_own_network_on_its_own_decisions(tmp_path):
    """Both seats' networks start from the same weights; after training they differ, each moved
    by its own seat's decisions (one shared network, or one group, would stay one)."""
    init = GroupedActorCritic.__init__

    def same_start(self, *args, **kwargs):  # seat 1 starts as seat 0: only training can part them
        init(self, *args, **kwargs)
        self.policies[1].load_state_dict(self.policies[0].state_dict())

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(GroupedActorCritic, "__init__", same_start)
        train(fastppo.make_config(TICTACTOE, "cleanrl-discrete", SEATS), tmp_path / "run")
    agent = fastppo.load(tmp_path / "run")
    assert isinstance(agent.policy, GroupedActorCritic) and len(agent.policy.policies) == 2
    first, second = (weights(member) for member in agent.policy.policies)
    assert not torch.equal(first, second)
    assert main(["eval", str(tmp_path / "run"), "--opponent", "random", "--games", "4"]) == 0


def test_stop_and_resume_with_per_seat_networks_and_a_pool_equals_one_go(tmp_path, monkeypatch):
    """The pool's snapshots are whole per-seat sets (every member's weights), resumed exactly."""
    train(fastppo.make_config(TICTACTOE, "cleanrl-discrete", SEATS), tmp_path / "one_go")
    with monkeypatch.context() as patch:
        stop_after(patch, ITERATIONS // 2)
        train(fastppo.make_config(TICTACTOE, "cleanrl-discrete", SEATS), tmp_path / "split")
    resumed_config, checkpoint = resume_config(tmp_path / "split")
    assert resumed_config.multi_agent.policies == "seat"
    assert {
        "pool.3.policy.policies.0.action_head.linear.weight",
        "pool.3.policy.policies.1.action_head.linear.weight",
    } <= set(checkpoint.tensors)
    train(resumed_config, tmp_path / "split", checkpoint)
    assert_same_run(tmp_path / "one_go", tmp_path / "split")


def test_a_shared_policy_games_run_folder_loads_and_resumes_as_it_did(tmp_path):
    """A tic-tac-toe run with a pool, written before per-seat networks, curricula and the envs'
    move histories (its config, league and env snapshot without them), loads as one network and
    resumes to the metrics the fastppo that wrote it resumed to."""
    pinned = json.loads((OLD_GAMES / "tictactoe_pool.json").read_text())
    run = tmp_path / "tictactoe_pool"
    shutil.copytree(OLD_GAMES / "tictactoe_pool", run)
    agent = fastppo.load(run)
    assert agent.config.multi_agent.policies == "shared" and type(agent.policy) is ActorCritic
    total = str(pinned["resume_total_timesteps"])
    assert main(["train", "--resume", str(run), "--ppo.total-timesteps", total, "--run.progress", "false"]) == 0
    found = differences("metrics", pinned["metrics"], metrics(run), 1e-5, 1e-6)
    assert not found, "\n".join(found[:20])


def test_per_seat_networks_need_agent_ids(capsys):
    argv = ["train", TICTACTOE, "--multi-agent.policies", "seat", "--multi-agent.no-agent-ids"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--multi-agent.policies seat reads each row's policy from its agent id" in err

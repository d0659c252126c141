"""Self-play's magnet (fastppo.games.magnet, --self-play.magnet-coef): the magnet follows the
learner's weights as an exponential moving average, the loss adds exactly coef x KL(policy ||
magnet) over the legal moves, a run resumed from a checkpoint continues bit for bit, the learner's
last policy nears an equilibrium of Kuhn poker, and bad flags are one line."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import fastppo
from fastppo.cli.main import main
from fastppo.config import PPOConfig
from fastppo.games.magnet import MAGNET_LOG_PROBS, Magnet
from fastppo.policies import ActorCritic
from fastppo.training.resume import resume_config
from fastppo.training.trainer import train
from fastppo.training.update import UpdateCoefficients, minibatch_loss
from tests.support.games import KUHN, trained_on_kuhn
from tests.support.resume import ITERATIONS, assert_same_run, stop_after

pytest.importorskip("pyspiel")
pytestmark = pytest.mark.games


def policies(count: int) -> list[ActorCritic]:
    torch.manual_seed(0)
    return [ActorCritic(gym.spaces.Box(-1.0, 1.0, (5,)), gym.spaces.Discrete(3)) for _ in range(count)]


def test_the_magnet_follows_the_learners_weights_by_its_rate():
    start, learner = policies(2)
    magnet = Magnet(start, 0.25)
    magnet.follow(learner)
    magnet.follow(learner)
    for (name, m), s, p in zip(magnet.policy.named_parameters(), start.parameters(), learner.parameters()):
        # two steps a quarter of the way: 1 - 0.75^2 = 7/16 of it
        torch.testing.assert_close(m, s + (p - s) * 7 / 16, msg=name)
    assert all(not p.requires_grad for p in magnet.policy.parameters())
    assert not torch.equal(next(start.parameters()), next(magnet.policy.parameters()))  # a copy, not the start


def test_the_loss_adds_coef_times_the_exact_kl_to_the_magnet_over_legal_moves():
    learner, magnet_policy = policies(2)
    with torch.no_grad():  # the heads start near uniform (gain 0.01): far from it, the KL is no rounding error
        for policy in (learner, magnet_policy):
            policy.action_head.linear.weight.mul_(100.0)
    torch.manual_seed(1)
    rows = 7
    mb = {
        "obs": torch.randn(rows, 5),
        "actions": torch.tensor([0, 1, 2, 0, 1, 0, 2]),
        "logprobs": torch.full((rows,), -1.0),
        "values": torch.zeros(rows),
        "advantages": torch.randn(rows),
        "returns": torch.randn(rows),
        "action_masks": torch.tensor(
            [[True, True, True]] * 4 + [[True, True, False], [True, False, True]] * 1 + [[True, False, True]]
        ),
    }
    magnet = Magnet(magnet_policy, 0.5).log_probs(mb)
    coefs = UpdateCoefficients(clip_coef=0.2, ent_coef=0.01, kl_beta=1.0, magnet_coef=0.7)
    plain, plain_metrics = minibatch_loss(learner, mb, PPOConfig(), coefs)
    with_magnet, metrics = minibatch_loss(learner, mb | magnet, PPOConfig(), coefs)
    # by hand: each row's distributions over its legal moves, renormalised
    with torch.no_grad():
        kls = []
        for row in range(rows):
            legal = mb["action_masks"][row]
            p = torch.softmax(learner(mb["obs"][row : row + 1])[0][0][legal], -1)
            q = torch.softmax(magnet_policy(mb["obs"][row : row + 1])[0][0][legal], -1)
            kls.append((p * (p / q).log()).sum())
        expected = torch.stack(kls).mean()
    assert float(expected) > 0.01  # two different networks: the term is not a zero
    torch.testing.assert_close(metrics["magnet_kl"], expected)
    torch.testing.assert_close(with_magnet - plain, 0.7 * expected)
    for name in ("pg_loss", "v_loss", "entropy"):  # the rest of the loss unchanged
        torch.testing.assert_close(metrics[name], plain_metrics[name], msg=name)


def magnet_overrides(**more) -> dict:
    return {
        "num_envs": 4, "num_steps": 32, "total_timesteps": ITERATIONS * 4 * 32, "checkpoint_every": 0, "gamma": 1.0,
        "learning_rate": 1e-3, "progress": False, "tensorboard": False, "self_play.magnet_coef": 0.5,
        "self_play.magnet_rate": 0.3, **more,
    }  # fmt: skip


def test_stop_and_resume_continues_with_the_same_magnet(tmp_path, monkeypatch):
    overrides = magnet_overrides()
    train(fastppo.make_config(KUHN, "cleanrl-discrete", overrides), tmp_path / "one_go")
    with monkeypatch.context() as patch:
        stop_after(patch, ITERATIONS // 2)
        train(fastppo.make_config(KUHN, "cleanrl-discrete", overrides), tmp_path / "split")
    resumed_config, checkpoint = resume_config(tmp_path / "split")
    train(resumed_config, tmp_path / "split", checkpoint)
    assert_same_run(tmp_path / "one_go", tmp_path / "split")


def test_a_run_logs_its_kl_to_the_magnet(tmp_path):
    agent = train(fastppo.make_config(KUHN, "cleanrl-discrete", magnet_overrides()), tmp_path / "run")
    kls = [record["losses/magnet_kl"] for record in agent.history]
    assert len(kls) == ITERATIONS and all(kl >= 0 for kl in kls) and any(kl > 0 for kl in kls[1:]), kls


@pytest.mark.slow
def test_the_learners_last_policy_nears_an_equilibrium_of_kuhn_poker(tmp_path):
    """The benchmark's Kuhn settings (benchmarks/equilibrium.py), seed 1: the learner's own policy
    at the end of training, below the goal's 0.05 (plain self-play with these settings ends near
    0.2, uniform play is at 0.4583)."""
    agent = trained_on_kuhn(
        tmp_path / "run",
        seed=1,
        total_timesteps=524288,
        num_envs=64,
        **{"ppo.ent_coef": 0.0, "self_play.magnet_coef": 0.5, "self_play.exploitability_every": 64},
    )
    assert agent.history[-1]["eval/exploitability"] < 0.05, agent.history[-1]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--self-play.magnet-coef", "-0.5"], "--self-play.magnet-coef must be a number >= 0, got -0.5"),
        (["--self-play.magnet-coef", "nan"], "--self-play.magnet-coef must be a number >= 0, got nan"),
        (["--self-play.magnet-coef", "1", "--self-play.magnet-rate", "0"], "--self-play.magnet-rate must be in (0, 1]"),
        (
            ["--self-play.magnet-coef", "1", "--self-play.magnet-rate", "1.5"],
            "--self-play.magnet-rate must be in (0, 1]",
        ),
        (
            ["--self-play.magnet-rate", "0.1"],
            "--self-play.magnet-rate 0.1 moves a magnet, and --self-play.magnet-coef is 0: give "
            "--self-play.magnet-coef",
        ),
        (
            ["--self-play.magnet-coef", "1", "--multi-agent.policies", "seat"],
            "--self-play.magnet-coef pulls the one shared policy toward its magnet, and --multi-agent.policies seat",
        ),
    ],
    ids=["negative", "nan", "rate-0", "rate-above-1", "rate-without-coef", "seat-policies"],
)
def test_bad_magnet_flags_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    run = tmp_path / "run"
    assert main(["train", KUHN, *argv, "--total-timesteps", "256", "--num-envs", "2", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"fastppo: error: {message}"), err
    assert not run.exists()


def test_a_magnet_on_a_parallel_env_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "pz:tests.support.fake_pz_teams", "--self-play.pool-size", "2", "--self-play.magnet-coef", "1"]
    assert main([*argv, "--total-timesteps", "256", "--num-envs", "2", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(
        "fastppo: error: --self-play.magnet-coef pulls the learner of a turn-based game toward its magnet, and "
        "pz:tests.support.fake_pz_teams is a Parallel env: drop it"
    ), err
    assert not run.exists()


def test_magnet_log_probs_are_the_batch_field_the_loss_reads():
    (policy,) = policies(1)
    batch = {"obs": torch.randn(4, 5), "action_masks": torch.tensor([[True, False, True]] * 4)}
    field = Magnet(policy, 0.1).log_probs(batch)[MAGNET_LOG_PROBS]
    probabilities = field.exp()
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(4))
    assert (probabilities[:, 1] == 0).all()

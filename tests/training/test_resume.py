"""Exact resume: 2N iterations in one go == N, stop (a real SIGINT), resume for N."""

from __future__ import annotations

import json

import pytest
import torch

import fastppo
from fastppo.cli.main import main
from fastppo.files.run_folder import list_checkpoints
from fastppo.training.resume import resume_config
from fastppo.training.trainer import train
from tests.support.resume import ITERATIONS, assert_same_run, metrics, stop_after


def config(env_id: str = "CartPole-v1", **overrides):
    base = {
        "num_envs": 4,
        "num_steps": 32,
        "total_timesteps": ITERATIONS * 128,
        "progress": False,
        "checkpoint_every": 0,
    }
    return fastppo.make_config(env_id, overrides=base | overrides)


@pytest.mark.parametrize(
    "env_id, overrides",
    [
        ("CartPole-v1", {}),
        ("CartPole-v1", {"normalize_obs": True, "normalize_reward": True, "objective": "kl", "tensorboard": False}),
        ("Pendulum-v1", {"normalize_obs": True, "normalize_reward": True, "tensorboard": False}),
        ("CartPole-v1", {"backend": "tensor", "tensorboard": False}),
        # One minibatch of 128 rows: the update runs the one-node MLP backward (policies/mlp_autograd.py).
        ("CartPole-v1", {"backend": "tensor", "num_minibatches": 1, "tensorboard": False}),
        # Recurrent policies: the live states at the stop are part of the run.
        ("CartPole-v1", {"policy.memory": "lstm", "policy.memory_size": 16, "tensorboard": False}),
        (
            "CartPole-v1",
            {
                "backend": "tensor",
                "policy.memory": "gru",
                "policy.memory_size": 16,
                "policy.shared_trunk": True,
                "tensorboard": False,
            },
        ),
        # A Gymnasium env of the user's that declares its state plain data (fastppo_plain_state).
        ("tests.support.fake_envs:DriftEnv", {"tensorboard": False}),
        # A GPU policy beside host envs: the rollout and its statistics stay on the CPU (envs.make.rollout_device).
        pytest.param(
            "Pendulum-v1",
            {"device": "cuda", "normalize_obs": True, "normalize_reward": True, "tensorboard": False},
            marks=pytest.mark.gpu,
        ),
        pytest.param(
            "CartPole-v1",
            {"device": "cuda", "policy.memory": "lstm", "policy.memory_size": 16, "tensorboard": False},
            marks=pytest.mark.gpu,
        ),
    ],
    ids=[
        "cartpole",
        "cartpole-normalised-kl",
        "pendulum-normalised",
        "cartpole-tensor-backend",
        "cartpole-one-node-backward",
        "cartpole-lstm",
        "cartpole-tensor-gru",
        "user-plain-env",
        "pendulum-normalised-cuda-policy",
        "cartpole-lstm-cuda-policy",
    ],
)
def test_stop_and_resume_equals_one_go(tmp_path, monkeypatch, env_id, overrides):
    train(config(env_id, **overrides), tmp_path / "one_go")

    with monkeypatch.context() as patch:
        stop_after(patch, ITERATIONS // 2)
        agent = train(config(env_id, **overrides), tmp_path / "split")
    assert len(agent.history) == ITERATIONS // 2
    assert [p.name for p in list_checkpoints(tmp_path / "split")] == [f"{ITERATIONS // 2:06d}"]

    resumed_config, checkpoint = resume_config(
        tmp_path / "split", env_id=env_id
    )  # a user env is named, as on the command line
    resumed = train(resumed_config, tmp_path / "split", checkpoint)
    assert len(resumed.history) == ITERATIONS  # the history before the stop is reloaded
    assert_same_run(tmp_path / "one_go", tmp_path / "split")


def test_a_user_env_that_does_not_declare_plain_state_resumes_with_fresh_episodes(tmp_path, monkeypatch):
    """The same env as the exact case above without ``fastppo_plain_state``: the checkpoint holds
    no env, so the resumed half starts fresh episodes (its own noise stream again) and parts ways
    with the run in one go, while everything before the stop is the same."""
    env_id = "tests.support.fake_envs:UndeclaredDriftEnv"
    train(config(env_id, tensorboard=False), tmp_path / "one_go")
    with monkeypatch.context() as patch:
        stop_after(patch, ITERATIONS // 2)
        train(config(env_id, tensorboard=False), tmp_path / "split")
    checkpoint = list_checkpoints(tmp_path / "split")[-1]
    assert json.loads((checkpoint / "trainer.json").read_text())["env"] is None
    resumed_config, checkpoint = resume_config(tmp_path / "split", env_id=env_id)
    train(resumed_config, tmp_path / "split", checkpoint)
    one_go, split = metrics(tmp_path / "one_go"), metrics(tmp_path / "split")
    assert one_go[: ITERATIONS // 2] == split[: ITERATIONS // 2]
    assert one_go[ITERATIONS // 2] != split[ITERATIONS // 2]


@pytest.mark.parametrize(
    ("env_id", "exact"),
    [
        ("CartPole-v1", True),
        ("CartPoleNoVelocity-v1", True),  # fastppo's own observation wrapper
        ("tests.support.fake_envs:DriftEnv", True),
        ("tests.support.fake_envs:UndeclaredDriftEnv", False),
        ("tests.support.fake_envs:StackedDriftEnv", False),  # a frame stack's deque is not plain data
    ],
)
def test_which_gymnasium_envs_resume_exactly(env_id, exact):
    from fastppo.config import EnvConfig
    from fastppo.envs import make_vec_env
    from fastppo.envs.snapshot import env_is_exact

    envs = make_vec_env(EnvConfig(env_id=env_id, num_envs=2), torch.device("cpu"))
    try:
        assert env_is_exact(envs) is exact
    finally:
        envs.close()


def test_resume_after_a_kill_drops_metrics_logged_past_the_checkpoint(tmp_path, monkeypatch):
    train(config(), tmp_path / "one_go")
    run = tmp_path / "killed"
    train(config(checkpoint_every=2), run)
    # As if killed after iteration 5: checkpoint 4 is the newest, metrics.jsonl has 6 lines.
    for newer in list_checkpoints(run)[-1:]:
        __import__("shutil").rmtree(newer)
    (run / "checkpoints" / "latest").write_text("000004\n")
    assert main(["train", "--resume", str(run)]) == 0
    assert_same_run(tmp_path / "one_go", run)


def test_resume_through_the_cli_can_extend_the_budget(tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                "--run-dir",
                str(run),
                "--total-timesteps",
                "1024",
                "--progress",
                "false",
                "--tensorboard",
                "false",
            ]
        )
        == 0
    )
    assert main(["train", "--resume", str(run), "--total-timesteps", "2048"]) == 0
    out = capsys.readouterr().out
    assert "resuming" in out and "2048 steps" in out
    assert [r["global_step"] for r in metrics(run)] == [1024, 2048]


def test_extending_the_budget_keeps_the_schedules_continuous(tmp_path, monkeypatch):
    """Stopped after 3 of 6 iterations, resumed for 12 and stopped after 7, resumed for 16: the
    linear lr never jumps at a resume and anneals to 0 at the last end."""
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        stop_after(patch, 3)
        train(config(), run)
    for iterations, stop in ((12, 7), (16, None)):
        with monkeypatch.context() as patch:
            if stop:
                stop_after(patch, stop)
            fastppo.resume(run, total_timesteps=iterations * 128)
    lrs = [r["charts/learning_rate"] for r in metrics(run)]
    drops = [a - b for a, b in zip(lrs, lrs[1:])]
    assert len(lrs) == 16 and lrs[0] == 1e-2
    assert all(0 < drop <= drops[0] * (1 + 1e-9) for drop in drops), lrs  # today's lr rose at each resume
    assert lrs[-1] == pytest.approx(drops[-1])  # one more step of the line lands on 0: annealed to the new end


@pytest.mark.parametrize("schedule", ["linear", "constant"])
def test_resuming_a_finished_run_says_how_to_train_further(tmp_path, capsys, schedule):
    run = tmp_path / "run"
    train(config(total_timesteps=256, lr_schedule=schedule, clip_schedule=schedule, tensorboard=False), run)
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(f"fastppo: error: {run} is finished (trained its 256 steps); ") and len(err.splitlines()) == 1
    ), err
    advice = err.split(": fastppo ")[-1].split()  # the advice works as written, annealed schedules too
    assert advice == ["train", "--resume", str(run), "--total-timesteps", "512"]
    assert main(advice) == 0
    assert [r["global_step"] for r in metrics(run)] == [128, 256, 384, 512]


def test_extending_a_finished_run_restarts_its_linear_schedules(tmp_path):
    """A finished run's linear lr, clip and entropy stand at 0; resumed with twice the budget they
    restart from their configured values and anneal in a straight line to 0 at the new end."""
    run = tmp_path / "run"
    train(config(total_timesteps=4 * 128, ent_schedule="linear", tensorboard=False), run)
    resumed = fastppo.resume(run, total_timesteps=8 * 128)
    cfg = resumed.config.ppo
    assert (cfg.lr_schedule, cfg.clip_schedule, cfg.ent_schedule) == ("linear", "linear", "linear")
    rows = metrics(run)
    assert [r["global_step"] for r in rows] == [128 * i for i in range(1, 9)]
    for name, start in (
        ("charts/learning_rate", cfg.learning_rate),
        ("charts/clip_coef", cfg.clip_coef),
        ("charts/ent_coef", cfg.ent_coef),
    ):
        assert [r[name] for r in rows[:4]] == [start - start * (i / 4) for i in range(4)], (
            name
        )  # the first run, CleanRL's line
        assert [r[name] for r in rows[4:]] == [start - start * (i / 4) for i in range(4)], (
            name
        )  # restarted, to 0 at step 1024


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--resume", "{missing}"], "does not exist"),
        (["train", "--resume", "{empty}"], "no checkpoint in"),
        (["train", "--resume", "{run}", "--learning-rate", "1"], "cannot change ppo.learning_rate when resuming"),
        (["train", "Pendulum-v1", "--resume", "{run}"], "trains CartPole-v1, not Pendulum-v1"),
        (["train", "CartPole-v1", "--run-dir", "{run}"], "already holds a run"),
        (["train"], "give an ENV_ID"),
    ],
)
def test_resume_errors_are_one_line(tmp_path, capsys, argv, message):
    run, empty = tmp_path / "run", tmp_path / "empty"
    empty.mkdir()
    train(config(total_timesteps=128, tensorboard=False), run)
    capsys.readouterr()
    argv = [a.format(missing=tmp_path / "missing", empty=empty, run=run) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err

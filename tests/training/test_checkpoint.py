"""Checkpoints: layout, round trip, keep-K, env snapshots, atomicity under SIGKILL, and the
non-finite guard that never lets NaNs into a checkpoint."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import fastppo
from fastppo.config import EnvConfig
from fastppo.envs import make_vec_env
from fastppo.envs.snapshot import restore_envs, snapshot_envs
from fastppo.errors import FastPPOError
from fastppo.files.run_folder import list_checkpoints
from fastppo.training.checkpoint import load_checkpoint
from fastppo.training.trainer import train


def config(env_id="CartPole-v1", **overrides):
    base = {"num_envs": 2, "num_steps": 16, "total_timesteps": 32 * 6, "progress": False, "tensorboard": False}
    return fastppo.make_config(env_id, overrides=base | overrides)


def test_checkpoints_every_n_keep_the_newest_k(tmp_path):
    agent = train(config(checkpoint_every=2, keep_checkpoints=2, total_timesteps=32 * 7), tmp_path)
    # iterations 2, 4, 6 and the final 7; the two newest remain
    assert [p.name for p in list_checkpoints(tmp_path)] == ["000006", "000007"]
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "000007"
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))
    ckpt = load_checkpoint(tmp_path)
    assert (ckpt.iteration, ckpt.global_step) == (7, 7 * 32)
    assert ckpt.config.to_dict() == agent.config.to_dict()
    assert {"rng.torch", "cursor.obs", "cursor.valid"} <= ckpt.tensors.keys()
    assert any(k.startswith("optim.") for k in ckpt.tensors)
    meta = json.loads((ckpt.path / "trainer.json").read_text())
    assert meta["env"]["kind"] == "sync" and len(meta["env"]["envs"]) == 2
    for key, value in agent.policy.state_dict().items():
        assert torch.equal(ckpt.agent.policy.state_dict()[key], value)


def test_zero_means_only_at_the_end_and_a_checkpoint_folder_loads_as_an_agent(tmp_path):
    train(config(checkpoint_every=0), tmp_path)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["000006"]
    agent = fastppo.load(tmp_path / "checkpoints" / "000006")
    assert agent.act(np.zeros(4, np.float32)) in (0, 1)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0"])
def test_sync_env_snapshot_continues_identically(env_id):
    """Snapshot mid-episode, step on, restore the snapshot into fresh envs: same trajectory."""
    cfg = EnvConfig(env_id=env_id, num_envs=3)
    a, b = make_vec_env(cfg, torch.device("cpu")), make_vec_env(cfg, torch.device("cpu"))
    a.reset(seed=3)
    a.single_action_space.seed(0)
    actions = [torch.as_tensor(np.stack([a.single_action_space.sample() for _ in range(3)])) for _ in range(520)]
    for act in actions[:150]:
        a.step(act)
    a.pop_episodes()
    tensors, meta = snapshot_envs(a)
    meta = json.loads(json.dumps(meta))  # through JSON, as on disk
    b.reset(seed=99)
    restore_envs(b, tensors, meta)
    for act in actions[150:]:
        sa, sb = a.step(act), b.step(act)
        for x, y in zip(sa, sb):
            assert (x is None and y is None) or torch.equal(x, y)
    episodes = a.pop_episodes()
    assert episodes.returns and episodes == b.pop_episodes()  # episodes ended, and were counted alike


def test_non_exact_envs_are_not_snapshot():
    pytest.importorskip("Box2D")
    envs = make_vec_env(EnvConfig(env_id="LunarLander-v3"), torch.device("cpu"))
    assert snapshot_envs(envs) == ({}, None)


# --- atomicity ----------------------------------------------------------------------------------

SAVE_LOOP = [
    sys.executable, "-m", "fastppo.cli", "train",
    "--num-envs", "1", "--num-steps", "4", "--num-minibatches", "1", "--update-epochs", "1",
    "--hidden-sizes", "512,512", "--total-timesteps", "100000000", "--checkpoint-every", "1", "--keep-checkpoints", "2",
    "--progress", "false", "--tensorboard", "false",
]  # fmt: skip


def newest(run) -> int:
    found = list_checkpoints(run)
    return int(found[-1].name) if found else 0


def test_sigkill_while_saving_leaves_a_loadable_checkpoint(tmp_path):
    """A real process that checkpoints every iteration (a 512x512 MLP: saves dominate its time) is
    killed with SIGKILL at random moments; the newest complete checkpoint always loads, and the
    run resumes from it."""
    rng = random.Random(0)
    run = tmp_path / "run"
    for round_ in range(3):
        argv = SAVE_LOOP + (["CartPole-v1", "--run-dir", str(run)] if round_ == 0 else ["--resume", str(run)])
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        before = newest(run)
        while time.monotonic() < deadline and newest(run) <= before + 2:
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        ckpt = load_checkpoint(run)  # must not raise
        assert ckpt.iteration > before
        assert all(torch.isfinite(p).all() for p in ckpt.agent.policy.parameters())


# --- non-finite guard -----------------------------------------------------------------------------


@pytest.mark.parametrize("env, what", [("NaNRewardEnv", "reward"), ("InfObservationEnv", "observation")])
def test_nan_from_the_env_stops_with_its_name_and_keeps_the_last_checkpoint(tmp_path, env, what):
    # 100 good steps per env, 16 per iteration: iteration 7 sees the first bad value.
    cfg = config(
        f"tests.support.nonfinite_envs:{env}", checkpoint_every=1, total_timesteps=32 * 20, normalize_obs=False
    )
    with pytest.raises(FastPPOError) as info:
        train(cfg, tmp_path)
    message = str(info.value)
    assert f"NaN/Inf {what}" in message and "iteration 7" in message
    assert "last good checkpoint is kept" in message and "000006" in message
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.iteration == 6
    assert all(torch.isfinite(p).all() for p in ckpt.agent.policy.parameters())
    assert not (tmp_path / "policy.safetensors").exists()  # no final agent from a failed run


def test_nan_parameters_stop_training_before_any_checkpoint_of_them(tmp_path, monkeypatch):
    import fastppo.training.trainer as trainer

    update, calls = trainer.ppo_update, []

    def update_then_break(policy, *args, **kwargs):
        losses = update(policy, *args, **kwargs)
        calls.append(1)
        if len(calls) == 3:
            with torch.no_grad():
                policy.value_head.weight[0, 0] = float("nan")
        return losses

    monkeypatch.setattr(trainer, "ppo_update", update_then_break)
    with pytest.raises(FastPPOError, match=r"iteration 3 .*parameter value_head.weight became NaN/Inf.*000002"):
        train(config(checkpoint_every=1), tmp_path)
    assert load_checkpoint(tmp_path).iteration == 2


def test_nan_loss_is_named(tmp_path, monkeypatch):
    import fastppo.training.trainer as trainer

    update = trainer.ppo_update
    monkeypatch.setattr(trainer, "ppo_update", lambda *a, **k: update(*a, **k) | {"v_loss": float("nan")})
    with pytest.raises(FastPPOError, match="iteration 1 .*v_loss became NaN/Inf"):
        train(config(), tmp_path)
    assert not list_checkpoints(tmp_path)

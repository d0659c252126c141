"""MuJoCo continuous control: the presets, a short HalfCheetah run, and the observation
normaliser (one estimate for all envs, saved and restored with the agent, frozen at evaluation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fastppo
from fastppo.agents.agent import load_agent
from fastppo.envs import make_single_env
from fastppo.envs.env_config import make_config

pytest.importorskip("mujoco", reason='MuJoCo is not installed: pip install -e ".[mujoco]"')
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # gymnasium warns that v4 ids are old


@pytest.mark.parametrize(
    "env_id", ["HalfCheetah-v4", "HalfCheetah-v5", "Hopper-v4", "Walker2d-v5", "Ant-v4", "Humanoid-v5"]
)
def test_each_mujoco_env_gets_its_preset(env_id):
    config = make_config(env_id)
    env, ppo, policy = config.env, config.ppo, config.policy
    assert (env.num_envs, env.normalize_obs, env.clip_obs, env.normalize_reward, env.clip_reward) == (
        1,
        True,
        10.0,
        True,
        10.0,
    )
    assert (ppo.num_steps, ppo.update_epochs, ppo.num_minibatches, ppo.total_timesteps) == (2048, 10, 32, 1_000_000)
    assert (ppo.learning_rate, ppo.lr_schedule, ppo.gamma, ppo.gae_lambda, ppo.clip_coef, ppo.ent_coef) == (
        3e-4,
        "linear",
        0.99,
        0.95,
        0.2,
        0.0,
    )
    assert (policy.hidden_sizes, policy.activation, policy.shared_trunk, policy.init_log_std) == (
        (64, 64),
        "tanh",
        False,
        0.0,
    )


@pytest.fixture(scope="module")
def cheetah_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cheetah")
    agent = fastppo.train(
        "HalfCheetah-v4",
        run_dir=run_dir,
        total_timesteps=256,
        num_envs=2,
        num_steps=64,
        num_minibatches=4,
        progress=False,
        tensorboard=False,
    )
    return agent, run_dir


def test_a_short_halfcheetah_run_trains(cheetah_run):
    agent, _ = cheetah_run
    assert len(agent.history) == 2
    assert all(np.isfinite(row["losses/value_loss"]) for row in agent.history)


def test_one_observation_statistic_is_shared_by_all_envs(cheetah_run):
    agent, _ = cheetah_run
    assert agent.obs_rms.mean.shape == (17,)
    # 2 reset observations, then 2 envs x 64 steps x 2 iterations, all folded into one estimate.
    assert agent.obs_rms.count == pytest.approx(2 + 2 * 64 * 2, abs=1e-3)


def test_normaliser_statistics_travel_with_the_saved_agent(cheetah_run):
    agent, run_dir = cheetah_run
    loaded = load_agent(run_dir)
    for key, value in agent.obs_rms.state_dict().items():
        torch.testing.assert_close(loaded.obs_rms.state_dict()[key], value)
    obs = make_single_env("HalfCheetah-v4").reset(seed=0)[0]
    np.testing.assert_allclose(loaded.act(obs, deterministic=True), agent.act(obs, deterministic=True), rtol=1e-6)


def test_normaliser_is_frozen_at_evaluation(cheetah_run):
    agent, _ = cheetah_run
    before = {k: v.clone() for k, v in agent.obs_rms.state_dict().items()}
    env = make_single_env("HalfCheetah-v4", for_eval=True)
    obs, _ = env.reset(seed=1)
    for _ in range(20):
        obs, *_ = env.step(agent.act(obs, deterministic=True))
    env.close()
    for key, value in agent.obs_rms.state_dict().items():
        torch.testing.assert_close(value, before[key])


def test_a_mujoco_gl_backend_that_cannot_load_is_a_one_line_error(tmp_path):
    """MuJoCo loads MUJOCO_GL's renderer on import, rendering or not (MUJOCO_GL=egl on a machine
    without libEGL failed so on the lent GPU machine). A fresh process: this one has mujoco loaded."""
    import os
    import subprocess
    import sys

    command = [
        sys.executable,
        "-m",
        "fastppo",
        "train",
        "HalfCheetah-v5",
        "--total-timesteps",
        "2048",
        "--run-dir",
        str(tmp_path / "run"),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "MUJOCO_GL": "bogus"}, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "fastppo: error: env 'HalfCheetah-v5': MuJoCo could not load the MUJOCO_GL=bogus renderer "
        "(RuntimeError: invalid value for environment variable MUJOCO_GL: bogus): unset MUJOCO_GL to train "
        "(it only matters for rendering), or install that backend's libraries"
    ]
    assert not (tmp_path / "run").exists()

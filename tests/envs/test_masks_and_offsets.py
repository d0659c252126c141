"""Action masks from every place an env may publish them, and Discrete spaces that start away
from 0: training, evaluation, recording, ``agent.act`` and ONNX export all agree."""

from __future__ import annotations

import numpy as np
import pytest

import fastppo
from fastppo.cli.main import main
from fastppo.errors import FastPPOError

TINY = dict(
    total_timesteps=512, num_envs=2, num_steps=64, num_minibatches=2, update_epochs=2, progress=False, tensorboard=False
)


def comparable(history):
    return [
        {k: v for k, v in row.items() if k not in ("time", "charts/SPS") and not k.startswith("time/")}
        for row in history
    ]


def test_a_mask_in_info_trains_exactly_as_the_same_mask_in_a_dict_observation():
    # Both envs raise on an invalid action, so finishing also shows every step was masked.
    in_obs = fastppo.train("tests.support.fake_envs:MaskedChoiceEnv", preset="cleanrl-discrete", **TINY)
    in_info = fastppo.train("tests.support.fake_envs:InfoMaskedChoiceEnv", preset="cleanrl-discrete", **TINY)
    assert comparable(in_info.history) == comparable(in_obs.history)
    assert in_info.action_masks and in_obs.action_masks


def test_the_update_scores_every_row_under_the_mask_it_was_sampled_with():
    """The first epoch's first ratio is exactly 1: the buffer keeps each row's mask, first
    observations of episodes (reset rows' successors) included."""
    import torch

    from fastppo.envs import make_vec_env
    from fastppo.policies import ActorCritic
    from fastppo.profiling import SectionTimer
    from fastppo.training.rollout import EnvCursor, ObservationNormalizer, RolloutBuffer, collect_rollout

    config = fastppo.make_config("tests.support.fake_envs:InfoMaskedChoiceEnv", "cleanrl-discrete", {"num_envs": 3})
    envs = make_vec_env(config.env, torch.device("cpu"))
    first = envs.reset(seed=0)
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space)
    buf = RolloutBuffer.allocate(50, envs, torch.device("cpu"), first.action_mask.shape[-1])
    collect_rollout(
        policy,
        envs,
        buf,
        EnvCursor(first.obs, first.action_mask, torch.ones(3, dtype=torch.bool)),
        ObservationNormalizer(None, 10.0),
        None,
        SectionTimer(),
    )
    envs.close()
    rows = buf.flatten()
    with torch.no_grad():
        newlogprob = policy.evaluate(rows["obs"], rows["actions"], rows["action_masks"])[0]
    assert torch.equal(newlogprob, rows["logprobs"])
    assert rows["action_masks"].sum(-1).eq(2).all()  # every row holds the env's mask (2 of 4 allowed)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ("StepOnlyMaskedChoiceEnv", r"from step\(\) but not from reset\(\)"),
        ("ResetOnlyMaskedChoiceEnv", r"from reset\(\) but not from step\(\)"),
    ],
)
def test_masks_published_by_only_one_of_reset_and_step_are_a_one_line_error(env, message, capsys, tmp_path):
    with pytest.raises(FastPPOError, match=message):
        fastppo.train(f"tests.support.fake_envs:{env}", preset="cleanrl-discrete", **TINY)
    code = main(["train", f"tests.support.fake_envs:{env}", "--total-timesteps", "512", "--num-envs", "2",
                 "--num-steps", "64", "--progress", "false", "--tensorboard", "false", "--run-root",
                 str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "action_mask" in err


@pytest.fixture(scope="module")
def masked_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("masked") / "run"
    fastppo.train("tests.support.fake_envs:InfoMaskedChoiceEnv", preset="cleanrl-discrete", run_dir=run, **TINY)
    return run


def test_evaluate_masks_every_step_wherever_the_env_publishes_the_mask(masked_run):
    # strict envs raise on an invalid action, the first step of each episode included
    in_info = fastppo.evaluate(masked_run, env_id="tests.support.fake_envs:InfoMaskedChoiceEnv", episodes=20, seed=3)
    in_obs = fastppo.evaluate(masked_run, env_id="tests.support.fake_envs:MaskedChoiceEnv", episodes=20, seed=3)
    assert in_info.returns == in_obs.returns and len(in_info.returns) == 20
    with pytest.raises(FastPPOError, match=r"trained with action masks, but .* published none from reset\(\)"):
        fastppo.evaluate(masked_run, env_id="tests.support.fake_envs:StepOnlyMaskedChoiceEnv", episodes=2)


def test_record_masks_every_step(masked_run, tmp_path):
    frames = fastppo.record(
        masked_run,
        tmp_path / "masked.mp4",
        episodes=2,
        deterministic=False,
        seed=1,
        env_id="tests.support.fake_envs:InfoMaskedChoiceEnv",
    )
    assert frames.stat().st_size > 0


def test_a_masked_agent_needs_a_mask_and_a_loaded_one_remembers_it(masked_run):
    agent = fastppo.load(masked_run)
    assert agent.action_masks
    obs = np.array([1, 0, 0, 1], dtype=np.float32)
    with pytest.raises(ValueError, match="trained with action masks"):
        agent.act(obs)
    actions = {int(agent.act(obs, action_mask=obs.astype(bool))) for _ in range(50)}
    assert actions <= {0, 3}


@pytest.mark.parametrize(
    "env_id", ["tests.support.fake_envs:OffsetTargetEnv", "tests.support.fake_envs:MultiOffsetTargetEnv"]
)
def test_discrete_actions_and_observations_that_start_away_from_zero(env_id, tmp_path):
    # The env raises on an action outside its space, so training is itself the first check.
    agent = fastppo.train(
        env_id,
        preset="cleanrl-discrete",
        run_dir=tmp_path / "run",
        **{**TINY, "total_timesteps": 4096, "learning_rate": 3e-3, "ent_coef": 0.0},
    )
    assert agent.obs_shape == (3,)  # Discrete(3, start=10) one-hot
    assert np.mean(agent.episode_returns[-200:]) > 0.5
    space = fastppo.envs.make.make_single_env(env_id).action_space
    obs = np.zeros((64, 3), dtype=np.float32)
    obs[:, 2] = 1.0  # observation 12
    actions = agent.act(obs)
    assert all(space.contains(np.asarray(a, dtype=space.dtype)) for a in actions)
    np.testing.assert_array_equal(agent.act(obs[0], deterministic=True), np.asarray(space.start) + 2)
    assert fastppo.evaluate(tmp_path / "run", env_id=env_id, episodes=5, deterministic=True).mean_return == 1.0


def test_onnx_export_gives_the_env_actions_of_an_offset_space(tmp_path):
    import onnxruntime as ort

    agent = fastppo.train("tests.support.fake_envs:OffsetTargetEnv", preset="cleanrl-discrete", **TINY)
    path = fastppo.export_onnx(agent, tmp_path / "offset.onnx")
    obs = np.eye(3, dtype=np.float32)
    onnx_actions = ort.InferenceSession(str(path)).run(["action"], {"obs": obs})[0]
    np.testing.assert_array_equal(onnx_actions, agent.act(obs, deterministic=True))
    assert set(onnx_actions.tolist()) <= {-1, 0, 1}


def test_agent_act_with_an_observation_of_the_wrong_shape_names_both_shapes():
    agent = fastppo.train("CartPole-v1", preset="cleanrl-discrete", **{**TINY, "total_timesteps": 128, "num_steps": 64})
    with pytest.raises(ValueError, match=r"shape \(3,\).*\(4,\)"):
        agent.act(np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError, match=r"shape \(2, 5\).*\(4,\)"):
        agent.act(np.zeros((2, 5), dtype=np.float32))

"""The Atari path on real ROMs (ale-py ships them): wrapper semantics, the Nature CNN, a short run.

Deterministic checks use ``*NoFrameskip-v4`` ids, which have no sticky actions.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

import fastppo
from fastppo.agents.agent import load_agent
from fastppo.cli.main import main
from fastppo.config import EnvConfig, PolicyConfig
from fastppo.env_ids import is_atari
from fastppo.envs import make_single_env, make_vec_env
from fastppo.envs.atari import EpisodicLife, FireReset
from fastppo.errors import FastPPOError
from fastppo.policies import ActorCritic
from fastppo.policies.cnn import NatureCNN

pytest.importorskip("ale_py", reason='ale-py is not installed: pip install -e ".[atari]"')


def test_observations_are_four_stacked_84x84_uint8_frames():
    env = make_single_env("ALE/Pong-v5")
    assert env.observation_space.shape == (4, 84, 84) and env.observation_space.dtype == np.uint8
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    obs, *_ = env.step(0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    env.close()


def test_frame_stack_sets_the_channels_and_keeps_the_newest_frames():
    """--env.frame-stack N observes the newest N of the frames a 4-stack holds (1: CleanRL's LSTM setting)."""
    stacks = {n: make_vec_env(EnvConfig(env_id="BreakoutNoFrameskip-v4", num_envs=1, frame_stack=n), torch.device("cpu")) for n in (1, 2, 4)}
    observations = {n: [envs.reset(seed=0).obs] for n, envs in stacks.items()}
    for action in [1, 2, 2, 3, 0]:
        for n, envs in stacks.items():
            observations[n].append(envs.step(torch.tensor([action])).obs)
    for n, envs in stacks.items():
        assert envs.single_observation_space.shape == (n, 84, 84)
        envs.close()
    for one, two, four in zip(*observations.values()):
        assert one.shape == (1, 1, 84, 84) and one.dtype == torch.uint8
        torch.testing.assert_close(one, four[:, -1:])
        torch.testing.assert_close(two, four[:, -2:])


@pytest.mark.parametrize(
    "env_id, value, message",
    [
        ("ALE/Pong-v5", "0", "--env.frame-stack must be a positive integer, got 0"),
        ("ALE/Pong-v5", "two", "--env.frame-stack expects an integer, got 'two'"),
        ("CartPole-v1", "1", "--env.frame-stack 1 applies to Atari ids only, and CartPole-v1 is not one: leave it at 4"),
    ],
)
def test_a_bad_frame_stack_is_one_line_and_exit_2(tmp_path, capsys, env_id, value, message):
    assert main(["train", env_id, "--frame-stack", value, "--run-dir", str(tmp_path / "run"), "--progress", "false"]) == 2
    out, err = capsys.readouterr()
    assert err == f"fastppo: error: {message}\n" and "results in" not in out  # refused before training: no summary


def test_atari_ids_are_recognised():
    assert is_atari("ALE/Pong-v5") and is_atari("BreakoutNoFrameskip-v4")
    assert not is_atari("CartPole-v1") and not is_atari("NoSuchGame-v9")


def test_each_step_is_four_frames_max_pooled_over_the_last_two():
    env = make_single_env("BreakoutNoFrameskip-v4")
    env.reset(seed=3)
    ale, raw = env.unwrapped.ale, env.unwrapped
    pooled_differs = False
    for action in [2, 3, 2, 3, 0, 3, 3, 2, 0, 1] * 2:
        state, frame0 = ale.cloneState(), ale.getEpisodeFrameNumber()
        obs, *_ = env.step(action)
        assert ale.getEpisodeFrameNumber() - frame0 == 4
        # Replay the same four frames on the raw ALE and pool the last two by hand.
        after = ale.cloneState()
        ale.restoreState(state)
        frames = []
        for _ in range(4):
            raw.step(action)
            frames.append(ale.getScreenGrayscale())
        ale.restoreState(after)
        expected = cv2.resize(np.maximum(frames[2], frames[3]), (84, 84), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(obs[-1], expected)
        last_only = cv2.resize(frames[3], (84, 84), interpolation=cv2.INTER_AREA)
        pooled_differs |= not np.array_equal(expected, last_only)
    assert pooled_differs, "the ball never moved between the pooled frames: the check proved nothing"
    env.close()


def test_life_loss_ends_the_training_episode_but_not_the_game():
    """Through the vector env: NEXT_STEP reset rows after a lost life continue the same game, and
    the recorded episode is the whole game with its raw score."""
    envs = make_vec_env(EnvConfig(env_id="BreakoutNoFrameskip-v4", num_envs=1), torch.device("cpu"))
    envs.reset(seed=1)
    ale = envs.envs.envs[0].unwrapped.ale
    rng = np.random.default_rng(0)
    life_losses, reset_row, rewards = 0, False, []
    for _ in range(5000):
        step = envs.step(torch.as_tensor(rng.integers(0, 4, size=1)))
        if reset_row:
            assert step.reward.item() == 0 and not step.terminated.item() and not step.truncated.item()
        else:
            rewards.append(step.reward.item())
        reset_row = bool(step.terminated.item() or step.truncated.item())
        if step.terminated.item() and ale.lives() > 0:
            life_losses += 1
            frame = ale.getEpisodeFrameNumber()
            envs.step(torch.zeros(1, dtype=torch.long))  # the reset row: a no-op (+FIRE), not a new game
            reset_row = False
            assert ale.getEpisodeFrameNumber() > frame, "a lost life restarted the game"
            assert envs.pop_episodes().returns == [], "a lost life was logged as a finished episode"
        episodes = envs.pop_episodes()
        if episodes.returns:
            break
    envs.close()
    assert life_losses == 4  # Breakout: 5 lives, the last one ends the game
    assert len(episodes.returns) == 1 and episodes.returns[0] >= sum(rewards) and episodes.lengths[0] > 0
    assert set(rewards) <= {0.0, 1.0}


def test_rewards_are_sign_clipped_in_training_and_raw_at_evaluation():
    """Space Invaders scores 5-30 points per alien: clipped to 1 for training, raw for evaluation,
    where one episode is one full game (all lives) and its summed reward is the game's score."""
    train_env = make_single_env("SpaceInvadersNoFrameskip-v4")
    train_env.reset(seed=0)
    rewards = []
    for _ in range(300):
        _, reward, terminated, truncated, _ = train_env.step(train_env.action_space.sample())
        rewards.append(float(reward))
        if terminated or truncated:
            train_env.reset()
    assert set(rewards) <= {-1.0, 0.0, 1.0} and 1.0 in rewards
    train_env.close()

    eval_env = make_single_env("SpaceInvadersNoFrameskip-v4", for_eval=True)
    assert not any(isinstance(w, EpisodicLife) for w in _wrappers(eval_env))
    assert any(isinstance(w, FireReset) and w.on_life_loss for w in _wrappers(eval_env))
    eval_env.reset(seed=0)
    eval_env.action_space.seed(0)
    total, info = 0.0, {}
    for _ in range(20_000):
        _, reward, terminated, truncated, info = eval_env.step(eval_env.action_space.sample())
        total += float(reward)
        if terminated or truncated:
            break
    assert terminated and eval_env.unwrapped.ale.lives() == 0
    assert info["episode"]["r"] == pytest.approx(total) and total > 30 and total % 5 == 0
    eval_env.close()


def _wrappers(env):
    while hasattr(env, "env"):
        yield env
        env = env.env


def test_nature_cnn_shapes_and_pixel_scaling():
    cnn = NatureCNN((4, 84, 84))
    assert cnn.out_features == 512 and cnn.linear[0].in_features == 3136
    frames = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    features = cnn(frames)
    assert features.shape == (5, 512)
    torch.testing.assert_close(features, cnn(frames.float() / 255.0))
    with pytest.raises(FastPPOError, match="at least 36x36"):
        NatureCNN((4, 20, 20))
    with pytest.raises(FastPPOError, match="channels, height, width"):
        NatureCNN((84, 84))


def test_actor_critic_on_pong_shares_the_cnn_trunk():
    env = make_single_env("ALE/Pong-v5")
    policy = ActorCritic(env.observation_space, env.action_space, PolicyConfig(shared_trunk=True, encoder="auto"))
    assert isinstance(policy.actor_encoder, NatureCNN) and policy.critic_encoder is policy.actor_encoder
    obs = torch.as_tensor(np.stack([env.reset(seed=i)[0] for i in range(3)]))
    logits, value = policy(obs)
    assert logits.shape == (3, env.action_space.n) and value.shape == (3,)
    env.close()


def test_a_short_pong_run_trains_saves_and_loads(tmp_path):
    agent = fastppo.train(
        "ALE/Pong-v5", run_dir=tmp_path, total_timesteps=256, num_envs=2, num_steps=64, progress=False, tensorboard=False
    )
    assert agent.config.ppo.clip_schedule == "linear" and agent.config.policy.shared_trunk
    assert len(agent.history) == 2 and agent.obs_rms is None
    loaded = load_agent(tmp_path)
    assert loaded.obs_shape == (4, 84, 84)
    obs = make_single_env("ALE/Pong-v5", for_eval=True).reset(seed=0)[0]
    assert loaded.act(obs, deterministic=True) == agent.act(obs, deterministic=True)


CLEANRL_PPO_ATARI_LSTM = {
    "env.num_envs": 8, "env.frame_stack": 1, "ppo.total_timesteps": 10_000_000, "ppo.num_steps": 128, "ppo.num_minibatches": 4, "ppo.update_epochs": 4,
    "ppo.learning_rate": 2.5e-4, "ppo.lr_schedule": "linear", "ppo.gamma": 0.99, "ppo.gae_lambda": 0.95, "ppo.norm_adv": True, "ppo.clip_coef": 0.1,
    "ppo.clip_schedule": "constant", "ppo.clip_vloss": True, "ppo.ent_coef": 0.01, "ppo.vf_coef": 0.5, "ppo.max_grad_norm": 0.5,
    "policy.memory": "lstm", "policy.memory_size": 128, "policy.shared_trunk": True, "policy.encoder": "cnn",
}  # fmt: skip
"""CleanRL ppo_atari_lstm.py's arguments (anneal_lr only: its clip coefficient stays 0.1) in fastppo's names."""


def test_the_atari_lstm_preset_is_cleanrls_ppo_atari_lstm():
    config = fastppo.make_config("BreakoutNoFrameskip-v4", "atari-lstm")
    values = {key: getattr(getattr(config, key.split(".")[0]), key.split(".")[1]) for key in CLEANRL_PPO_ATARI_LSTM}
    assert values == CLEANRL_PPO_ATARI_LSTM


def test_the_atari_lstm_preset_observes_one_frame_through_resume_load_eval_and_export(tmp_path):
    """CleanRL's ppo_atari_lstm.py setting: 1 frame per observation, the LSTM is the memory. The saved
    config's frame_stack must rebuild the same 1-channel env wherever the agent goes."""
    ort = pytest.importorskip("onnxruntime", reason="ONNX export needs the [export] extra")
    agent = fastppo.train(
        "BreakoutNoFrameskip-v4", preset="atari-lstm", run_dir=tmp_path, total_timesteps=256, num_envs=2, num_steps=64, num_minibatches=2,
        lr_schedule="constant", clip_schedule="constant", progress=False, tensorboard=False,
    )  # fmt: skip
    policy = agent.policy
    assert isinstance(policy.actor_encoder, NatureCNN) and policy.recurrent and policy.critic_memory is policy.actor_memory
    assert policy.state_size == 256  # h and c of one LSTM of 128
    assert agent.config.env.frame_stack == 1 and agent.obs_shape == (1, 84, 84) and policy.actor_encoder.convs[0].in_channels == 1
    resumed = fastppo.resume(tmp_path, total_timesteps=384, progress=False)
    assert resumed.obs_shape == (1, 84, 84) and len(resumed.history) == 3
    loaded = load_agent(tmp_path)
    assert loaded.obs_shape == (1, 84, 84)
    obs = make_single_env("BreakoutNoFrameskip-v4", for_eval=True, frame_stack=1).reset(seed=0)[0]
    action = loaded.step(obs, loaded.initial_state(), deterministic=True)[0]
    assert action == resumed.step(obs, resumed.initial_state(), deterministic=True)[0]
    result = fastppo.evaluate(tmp_path, episodes=1, deterministic=True, seed=0)  # a 4-frame env would be refused
    assert len(result.returns) == 1 and result.lengths[0] > 0
    session = ort.InferenceSession(str(fastppo.export_onnx(loaded, tmp_path / "lstm.onnx")))
    assert session.get_inputs()[0].shape[1:] == [1, 84, 84]
    onnx_action, _ = session.run(None, {"obs": obs[None], "state": loaded.initial_state().numpy()})
    assert onnx_action[0] == action

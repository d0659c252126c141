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
    stacks = {
        n: make_vec_env(EnvConfig(env_id="BreakoutNoFrameskip-v4", num_envs=1, frame_stack=n), torch.device("cpu"))
        for n in (1, 2, 4)
    }
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
        (
            "CartPole-v1",
            "1",
            "--env.frame-stack 1 applies to Atari ids only, and CartPole-v1 is not one: leave it at 4",
        ),
    ],
)
def test_a_bad_frame_stack_is_one_line_and_exit_2(tmp_path, capsys, env_id, value, message):
    assert (
        main(["train", env_id, "--frame-stack", value, "--run-dir", str(tmp_path / "run"), "--progress", "false"]) == 2
    )
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


def test_nature_cnn_convolves_channels_last_frames_with_the_same_features():
    cnn = NatureCNN((4, 84, 84))
    layouts = []
    cnn.convs[0].register_forward_pre_hook(
        lambda _, inputs: layouts.append(inputs[0].is_contiguous(memory_format=torch.channels_last))
    )
    frames = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
    features = cnn(frames)
    assert layouts == [True]
    torch.testing.assert_close(
        features, cnn.linear(cnn.convs(frames.float() / 255.0)), rtol=1e-5, atol=1e-6
    )  # the default layout


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
        "ALE/Pong-v5",
        run_dir=tmp_path,
        total_timesteps=256,
        num_envs=2,
        num_steps=64,
        progress=False,
        tensorboard=False,
    )
    assert agent.config.ppo.clip_schedule == "linear" and agent.config.policy.shared_trunk
    assert len(agent.history) == 2 and agent.obs_rms is None
    loaded = load_agent(tmp_path)
    assert loaded.obs_shape == (4, 84, 84)
    obs = make_single_env("ALE/Pong-v5", for_eval=True).reset(seed=0)[0]
    assert loaded.act(obs, deterministic=True) == agent.act(obs, deterministic=True)


CLEANRL_PPO_ATARI_LSTM = {
    "env.num_envs": 8, "env.frame_stack": 1, "ppo.total_timesteps": 10_000_000, "ppo.num_steps": 128,
    "ppo.num_minibatches": 4, "ppo.update_epochs": 4, "ppo.learning_rate": 2.5e-4, "ppo.lr_schedule": "linear",
    "ppo.gamma": 0.99, "ppo.gae_lambda": 0.95, "ppo.norm_adv": True, "ppo.clip_coef": 0.1,
    "ppo.clip_schedule": "constant", "ppo.clip_vloss": True, "ppo.ent_coef": 0.01, "ppo.vf_coef": 0.5,
    "ppo.max_grad_norm": 0.5, "policy.memory": "lstm", "policy.memory_size": 128, "policy.shared_trunk": True,
    "policy.encoder": "cnn",
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
        "BreakoutNoFrameskip-v4", preset="atari-lstm", run_dir=tmp_path, total_timesteps=256, num_envs=2, num_steps=64,
        num_minibatches=2, lr_schedule="constant", clip_schedule="constant", progress=False, tensorboard=False,
    )  # fmt: skip
    policy = agent.policy
    assert (
        isinstance(policy.actor_encoder, NatureCNN) and policy.recurrent and policy.critic_memory is policy.actor_memory
    )
    assert policy.state_size == 256  # h and c of one LSTM of 128
    assert (
        agent.config.env.frame_stack == 1
        and agent.obs_shape == (1, 84, 84)
        and policy.actor_encoder.convs[0].in_channels == 1
    )
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


# The ale backend: ale-py's C++ vector env (fastppo.envs.ale_vec), side by side with the gymnasium path.

CPU = torch.device("cpu")


def random_steps(env_id: str, backend: str, num_envs: int, steps: int, seed: int = 0, frame_stack: int = 4):
    """Random actions from ``seed``; returns (the step results, the finished episodes, the env's spaces)."""
    envs = make_vec_env(EnvConfig(env_id=env_id, num_envs=num_envs, backend=backend, frame_stack=frame_stack), CPU)
    results = [envs.reset(seed=seed)]
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        results.append(envs.step(torch.as_tensor(rng.integers(0, envs.single_action_space.n, size=num_envs))))
    episodes = envs.pop_episodes()
    spaces = (envs.single_observation_space, envs.single_action_space)
    envs.close()
    return results, episodes, spaces


def test_the_atari_presets_step_on_the_ale_backend():
    for preset in ("atari", "atari-lstm"):
        assert fastppo.make_config("BreakoutNoFrameskip-v4", preset).env.backend == "ale"
    assert fastppo.make_config("ALE/Pong-v5").env.backend == "ale"
    assert fastppo.make_config("CartPole-v1").env.backend == "sync"


@pytest.mark.parametrize("frame_stack", [4, 1])
def test_ale_backend_has_the_gymnasium_paths_spaces_and_frames(frame_stack):
    """Same spaces, uint8 frames of the same shape; the first observation of a seeded reset is the
    same game screen on both engines (both reset with FIRE and a few no-ops: allow a few pixels)."""
    sync, _, sync_spaces = random_steps("BreakoutNoFrameskip-v4", "sync", 2, 0, frame_stack=frame_stack)
    ale, _, ale_spaces = random_steps("BreakoutNoFrameskip-v4", "ale", 2, 0, frame_stack=frame_stack)
    assert (
        ale_spaces == sync_spaces and ale_spaces[0].shape == (frame_stack, 84, 84) and ale_spaces[0].dtype == np.uint8
    )
    assert ale[0].obs.shape == sync[0].obs.shape == (2, frame_stack, 84, 84) and ale[0].obs.dtype == torch.uint8
    newest_sync, newest_ale = sync[0].obs[:, -1].float(), ale[0].obs[:, -1].float()
    assert newest_ale.mean() > 10 and (newest_ale - newest_sync).abs().gt(0).float().mean() < 0.02


def test_ale_backend_is_reproducible_from_its_seed():
    first, episodes, _ = random_steps("BreakoutNoFrameskip-v4", "ale", 2, 200, seed=3)
    again, episodes_again, _ = random_steps("BreakoutNoFrameskip-v4", "ale", 2, 200, seed=3)
    other, *_ = random_steps("BreakoutNoFrameskip-v4", "ale", 2, 200, seed=4)
    assert all(torch.equal(a.obs, b.obs) and torch.equal(a.reward, b.reward) for a, b in zip(first, again))
    assert episodes == episodes_again
    assert not all(torch.equal(a.obs, b.obs) for a, b in zip(first, other))


def test_ale_backend_ends_training_episodes_at_lost_lives_and_logs_whole_games_in_raw_points(monkeypatch):
    """Space Invaders scores 5-30 points an alien. Every C++ step is recorded: training sees
    sign(raw score), 0 on reset rows; a lost life is ``terminated`` with the game going on, its
    reset row plays FIRE whatever the policy chose; a game's logged return is its raw score
    summed over all its steps (lost lives' reset rows included), its length those steps."""
    from fastppo.envs.ale_vec import AleVecEnv

    sent, received = [], []
    step = AleVecEnv.__init__

    def recording_init(self, *args, **kwargs):
        step(self, *args, **kwargs)
        (engine,) = self.engines
        send, recv = engine.send, engine.recv
        engine.send = lambda action: (sent.append(np.array(action)), send(action))[1]
        engine.recv = lambda: (received.append(result := recv()), result)[1]

    monkeypatch.setattr(AleVecEnv, "__init__", recording_init)
    results, episodes, _ = random_steps("SpaceInvadersNoFrameskip-v4", "ale", 2, 2500, seed=0)
    steps = results[1:]
    raw = np.stack([r[1] for r in received])
    lives = np.stack([r[4]["lives"] for r in received])
    frames = np.stack([r[4]["episode_frame_number"] for r in received])
    terminated = np.stack([s.terminated.numpy() for s in steps])
    truncated = np.stack([s.truncated.numpy() for s in steps])
    rewards = np.stack([s.reward.numpy() for s in steps])
    actions = np.stack(sent)
    assert not truncated.any()
    games, lost_lives = [], 0
    for env in range(2):
        total, length, after = 0.0, 0, None  # after: what the previous step ended (None, "life", "game")
        for t in range(len(steps)):
            if after == "game":  # the C++ env's own reset row: a new game, nothing scored
                assert frames[t, env] < frames[t - 1, env] and raw[t, env] == 0
                assert rewards[t, env] == 0 and not terminated[t, env]
                after = None
                continue
            total += raw[t, env]
            length += 1
            if after == "life":  # a lost life's reset row: FIRE, the same game goes on
                assert actions[t, env] == 1 and frames[t, env] > frames[t - 1, env]
                assert rewards[t, env] == 0
            else:
                assert rewards[t, env] == np.sign(raw[t, env])
            after = None
            if terminated[t, env]:
                if lives[t, env] > 0:
                    after, lost_lives = "life", lost_lives + 1
                else:
                    after = "game"
                    games.append((total, length))
                    total, length = 0.0, 0
    assert lost_lives >= 2 * len(games) and len(games) >= 2
    assert sorted(zip(episodes.returns, episodes.lengths)) == sorted(games)
    assert all(r > 30 and r % 5 == 0 for r, _ in games)
    assert set(np.unique(rewards)) <= {0.0, 1.0} and rewards.max() == 1.0


def test_ale_backend_truncates_at_the_ids_frame_limit_as_the_gymnasium_path_does():
    """An episode that reaches its frame limit (a registered Pong with 400 frames: no game ends
    sooner) is truncated, not terminated, on both engines, within the same few steps (the
    engines' reset no-ops differ), and is logged with its raw score and length."""
    import gymnasium as gym

    short = "ALE/PongShortForTests-v5"
    if short not in gym.registry:
        base = gym.spec("PongNoFrameskip-v4")
        gym.register(id=short, entry_point=base.entry_point, kwargs={**base.kwargs, "max_num_frames_per_episode": 400})
    for backend in ("sync", "ale"):
        results, episodes, _ = random_steps(short, backend, 2, 150, seed=0)
        terminated = torch.stack([s.terminated for s in results])
        truncated = torch.stack([s.truncated for s in results])
        assert not terminated.any(), backend
        truncated_at = truncated.nonzero()[:, 0].tolist()
        assert len(truncated_at) == 2 and all(90 <= t <= 100 for t in truncated_at), (backend, truncated_at)
        assert len(episodes.returns) == 2 and all(r <= 0 for r in episodes.returns), backend
        # In agent steps; the gymnasium stack also counts its reset's FIRE and UP steps.
        assert sorted(episodes.lengths) == [t + (2 if backend == "sync" else 0) for t in sorted(truncated_at)], backend


def test_the_ale_backend_refuses_an_id_it_cannot_serve(tmp_path, capsys):
    assert (
        main(["train", "CartPole-v1", "--backend", "ale", "--run-dir", str(tmp_path / "run"), "--progress", "false"])
        == 2
    )
    message = (
        "the ale backend steps Atari games (ALE/Pong-v5, BreakoutNoFrameskip-v4), and CartPole-v1 is not one: use "
        "--env.backend sync"
    )
    assert capsys.readouterr().err == f"fastppo: error: {message}\n"


@pytest.mark.parametrize("backend", [[], ["--backend", "ale"]])
def test_an_atari_id_without_ale_py_is_one_line(tmp_path, backend):
    import subprocess
    import sys

    hide_ale = (
        "import sys; sys.modules['ale_py'] = None; from fastppo.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    argv = ["train", "ALE/Pong-v5", *backend, "--run-dir", str(tmp_path / "run"), "--progress", "false"]
    proc = subprocess.run([sys.executable, "-c", hide_ale, *argv], capture_output=True, text=True, timeout=120)
    message = (
        "env 'ALE/Pong-v5' is an Atari game, and ale-py (which plays them) is not installed: pip install "
        "'fastppo[atari]'"
    )
    assert (proc.returncode, proc.stderr) == (2, f"fastppo: error: {message}\n")
    assert not (tmp_path / "run").exists()


def test_a_run_resumes_on_its_saved_backend_or_on_another_host_backend_when_asked(tmp_path, capsys):
    run = tmp_path / "run"
    small = [
        "--num-envs",
        "2",
        "--num-steps",
        "32",
        "--num-minibatches",
        "2",
        "--progress",
        "false",
        "--tensorboard",
        "false",
    ]
    assert (
        main(
            [
                "train",
                "BreakoutNoFrameskip-v4",
                "--backend",
                "sync",
                "--total-timesteps",
                "64",
                "--run-dir",
                str(run),
                *small,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--total-timesteps", "128", "--progress", "false"]) == 0
    assert "(its saved config, sync backend)" in capsys.readouterr().out  # not the preset's ale
    assert (
        main(["train", "--resume", str(run), "--total-timesteps", "192", "--backend", "ale", "--progress", "false"])
        == 0
    )
    assert "(its saved config, ale backend)" in capsys.readouterr().out
    assert (
        "backend: ale" in (run / "config.yaml").read_text()
        and len((run / "metrics.jsonl").read_text().splitlines()) == 3
    )
    assert (
        main(["train", "--resume", str(run), "--total-timesteps", "256", "--backend", "tensor", "--progress", "false"])
        == 2
    )
    message = (
        f"{run} was trained on the ale backend and cannot resume on tensor: a resume may move between sync, "
        "async, envpool, ale only; drop --backend"
    )
    assert capsys.readouterr().err == f"fastppo: error: {message}\n"


def test_a_cnn_run_collects_on_one_thread_and_updates_on_every_cpu(tmp_path, monkeypatch):
    """The automatic threads in fp32: the rollout's forward on a step's few frames runs on one
    thread, the update's minibatches on every CPU (3 here); --torch-threads N sets both. (bf16 keeps
    the update's threads throughout: tests/policies/test_pixel_precision.py.)"""
    import fastppo.config as config_module

    monkeypatch.setattr(config_module, "available_cpus", lambda: 3)
    seen = []

    def threads_of(explicit):
        seen.clear()
        original = NatureCNN.forward

        def recorded(self, obs):
            seen.append((torch.is_grad_enabled(), torch.get_num_threads()))
            return original(self, obs)

        monkeypatch.setattr(NatureCNN, "forward", recorded)
        fastppo.train(
            "BreakoutNoFrameskip-v4", run_dir=tmp_path / str(explicit), total_timesteps=64, num_envs=2, num_steps=32,
            num_minibatches=2, update_epochs=1, progress=False, tensorboard=False, precision="fp32",
            **({"torch_threads": explicit} if explicit else {}),
        )  # fmt: skip
        monkeypatch.setattr(NatureCNN, "forward", original)
        return {"rollout": {n for grad, n in seen if not grad}, "update": {n for grad, n in seen if grad}}

    assert threads_of(0) == {"rollout": {1}, "update": {3}}
    assert threads_of(2) == {"rollout": {2}, "update": {2}}


def test_the_ale_backend_trains_without_opencv(tmp_path, monkeypatch):
    """The C++ env preprocesses by itself: a machine without OpenCV (a lent GPU's) trains on it."""
    import sys

    monkeypatch.setitem(sys.modules, "cv2", None)
    agent = fastppo.train(
        "BreakoutNoFrameskip-v4",
        run_dir=tmp_path,
        total_timesteps=64,
        num_envs=2,
        num_steps=32,
        num_minibatches=2,
        update_epochs=1,
        progress=False,
        tensorboard=False,
    )
    assert agent.config.env.backend == "ale" and agent.obs_shape == (4, 84, 84) and len(agent.history) == 1

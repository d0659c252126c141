"""Recurrent policies (--policy.memory lstm|gru): the rollout's states, the update's re-run of
whole env sequences, resets at episode starts, memory that learns, and the agent API."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import fastppo
from fastppo.envs import make_vec_env
from fastppo.errors import FastPPOError
from fastppo.policies import ActorCritic
from fastppo.profiling import SectionTimer
from fastppo.training.rollout import EnvCursor, ObservationNormalizer, RolloutBuffer, collect_rollout
from fastppo.training.update import minibatch

TINY = dict(
    total_timesteps=512, num_envs=4, num_steps=64, num_minibatches=2, update_epochs=2, progress=False, tensorboard=False
)


def rollout(memory: str, shared: bool, env_id: str = "CartPole-v1", backend: str = "sync"):
    """Two 100-step rollouts of 4 envs (episodes end inside them) with a fresh recurrent policy."""
    config = fastppo.make_config(
        env_id,
        "cleanrl-discrete",
        {
            "num_envs": 4,
            "backend": backend,
            "policy.memory": memory,
            "policy.shared_trunk": shared,
            "policy.memory_size": 16,
        },
    )
    envs = make_vec_env(config.env, torch.device("cpu"))
    first = envs.reset(seed=0)
    torch.manual_seed(0)
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space, config.policy)
    buf = RolloutBuffer.allocate(100, envs, torch.device("cpu"), None, policy.state_size)
    cursor = EnvCursor(first.obs, None, torch.ones(4, dtype=torch.bool), policy.initial_state(4))
    for _ in range(2):  # the second starts from the live states the first left
        cursor, last_value = collect_rollout(
            policy, envs, buf, cursor, ObservationNormalizer(None, 10.0), None, SectionTimer()
        )
    envs.close()
    return policy, buf, cursor, last_value


@pytest.mark.parametrize(
    ("memory", "shared", "backend"), [("lstm", False, "sync"), ("gru", True, "sync"), ("lstm", True, "tensor")]
)
def test_the_update_re_runs_each_sequence_to_the_rollouts_own_logprobs(memory, shared, backend):
    """The first epoch's first ratio is 1: whole env sequences re-run from the stored initial
    state with the rollout's resets give its log-probs and values (to float rounding, as matmuls
    over a different number of rows may round differently)."""
    policy, buf, _, _ = rollout(memory, shared, backend=backend)
    assert (~buf.valid).any() and buf.initial_state.abs().sum() > 0  # resets inside, live state at the start
    batch = buf.batch()
    for envs in [(0, 4), (1, 3), (3, 4)]:
        mb = minibatch(batch, *envs, sequences=True)
        with torch.no_grad():
            newlogprob, _, newvalue = policy.evaluate(mb["obs"], mb["actions"], None, mb["initial_state"], mb["valid"])
        ratio = torch.exp(newlogprob - mb["logprobs"])
        torch.testing.assert_close(ratio, torch.ones_like(ratio), rtol=0, atol=1e-6)
        torch.testing.assert_close(newvalue, mb["values"], rtol=0, atol=1e-6)


def test_each_episode_starts_from_a_zero_state_and_the_bootstrap_value_uses_the_live_state():
    policy, buf, cursor, last_value = rollout("lstm", False)
    T, N = buf.valid.shape
    starts = [(t + 1, n) for t in range(T - 1) for n in range(N) if not buf.valid[t, n]]  # a reset row's successor
    assert starts
    with torch.no_grad():
        for t, n in starts:
            lp = policy.evaluate(buf.obs[t, n : n + 1], buf.actions[t, n : n + 1], None, policy.initial_state(1))[0]
            torch.testing.assert_close(lp, buf.logprobs[t, n : n + 1], rtol=0, atol=1e-6)
        # V(s_T) for GAE comes from the state carried to the end of the rollout, not from zeros
        torch.testing.assert_close(last_value, policy.get_value(cursor.obs, cursor.state))
        assert not torch.allclose(last_value, policy.get_value(cursor.obs, policy.initial_state(N)))


def test_memory_solves_a_task_an_mlp_cannot():
    """CueMemoryEnv pays for recalling a cue shown one step earlier: 0.5 per episode without memory."""
    budget = dict(
        TINY, total_timesteps=12_288, num_steps=32, num_envs=8, update_epochs=4, learning_rate=3e-3, ent_coef=0.0
    )
    lstm = fastppo.train(
        "tests.support.fake_envs:CueMemoryEnv",
        preset="cleanrl-discrete",
        **budget,
        **{"policy.memory": "lstm", "policy.memory_size": 16},
    )
    mlp = fastppo.train("tests.support.fake_envs:CueMemoryEnv", preset="cleanrl-discrete", **budget)
    assert np.mean(lstm.episode_returns[-300:]) > 0.9
    assert np.mean(mlp.episode_returns[-300:]) < 0.65


def test_recurrent_agent_api_and_evaluation(tmp_path):
    fastppo.train(
        "tests.support.fake_envs:CueMemoryEnv",
        preset="cleanrl-discrete",
        run_dir=tmp_path / "run",
        **TINY,
        **{"policy.memory": "gru"},
    )
    agent = fastppo.load(tmp_path / "run")
    assert agent.policy.recurrent
    with pytest.raises(ValueError, match=r"agent.step\(obs, state\)"):
        agent.act(np.zeros(3, dtype=np.float32))
    state = agent.initial_state(batch_size=1)
    assert state.shape == (1, 256) and not state.any()  # the actor's and the critic's GRU states
    action, state = agent.step(np.array([1, 0, 0], dtype=np.float32), state, deterministic=True)
    assert action in (0, 1) and state.abs().sum() > 0
    with pytest.raises(ValueError, match="state of shape"):
        agent.step(np.zeros((2, 3), dtype=np.float32), state)
    # evaluation carries the state through each episode, from zeros at each reset
    result = fastppo.evaluate(tmp_path / "run", env_id="tests.support.fake_envs:CueMemoryEnv", episodes=4, seed=0)
    assert result.lengths == [2, 2, 2, 2]


def test_the_state_agent_step_returns_is_an_ordinary_tensor_and_arrays_are_cast():
    """A finished row of a batch is zeroed in place (an inference tensor would refuse), and a
    float64 numpy state (e.g. stored by the caller) acts exactly as the float32 tensor."""
    from fastppo.agents.agent import build_agent

    config = fastppo.make_config("CartPoleNoVelocity-v1", overrides={"policy.memory_size": 8})
    agent = build_agent(config, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), torch.device("cpu"))
    obs = np.random.default_rng(0).normal(0, 1, (3, 2)).astype(np.float32)
    _, state = agent.step(obs, agent.initial_state(3))
    state[1] = 0
    assert state[0].any() and not state[1].any() and state[2].any()
    action, after = agent.step(obs, state, deterministic=True)
    action64, after64 = agent.step(obs, state.numpy().astype(np.float64), deterministic=True)
    assert after64.dtype == torch.float32
    np.testing.assert_array_equal(action64, action)
    torch.testing.assert_close(after64, after, rtol=0, atol=0)


def test_recurrent_training_on_the_tensor_backend_and_with_action_masks():
    fastppo.train(
        "CartPole-v1",
        preset="cleanrl-discrete",
        backend="tensor",
        **TINY,
        **{"policy.memory": "lstm", "policy.memory_size": 8},
    )
    # the strict env raises on an invalid action: masks apply to every recurrent step
    fastppo.train(
        "tests.support.fake_envs:InfoMaskedChoiceEnv",
        preset="cleanrl-discrete",
        **TINY,
        **{"policy.memory": "gru", "policy.memory_size": 8},
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_minibatches": 8}, "whole env sequences"),
        ({"compile": True}, "do not support --policy.memory"),
        ({"policy.memory": "rnn"}, "lstm, gru"),
    ],
)
def test_recurrent_config_errors_say_how_to_fix_them(overrides, message):
    with pytest.raises(FastPPOError, match=message):
        fastppo.make_config("CartPole-v1", overrides={"policy.memory": "lstm", "num_envs": 4, **overrides})


@pytest.mark.parametrize("shared", [False, True])
def test_onnx_export_of_a_recurrent_policy_takes_and_returns_the_state(tmp_path, shared):
    import onnxruntime as ort

    agent = fastppo.train(
        "CartPoleNoVelocity-v1",
        preset="cleanrl-discrete",
        normalize_obs=True,
        **TINY,
        **{"policy.memory": "lstm", "policy.memory_size": 8, "policy.shared_trunk": shared},
    )
    session = ort.InferenceSession(str(fastppo.export_onnx(agent, tmp_path / "lstm.onnx")))
    assert [i.name for i in session.get_inputs()] == ["obs", "state"] and [o.name for o in session.get_outputs()] == [
        "action",
        "state_out",
    ]
    rng = np.random.default_rng(0)
    state, onnx_state = agent.initial_state(3), agent.initial_state(3).numpy()
    for _ in range(5):  # a few steps of 3 episodes, the state carried by both
        obs = rng.normal(0, 0.2, (3, 2)).astype(np.float32)
        action, state = agent.step(obs, state, deterministic=True)
        onnx_action, onnx_state = session.run(None, {"obs": obs, "state": onnx_state})
        np.testing.assert_array_equal(onnx_action, action)
        np.testing.assert_allclose(onnx_state, state.numpy(), rtol=1e-4, atol=1e-5)


POPGYM_REPEAT_PREVIOUS = "popgym:popgym-RepeatPreviousEasy-v0"


def test_popgym_env_trains_with_its_gru_preset():
    """POPGym's RepeatPreviousEasy by its gymnasium id (the [popgym] extra): the preset named after
    it is picked (a GRU), the card (Discrete(4)) arrives one-hot, and 51-step episodes finish
    with returns in [-1, 1]."""
    pytest.importorskip("popgym")
    config = fastppo.make_config(POPGYM_REPEAT_PREVIOUS)
    assert (config.policy.memory, config.env.num_envs, config.ppo.num_minibatches) == ("gru", 64, 1)
    agent = fastppo.train(
        POPGYM_REPEAT_PREVIOUS,
        total_timesteps=1024,
        num_envs=8,
        num_steps=64,
        progress=False,
        tensorboard=False,
        checkpoint_every=0,
    )
    assert agent.policy.recurrent and agent.history[-1]["global_step"] == 1024
    returns = np.asarray(agent.episode_returns)
    assert len(returns) >= 8 and np.all(np.abs(returns) <= 1 + 1e-6)


@pytest.mark.slow
def test_popgym_preset_learns_repeat_previous():
    """The preset's 1M steps: the last 100 episodes recall the suit of 4 cards ago almost always
    (a memoryless policy averages -0.5). 2-5 min on 2 cores."""
    pytest.importorskip("popgym")
    agent = fastppo.train(POPGYM_REPEAT_PREVIOUS, seed=1, progress=False, tensorboard=False, checkpoint_every=0)
    assert np.mean(agent.episode_returns[-100:]) > 0.95


def test_fastppo_record_eval_and_export_carry_the_state_of_a_recurrent_run(tmp_path, capsys):
    from fastppo.cli.main import main

    fastppo.train("CartPoleNoVelocity-v1", run_dir=tmp_path / "run", **{**TINY, "num_minibatches": 1})
    assert main(["export", str(tmp_path / "run"), "--onnx", str(tmp_path / "nov.onnx")]) == 0
    # the preset's actor and critic LSTMs of 32: h and c of each, 128 numbers of state per row
    assert capsys.readouterr().out == (
        f"fastppo: wrote {tmp_path / 'nov.onnx'} (inputs 'obs' [batch, 2], 'state' [batch, 128]; outputs "
        "'action' [batch], 'state_out' [batch, 128])\n"
    )
    assert main(["record", str(tmp_path / "run"), "--out", str(tmp_path / "nov.mp4"), "--seed", "0"]) == 0
    assert (tmp_path / "nov.mp4").stat().st_size > 0
    assert main(["eval", str(tmp_path / "run"), "--episodes", "2", "--seed", "0", "--json"]) == 0
    assert '"episodes": 2' in capsys.readouterr().out

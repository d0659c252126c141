"""--env.step-in-halves: the ale backend's envs as two halves that take turns in the one rollout
loop (fastppo.envs.vector.SteppedInParts), each env's steps those of the whole set's."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

import fastppo
from fastppo.cli.main import main
from fastppo.core.normalize import RewardScaler
from fastppo.profiling import SectionTimer
from fastppo.training.rollout import EnvCursor, ObservationNormalizer, RolloutBuffer, collect_rollout

pytest.importorskip("ale_py", reason='ale-py is not installed: pip install -e ".[atari]"')

SHORT_BREAKOUT = "BreakoutShortForTests-v4"
"""Breakout with a 240-frame limit: within a few rollouts every env loses lives, and its games
end by that limit (truncated)."""


def short_breakout() -> str:
    if SHORT_BREAKOUT not in gym.registry:
        base = gym.spec("BreakoutNoFrameskip-v4")
        gym.register(
            id=SHORT_BREAKOUT, entry_point=base.entry_point, kwargs={**base.kwargs, "max_num_frames_per_episode": 240}
        )
    return SHORT_BREAKOUT


def ale_env(parts: int, num_envs: int = 4):
    from fastppo.envs.ale_vec import AleVecEnv

    return AleVecEnv(short_breakout(), num_envs, 4, torch.device("cpu"), threads=1, parts=parts)


class FramesDecide:
    """A deterministic stand-in for the policy's sampling step: each row's action, logprob and
    value are functions of its own frames, so rows acted on out of place would show."""

    def refresh(self) -> None:
        pass

    def __call__(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None):
        pixels = obs.flatten(1).long()
        action = (pixels * torch.arange(1, pixels.shape[1] + 1)).sum(1) % 4
        return action, -pixels.float().mean(1), pixels[:, -84:].float().mean(1)


def rollouts(parts: int, count: int):
    """``count`` rollouts of 4 envs x 32 steps on the ale backend in ``parts`` parts."""
    from fastppo.policies import ActorCritic

    envs = ale_env(parts)
    torch.manual_seed(0)  # the same critic for V(s_T)
    policy = ActorCritic(envs.single_observation_space, envs.single_action_space)
    normalize = ObservationNormalizer(None, 10.0)
    scaler = RewardScaler(envs.num_envs, 0.99, 10.0)
    cursor = EnvCursor.at_reset(envs.reset(seed=11), normalize, update=True)
    filled = []
    for _ in range(count):
        buf = RolloutBuffer.allocate(32, envs, torch.device("cpu"), None)
        cursor, last_value = collect_rollout(
            policy, envs, buf, cursor, normalize, scaler, SectionTimer(), FramesDecide()
        )
        filled.append((buf.flatten(), cursor.obs.clone(), cursor.valid.clone(), last_value, envs.pop_episodes()))
    envs.close()
    return filled


def test_halves_fill_the_rollout_buffer_with_each_envs_steps_in_order_as_the_whole_set_does():
    """Three rollouts, with lost lives (their FIRE reset rows) and games cut at the frame limit:
    every field of every row (rewards scaled by --env.normalize-reward's running statistics, each
    env's discounted return its own), the cursor between rollouts, V(s_T) and the episode
    statistics are those of the envs stepped as one set."""
    whole, halves = rollouts(1, 3), rollouts(2, 3)
    for (buf, obs, valid, last, episodes), (buf2, obs2, valid2, last2, episodes2) in zip(whole, halves):
        for name in buf:
            assert torch.equal(buf[name], buf2[name]), name
        assert torch.equal(obs, obs2) and torch.equal(valid, valid2) and torch.equal(last, last2)
        assert episodes == episodes2
    terminated = torch.stack([buf["terminated"] for buf, *_ in whole])
    truncated = torch.stack([buf["truncated"] for buf, *_ in whole])
    assert terminated.sum() >= 4 and truncated.sum() >= 4  # lost lives and games cut short, both seen
    assert sum(len(episodes.returns) for *_, episodes in whole) == truncated.sum()


def test_halves_take_turns_with_the_policy():
    """The policy acts on one half while the other's step is under way: each half is sent its
    actions and acted on again only after the other half was acted on."""
    envs = ale_env(2)
    calls = []
    send, recv = envs.send, envs.recv
    envs.send = lambda actions, part: (calls.append(("send", part, len(actions))), send(actions, part))[1]
    envs.recv = lambda part: (calls.append(("recv", part)), recv(part))[1]
    from fastppo.policies import ActorCritic

    policy = ActorCritic(envs.single_observation_space, envs.single_action_space)
    normalize = ObservationNormalizer(None, 10.0)
    cursor = EnvCursor.at_reset(envs.reset(seed=0), normalize, update=True)
    buf = RolloutBuffer.allocate(3, envs, torch.device("cpu"), None)
    collect_rollout(policy, envs, buf, cursor, normalize, None, SectionTimer(), FramesDecide())
    envs.close()
    assert calls == [
        ("send", 0, 2), ("send", 1, 2),
        ("recv", 0), ("send", 0, 2), ("recv", 1), ("send", 1, 2),
        ("recv", 0), ("send", 0, 2), ("recv", 1), ("send", 1, 2),
        ("recv", 0), ("recv", 1),
    ]  # fmt: skip


def test_a_run_in_halves_trains(tmp_path):
    agent = fastppo.train(
        "BreakoutNoFrameskip-v4", run_dir=tmp_path, total_timesteps=128, num_envs=4, num_steps=32, num_minibatches=2,
        update_epochs=1, progress=False, tensorboard=False, step_in_halves=True,
    )  # fmt: skip
    assert agent.config.env.step_in_halves and len(agent.history) == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["CartPole-v1", "--step-in-halves"],
            "--env.step-in-halves steps the ale backend's C++ envs, not the sync backend's: "
            "use --env.backend ale (Atari ids), or drop it",
        ),
        (
            ["BreakoutNoFrameskip-v4", "--step-in-halves", "--num-envs", "7"],
            "--env.step-in-halves needs an even --num-envs (two equal halves), got 7",
        ),
    ],
)
def test_halves_where_they_cannot_be_are_one_line_and_exit_2(tmp_path, capsys, argv, message):
    assert main(["train", *argv, "--run-dir", str(tmp_path / "run"), "--progress", "false"]) == 2
    assert capsys.readouterr().err == f"fastppo: error: {message}\n"
    assert not (tmp_path / "run").exists()


def test_a_resume_may_turn_the_halves_on_or_off():
    """The halves change no env's steps: a resume may switch them (a speed setting, as threads)."""
    from fastppo.training.resume import apply_resumable

    config = fastppo.make_config("BreakoutNoFrameskip-v4")
    assert apply_resumable(config, {"step-in-halves": "true"}, "run").env.step_in_halves
    assert not apply_resumable(config, {"env.step_in_halves": "false"}, "run").env.step_in_halves

"""Evaluation episodes with a trained agent (frozen observation statistics), and recording them.

Named evaluation.py, not evaluate.py, so that the module never shadows ``fastppo.evaluate``.

    agent = fastppo.load("runs/CartPole-v1__ppo__1__1700000000")
    result = fastppo.evaluate(agent, episodes=10, deterministic=True, seed=0)
    print(result)            # CartPole-v1: return 500.0 ± 0.0, length 500.0 ± 0.0 over 10 episodes
    fastppo.record(agent, "cartpole.mp4")
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from fastppo.agents.agent import Agent, load_agent
from fastppo.env_ids import folder_env_id, is_pettingzoo
from fastppo.envs.gymnasium_vec import published_action_mask
from fastppo.envs.make import make_pettingzoo_env, make_single_env
from fastppo.envs.pettingzoo_vec import PettingZooVecEnv
from fastppo.envs.tensor import user_tensor_env
from fastppo.envs.turn_based import TurnBasedVecEnv
from fastppo.envs.vector import StepResult, VecEnv
from fastppo.envs.video import VideoWriter, env_fps
from fastppo.errors import FastPPOError
from fastppo.policies.memory import carry


@dataclass
class EvalResult:
    """Undiscounted returns and lengths of the evaluation episodes (raw env rewards). A
    multi-agent env's ``returns`` are its headline's (--multi-agent.headline: none when its agents
    are not one team, and then ``mean_return`` is None), ``group_returns`` each agent group's."""

    env_id: str
    deterministic: bool
    seed: int | None
    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    group_returns: dict[str, list[float]] | None = None

    @property
    def mean_return(self) -> float | None:
        return float(np.mean(self.returns)) if self.returns else None

    @property
    def std_return(self) -> float | None:
        return float(np.std(self.returns)) if self.returns else None

    @property
    def mean_group_returns(self) -> dict[str, float] | None:
        return (
            None
            if self.group_returns is None
            else {group: float(np.mean(returns)) for group, returns in self.group_returns.items()}
        )

    @property
    def mean_length(self) -> float:
        return float(np.mean(self.lengths))

    @property
    def std_length(self) -> float:
        return float(np.std(self.lengths))

    def to_dict(self) -> dict[str, Any]:
        stats = {
            k: getattr(self, k)
            for k in ("mean_return", "std_return", "mean_group_returns", "mean_length", "std_length")
        }
        return {**asdict(self), "episodes": len(self.lengths), **stats}

    def __str__(self) -> str:
        mode = "deterministic" if self.deterministic else "stochastic"
        groups = ", ".join(
            f"{group} {np.mean(r):.1f} ± {np.std(r):.1f}" for group, r in (self.group_returns or {}).items()
        )
        if not self.returns:  # agents in several groups without a headline: each group's
            shown = f"returns {groups}"
        else:  # one group's return is the headline's: shown once
            shown = f"return {self.mean_return:.1f} ± {self.std_return:.1f}" + (
                f" ({groups})" if len(self.group_returns or {}) > 1 else ""
            )
        return (
            f"{self.env_id}: {shown}, length {self.mean_length:.1f} ± {self.std_length:.1f} over "
            f"{len(self.lengths)} episodes ({mode} policy)"
        )


def played_env(agent: Agent | str | Path, env_id: str | None, command: str) -> tuple[Agent, str]:
    """The agent (loaded if a folder is given) and the env to play: the caller's ``env_id``, else
    the agent's own, which a run folder may name only when building it imports no user code
    (fastppo.env_ids.folder_env_id); ``command`` (eval, record) is the fix's command line."""
    agent = agent if isinstance(agent, Agent) else load_agent(agent, env_id=env_id)
    if env_id is not None:
        return agent, env_id
    own = agent.config.env.env_id
    if not agent.from_folder:  # trained in this process, on the env its caller named
        return agent, own
    fix = (
        f"if you trust it, name it yourself: fastppo {command} {agent.run_dir} --env-id {own} (in Python: "
        f"env_id='{own}')"
    )
    return agent, folder_env_id(own, agent.run_dir, fix)


def episode_policy(agent: Agent, deterministic: bool) -> Callable[[Any, Any], np.ndarray]:
    """``(obs, action_mask) -> action`` for one episode of a single env from its start:
    ``agent.act``, or for a recurrent agent ``agent.step`` carrying its state from ``initial_state``."""
    if not agent.policy.recurrent:
        return lambda obs, mask: agent.act(obs, deterministic=deterministic, action_mask=mask)
    state = agent.initial_state(1)

    def step(obs: Any, mask: Any) -> np.ndarray:
        nonlocal state
        action, state = agent.step(obs, state, deterministic=deterministic, action_mask=mask)
        return action

    return step


def run_episodes(
    agent: Agent,
    env: gym.Env,
    episodes: int,
    deterministic: bool,
    seed: int | None,
    on_frame: Callable[[Any], None] | None = None,
) -> tuple[list[float], list[int]]:
    """Play ``episodes`` full episodes in the single gymnasium env ``env``, one after another, each
    from its own reset; ``on_frame`` gets each rendered frame. (Not ``play_episodes``: a VecEnv's
    autoreset step would draw a sample the single env never does, moving every later episode's.)"""
    _check_episodes(episodes)
    space = env.action_space
    returns, lengths = [], []
    # A seed makes the whole evaluation repeatable (env resets and the policy's samples) without
    # touching the global torch RNG a training run in the same process depends on.
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        masked = None  # decided by the first reset, as in training (published_action_mask)
        for episode in range(episodes):
            obs, info = env.reset(seed=seed if episode == 0 else None)
            mask = published_action_mask(info, masked, "reset()")
            masked = mask is not None
            if agent.action_masks and not masked:
                raise FastPPOError(
                    f"the agent was trained with action masks, but {env.spec.id if env.spec else 'the env'} "
                    "published none from reset(): evaluate on an env that publishes info['action_mask'] (or a "
                    "Dict observation's 'action_mask') from reset() and every step()"
                )
            if on_frame is not None:
                on_frame(env.render())
            total, length, done = 0.0, 0, False
            policy = episode_policy(agent, deterministic)
            while not done:
                action = policy(obs, mask)
                if isinstance(space, gym.spaces.Box):
                    action = np.clip(action, space.low, space.high)
                obs, reward, terminated, truncated, info = env.step(action)
                mask = published_action_mask(info, masked, "step()")
                if on_frame is not None:
                    on_frame(env.render())
                total += float(reward)
                length += 1
                done = terminated or truncated
            returns.append(total)
            lengths.append(length)
    return returns, lengths


def play_episodes(
    agent: Agent,
    envs: VecEnv,
    episodes: int,
    deterministic: bool,
    seed: int | None,
    after_step: Callable[[], None] | None = None,
) -> tuple[list[float], list[int], dict[str, list[float]]]:
    """Play ``episodes`` episodes on the rows of ``envs``, from its reset with ``seed``, every row
    acting with ``agent`` (a recurrent one's state fresh after a row that was no decision, as in
    the rollout): the rows of one PettingZoo copy play episodes one after another, and an env
    whose episodes name their row (a tensor env of ``episodes`` rows) plays the first of each
    row. ``after_step`` is called after the reset and after each step (recording renders a frame).
    Returns the headline returns (raw rewards; a multi-agent env's as training logs them:
    --multi-agent.headline), lengths and each agent group's returns."""
    _check_episodes(episodes)
    returns: list[float] = []
    lengths: list[int] = []
    groups: dict[str, list[float]] = {}
    done_rows: dict[int, tuple[float, int]] = {}  # a row's first episode, where episodes name their rows
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        step = envs.reset(seed=seed)
        state = agent.initial_state(envs.num_envs) if agent.policy.recurrent else None
        valid = _live(step)
        if after_step is not None:
            after_step()
        while len(lengths) + len(done_rows) < episodes:
            if state is None:
                action = agent.act(step.obs, deterministic=deterministic, action_mask=step.action_mask)
            else:
                action, state = agent.step(step.obs, state, deterministic=deterministic, action_mask=step.action_mask)
                state = carry(state, valid)  # as the rollout does: fresh after a row that was no decision
            step = envs.step(torch.as_tensor(action))
            valid = ~(step.terminated | step.truncated) & _live(step)
            if after_step is not None:
                after_step()
            finished = envs.pop_episodes()
            if finished.rows is not None:
                for row, episode in zip(finished.rows, zip(finished.returns, finished.lengths)):
                    done_rows.setdefault(row, episode)
                continue
            returns += finished.returns
            lengths += finished.lengths
            for group, group_returns in (finished.by_group or {}).items():
                groups.setdefault(group, []).extend(group_returns)
    for row in sorted(done_rows):
        returns.append(done_rows[row][0])
        lengths.append(done_rows[row][1])
    return (
        returns[:episodes],
        lengths[:episodes],
        {group: group_returns[:episodes] for group, group_returns in groups.items()},
    )


def evaluate_episodes(
    agent: Agent, env_id: str, episodes: int = 10, deterministic: bool = False, seed: int | None = None
) -> EvalResult:
    """Mean ± std return and length over ``episodes`` episodes of ``env_id`` (not a turn-based
    game: ``fastppo.evaluate`` plays those), with the observation statistics frozen as saved;
    actions sampled unless ``deterministic``."""
    env_class = user_tensor_env(env_id)
    if is_pettingzoo(env_id):
        envs = agent_rows_env(agent, env_id)
        try:
            return EvalResult(env_id, deterministic, seed, *play_episodes(agent, envs, episodes, deterministic, seed))
        finally:
            envs.close()
    elif env_class is not None:
        # One episode in each of ``episodes`` rows of a user's tensor env (which has no gymnasium
        # twin to play one by one), on CPU.
        _check_obs_shape(agent, env_class.single_observation_space.shape, env_id)
        _check_episodes(episodes)
        returns, lengths, _ = play_episodes(agent, env_class(episodes), episodes, deterministic, seed)
    else:
        env = make_single_env(env_id, for_eval=True, frame_stack=agent.config.env.frame_stack)
        try:
            _check_obs_shape(agent, env.observation_space.shape, env_id)
            returns, lengths = run_episodes(agent, env, episodes, deterministic, seed)
        finally:
            env.close()
    return EvalResult(env_id, deterministic, seed, returns, lengths)


def record(
    agent: Agent | str | Path,
    out: str | Path,
    episodes: int = 1,
    env_id: str | None = None,
    deterministic: bool = True,
    seed: int | None = None,
) -> tuple[Path, EvalResult, int]:
    """Render ``episodes`` episodes into one MP4 at ``out``; returns (path, result, frames written)."""
    agent, env_id = played_env(agent, env_id, "record")
    if user_tensor_env(env_id) is not None:
        raise FastPPOError(
            f"cannot record {env_id}: a tensor env has no renderer; record a gymnasium env that renders "
            "rgb_array frames"
        )
    if is_pettingzoo(env_id):
        envs = agent_rows_env(agent, env_id, render_mode="rgb_array")
        try:
            with VideoWriter(out, env_fps(envs.envs[0])) as video:
                result = EvalResult(
                    env_id,
                    deterministic,
                    seed,
                    *play_episodes(agent, envs, episodes, deterministic, seed, lambda: video.append(envs.render())),
                )
        finally:
            envs.close()
        return Path(out), result, video.frames
    env = make_single_env(env_id, render_mode="rgb_array", for_eval=True, frame_stack=agent.config.env.frame_stack)
    try:
        _check_obs_shape(agent, env.observation_space.shape, env_id)
        with VideoWriter(out, env_fps(env)) as video:
            returns, lengths = run_episodes(agent, env, episodes, deterministic, seed, on_frame=video.append)
    finally:
        env.close()
    return Path(out), EvalResult(env_id, deterministic, seed, returns, lengths), video.frames


def agent_rows_env(agent: Agent, env_id: str, render_mode: str | None = None) -> PettingZooVecEnv | TurnBasedVecEnv:
    """One copy of a PettingZoo env, its rows built as the agent was trained (env kwargs, MAPPO
    state, agent ids), in this process whatever backend the agent trained on (a worker process
    has no frames to record)."""
    cfg = dataclasses.replace(agent.config.env, env_id=env_id, num_envs=1, backend="sync")
    envs = make_pettingzoo_env(cfg, agent.config.multi_agent, agent.device, render_mode)
    assert isinstance(envs, PettingZooVecEnv | TurnBasedVecEnv)  # the sync backend's
    try:
        _check_obs_shape(agent, envs.single_observation_space.shape, env_id)
    except FastPPOError:
        envs.close()
        raise
    return envs


def _live(step: StepResult) -> Tensor:
    """Which rows are in play: a PettingZoo env's steps say; every row of any other env."""
    return torch.ones_like(step.terminated) if step.live is None else step.live


def _check_obs_shape(agent: Agent, shape: tuple[int, ...] | None, env_id: str) -> None:
    found = None if shape is None else tuple(shape)
    if found != tuple(agent.obs_shape):
        raise FastPPOError(
            f"{env_id} has observations of shape {found}, the agent expects {agent.obs_shape}: evaluate "
            f"on {agent.config.env.env_id}"
        )


def _check_episodes(episodes: int) -> None:
    if episodes < 1:
        raise FastPPOError(f"--episodes must be >= 1, got {episodes}")

"""The PPO loop: collect_rollout -> compute_gae -> ppo_update -> log. Nothing else lives here."""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fastppo.agent import Agent, build_agent
from fastppo.config import Config
from fastppo.core import RewardScaler, adaptive_kl_beta, compute_gae, explained_variance, scheduled, shift_values
from fastppo.diagnostics import HealthMonitor
from fastppo.envs import make_vec_env
from fastppo.errors import FastPPOError
from fastppo.logger import RunLogger
from fastppo.profiling import SectionTimer
from fastppo.rollout import EnvCursor, ObservationNormalizer, RolloutBuffer, collect_rollout
from fastppo.update import UpdateCoefficients, ppo_update


@dataclass
class TrainState:
    """Everything a run carries from one iteration to the next."""

    agent: Agent
    optimizer: torch.optim.Optimizer
    reward_scaler: RewardScaler | None
    iteration: int = 0
    global_step: int = 0
    kl_beta: float = 1.0


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = deterministic


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise FastPPOError(f"unknown device '{name}': use cpu, cuda, cuda:N or auto") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise FastPPOError("--device cuda asked for, but torch sees no CUDA GPU: use --device cpu")
    return device


def check_finite(metrics: dict[str, float], agent: Agent, iteration: int, global_step: int) -> None:
    """Stop with the culprit's name instead of training on NaNs."""
    bad = [name for name in ("loss", "pg_loss", "v_loss", "entropy", "grad_norm") if not math.isfinite(metrics[name])]
    bad += [f"parameter {name}" for name, p in agent.policy.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise FastPPOError(
            f"training stopped at iteration {iteration} (step {global_step}): {', '.join(bad)} became NaN/Inf; "
            "lower --learning-rate or enable --normalize-obs/--normalize-reward"
        )


def train(config: Config, run_dir: Path | None = None) -> Agent:
    """Train a PPO agent as ``config`` says; write logs and the final agent to ``run_dir``."""
    config.validate()
    cfg = config.ppo
    seed_everything(config.run.seed, config.run.torch_deterministic)
    torch.set_num_threads(config.run.torch_threads)
    device = resolve_device(config.run.device)
    envs = make_vec_env(config.env, device, video_dir=run_dir / "videos" if run_dir else None)
    first = envs.reset(seed=config.run.seed)
    agent = build_agent(config, envs.single_observation_space, envs.single_action_space, device)
    agent.run_dir = run_dir
    state = TrainState(
        agent=agent,
        optimizer=torch.optim.Adam(agent.policy.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps),
        reward_scaler=RewardScaler(envs.num_envs, cfg.gamma, config.env.clip_reward, device) if config.env.normalize_reward else None,
        kl_beta=cfg.kl_beta,
    )
    normalize_obs = ObservationNormalizer(agent.obs_rms, config.env.clip_obs)
    mask_dim = None if first.action_mask is None else first.action_mask.shape[-1]
    buf = RolloutBuffer.allocate(cfg.num_steps, envs, device, mask_dim)
    cursor = EnvCursor(normalize_obs(first.obs, update=True), first.action_mask, torch.ones(envs.num_envs, dtype=torch.bool, device=device))
    logger = RunLogger(run_dir, cfg.total_timesteps, config.run.tensorboard, config.run.progress, config.to_dict())
    monitor, timer = HealthMonitor(), SectionTimer()
    try:
        while state.iteration < config.num_iterations:
            state.iteration += 1
            progress = (state.iteration - 1) / config.num_iterations
            start = time.perf_counter()
            for group in state.optimizer.param_groups:
                group["lr"] = scheduled(cfg.lr_schedule, cfg.learning_rate, progress)
            coefs = UpdateCoefficients(
                clip_coef=scheduled(cfg.clip_schedule, cfg.clip_coef, progress),
                ent_coef=scheduled(cfg.ent_schedule, cfg.ent_coef, progress),
                kl_beta=state.kl_beta,
            )

            cursor, last_value = collect_rollout(agent.policy, envs, buf, cursor, normalize_obs, state.reward_scaler, timer)
            advantages, returns = compute_gae(
                buf.rewards, buf.values, shift_values(buf.values, last_value), buf.terminated, buf.truncated, cfg.gamma, cfg.gae_lambda
            )
            with timer.section("update"):
                losses = ppo_update(agent.policy, state.optimizer, buf.flatten(advantages=advantages, returns=returns), cfg, config.minibatch_size, coefs)
            state.global_step += config.batch_size
            check_finite(losses, agent, state.iteration, state.global_step)
            if cfg.objective == "kl":
                state.kl_beta = adaptive_kl_beta(state.kl_beta, losses["approx_kl"], cfg.kl_target)

            episodes = envs.pop_episodes()
            agent.episode_returns += episodes.returns
            metrics = iteration_metrics(losses, episodes, timer.pop(), state, coefs, buf, returns, time.perf_counter() - start, config.batch_size)
            logger.log(state.global_step, metrics)
            for warning in monitor.check(metrics, progress):
                logger.message(f"[yellow]warning:[/] {warning}")
    finally:
        logger.close()
        envs.close()
    agent.history = logger.history
    if run_dir is not None:
        agent.save(run_dir)
    return agent


def iteration_metrics(losses, episodes, seconds, state: TrainState, coefs: UpdateCoefficients, buf: RolloutBuffer, returns, elapsed: float, batch_size: int) -> dict[str, float]:
    """The logged scalars of one iteration, under CleanRL's names."""
    metrics = {
        "charts/learning_rate": state.optimizer.param_groups[0]["lr"],
        "charts/clip_coef": coefs.clip_coef,
        "charts/ent_coef": coefs.ent_coef,
        "charts/SPS": batch_size / elapsed,
        "charts/episodes": float(len(episodes.returns)),
        "losses/policy_loss": losses["pg_loss"],
        "losses/value_loss": losses["v_loss"],
        "losses/entropy": losses["entropy"],
        "losses/approx_kl": losses["approx_kl"],
        "losses/old_approx_kl": losses["old_approx_kl"],
        "losses/clipfrac": losses["clipfrac"],
        "losses/ratio_mean": losses["ratio_mean"],
        "losses/ratio_std": losses["ratio_std"],
        "losses/grad_norm": losses["grad_norm"],
        "losses/epochs": losses["epochs"],
        "losses/explained_variance": explained_variance(buf.values, returns, buf.valid),
        **{f"time/{name}": value for name, value in seconds.items()},
    }
    if state.reward_scaler is not None or coefs.kl_beta != 1.0:
        metrics["losses/kl_beta"] = coefs.kl_beta
    if episodes.returns:
        metrics["charts/episodic_return"] = float(np.mean(episodes.returns))
        metrics["charts/episodic_length"] = float(np.mean(episodes.lengths))
    return metrics

"""The runs trained together by one loop: a single run, or a stack of seeds (``fastppo.training.seed_stack``).

The loop (``trainer.train_loop``) asks the same of either: lay out the update's batch, take the
iteration's episodes, split the update's figures into one metrics dict per run, log them, save
checkpoints, let the runs that reached --run.stop-return finish, and hand back the trained
agents. A single run is a set of one (``SingleRun``); a stack's seeds (``SeedRuns``) are each an
ordinary run in ``RUN_DIR/seed_<n>``, and one that finishes leaves the stack, which trains on
without it.
"""

from __future__ import annotations

import signal
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from fastppo.agents.agent import Agent
from fastppo.config import Config, RunConfig
from fastppo.core import adaptive_kl_beta, explained_variance
from fastppo.env_ids import names_user_code
from fastppo.envs.vector import Episodes
from fastppo.files.outputs import writing
from fastppo.files.run_folder import list_checkpoints
from fastppo.training.checkpoint import save_checkpoint
from fastppo.training.diagnostics import HealthMonitor
from fastppo.training.distributed import World
from fastppo.training.logger import GROUP_RETURN, RunLogger
from fastppo.training.optim import Optimizer
from fastppo.training.rollout import RolloutBuffer
from fastppo.training.seed_stack import SeedLoggers, episodes_by_seed, per_seed, save_seed_agent, save_seed_checkpoints
from fastppo.training.signals import StopRequest
from fastppo.training.state import TrainState
from fastppo.training.update import UpdateCoefficients

OnIteration = Callable[[int, Any], None]
"""``on_iteration(global_step, metrics)``: a single run's metrics dict; a stack's {seed: metrics}."""


def reached_stop_return(run: RunConfig, returns: list[float]) -> bool:
    """Whether a run's finished episodes have reached --run.stop-return (never without one)."""
    return (
        run.stop_return is not None
        and len(returns) >= run.stop_window
        and float(np.mean(returns[-run.stop_window :])) >= run.stop_return
    )


def stop_return_note(run: RunConfig, returns: list[float], global_step: int) -> str:
    return (
        f"mean return {np.mean(returns[-run.stop_window :]):.1f} over the last {run.stop_window} episodes reached "
        f"--run.stop-return {run.stop_return:g} at step {global_step}: stopped"
    )


def resume_command(run_dir: Path | None, env_id: str) -> str:
    """The command that resumes ``run_dir``: a run on user code names it again, as fastppo never
    imports code that a run folder names (``check_resumed_env``)."""
    return f"fastppo train --resume {run_dir}" + (f" {env_id}" if names_user_code(env_id) else "")


def run_kl_beta(coefs: UpdateCoefficients) -> float:
    """One run's PPO-KL beta (``Runs.split_losses`` gives each run coefficients of its own)."""
    assert isinstance(coefs.kl_beta, (int, float))
    return coefs.kl_beta


def iteration_metrics(
    losses: dict[str, float],
    episodes: Episodes,
    seconds: dict[str, float],
    optimizer: Optimizer,
    config: Config,
    coefs: UpdateCoefficients,
    explained: float,
    elapsed: float,
    batch_size: int,
) -> dict[str, float]:
    """The logged scalars of one run's iteration, under CleanRL's names (``explained``: the critic's
    explained variance on the rollout)."""
    metrics = {
        "charts/learning_rate": float(optimizer.param_groups[0]["lr"]),
        "charts/clip_coef": coefs.clip_coef,
        "charts/ent_coef": coefs.ent_coef,
        "charts/SPS": batch_size / elapsed,
        "charts/episodes": float(len(episodes.lengths)),
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
        "losses/explained_variance": explained,
        **{f"time/{name}": value for name, value in seconds.items()},
    }
    if config.ppo.objective == "kl":
        metrics["losses/kl_beta"] = run_kl_beta(coefs)
        metrics["losses/kl_after_update"] = losses["kl_after_update"]  # what beta adapts from
    if episodes.returns:  # a multi-agent env's headline: none when its agents are not one team
        metrics["charts/episodic_return"] = float(np.mean(episodes.returns))
    if episodes.lengths:
        metrics["charts/episodic_length"] = float(np.mean(episodes.lengths))
        for name, returns in (episodes.by_group or {}).items():  # multi-agent: each group's, then each agent's
            metrics[f"{GROUP_RETURN}{name}"] = float(np.mean(returns))
        for name, returns in (episodes.by_agent or {}).items():
            metrics[f"charts/agent_return/{name}"] = float(np.mean(returns))
    return metrics


class Runs(ABC):
    """The runs one loop trains (S >= 1), their loggers and health monitors; ``SingleRun`` and
    ``SeedRuns`` say what differs."""

    def __init__(
        self,
        config: Config,
        agent: Agent,
        logger: RunLogger | SeedLoggers,
        run_dir: Path | None,
        out_dir: Path | None,
        labels: list[str],
        on_iteration: OnIteration | None,
        newest: Path | None,
    ):
        self.config, self.agent, self.logger, self.run_dir = config, agent, logger, run_dir
        self.out_dir = out_dir
        """Where this process writes: None on a torchrun rank but 0, or for a run without a folder."""
        self.labels = labels
        self.monitors = [HealthMonitor() for _ in labels]  # one per run: each run's own warnings
        self.on_iteration = on_iteration
        self.resume = resume_command(run_dir, config.env.env_id)
        self.newest = newest
        """The newest checkpoint (what a stop at once loses is counted from it)."""
        self.saved: Path | None = None
        """The checkpoint this process saved last (None: none yet)."""
        self.save_seconds: float | None = None
        """How long a save takes (None: not measured yet)."""

    def take_episodes(self, episodes: Episodes) -> list[Episodes]:
        """The iteration's finished episodes (every rank's), recorded; returned split per run."""
        self.agent.episode_returns += episodes.returns
        for group, returns in (episodes.by_group or {}).items():
            self.agent.group_returns.setdefault(group, []).extend(returns)
        return self.split_episodes(episodes)

    def metrics(
        self,
        losses: dict,
        coefs: UpdateCoefficients,
        batch: dict[str, Tensor],
        episodes: list[Episodes],
        seconds: dict[str, float],
        elapsed: float,
        optimizer: Optimizer,
        batch_size: int,
    ) -> tuple[list[dict[str, float]], list[float] | float]:
        """One metrics dict per run (its losses, coefficients, episodes, critic fit), and the
        runs' PPO-KL betas adapted to the update (each run its own)."""
        runs_losses, runs_coefs = self.split_losses(losses, coefs)
        explained = self.explained(batch)
        runs_metrics = [
            iteration_metrics(
                run_losses, run_episodes, seconds, optimizer, self.config, run_coefs, run_explained, elapsed, batch_size
            )
            for run_losses, run_coefs, run_episodes, run_explained in zip(runs_losses, runs_coefs, episodes, explained)
        ]
        betas = [run_kl_beta(c) for c in runs_coefs]
        if self.config.ppo.objective == "kl":
            betas = [
                adaptive_kl_beta(run_kl_beta(c), run_losses["kl_after_update"], self.config.ppo.kl_target)
                for c, run_losses in zip(runs_coefs, runs_losses)
            ]
        return runs_metrics, self.one_per_run(betas)

    def log(self, step: int, runs_metrics: list[dict[str, float]], progress: float) -> None:
        """Each run's metrics to its log, its health monitor's warnings, then ``on_iteration``."""
        # a full disk: one line, the last checkpoint kept
        with writing(self.out_dir, "the metrics in") if self.out_dir is not None else nullcontext():
            self.logger.log(step, self.one_per_run(runs_metrics))
        for label, monitor, run_metrics in zip(self.labels, self.monitors, runs_metrics):
            for warning in monitor.check(run_metrics, progress):
                self.logger.message(f"[yellow]warning:[/] {label}{warning}")
        if self.on_iteration is not None:
            self.on_iteration(step, self.by_run(runs_metrics))

    def checkpoint(self, state: TrainState, envs: Any, stop: StopRequest, due: bool) -> bool:
        """Checkpoint every run where this process writes and a checkpoint is ``due``; whether it
        did. A second signal cuts a save that takes a second or more."""
        if self.out_dir is None or not due:
            return False
        stop.at_once, began = self.save_seconds is not None and self.save_seconds >= 1.0, time.perf_counter()
        self.saved = self.newest = self.save_all(state, envs)
        stop.at_once, self.save_seconds = False, time.perf_counter() - began
        return True

    def kept_note(self) -> str | None:
        """The last good checkpoint, for an error that stops training."""
        last_good = list_checkpoints(self.run_dir) if self.run_dir is not None else []
        return str(last_good[-1]) if last_good else None

    # What differs: ------------------------------------------------------------------------------

    @abstractmethod
    def batch(self, buf: RolloutBuffer, **extra: Tensor) -> dict[str, Tensor]: ...

    @abstractmethod
    def split_episodes(self, episodes: Episodes) -> list[Episodes]: ...

    @abstractmethod
    def split_losses(self, losses: dict, coefs: UpdateCoefficients) -> tuple[list[dict], list[UpdateCoefficients]]: ...

    @abstractmethod
    def explained(self, batch: dict[str, Tensor]) -> list[float]: ...

    @abstractmethod
    def one_per_run(self, values: list) -> Any: ...

    @abstractmethod
    def by_run(self, runs_metrics: list[dict[str, float]]) -> Any: ...

    @abstractmethod
    def save_all(self, state: TrainState, envs: Any) -> Path: ...

    @property
    @abstractmethod
    def training(self) -> bool:
        """Whether any run is left to train."""
        ...

    @abstractmethod
    def finish_solved(self, state: TrainState, envs: Any, saved: bool) -> None:
        """Let the runs that reached --run.stop-return finish (``saved``: this iteration's
        checkpoint is written already)."""
        ...

    @abstractmethod
    def all_solved(self) -> bool: ...

    def close(self) -> None:
        self.logger.close()

    @abstractmethod
    def result(self, iteration: int, interrupted_by: signal.Signals | None, world: World) -> Any:
        """The trained agents, saved (a single run's, or each seed's in the order the seeds were given)."""
        ...


class SingleRun(Runs):
    """One run: its folder (``out_dir``: None on a torchrun rank but 0, or without a folder), its
    logger; --run.stop-return ends it."""

    logger: RunLogger

    def __init__(
        self,
        config: Config,
        agent: Agent,
        logger: RunLogger,
        run_dir: Path | None,
        out_dir: Path | None,
        on_iteration: OnIteration | None,
        newest: Path | None,
    ):
        super().__init__(config, agent, logger, run_dir, out_dir, [""], on_iteration, newest)

    def batch(self, buf: RolloutBuffer, **extra: Tensor) -> dict[str, Tensor]:
        return buf.batch(**extra)

    def split_episodes(self, episodes: Episodes) -> list[Episodes]:
        return [episodes]

    def split_losses(self, losses: dict, coefs: UpdateCoefficients) -> tuple[list[dict], list[UpdateCoefficients]]:
        return [losses], [coefs]

    def explained(self, batch: dict[str, Tensor]) -> list[float]:
        return [explained_variance(batch["values"], batch["returns"], batch["valid"])]

    def one_per_run(self, values: list) -> Any:
        return values[0]

    def by_run(self, runs_metrics: list[dict[str, float]]) -> dict[str, float]:
        return runs_metrics[0]

    def save_all(self, state: TrainState, envs: Any) -> Path:
        assert self.out_dir is not None  # ``checkpoint`` saves only where this process writes
        return save_checkpoint(self.out_dir, state, envs, self.config.run.keep_checkpoints)

    def all_solved(self) -> bool:
        return reached_stop_return(self.config.run, self.agent.episode_returns)

    @property
    def training(self) -> bool:
        return not self.all_solved()

    def finish_solved(self, state: TrainState, envs: Any, saved: bool) -> None:
        if self.all_solved():  # the loop ends: ``training`` is now False
            self.logger.message(stop_return_note(self.config.run, self.agent.episode_returns, state.global_step))

    def result(self, iteration: int, interrupted_by: signal.Signals | None, world: World) -> Agent:
        agent, out_dir = self.agent, self.out_dir
        if (
            interrupted_by is not None and out_dir is not None
        ):  # plain print, after the progress bar is gone: one unwrapped line to copy
            print(
                f"fastppo: {interrupted_by.name}: stopped after iteration {iteration}, checkpoint saved in "
                f"{self.saved}\nfastppo: resume with: {world.relaunch}{self.resume}",
                file=sys.stderr,
                flush=True,
            )
        agent.history = self.logger.history
        if out_dir is not None:
            with writing(out_dir, "the agent in"):
                agent.save(out_dir)
        return agent


class SeedRuns(Runs):
    """A stack of seeds: each seed's folder, logger, health monitor, episode returns and
    checkpoints; a seed that reaches --run.stop-return saves its final checkpoint and agent and
    leaves, and the stack trains on without it (``keep``: shrinks what the loop trains to the
    seeds at the given indices)."""

    logger: SeedLoggers
    run_dir: Path

    def __init__(
        self,
        config: Config,
        agent: Agent,
        logger: SeedLoggers,
        run_dir: Path,
        seeds: list[int],
        seeds_returns: list[list[float]],
        on_iteration: OnIteration | None,
        newest: Path | None,
        keep: Callable[[list[int]], None],
    ):
        super().__init__(config, agent, logger, run_dir, run_dir, [f"seed {s}: " for s in seeds], on_iteration, newest)
        self.seeds, self.seeds_returns, self.keep = seeds, seeds_returns, keep
        self.given = list(seeds)  # the order the agents are returned in: the caller's, whichever seeds leave first
        self.seed_dirs = [run_dir / f"seed_{s}" for s in seeds]
        self.finished: list[Agent] = []  # the seeds that left at --run.stop-return, saved as they left

    def batch(self, buf: RolloutBuffer, **extra: Tensor) -> dict[str, Tensor]:
        return buf.seed_batch(len(self.seeds), **extra)

    def split_episodes(self, episodes: Episodes) -> list[Episodes]:
        split = episodes_by_seed(episodes, self.seeds, self.config.env.num_envs)
        for seed_returns, seed_episodes in zip(self.seeds_returns, split):
            seed_returns += seed_episodes.returns
        return split

    def split_losses(self, losses: dict, coefs: UpdateCoefficients) -> tuple[list[dict], list[UpdateCoefficients]]:
        return per_seed(losses, len(self.seeds)), [
            UpdateCoefficients(**c) for c in per_seed(asdict(coefs), len(self.seeds))
        ]

    def explained(self, batch: dict[str, Tensor]) -> list[float]:
        # The critic's fit on each seed's rows, [S, ...], all seeds at once.
        values, returns, valid = (batch[k].flatten(1) for k in ("values", "returns", "valid"))
        return explained_variance(values, returns, valid, dim=-1)

    def one_per_run(self, values: list) -> list:
        return values

    def by_run(self, runs_metrics: list[dict[str, float]]) -> dict[int, dict[str, float]]:
        return dict(zip(self.seeds, runs_metrics))

    def save_all(self, state: TrainState, envs: Any) -> Path:
        return save_seed_checkpoints(
            state, envs, self.seeds, self.seed_dirs, self.seeds_returns, self.config.run.keep_checkpoints
        )

    def all_solved(self) -> bool:
        return False  # the seeds leave one by one (finish_solved), and the loop ends when none is left

    @property
    def training(self) -> bool:
        return bool(self.seeds)

    def finish_solved(self, state: TrainState, envs: Any, saved: bool) -> None:
        done = [i for i, returns in enumerate(self.seeds_returns) if reached_stop_return(self.config.run, returns)]
        if not done:
            return
        if not saved:  # those seeds are finished runs: their final checkpoint and agent
            save_seed_checkpoints(
                state, envs, self.seeds, self.seed_dirs, self.seeds_returns, self.config.run.keep_checkpoints, done
            )
        for i in done:
            self.logger.message(
                f"seed {self.seeds[i]}: {stop_return_note(self.config.run, self.seeds_returns[i], state.global_step)}"
            )
            with writing(self.seed_dirs[i], "the agent in"):
                self.finished.append(
                    save_seed_agent(
                        self.agent, i, self.seed_dirs[i], self.logger.loggers[i].history, self.seeds_returns[i]
                    )
                )
            self.logger.loggers[i].close()
        kept = [i for i in range(len(self.seeds)) if i not in done]
        self.seeds = [self.seeds[i] for i in kept]
        self.seed_dirs = [self.seed_dirs[i] for i in kept]
        self.seeds_returns = [self.seeds_returns[i] for i in kept]
        self.monitors = [self.monitors[i] for i in kept]
        self.labels = [self.labels[i] for i in kept]
        self.logger.loggers = [self.logger.loggers[i] for i in kept]
        if kept:  # the stack trains on without them
            self.keep(kept)

    def kept_note(self) -> str | None:
        # A stack's seeds stand together: each seed's checkpoint of the same iteration.
        last_good = list_checkpoints(self.seed_dirs[0]) if self.seed_dirs else []
        if not last_good:
            return None
        return (
            f"each seed's, {self.run_dir}/seed_<n>/checkpoints/{last_good[-1].name} "
            f"(fastppo train --resume {self.run_dir})"
        )

    def result(self, iteration: int, interrupted_by: signal.Signals | None, world: World) -> list[Agent]:
        if interrupted_by is not None:
            print(
                f"fastppo: {interrupted_by.name}: stopped after iteration {iteration}, each seed checkpointed in "
                f"{self.run_dir}/seed_<n>\nfastppo: resume the stack with: {self.resume} (or one seed alone: --resume "
                f"{self.run_dir}/seed_<n>)",
                file=sys.stderr,
                flush=True,
            )
        with writing(self.run_dir, "the seeds' agents in"):
            seed_agents = [
                save_seed_agent(self.agent, i, d, seed_logger.history, r)
                for i, (d, seed_logger, r) in enumerate(zip(self.seed_dirs, self.logger.loggers, self.seeds_returns))
            ]
        for seed_agent in seed_agents:
            seed_agent.interrupted_by = interrupted_by
        return sorted(self.finished + seed_agents, key=lambda a: self.given.index(a.config.run.seed))

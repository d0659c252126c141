"""The runs trained together by one loop: a population of S members, a single run being a
population of one (a stack of seeds: ``fastppo.training.seed_stack``).

The loop (``trainer.train_loop``) asks the same of any population: lay out the update's batch,
take the iteration's episodes, split the update's figures into one metrics dict per member, log
them, save checkpoints, let the members that reached --run.stop-return finish, and hand back the
trained agents. Each member is an ordinary run (a stack's in ``RUN_DIR/seed_<n>``), and one that
finishes leaves the population, which trains on without it.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterable
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
from fastppo.policies import ActorCritic
from fastppo.policies.population import StackedActorCritic
from fastppo.training.checkpoint import WHOLE, Member, save_checkpoint
from fastppo.training.diagnostics import HealthMonitor
from fastppo.training.distributed import World
from fastppo.training.logger import GROUP_RETURN, RunLogger
from fastppo.training.optim import Optimizer
from fastppo.training.rollout import RolloutBuffer
from fastppo.training.seed_stack import episodes_by_seed, per_seed, seed_agent
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
    if config.self_play.magnet_coef:
        metrics["losses/magnet_kl"] = losses["magnet_kl"]
    if episodes.returns:  # a multi-agent env's headline: none when its agents are not one team
        metrics["charts/episodic_return"] = float(np.mean(episodes.returns))
    if episodes.lengths:
        metrics["charts/episodic_length"] = float(np.mean(episodes.lengths))
        for name, returns in (episodes.by_group or {}).items():  # multi-agent: each group's, then each agent's
            metrics[f"{GROUP_RETURN}{name}"] = float(np.mean(returns))
        for name, returns in (episodes.by_agent or {}).items():
            metrics[f"charts/agent_return/{name}"] = float(np.mean(returns))
    return metrics


class Runs:
    """The runs one loop trains: a population of S members, a single run being a population of one.

    Each member is an ordinary run: its folder (None on a torchrun rank but 0, or for a run
    without one), its logger, health monitor and finished episodes' returns. A member that reaches
    --run.stop-return saves its final checkpoint and agent and leaves; the others train on
    without it (``keep``: shrinks what the loop trains to the members at the given indices), and
    the loop ends when none is left. ``seeds`` names a stack's members (``RUN_DIR/seed_<n>``, the
    figures handed out per seed); None for a lone run, whose figures are handed out as its own."""

    def __init__(
        self,
        config: Config,
        agent: Agent,
        loggers: list[RunLogger],
        run_dir: Path | None,
        out_dir: Path | None,
        folders: list[Path | None],
        returns: list[list[float]],
        on_iteration: OnIteration | None,
        newest: Path | None,
        seeds: list[int] | None,
        progress: RunLogger | None,
        keep: Callable[[list[int]], None],
    ):
        self.config, self.agent, self.run_dir = config, agent, run_dir
        self.out_dir = out_dir
        """Where this process writes: None on a torchrun rank but 0, or for a run without a folder."""
        self.seeds, self.folders, self.returns, self.loggers = seeds, folders, returns, loggers
        self.given = list(seeds or [])  # the order a stack's agents are returned in: the caller's
        self.labels = [""] if seeds is None else [f"seed {s}: " for s in seeds]
        self.monitors = [HealthMonitor() for _ in loggers]  # one per member: each run's own warnings
        self.progress = progress
        """A population's one progress bar, fed with the members' means (None: the one member's logger shows it)."""
        self.console = progress or loggers[0]  # a lone run's messages: its own logger's, to the end
        self.keep = keep
        self.finished: list[Agent] = []  # the members that left at --run.stop-return, saved as they left
        self.on_iteration = on_iteration
        self.resume = resume_command(run_dir, config.env.env_id)
        self.newest = newest
        """The newest checkpoint (what a stop at once loses is counted from it)."""
        self.saved: Path | None = None
        """The checkpoint this process saved last (None: none yet)."""
        self.save_seconds: float | None = None
        """How long a save takes (None: not measured yet)."""

    @property
    def stacked(self) -> bool:
        """Whether the members' rows carry a population axis: a stack of seeds (``StackedActorCritic``);
        a population of one is its plain ``ActorCritic``."""
        return isinstance(self.agent.policy, StackedActorCritic)

    def message(self, text: str) -> None:
        self.console.message(text)

    def batch(self, buf: RolloutBuffer, **extra: Tensor) -> dict[str, Tensor]:
        """The update's batch: each member's rows, ``[S, ...]`` for a stack."""
        return buf.batch(len(self.loggers) if self.stacked else None, **extra)

    def take_episodes(self, episodes: Episodes) -> list[Episodes]:
        """The iteration's finished episodes (every rank's), recorded; returned split per member."""
        for group, returns in (episodes.by_group or {}).items():
            self.agent.group_returns.setdefault(group, []).extend(returns)
        split = episodes_by_seed(episodes, len(self.loggers), self.config.env.num_envs)
        for member_returns, member_episodes in zip(self.returns, split):
            member_returns += member_episodes.returns
        return split

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
        """One metrics dict per member (its losses, coefficients, episodes, critic fit), and the
        members' PPO-KL betas adapted to the update (each member its own)."""
        members = len(self.loggers)
        runs_losses = per_seed(losses, members)
        runs_coefs = [UpdateCoefficients(**c) for c in per_seed(asdict(coefs), members)]
        runs_metrics = [
            iteration_metrics(
                run_losses, run_episodes, seconds, optimizer, self.config, run_coefs, run_explained, elapsed, batch_size
            )
            for run_losses, run_coefs, run_episodes, run_explained in zip(
                runs_losses, runs_coefs, episodes, self.explained(batch)
            )
        ]
        betas = [run_kl_beta(c) for c in runs_coefs]
        if self.config.ppo.objective == "kl":
            betas = [
                adaptive_kl_beta(run_kl_beta(c), run_losses["kl_after_update"], self.config.ppo.kl_target)
                for c, run_losses in zip(runs_coefs, runs_losses)
            ]
        return runs_metrics, self.one_per_run(betas)

    def explained(self, batch: dict[str, Tensor]) -> list[float]:
        """The critic's fit on each member's rows (a stack's ``[S, ...]``: all members at once)."""
        if not self.stacked:
            return [explained_variance(batch["values"], batch["returns"], batch["valid"])]
        values, returns, valid = (batch[k].flatten(1) for k in ("values", "returns", "valid"))
        return explained_variance(values, returns, valid, dim=-1)

    def one_per_run(self, values: list) -> Any:
        """Per-member values as the run hands them out: a lone run's own, a stack's list."""
        return values[0] if self.seeds is None else values

    def log(self, step: int, runs_metrics: list[dict[str, float]], progress: float) -> None:
        """Each member's metrics to its log (the means over a stack to its progress bar), its health
        monitor's warnings, then ``on_iteration`` (a lone run's metrics, or a stack's {seed: metrics})."""
        # a full disk: one line, the last checkpoint kept
        with writing(self.out_dir, "the metrics in") if self.out_dir is not None else nullcontext():
            for logger, run_metrics in zip(self.loggers, runs_metrics):
                logger.log(step, run_metrics)
            if self.progress is not None:
                names = set.intersection(*(set(m) for m in runs_metrics))
                means = {name: float(np.mean([m[name] for m in runs_metrics])) for name in names}
                means["charts/SPS"] = means["charts/SPS"] * len(runs_metrics)  # the stack's steps per second
                self.progress.log(step, means)
        for label, monitor, run_metrics in zip(self.labels, self.monitors, runs_metrics):
            for warning in monitor.check(run_metrics, progress):
                self.message(f"[yellow]warning:[/] {label}{warning}")
        if self.on_iteration is not None:
            self.on_iteration(step, runs_metrics[0] if self.seeds is None else dict(zip(self.seeds, runs_metrics)))

    def checkpoint(self, state: TrainState, envs: Any, stop: StopRequest, due: bool) -> bool:
        """Checkpoint every member where this process writes and a checkpoint is ``due``; whether it
        did. A second signal cuts a save that takes a second or more."""
        if self.out_dir is None or not due:
            return False
        stop.at_once, began = self.save_seconds is not None and self.save_seconds >= 1.0, time.perf_counter()
        self.saved = self.newest = self.save(state, envs, range(len(self.loggers)))
        stop.at_once, self.save_seconds = False, time.perf_counter() - began
        return True

    def save(self, state: TrainState, envs: Any, indices: Iterable[int]) -> Path:
        """Checkpoint the members at ``indices``, each into its folder from its slice of the
        population's state (its single run's checkpoint; a stack's also names its seeds, which a
        resume stacks again: a stack's float rounding depends on its width); the last folder written."""
        saved: Path | None = None
        scratch: ActorCritic | None = None  # one module takes each stacked seed's weights in turn: written, not kept
        extra = None if self.seeds is None else {"stack": self.seeds}
        for i in indices:
            folder = self.folders[i]
            assert folder is not None  # saved only where this process writes
            agent = self.agent
            if self.stacked:
                agent = seed_agent(self.agent, i, folder, [], self.returns[i], scratch)
                assert isinstance(agent.policy, ActorCritic)  # the seed's own policy, unstacked
                scratch = agent.policy
            member = Member(i, len(self.loggers)) if self.stacked else WHOLE
            saved = save_checkpoint(folder, state, envs, self.config.run.keep_checkpoints, member, agent, extra)
        assert saved is not None  # at least one member is saved
        return saved

    @property
    def training(self) -> bool:
        """Whether any member is left to train (a resumed run may have reached its stop-return already)."""
        return bool(self.loggers) and not self.all_solved()

    def all_solved(self) -> bool:
        """Whether every member has reached --run.stop-return (this iteration is then the last)."""
        return all(reached_stop_return(self.config.run, returns) for returns in self.returns)

    def finish_solved(self, state: TrainState, envs: Any, saved: bool) -> None:
        """Let the members that reached --run.stop-return finish (``saved``: this iteration's
        checkpoint is written already): their final checkpoint and agent; the others train on."""
        done = [i for i, returns in enumerate(self.returns) if reached_stop_return(self.config.run, returns)]
        if not done:
            return
        if not saved and self.out_dir is not None:
            self.save(state, envs, done)
        for i in done:
            self.message(f"{self.labels[i]}{stop_return_note(self.config.run, self.returns[i], state.global_step)}")
            self.finished.append(self.member_agent(i))
            self.loggers[i].close()
        kept = [i for i in range(len(self.loggers)) if i not in done]
        if kept:  # the population trains on without them
            self.keep(kept)
        for name in ("seeds", "folders", "returns", "loggers", "monitors", "labels"):
            values = getattr(self, name)
            if values is not None:
                setattr(self, name, [values[i] for i in kept])

    def member_agent(self, index: int) -> Agent:
        """Member ``index`` as its run's agent, saved into its folder (where this process writes);
        a population of one's is the run's own agent."""
        folder, history = self.folders[index], self.loggers[index].history
        if not self.stacked:
            agent = self.agent
            agent.history = history
        else:
            assert folder is not None  # a stack's members each have one
            agent = seed_agent(self.agent, index, folder, history, self.returns[index])
        if folder is not None and self.out_dir is not None:
            with writing(folder, "the agent in"):
                agent.save(folder)
        return agent

    def kept_note(self) -> str | None:
        """The last good checkpoint, for an error that stops training."""
        if self.seeds is None:
            last_good = list_checkpoints(self.run_dir) if self.run_dir is not None else []
            return str(last_good[-1]) if last_good else None
        # A stack's seeds stand together: each seed's checkpoint of the same iteration.
        last_good = list_checkpoints(self.folders[0]) if self.folders and self.folders[0] else []
        if not last_good:
            return None
        return (
            f"each seed's, {self.run_dir}/seed_<n>/checkpoints/{last_good[-1].name} "
            f"(fastppo train --resume {self.run_dir})"
        )

    def close(self) -> None:
        for logger in (*self.loggers, *([self.progress] if self.progress else [])):
            logger.close()

    def result(self, iteration: int, interrupted_by: signal.Signals | None, world: World) -> Any:
        """The trained agents, saved: a lone run's agent, or a stack's in the order its seeds were given."""
        if interrupted_by is not None and self.out_dir is not None:
            # plain print, after the progress bar is gone: one unwrapped line to copy
            where = (
                f"checkpoint saved in {self.saved}"
                if self.seeds is None
                else f"each seed checkpointed in {self.run_dir}/seed_<n>"
            )
            how = (
                f"{world.relaunch}{self.resume}"
                if self.seeds is None
                else f"{self.resume} (or one seed alone: --resume {self.run_dir}/seed_<n>)"
            )
            print(
                f"fastppo: {interrupted_by.name}: stopped after iteration {iteration}, {where}\nfastppo: resume "
                f"{'' if self.seeds is None else 'the stack '}with: {how}",
                file=sys.stderr,
                flush=True,
            )
        agents = [self.member_agent(i) for i in range(len(self.loggers))]
        for agent in agents:
            agent.interrupted_by = interrupted_by
        agents = self.finished + agents
        if self.seeds is None:
            return agents[0]
        return sorted(agents, key=lambda a: self.given.index(a.config.run.seed))

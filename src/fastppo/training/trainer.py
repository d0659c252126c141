"""The PPO loop (``train_loop``: collect_rollout -> compute_gae -> ppo_update -> log -> checkpoint)
and the setup that builds what it trains: envs, agent, optimizer, a restored checkpoint, loggers."""

from __future__ import annotations

import math
import random
import signal
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fastppo.agents.agent import Agent, build_agent
from fastppo.agents.agent_rows import PettingZooAgents
from fastppo.config import Config, RunConfig
from fastppo.core import RewardScaler, schedule_progress, scheduled
from fastppo.devices import check_precision, native_bf16, resolve_device
from fastppo.env_ids import is_pettingzoo
from fastppo.envs import make_vec_env
from fastppo.envs.make import rollout_device
from fastppo.envs.pettingzoo_vec import AgentSpaces
from fastppo.envs.turn_based import is_game
from fastppo.envs.vector import HostCopies, VecEnv
from fastppo.errors import FastPPOError
from fastppo.files.outputs import no_links, output_dir, removed_if_left_empty, writing
from fastppo.files.run_folder import check_no_run, write_config
from fastppo.games.league import check_league, make_league
from fastppo.policies import ActorCritic
from fastppo.policies.mlp_autograd import mlp_layers
from fastppo.profiling import SectionTimer
from fastppo.training.allocator import reuse_freed_memory
from fastppo.training.checkpoint import (
    WHOLE,
    Checkpoint,
    Member,
    check_metrics_reach,
    restore_train_state,
    rewind_metrics,
)
from fastppo.training.cuda_graphs import check_cudagraphs
from fastppo.training.distributed import LONE, SyncedStatistics, Unsynced, World, rank_device, ranks
from fastppo.training.logger import GROUP_RETURN, GYM_SUMMARY, RunLogger
from fastppo.training.optim import Optimizer
from fastppo.training.rollout import (
    EnvCursor,
    ObservationNormalizer,
    PolicyStep,
    RolloutBuffer,
    collect_rollout,
    fresh_state,
    rollout_targets,
    torch_threads,
)
from fastppo.training.runs import OnIteration, Runs
from fastppo.training.seed_stack import check_seed_stack, keep_seeds, stacked_agent
from fastppo.training.signals import StopRequest, during_start_up, lost_since
from fastppo.training.state import TrainState, planned_iterations
from fastppo.training.update import MinibatchStep, UpdateCoefficients, make_optimizer, ppo_update, set_learning_rate


def seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = deterministic


def gpu_note(device: torch.device, envs: VecEnv, policy: torch.nn.Module) -> str | None:
    """A hint when a GPU trains an MLP policy on envs that step on the host: every rollout step is
    then a round trip to the device for a forward of a few tiny kernels, and the CPU is often as
    fast (measured, benchmarks/README.md "GPU figures"). Tensor envs, CNNs and stacks of seeds are
    what a GPU pays for."""
    if (
        device.type != "cuda"
        or not isinstance(envs, HostCopies)
        or not isinstance(policy, ActorCritic)
        or mlp_layers(policy.actor_encoder) is None
    ):
        return None
    return (
        f"[yellow]note:[/] an MLP policy on {envs.num_envs} host env{'s' if envs.num_envs > 1 else ''} may train "
        "faster with --device cpu (HalfCheetah with CleanRL's defaults on an H200: 749 SPS eager, 1 668 with "
        "--compile --cudagraphs, 1 703 on its CPU); a GPU pays for --backend tensor, CNN policies and --seeds"
    )


def check_finite(
    metrics: dict[str, float], agent: Agent, optimizer: Optimizer, iteration: int, global_step: int
) -> None:
    """Stop with the culprit's name instead of training on NaNs (and before checkpointing them)."""
    # A stack of seeds has one value per seed (a list): any non-finite one stops them all.
    bad = [
        name
        for name in ("loss", "pg_loss", "v_loss", "entropy", "grad_norm")
        if not all(map(math.isfinite, np.atleast_1d(metrics[name])))
    ]
    # One check on the optimizer's flat parameter (every weight is a view of it: optim.flatten_parameters);
    # the per-layer names only once something is wrong.
    if not all(bool(torch.isfinite(p).all()) for group in optimizer.param_groups for p in group["params"]):
        bad += [f"parameter {name}" for name, p in agent.policy.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise FastPPOError(
            f"training stopped at iteration {iteration} (step {global_step}): {', '.join(bad)} became NaN/Inf; "
            "lower --learning-rate or enable --normalize-obs/--normalize-reward"
        )


def check_finite_rollout(
    buf: RolloutBuffer, cursor: EnvCursor, iteration: int, global_step: int, agents: list[str] | None = None
) -> None:
    """NaN/Inf observations or rewards from the env, looked for once per iteration on the whole
    buffer (not per step: that would cost a host sync per step on GPU). With ``agents`` (a
    PettingZoo env's), the rows are its copies' agents, and the culprit is named so."""
    num_envs = buf.rewards.shape[1]
    copies = num_envs // len(agents) if agents else num_envs
    observations = torch.cat([buf.obs, cursor.obs.unsqueeze(0)])
    for name, values in (("observation", observations), ("reward", buf.rewards)):
        if not values.is_floating_point():
            continue
        bad = ~torch.isfinite(values.reshape(values.shape[0], num_envs, -1)).all(dim=-1)
        if bad.any():
            t, row = (int(i) for i in bad.nonzero()[0])
            t -= buf.first_row  # a game's rows of steps start after its carried decisions
            if agents:
                what = (
                    f"the env returned a NaN/Inf {name} for agent {agents[row % len(agents)]} of copy "
                    f"{row // len(agents)}"
                )
            else:
                what = f"env {row} returned a NaN/Inf {name}"
            fix = "fix the env" if agents else "fix the env or sanitise it in a gymnasium wrapper"
            raise FastPPOError(
                f"training stopped at iteration {iteration}: {what} at rollout step {t} (about global step "
                f"{global_step + t * copies}); {fix}"
            )


def check_stop_return(run: RunConfig, envs: VecEnv) -> None:
    """--run.stop-return reads the headline return: a multi-agent env without one (agents in
    several groups, --multi-agent.headline auto) must name the group it reads."""
    spaces = getattr(envs, "spaces", None)
    if run.stop_return is not None and isinstance(spaces, AgentSpaces) and spaces.headline is None:
        raise FastPPOError(
            f"--run.stop-return reads one return, and the agents are in {len(spaces.group_names)} groups "
            f"({', '.join(spaces.group_names)}) that may play against each other: name the one it reads, e.g. "
            f"--multi-agent.headline {spaces.group_names[0]} (or team for the sum of all agents')"
        )


FEW_UPDATES = 10
"""Below this many iterations a run warns at its start: PPO barely learns in a handful of updates."""


def few_updates_warning(config: Config, world_size: int = 1) -> str | None:
    """One line when the budget leaves fewer than ``FEW_UPDATES`` iterations (each one batch of
    num_envs x num_steps per rank), naming the figures and what to change; None otherwise."""
    iterations = config.num_iterations // world_size
    if iterations >= FEW_UPDATES:
        return None
    batch = config.batch_size * world_size
    return (
        f"--total-timesteps {config.ppo.total_timesteps} gives only {iterations} "
        f"update{'s' if iterations != 1 else ''} of {batch} steps ({config.env.num_envs} envs x {config.ppo.num_steps} "
        f"steps{f' x {world_size} ranks' if world_size > 1 else ''}): PPO needs more to learn; raise --total-timesteps "
        f"to {FEW_UPDATES * batch} or more, or lower --num-envs/--num-steps"
    )


def train(
    config: Config,
    run_dir: Path | None = None,
    checkpoint: Checkpoint | None = None,
    on_iteration: Callable[[int, dict[str, float]], None] | None = None,
    on_start: Callable[[Config], None] | None = None,
    start_over: bool = False,
) -> Agent:
    """Train a PPO agent as ``config`` says; write logs, checkpoints and the final agent to ``run_dir``.

    With ``checkpoint`` (from ``resume_config``) the run continues where it stopped; with
    ``start_over``, the run in ``run_dir`` that stopped before its first checkpoint starts over
    (``restart_config``: its files are rewritten, as a new run's). With a
    ``run_dir``, SIGINT/SIGTERM end the run after the current iteration, with a checkpoint, and the
    returned agent's ``interrupted_by`` names the signal (None for a run that reached its end).
    ``on_iteration(global_step, metrics)`` is called after each iteration is logged (fastppo sweep
    reports returns to Optuna's pruner with it); an exception it raises ends the run there, envs and
    logger closed, nothing saved, and reaches the caller unchanged. ``on_start(config)`` is called once
    the run folder has passed its checks, before the envs are built (the CLI prints its header).

    Under torchrun (WORLD_SIZE > 1) every rank calls this and trains as one rank of the run
    (``fastppo.training.distributed``): rank 0 alone writes to ``run_dir``.
    """
    config.validate()
    device = rank_device(resolve_device(config.run.device))
    # Only the process that writes the run folder may take it away again (torchrun: rank 0).
    with (
        during_start_up(),
        ranks(device, config.run.collective_timeout) as world,
        removed_if_left_empty(run_dir if world.main else None),
    ):
        return train_rank(
            config, run_dir, checkpoint, on_iteration, device, world, on_start=on_start, start_over=start_over
        )


def train_seed_stack(
    config: Config,
    seeds: list[int],
    run_dir: Path,
    checkpoints: list[Checkpoint] | None = None,
    on_iteration: Callable[[int, dict[int, dict[str, float]]], None] | None = None,
) -> list[Agent]:
    """Train one agent per seed of ``seeds`` in this process, as one batched computation
    (``fastppo.training.seed_stack``), each seed's run into ``run_dir/seed_<n>``; the agents in the order of ``seeds``.
    With ``checkpoints`` (``resume_seed_stack_config``), the stack continues where it stopped.
    ``on_iteration(global_step, {seed: metrics})`` as ``train``'s, for the seeds still training."""
    config.validate()
    check_seed_stack(config)
    with during_start_up(), removed_if_left_empty(run_dir):
        return train_rank(config, run_dir, checkpoints, on_iteration, resolve_device(config.run.device), LONE, seeds)


def train_rank(
    config: Config,
    run_dir: Path | None,
    checkpoint: Checkpoint | list[Checkpoint] | None,
    on_iteration: OnIteration | None,
    device: torch.device,
    world: World,
    seeds: list[int] | None = None,
    on_start: Callable[[Config], None] | None = None,
    start_over: bool = False,
) -> Any:
    """``train`` on ``device``, as one rank of ``world``: a population of one run, or with ``seeds`` a
    stack of those seeds (``train_seed_stack``; ``checkpoint`` is then one per seed, each member's):
    the set-up, step by step, then ``train_loop``."""
    config = precision_for(config, device)  # before anything is written
    reuse_freed_memory()  # the update's large temporaries: no fresh page faults each time (fastppo.training.allocator)
    out_dir = run_dir if world.main else None  # where this process writes
    checkpoints = checkpoint if isinstance(checkpoint, list) else [] if checkpoint is None else [checkpoint]
    folders = member_folders(run_dir, out_dir, seeds)
    check_folders([f for f in folders if f is not None], checkpoints, start_over)  # before anything is written
    if on_start is not None and world.main:
        on_start(config)  # as it trains: with its precision chosen
    seed = start_random_streams(config, world, checkpoints, seeds, device)
    collect_on = rollout_device(config.env, device)  # where the rollout lives: the CPU for numpy envs
    envs = open_envs(config, collect_on, out_dir if seeds is None else None, world, len(seeds or [seed]))
    state, normalize_obs, statistics, mask_dim = start_state(config, envs, device, collect_on, world, seed, seeds)
    state.agent.run_dir = run_dir
    # self-play: the learner's opponents, its past snapshots
    state.league = make_league(config, envs, state.agent, seed)
    # The checkpoint is checked whole and restored before the loggers rewind metrics.jsonl and
    # TensorBoard and rewrite config.yaml: a damaged one leaves the run folder as it was.
    try:
        exact, returns = restore(state, envs, checkpoint, normalize_obs, statistics, world.restart_seed(seed), seeds)
    except BaseException:
        envs.close()
        raise
    training = Training(
        config,
        state,
        envs,
        world,
        device,
        collect_on,
        normalize_obs,
        statistics,
        mask_dim,
        config.rollout_threads(stacked=seeds is not None),
    )
    runs = open_runs(config, training, run_dir, out_dir, folders, checkpoints, returns, on_iteration, seeds)
    for note in (restart_note(config, world) if not exact else None, gpu_note(device, envs, state.agent.policy)):
        if note is not None:
            runs.message(note)
    if isinstance(envs, HostCopies):
        envs.timer = training.timer  # numpy-backed envs time their host<->device copies ("copy")
    return run(training, runs, run_dir is not None)


def precision_for(config: Config, device: torch.device) -> Config:
    """``config`` with ``policy.precision`` "auto" chosen for ``device``: bf16 for a pixel policy
    where ``device`` computes it natively (the Nature CNN's update step in 0.64-0.73x fp32's time on
    a Zen 4 CPU), else fp32. Chosen before config.yaml is written, so a resume computes as the run
    did, on any machine. An explicit bf16 where it is not native: one line."""
    check_precision(config.policy.precision, device)
    if config.policy.precision != "auto":
        return config
    return replace(
        config,
        policy=replace(config.policy, precision="bf16" if config.pixel_policy and native_bf16(device) else "fp32"),
    )


def member_folders(run_dir: Path | None, out_dir: Path | None, seeds: list[int] | None) -> list[Path | None]:
    """Each member's run folder: a lone run's (None where this process writes none: a torchrun rank
    but 0, a run without a folder), a stack's seeds' ``run_dir/seed_<n>``."""
    if seeds is None:
        return [out_dir]
    assert run_dir is not None  # a stack always writes its seeds' folders
    return [run_dir / f"seed_{s}" for s in seeds]


def check_folders(folders: list[Path], checkpoints: list[Checkpoint], start_over: bool) -> None:
    """The members' folders, before anything is written to any of them: no other run's files there
    (a fresh start), a resumed member's metrics.jsonl whole, each folder writable."""
    for directory in folders if not checkpoints else []:
        check_no_run(directory, start_over)
    for directory, saved in zip(folders, checkpoints):
        check_metrics_reach(directory, saved)
    for directory in folders:
        output_dir(directory, "the run directory")  # before a single step is spent


def start_random_streams(
    config: Config, world: World, checkpoints: list[Checkpoint], seeds: list[int] | None, device: torch.device
) -> int:
    """Seed the global RNGs, set torch's threads; the rank's seed. Each rank its own envs and random
    streams; a resumed rank restarts them (the checkpoint holds rank 0's). A stack seeds each
    member's streams itself (``seed_stack.stacked_agent``), from its first seed here."""
    resumed = checkpoints[0].iteration if checkpoints and seeds is None else 0
    seed = world.seed(config.run.seed, config.env.num_envs, resumed)
    seed_everything(seeds[0] if seeds is not None else seed, config.run.torch_deterministic)
    torch.set_num_threads(config.intra_op_threads(stacked=seeds is not None))
    if config.run.cudagraphs:
        check_cudagraphs(device)
    return seed


def open_envs(config: Config, collect_on: torch.device, out_dir: Path | None, world: World, members: int) -> Any:
    """The envs every member's rows step in (a stack's: a block of one tensor env per seed), checked
    against the config; videos into ``out_dir`` (a lone run's) with --capture-video."""
    video_dir = out_dir / "videos" if out_dir else None
    if video_dir is not None and config.env.capture_video:
        no_links(video_dir, "--capture-video's folder", inside=out_dir)
    envs = make_vec_env(
        config.env, collect_on, video_dir=video_dir, multi_agent=config.multi_agent, seed_blocks=members
    )
    try:
        if is_pettingzoo(config.env.env_id):  # a row per agent: the batch is known now (Config.validate left it)
            config.check_batch(agents=envs.num_envs // config.env.num_envs)
        check_stop_return(config.run, envs)
        check_league(config, envs, world.size)
    except FastPPOError:
        envs.close()
        raise
    return envs


def start_state(
    config: Config,
    envs: Any,
    device: torch.device,
    collect_on: torch.device,
    world: World,
    seed: int,
    seeds: list[int] | None,
) -> tuple[TrainState, ObservationNormalizer, SyncedStatistics | Unsynced, int | None]:
    """The population's first state on the envs' first rows: its agent (a single run's plain
    ``ActorCritic``; a stack's ``StackedActorCritic``, a block of the tensor env per seed:
    ``check_seed_stack``), the optimizer, the statistics (per member), the cursor, PPO-KL's beta
    per member. Also the observation normaliser, the statistics every rank merges and the action
    mask's width."""
    cfg = config.ppo
    first = envs.reset(seed=seed if seeds is None else seeds)
    if seeds is None:
        agent = build_agent(
            config,
            envs.single_observation_space,
            envs.single_action_space,
            device,
            envs.layout,
            statistics_device=collect_on,
        )
    else:
        agent = stacked_agent(config, envs.single_observation_space, envs.single_action_space, device, seeds)
    agent.action_masks = first.action_mask is not None
    if isinstance(spaces := getattr(envs, "spaces", None), AgentSpaces):  # agent.act on PettingZoo's own observations
        agent.pettingzoo = PettingZooAgents.of(spaces)
    normalize_obs = ObservationNormalizer(agent.obs_rms, config.env.clip_obs)
    groups = None if seeds is None else len(seeds)
    reward_scaler = (
        RewardScaler(envs.num_envs, cfg.gamma, config.env.clip_reward, collect_on, groups=groups)
        if config.env.normalize_reward
        else None
    )
    # The same start on every rank: rank 0's weights, and statistics merged each iteration.
    world.broadcast_module(agent.policy)
    return_rms = None if reward_scaler is None else reward_scaler.return_rms
    statistics = world.synced([rms for rms in (agent.obs_rms, return_rms) if rms is not None])
    mask_dim = None if first.action_mask is None else first.action_mask.shape[-1]
    # A turn-based game's cursor carries the decisions a rollout's end leaves open (fastppo.training.rollout).
    open_decisions = RolloutBuffer.allocate(1, envs, collect_on, mask_dim) if is_game(envs) else None
    state = TrainState(
        agent=agent,
        optimizer=make_optimizer(agent.policy, cfg.learning_rate, cfg.adam_eps, device, config.run.cudagraphs),
        reward_scaler=reward_scaler,
        cursor=EnvCursor.at_reset(
            first,
            normalize_obs,
            update=True,
            state=fresh_state(agent.policy, envs.num_envs, collect_on),
            open=open_decisions,
        ),
        kl_beta=cfg.kl_beta if groups is None else [cfg.kl_beta] * groups,
        world_size=world.size,
    )
    return state, normalize_obs, statistics, mask_dim


def restore(
    state: TrainState,
    envs: Any,
    checkpoint: Checkpoint | list[Checkpoint] | None,
    normalize_obs: ObservationNormalizer,
    statistics: SyncedStatistics | Unsynced,
    fresh_seed: int | None,
    seeds: list[int] | None,
) -> tuple[bool, list[list[float]]]:
    """Put a resumed population into its checkpoints' state (a stack's: one per seed, each into its
    member's slice); whether its envs were restored exactly, and each member's recent episode returns."""
    if checkpoint is None:  # a fresh single run's returns are its agent's; a fresh stack's seeds have none yet
        return True, [state.agent.episode_returns] if seeds is None else [[] for _ in seeds]
    members = (
        {Member(index, len(checkpoint)): c for index, c in enumerate(checkpoint)}
        if isinstance(checkpoint, list)
        else {WHOLE: checkpoint}
    )
    exact, returns = restore_train_state(state, envs, members, normalize_obs, fresh_seed=fresh_seed)
    statistics.rebase()  # the checkpoint's, on every rank
    return exact, returns


def open_runs(
    config: Config,
    training: Training,
    run_dir: Path | None,
    out_dir: Path | None,
    folders: list[Path | None],
    checkpoints: list[Checkpoint],
    returns: list[list[float]],
    on_iteration: OnIteration | None,
    seeds: list[int] | None,
) -> Runs:
    """The population's runs: a logger per member into its folder (on resume, each rewound to its
    checkpoint), with a stack's one progress bar, fed the means over its seeds."""
    planned = training.num_iterations * training.steps_per_iteration  # the bar's 100%: whole batches
    world, envs = training.world, training.envs
    if seeds is None:
        loggers = [
            open_logger(
                config,
                out_dir,
                checkpoints[0] if checkpoints else None,
                planned,
                quiet=not world.main,
                summary=progress_summary(envs),
            )
        ]
        progress = None
    else:
        member_checkpoints: list[Checkpoint | None] = [*checkpoints] if checkpoints else [None] * len(seeds)
        loggers = [
            open_logger(replace(config, run=replace(config.run, seed=s, progress=False)), d, c, planned)
            for s, d, c in zip(seeds, folders, member_checkpoints)
        ]
        progress = RunLogger(None, planned, False, config.run.progress)
    newest = checkpoints[0].path if checkpoints else None
    agent, keep = training.state.agent, training.keep_runs
    return Runs(config, agent, loggers, run_dir, out_dir, folders, returns, on_iteration, newest, seeds, progress, keep)


def restart_note(config: Config, world: World) -> str:
    """What a resume that could not restore the envs exactly restarts."""
    if world.size > 1:
        return (
            "[yellow]note:[/] under torchrun every rank restarts fresh episodes and random streams (the checkpoint "
            "holds rank 0's); weights, optimizer, statistics and counters are restored exactly"
        )
    return (
        f"[yellow]note:[/] {config.env.env_id} ({config.env.backend} backend) cannot be snapshot: its envs "
        "restart fresh episodes; weights, optimizer, statistics, counters and RNGs are restored exactly"
    )


def run(training: Training, runs: Runs, stoppable: bool) -> Any:
    """``train_loop`` until the end, a signal (``stoppable``: a run with a folder; it checkpoints
    and ends) or an error (it names the last good checkpoint); the runs' agents, saved."""
    state, envs, agent = training.state, training.envs, training.state.agent
    try:
        with StopRequest(enabled=stoppable, world=training.world) as stop:
            train_loop(training, runs, stop)
            # A signal during the last iteration stopped nothing: the run is finished, not interrupted
            # (so is one whose runs all reached --stop-return).
            if stop.requested and state.iteration < training.num_iterations and runs.training:
                runs.checkpoint(
                    state, envs, stop, due=runs.saved is None or not runs.saved.name.endswith(f"{state.iteration:06d}")
                )
                assert stop.signal is not None  # requested
                agent.interrupted_by = signal.Signals(stop.signal)
    except FastPPOError as exc:
        kept = runs.kept_note()
        raise FastPPOError(f"{exc}; the last good checkpoint is kept: {kept}" if kept else str(exc)) from None
    finally:
        runs.close()
        envs.close()
    return runs.result(state.iteration, agent.interrupted_by, training.world)


class Training:
    """What the loop trains with, besides its runs: the state, envs, world, and the rollout buffer
    and opt-in speed layers (--compile, --cudagraphs; eager by default) built for the policy."""

    def __init__(
        self,
        config: Config,
        state: TrainState,
        envs: Any,
        world: World,
        device: torch.device,
        collect_on: torch.device,
        normalize_obs: ObservationNormalizer,
        statistics: SyncedStatistics | Unsynced,
        mask_dim: int | None,
        rollout_threads: int,
    ):
        self.config, self.state, self.envs, self.world, self.device, self.collect_on = (
            config,
            state,
            envs,
            world,
            device,
            collect_on,
        )
        self.rollout_threads = rollout_threads  # torch's intra-op threads while collecting (Config.rollout_threads)
        self.normalize_obs, self.statistics, self.timer = normalize_obs, statistics, SectionTimer()
        self.num_iterations, self.steps_per_iteration = (
            planned_iterations(config, world.size),
            config.batch_size * world.size,
        )
        self.mask_dim = mask_dim
        self.agent_names = (
            envs.agents if is_pettingzoo(config.env.env_id) else None
        )  # rollout checks name a PettingZoo env's agents
        self.build()

    def build(self) -> None:
        policy, run = self.state.agent.policy, self.config.run
        # A turn-based game's buffer: decisions counted per seat, those a rollout leaves open carried in.
        self.buf = RolloutBuffer.allocate(
            self.config.ppo.num_steps,
            self.envs,
            self.collect_on,
            self.mask_dim,
            policy.state_size,
            turns=self.state.cursor.open is not None,
        )
        self.policy_step = PolicyStep(policy, run.compile, run.cudagraphs)
        self.update_step = MinibatchStep(
            policy, self.state.optimizer, self.config.ppo, run.compile, run.cudagraphs, self.world
        )

    def targets(self, last_value: torch.Tensor) -> dict[str, torch.Tensor]:
        """GAE over the rollout; in a turn-based game over each seat's own decisions (its rows
        are decisions on its turns only: fastppo.envs.turn_based), with the decisions that have
        a target (``rollout_targets``)."""
        return rollout_targets(self.buf, last_value, self.config.ppo.gamma, self.config.ppo.gae_lambda)

    def keep_runs(self, indices: list[int]) -> None:
        """A stack trains on with the seeds at ``indices`` (a population of one never keeps fewer:
        its one member's leaving ends the loop): what holds the old parameter is rebuilt."""
        keep_seeds(self.state, self.envs, indices)
        self.build()


def train_loop(t: Training, runs: Runs, stop: StopRequest) -> None:
    """The PPO loop, the pseudocode of docs/how-it-works/ppo-loop.md (the design: docs/how-it-works/design.md):
    collect_rollout -> compute_gae -> ppo_update -> log -> checkpoint, each iteration, until the
    budget is spent, a signal asks to stop or no run is left.
    The same lines train a single run or a stack of seeds (``runs``), alone or as a torchrun rank
    (``t.world``: a lone process's collectives are identities), on env or agent rows."""
    state, cfg, every = t.state, t.config.ppo, t.config.run.checkpoint_every
    while state.iteration < t.num_iterations and not stop.requested and runs.training:
        state.iteration += 1
        stop.lost = lost_since(runs.newest, state.iteration, runs.resume)
        stop.at_once = True  # until the update is done
        progress = schedule_progress(state.iteration, t.num_iterations, state.schedule_anchor)
        start = time.perf_counter()
        set_learning_rate(state.optimizer, scheduled(cfg.lr_schedule, cfg.learning_rate, progress))
        clip_coef = scheduled(cfg.clip_schedule, cfg.clip_coef, progress)
        entropy = scheduled(cfg.ent_schedule, cfg.ent_coef, progress)
        coefs = UpdateCoefficients(clip_coef, entropy, state.kl_beta, t.config.self_play.magnet_coef)

        with torch_threads(t.rollout_threads):
            state.cursor, last_value = collect_rollout(
                state.agent.policy,
                t.envs,
                t.buf,
                state.cursor,
                t.normalize_obs,
                state.reward_scaler,
                t.timer,
                t.policy_step,
            )
        check_finite_rollout(t.buf, state.cursor, state.iteration, state.global_step, t.agent_names)
        t.statistics.merge()  # every rank: the same statistics, and every rank's episodes
        # the episodes played by the policy before this update
        episodes = runs.take_episodes(t.world.gather_episodes(t.envs.pop_episodes()))
        targets = t.targets(last_value)  # advantages, returns; a game's decisions with a target
        with t.timer.section("update"):
            batch = {k: v.to(t.device, non_blocking=True) for k, v in runs.batch(t.buf, **targets).items()}
            batch |= state.league.magnet_log_probs(batch)  # self-play's magnet, if any (fastppo.games.magnet)
            losses = ppo_update(state.agent.policy, state.optimizer, batch, cfg, coefs, t.update_step)
        state.global_step += t.steps_per_iteration
        check_finite(losses, state.agent, state.optimizer, state.iteration, state.global_step)
        timings, seconds = t.timer.pop(), time.perf_counter() - start
        metrics, state.kl_beta = runs.metrics(
            losses, coefs, batch, episodes, timings, seconds, state.optimizer, t.steps_per_iteration
        )
        metrics[0] |= state.league.after_update(state.iteration)  # self-play: snapshots, games, ratings
        stop.at_once = False  # the state is whole again: a second signal waits for the save

        runs.log(state.global_step, metrics, progress)
        stop.agree()
        last = state.iteration == t.num_iterations or runs.all_solved()
        due = stop.requested or last or bool(every and state.iteration % every == 0)
        saved = runs.checkpoint(state, t.envs, stop, due=due)
        runs.finish_solved(state, t.envs, saved)


def progress_summary(envs: VecEnv) -> tuple[tuple[str, str, str], ...]:
    """The progress bar's figures: a gymnasium run's; for agents in several groups each group's
    return beside the headline (in its place when there is none); for a game the learner's
    record against its pool and its rating."""
    sps, headline, *rest = GYM_SUMMARY
    if is_game(envs):
        return (sps, ("win vs pool", "self_play/win_vs_pool", ".2f"), ("rating", "ratings/learner", ".1f"), *rest)
    spaces = getattr(envs, "spaces", None)
    if not isinstance(spaces, AgentSpaces) or len(spaces.group_names) == 1:
        return GYM_SUMMARY
    groups = tuple((group, f"{GROUP_RETURN}{group}", ".1f") for group in spaces.group_names)
    return (sps, *([headline] if spaces.headline else []), *groups, *rest)


def open_logger(
    config: Config,
    run_dir: Path | None,
    checkpoint: Checkpoint | None,
    total_steps: int,
    quiet: bool = False,
    summary: tuple[tuple[str, str, str], ...] = GYM_SUMMARY,
) -> RunLogger:
    """The run's logger, its progress bar ending at ``total_steps`` (the steps the run takes); on
    resume, metrics.jsonl and TensorBoard are first rewound to the checkpoint's step (a killed run
    may have logged past it) and the history reloaded. A ``quiet`` one (torchrun ranks but 0)
    shows nothing: no progress bar, no messages."""
    previous: list[dict[str, float]] = []
    purge_step = checkpoint.global_step + 1 if checkpoint else None
    with (
        writing(run_dir, "the run folder") if run_dir is not None else nullcontext()
    ):  # a full disk, a folder gone: one line
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            write_config(run_dir, config)
            previous = rewind_metrics(run_dir, checkpoint.global_step if checkpoint else 0)
        logger = RunLogger(
            run_dir,
            total_steps,
            config.run.tensorboard,
            config.run.progress and not quiet,
            config.to_dict(),
            purge_step,
            summary,
        )
    logger.console.quiet = quiet
    logger.history[:0] = previous
    return logger

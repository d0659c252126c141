"""Run configuration: one dataclass per concern, each field's docstring is its CLI help.

Defaults equal CleanRL's ppo.py (discrete actions); the shipped ``cleanrl-continuous`` preset
holds ppo_continuous_action.py's. ``Config.validate`` derives the batch sizes and checks every
value once, with messages that say how to fix the input.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import math
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from fastppo.env_ids import is_atari, is_pettingzoo
from fastppo.errors import FastPPOError

PRESET_DIR = Path(__file__).parent / "presets"
MAX_SEED = 2**32 - 1
"""numpy and gymnasium take seeds in [0, 2**32 - 1]."""


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


WIDE_UPDATE_WORK = 2**26
"""``Config.policy_work`` of one minibatch from which the update runs on every CPU. Tensor
CartPole, 64 x 64 MLP, one epoch of one minibatch, 2-core Zen 4, median ms an update on 1 / 2
threads: 16 384 rows 20.5 / 14.8, 32 768 rows 39 / 28, 65 536 rows 80 / 55; below, the second
thread's wake-up costs about what it saves."""
WIDE_BOARD_UPDATE_WORK = 2**24
"""``WIDE_UPDATE_WORK`` for a board encoder, whose ``Config.policy_work`` counts one cell of the
board. 2-core Zen 4, 2026-11-29, SPS on 1 / 2 threads of a game's first 20-40k steps: connect four's
preset (64 channels, 2 blocks, 512-row minibatches: 9.4e7) 544 / 909, the same at 32 channels
(2.4e7) 1 527 / 2 351; tic-tac-toe's preset (16 channels, 1 block, 256 rows: 1.8e6) 2 787 and
2 766 / 3 057 and 2 403, no gain."""
WIDE_ROLLOUT_WORK = 2**22
"""``Config.policy_work`` of one rollout step (every env's row) from which the policy acts on every CPU.
The same runs, ms of the policy's forwards an iteration of 64 steps on 1 / 2 threads: 256 envs
12.4 / 12.3, 512 envs 19.5 / 15-22, 1 024 envs 35 / 23, 2 048 envs 65 / 42."""


@dataclass
class EnvConfig:
    """Environments."""

    env_id: str = "CartPole-v1"
    """A registered gymnasium id, or 'package.module:Class' (or 'file.py:Class') naming your own gymnasium.Env, or
    your own TensorEnv (trained on the tensor backend)."""
    num_envs: int = 4
    """Parallel environments."""
    backend: Literal["sync", "async", "tensor", "envpool", "ale"] = "sync"
    """Vector env: gymnasium sync (one process), async (one process per env; PettingZoo envs: one per CPU, the copies
    split among them), batched torch tensor envs, EnvPool, or ale (Atari games in ale-py's C++ threads; the Atari
    presets' backend)."""
    normalize_obs: bool = False
    """Normalise observations by one running mean/std shared by all envs (frozen at evaluation)."""
    clip_obs: float = 10.0
    """Clip normalised observations to [-clip_obs, clip_obs]."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return."""
    clip_reward: float = 10.0
    """Clip scaled rewards to [-clip_reward, clip_reward]."""
    capture_video: bool = False
    """Record videos of env 0's episodes into the run directory during training."""
    frame_stack: int = 4
    """Atari only: how many of the latest 84x84 frames one observation stacks (1 when --policy.memory remembers
    instead, as CleanRL's ppo_atari_lstm.py)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """PettingZoo envs (pz:<module>) only: keyword arguments for the module's parallel_env(**kwargs), as JSON:
    '{"max_cycles": 25}'."""
    step_in_halves: bool = False
    """ale backend only: step the envs as two halves that take turns, the env threads stepping one
    half while the policy acts on the other (each env's steps are those of the default)."""


@dataclass
class MultiAgentConfig:
    """Multi-agent PettingZoo envs (pz:<module>): every agent of every env copy is one batch row."""

    algorithm: Literal["ippo", "mappo"] = "ippo"
    """ippo: the critic sees the agent's own observation; mappo: a centralised critic also sees the env's global
    state() (the agents' observations concatenated when the env has none)."""
    agent_ids: bool = True
    """Append a one-hot agent id to each agent's observation, so the shared policy can tell the agents apart."""
    policies: Literal["shared", "group", "seat"] = "shared"
    """shared: one policy for all agents; group: one per agent group, agents grouped by name without the trailing
    _<n> (adversary_0, adversary_1 | agent_0); seat: one per agent, e.g. each seat of a turn-based game whose seats
    differ (the self-play pool then snapshots and plays whole per-seat sets)."""
    pad: bool = False
    """Agents with different observation sizes or numbers of discrete actions: pad observations with zeros and mask
    the missing actions (else such envs are refused)."""
    headline: str = "auto"
    """The return charts/episodic_return, the progress bar, fastppo eval and --run.stop-return read: team (the sum of
    all agents' returns), a group's name (the sum of its agents' returns, e.g. adversary), or auto: team when the
    agents are one group (agent_0, agent_1, ...), else none (agents in several groups, e.g. adversary_0 | agent_0,
    may play against each other: only each group's return is reported, charts/episodic_return/<group>)."""


@dataclass
class SelfPlayConfig:
    """Self-play in turn-based games (pz: modules with only env(), e.g. pz:pettingzoo.classic.connect_four_v3): the
    learner plays every seat against itself, and against a pool of its past snapshots."""

    pool_size: int = 0
    """Past snapshots of the learner kept as opponents (0: it plays only itself); a pool needs a two-seat game."""
    snapshot_every: int = 10
    """Iterations between snapshots of the learner into the pool (the oldest leaves a full pool)."""
    sampling: Literal["latest", "uniform", "prioritised"] = "prioritised"
    """How a game's opponent is drawn from the pool: the newest snapshot, uniformly, or prioritised: in proportion to
    (1 - the learner's score against it)^2, so the snapshots it still loses to come up most."""
    latest_share: float = 0.5
    """Share of games the learner plays against its latest self (every seat trained); the others against the pool,
    its own seat alone trained."""
    random_share: float = 0.0
    """Turn-based games: share of games against uniform legal moves (the learner's seat alone trained), so that
    positions its own play never reaches are seen too; drawn before the latest/pool split."""
    fixed_opponents: tuple[str, ...] = ()
    """Turn-based games: fixed players a share of training games is played against, one drawn uniformly per game
    (the learner's seat alone trained, rated against the player's fixed rating): random, mcts:N, minimax
    (tic-tac-toe), the run folder of an agent of this game; drawn before --self-play.random-share."""
    fixed_share: float = 0.0
    """Share of training games against --self-play.fixed-opponents at the start of training."""
    fixed_schedule: Literal["constant", "linear"] = "constant"
    """constant: fixed-share throughout; linear: from fixed-share down to 0 at the end of training (a curriculum
    that leaves the fixed players behind)."""
    eval_every: int = 0
    """Iterations between rated evaluation games against fixed players (0: none); ratings are logged under ratings/."""
    eval_games: int = 20
    """Games per fixed player at each evaluation, half in each seat."""
    eval_opponents: tuple[str, ...] = ("random",)
    """Fixed players the learner is rated against: random (uniform legal moves), mcts:N (OpenSpiel's MCTS with N
    simulations), minimax (tic-tac-toe)."""
    exploitability_every: int = 0
    """Iterations between exploitability figures of the learner's policy (0: none), logged as eval/exploitability:
    OpenSpiel's, in the game's units per game, for a small two-player zero-sum openspiel:<game> (Kuhn, Leduc)."""
    average_policy: bool = False
    """With exploitability_every and a pool: also log eval/exploitability_average, the exploitability of the pool's
    time-average policy (its snapshots weighted alike, each state by how often each snapshot reaches it), the policy
    fictitious play converges with where the learner's own circles; sampling uniform and latest_share 0 make the
    learner play against that same average."""
    magnet_coef: float = 0.0
    """Magnetic mirror descent (Sokota et al. 2023) in a turn-based game: weight of the exact KL(policy || magnet) over
    the legal moves added to the PPO loss, the magnet a slowly moving copy of the learner (0: none); it makes the
    learner's own last policy converge toward an equilibrium in self-play (in Kuhn poker with 0.5, entropy 0)."""
    magnet_rate: float = 0.05
    """Share of the way the magnet's weights move toward the learner's after each update (an exponential moving
    average of its weights, in (0, 1]; 1: the magnet is the previous policy)."""


POOL_SETTINGS = ("sampling", "snapshot_every")
"""SelfPlayConfig's settings of a pool, which a run without one (pool_size 0) has no use for."""


@dataclass
class PPOConfig:
    """The PPO algorithm."""

    total_timesteps: int = 500_000
    """Environment steps to train for (all envs together)."""
    num_steps: int = 128
    """Steps per env per rollout; the batch is num_envs * num_steps."""
    num_minibatches: int = 4
    """Minibatches the batch is split into per epoch."""
    update_epochs: int = 4
    """Passes over the batch per iteration."""
    learning_rate: float = 2.5e-4
    """Adam learning rate (start value of lr_schedule)."""
    lr_schedule: Literal["constant", "linear"] = "linear"
    """constant, or linear decay to 0 over training."""
    adam_eps: float = 1e-5
    """Adam epsilon."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda: 0 is one-step TD, 1 is Monte Carlo."""
    norm_adv: bool = True
    """Normalise advantages per minibatch (mean 0, std 1)."""
    objective: Literal["clip", "kl"] = "clip"
    """Policy objective: clipped surrogate, or the adaptive KL penalty (PPO-KL)."""
    clip_coef: float = 0.2
    """Surrogate clip range epsilon (start value of clip_schedule)."""
    clip_schedule: Literal["constant", "linear"] = "constant"
    """constant, or linear decay of clip_coef to 0."""
    clip_vloss: bool = True
    """Clip the value loss around the rollout's values (by clip_coef)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient (start value of ent_schedule)."""
    ent_schedule: Literal["constant", "linear"] = "constant"
    """constant, or linear decay of ent_coef to 0."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    target_kl: float | None = None
    """Stop the epochs early once approx_kl exceeds this (none to disable)."""
    kl_beta: float = 1.0
    """Initial KL penalty coefficient (objective=kl)."""
    kl_target: float = 0.01
    """KL the penalty coefficient is adapted toward (objective=kl)."""


@dataclass
class PolicyConfig:
    """Network architecture."""

    hidden_sizes: tuple[int, ...] = (64, 64)
    """Widths of the MLP hidden layers, e.g. 64,64."""
    activation: Literal["tanh", "relu"] = "tanh"
    """Hidden activation."""
    shared_trunk: bool = False
    """One encoder for actor and critic instead of two separate ones."""
    encoder: Literal["auto", "mlp", "cnn", "board"] = "auto"
    """Observation encoder: mlp, cnn (Nature CNN), board (a residual CNN over a board game's planes, height x width x
    planes, then the MLP of hidden_sizes; the connect four and tic-tac-toe presets' choice) or auto (cnn for uint8
    images, else mlp)."""
    board_channels: int = 64
    """The board encoder's width: channels of each of its 3x3 convolutions."""
    board_blocks: int = 2
    """The board encoder's depth: residual blocks (two 3x3 convolutions each) after its first convolution."""
    init_log_std: float = 0.0
    """Initial log standard deviation of Gaussian policies."""
    memory: Literal["none", "lstm", "gru"] = "none"
    """Recurrent core after the encoder (for actor and critic, shared or separate as shared_trunk says): none, lstm
    or gru."""
    memory_size: int = 128
    """Hidden units of the recurrent core."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """Compute of the Nature CNN (pixel policies): fp32, or bf16 autocast in the rollout and the
    update, the weights, heads, losses and optimizer staying fp32; bf16 needs CUDA (Ampere on) or a
    CPU with native bf16 (AVX512-BF16 or AMX). auto: bf16 for a pixel policy where the device has it
    natively, else fp32; chosen when training starts and saved resolved in config.yaml."""


BOARD_SETTINGS = ("board_channels", "board_blocks")
"""PolicyConfig's settings of the board encoder, which another encoder has no use for."""


@dataclass
class RunConfig:
    """Bookkeeping: seeding, device, logging, outputs."""

    seed: int = 1
    """Seed for torch, numpy, python and the envs."""
    exp_name: str = "ppo"
    """Experiment name used in the run directory."""
    run_root: str = "runs"
    """Folder that receives run directories."""
    device: str = "cpu"
    """Torch device: cpu, cuda, cuda:1, or auto."""
    torch_threads: int = 0
    """Intra-op threads; 0: by what the policy costs: every CPU for a CNN (Atari), a stack of seeds (--seeds in one
    process: its batched matmuls share them) or an MLP's wide batches (16 384 rows a minibatch at 64 x 64 for the
    update, 1 024 envs for the rollout), 1 for one run of a narrower MLP (fastest for small MLPs on a few cores; see
    benchmarks/README.md)."""
    torch_deterministic: bool = True
    """Use deterministic torch algorithms (cudnn)."""
    compile: bool = False
    """torch.compile the update's loss, and the rollout's policy forward except an MLP's on the CPU, whose merged
    eager forward is faster (first iterations pay the compile time; see benchmarks/README.md)."""
    cudagraphs: bool = False
    """Capture each update epoch (every minibatch's step) and the rollout's policy forward in CUDA graphs (needs
    --device cuda)."""
    tensorboard: bool = True
    """Write TensorBoard event files."""
    progress: bool = True
    """Show the live progress bar."""
    checkpoint_every: int = 50
    """Save a checkpoint every this many iterations (0: only at the end); resume with 'fastppo train --resume
    RUN_DIR'."""
    keep_checkpoints: int = 3
    """How many of the newest checkpoints to keep in RUN_DIR/checkpoints."""
    stop_return: float | None = None
    """End training once the mean return of the last --run.stop-window finished episodes reaches this (e.g. 475 for
    CartPole-v1), with a final checkpoint as at the budget's end; a stack of seeds ends each seed at its own and
    trains the others on (none: the whole budget)."""
    stop_window: int = 20
    """How many of the latest finished training episodes --run.stop-return averages (at most 100: a checkpoint keeps
    the last 100)."""
    collective_timeout: int = 600
    """Under torchrun, seconds a rank waits for the others in a collective before it ends the run with a one-line
    error (a rank stalled or died; torch's own default: 30 min on gloo, 10 on NCCL). The longest wait in a healthy
    run is rank 0 alone saving a checkpoint or a first iteration's compile."""


@dataclass
class Config:
    env: EnvConfig = field(default_factory=EnvConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    multi_agent: MultiAgentConfig = field(default_factory=MultiAgentConfig)
    self_play: SelfPlayConfig = field(default_factory=SelfPlayConfig)
    run: RunConfig = field(default_factory=RunConfig)

    @property
    def batch_size(self) -> int:
        return self.env.num_envs * self.ppo.num_steps

    @property
    def minibatch_size(self) -> int:
        return self.batch_size // self.ppo.num_minibatches

    @property
    def num_iterations(self) -> int:
        return self.ppo.total_timesteps // self.batch_size

    @property
    def pixel_policy(self) -> bool:
        """Whether the policy reads images through the Nature CNN: --policy.encoder cnn, or auto on an Atari id."""
        return self.policy.encoder == "cnn" or (self.policy.encoder == "auto" and is_atari(self.env.env_id))

    def intra_op_threads(self, stacked: bool) -> int:
        """--run.torch-threads, or for 0 its automatic value, by what the policy costs: every CPU
        for a CNN (its convolutions split well over the cores; the envs step between its calls,
        not beside them, so the two take turns on the cores), a stack of seeds (its batched
        matmuls share them) or wide minibatches of an MLP or a board encoder (``policy_work``
        from ``WIDE_UPDATE_WORK`` or ``WIDE_BOARD_UPDATE_WORK``); 1 for one run of a narrower
        one or a recurrent core (small matmuls and convolutions of a few cells: more threads
        cost more than they save)."""
        board = self.policy.encoder == "board"
        wide = self.policy_work(self.minibatch_size) >= (WIDE_BOARD_UPDATE_WORK if board else WIDE_UPDATE_WORK)
        return self.run.torch_threads or (available_cpus() if stacked or self.pixel_policy or wide else 1)

    def rollout_threads(self, stacked: bool, rows: int | None = None) -> int:
        """Intra-op threads while the policy acts on ``rows`` at once (default: the run's envs,
        as the rollout collects; an evaluation's few envs give fewer): ``intra_op_threads``, but 1 for one run's
        CNN when automatic: its forward on a step's few frames gains little from more threads and,
        on a shared machine, loses much (threads waiting for each other), while the update's
        minibatches keep every CPU. Under bf16 autocast the rollout keeps the update's threads:
        oneDNN rebuilds its bf16 convolutions after each change of torch's thread count (the
        update step of a 256-frame minibatch: 0.30 s without the change, 4.6 s after it). An MLP
        or a board encoder acting on many envs at once takes every CPU (``WIDE_ROLLOUT_WORK``)."""
        if self.policy.precision == "bf16":
            return self.intra_op_threads(stacked)
        wide = self.policy_work(self.env.num_envs if rows is None else rows) >= WIDE_ROLLOUT_WORK
        return self.run.torch_threads or (available_cpus() if stacked or wide else 1)

    def policy_work(self, rows: int) -> int:
        """A feed-forward policy's work on ``rows`` at once, in multiply-adds of one network: an MLP's
        rows x its widest hidden layer squared; a board encoder's rows x its 3x3 convolutions' on
        one cell of the board (9 x channels squared each, the first one counted as another; the
        config does not know the board's size); 0 for the Nature CNN and recurrent cores, whose
        threads are chosen otherwise."""
        if self.pixel_policy or self.policy.memory != "none":
            return 0
        if self.policy.encoder == "board":
            return rows * 9 * self.policy.board_channels**2 * (2 * self.policy.board_blocks + 1)
        return rows * max(self.policy.hidden_sizes, default=0) ** 2

    def validate(self, minibatches_from: str | None = None) -> Config:
        """Check every value once; raise FastPPOError with the fix. ``minibatches_from`` names
        where num_minibatches came from when the user did not give it (e.g. "the preset
        LunarLander-v3's"), for the message that asks to change it."""
        positive_ints = {
            "env.num_envs": self.env.num_envs,
            "env.frame_stack": self.env.frame_stack,
            "ppo.num_steps": self.ppo.num_steps,
            "ppo.num_minibatches": self.ppo.num_minibatches,
            "ppo.update_epochs": self.ppo.update_epochs,
            "ppo.total_timesteps": self.ppo.total_timesteps,
        }
        for name, number in positive_ints.items():
            if number <= 0:
                raise FastPPOError(f"--{name.replace('_', '-')} must be a positive integer, got {number}")
        if self.run.stop_return is not None and not math.isfinite(self.run.stop_return):
            raise FastPPOError(f"--run.stop-return must be a finite return or none, got {self.run.stop_return}")
        if not 1 <= self.run.stop_window <= 100:
            raise FastPPOError(
                "--run.stop-window must be between 1 and 100 (a checkpoint keeps the last 100 returns), got "
                f"{self.run.stop_window}"
            )
        if self.run.collective_timeout < 1:
            raise FastPPOError(
                f"--run.collective-timeout must be a positive number of seconds, got {self.run.collective_timeout}"
            )
        if self.run.torch_threads < 0:
            raise FastPPOError(
                f"--run.torch-threads must be 0 (automatic) or a positive integer, got {self.run.torch_threads}"
            )
        positive_floats = {
            "ppo.learning_rate": self.ppo.learning_rate,
            "ppo.clip_coef": self.ppo.clip_coef,
            "ppo.max_grad_norm": self.ppo.max_grad_norm,
            "ppo.adam_eps": self.ppo.adam_eps,
            "ppo.kl_target": self.ppo.kl_target,
            "env.clip_obs": self.env.clip_obs,
            "env.clip_reward": self.env.clip_reward,
        }
        for name, value in positive_floats.items():
            if not value > 0:  # NaN too
                raise FastPPOError(f"--{name.replace('_', '-')} must be > 0, got {value}")
        non_negative = {
            "ppo.ent_coef": self.ppo.ent_coef,
            "ppo.vf_coef": self.ppo.vf_coef,
            "ppo.kl_beta": self.ppo.kl_beta,
        }
        for name, value in non_negative.items():
            if not value >= 0:  # NaN too
                raise FastPPOError(f"--{name.replace('_', '-')} must be >= 0, got {value}")
        # inf is a real setting only for the clips (clip_coef inf: the unclipped surrogate); an
        # infinite rate, epsilon or coefficient turns the first update into NaN.
        for name, value in {**positive_floats, **non_negative}.items():
            if math.isinf(value) and name not in ("ppo.clip_coef", "env.clip_obs", "env.clip_reward"):
                raise FastPPOError(f"--{name.replace('_', '-')} must be finite, got {value}")
        if math.isinf(self.ppo.clip_coef) and self.ppo.clip_schedule == "linear":
            raise FastPPOError(
                "--ppo.clip-coef inf cannot decay linearly (inf x 0 is NaN): use --ppo.clip-schedule constant"
            )
        for name, value in {"ppo.gamma": self.ppo.gamma, "ppo.gae_lambda": self.ppo.gae_lambda}.items():
            if not 0.0 <= value <= 1.0:
                raise FastPPOError(f"--{name.replace('_', '-')} must be in [0, 1], got {value}")
        if self.env.capture_video and self.env.backend in ("tensor", "envpool", "ale"):
            raise FastPPOError(
                f"--capture-video needs gymnasium envs that render, and the {self.env.backend} backend has none: drop "
                "it and record the trained run with 'fastppo record RUN_DIR' (it plays the gymnasium env), or train "
                "with --backend sync"
            )
        check_seed(self.run.seed, "--run.seed")
        if self.run.checkpoint_every < 0:
            raise FastPPOError(
                f"--run.checkpoint-every must be >= 0 (0: only at the end), got {self.run.checkpoint_every}"
            )
        if self.run.keep_checkpoints < 1:
            raise FastPPOError(f"--run.keep-checkpoints must be >= 1, got {self.run.keep_checkpoints}")
        if self.ppo.target_kl is not None and not self.ppo.target_kl > 0:  # NaN too
            raise FastPPOError(f"--ppo.target-kl must be > 0 or none, got {self.ppo.target_kl}")
        if not is_pettingzoo(self.env.env_id):  # else once its agents are known (trainer.train_rank)
            self.check_batch(minibatches_from=minibatches_from)
        if self.num_iterations < 1:
            raise FastPPOError(
                f"--total-timesteps {self.ppo.total_timesteps} is less than one batch ({self.batch_size} steps): raise "
                "it or shrink the batch"
            )
        if self.policy.memory != "none":
            if self.policy.memory_size <= 0:
                raise FastPPOError(f"--policy.memory-size must be a positive integer, got {self.policy.memory_size}")
            if self.run.compile or self.run.cudagraphs:
                raise FastPPOError(
                    "--compile and --cudagraphs do not support --policy.memory yet: drop them for a recurrent policy"
                )
        if self.env.step_in_halves and self.env.backend != "ale":
            raise FastPPOError(
                f"--env.step-in-halves steps the ale backend's C++ envs, not the {self.env.backend} backend's: "
                "use --env.backend ale (Atari ids), or drop it"
            )
        if self.env.step_in_halves and self.env.num_envs % 2:
            raise FastPPOError(
                f"--env.step-in-halves needs an even --num-envs (two equal halves), got {self.env.num_envs}"
            )
        if self.policy.precision == "bf16" and not self.pixel_policy:
            raise FastPPOError(
                "--policy.precision bf16 computes the Nature CNN of a pixel policy (an Atari id, or "
                "--policy.encoder cnn), and this policy has none (it trains in fp32): drop it"
            )
        self._validate_multi_agent()
        self._validate_self_play()
        if any(w <= 0 for w in self.policy.hidden_sizes):
            raise FastPPOError(f"--policy.hidden-sizes must be positive widths, got {self.policy.hidden_sizes}")
        self._validate_board()
        return self

    def _validate_board(self) -> None:
        policy = self.policy
        if policy.board_channels < 1:
            raise FastPPOError(f"--policy.board-channels must be a positive integer, got {policy.board_channels}")
        if policy.board_blocks < 0:
            raise FastPPOError(f"--policy.board-blocks must be 0 or more, got {policy.board_blocks}")
        if policy.encoder != "board" and (
            unused := [name for name in BOARD_SETTINGS if getattr(policy, name) != getattr(PolicyConfig, name)]
        ):
            flags = " and ".join(f"--policy.{name.replace('_', '-')} {getattr(policy, name)}" for name in unused)
            raise FastPPOError(
                f"{flags} {'shapes' if len(unused) == 1 else 'shape'} the board encoder, and --policy.encoder is "
                f"{policy.encoder}: give --policy.encoder board, or drop {'it' if len(unused) == 1 else 'them'}"
            )

    def check_batch(self, agents: int = 1, minibatches_from: str | None = None) -> None:
        """That the update's rows split into ``--num-minibatches``: ``num_envs x num_steps`` of
        them, times ``agents`` for a PettingZoo env (a row per agent; known once its env is built)."""
        rows = self.batch_size * agents
        counted = f"num_envs {self.env.num_envs} x num_steps {self.ppo.num_steps}" + (
            f" x {agents} agents" if agents > 1 else ""
        )
        noun = "rows" if agents > 1 else "steps"
        if rows % self.ppo.num_minibatches:
            raise FastPPOError(
                f"batch size {rows} ({counted}) does not split into {self.ppo.num_minibatches} minibatches: pick "
                f"num_minibatches dividing {rows}"
            )
        if rows // self.ppo.num_minibatches < 2:
            # One row: its advantage's std is 0 and normalising divides by it, so the first update is NaN.
            given = f"--num-minibatches {self.ppo.num_minibatches}" + (
                f" ({minibatches_from})" if minibatches_from else ""
            )
            fix = f"give --num-minibatches {rows // 2} or fewer, or " if rows >= 2 else ""
            raise FastPPOError(
                f"{given} splits the batch of {rows} {noun if rows > 1 else noun[:-1]} ({counted}) into minibatches of "
                f"{rows // self.ppo.num_minibatches} row, and a minibatch needs at least 2: {fix}raise --num-envs or "
                "--num-steps"
            )
        sequences = self.env.num_envs * agents
        if self.policy.memory != "none" and self.ppo.num_minibatches > sequences:
            what = f"--num-envs {self.env.num_envs}" + (f" x {agents} agents" if agents > 1 else "")
            raise FastPPOError(
                "a recurrent policy's minibatches are whole env sequences: --num-minibatches "
                f"{self.ppo.num_minibatches} exceeds {what}; pick at most {sequences}"
            )

    def _validate_self_play(self) -> None:
        sp = self.self_play
        if sp != SelfPlayConfig() and not is_pettingzoo(self.env.env_id):
            raise FastPPOError(
                f"--self-play.* flags apply to turn-based PettingZoo games (pz:<module>), and {self.env.env_id} is not "
                "one: drop them"
            )
        for name in ("snapshot_every", "eval_games"):
            if getattr(sp, name) < 1:
                raise FastPPOError(
                    f"--self-play.{name.replace('_', '-')} must be a positive integer, got {getattr(sp, name)}"
                )
        for name in ("pool_size", "eval_every", "exploitability_every"):
            if getattr(sp, name) < 0:
                raise FastPPOError(f"--self-play.{name.replace('_', '-')} must be 0 or more, got {getattr(sp, name)}")
        for name in ("latest_share", "random_share", "fixed_share"):
            if not 0.0 <= getattr(sp, name) <= 1.0:
                raise FastPPOError(f"--self-play.{name.replace('_', '-')} must be in [0, 1], got {getattr(sp, name)}")
        if sp.pool_size == 0 and (
            unused := [name for name in POOL_SETTINGS if getattr(sp, name) != getattr(SelfPlayConfig, name)]
        ):
            flags = " and ".join(f"--self-play.{name.replace('_', '-')} {getattr(sp, name)}" for name in unused)
            raise FastPPOError(
                f"{flags} {'needs' if len(unused) == 1 else 'need'} a pool, and --self-play.pool-size is 0: give "
                f"--self-play.pool-size N (N >= 1), or drop {'it' if len(unused) == 1 else 'them'}"
            )
        if bool(sp.fixed_share) != bool(sp.fixed_opponents):
            raise FastPPOError(
                "--self-play.fixed-share needs fixed players to play: give --self-play.fixed-opponents, e.g. "
                "random,mcts:10"
                if sp.fixed_share
                else "--self-play.fixed-opponents are played in a share of the games: give --self-play.fixed-share, "
                "e.g. 0.3 (and --self-play.fixed-schedule linear to let it fall to 0 over training)"
            )
        if sp.fixed_schedule != "constant" and not sp.fixed_share:
            raise FastPPOError(
                f"--self-play.fixed-schedule {sp.fixed_schedule} schedules --self-play.fixed-share, which is 0: give "
                "--self-play.fixed-share, or drop it"
            )
        if sp.average_policy and not (sp.pool_size and sp.exploitability_every):
            raise FastPPOError(
                "--self-play.average-policy scores the average of the pool's snapshots: give --self-play.pool-size N "
                "and --self-play.exploitability-every K too"
            )
        if not (math.isfinite(sp.magnet_coef) and sp.magnet_coef >= 0):
            raise FastPPOError(f"--self-play.magnet-coef must be a number >= 0, got {sp.magnet_coef}")
        if not 0.0 < sp.magnet_rate <= 1.0:
            raise FastPPOError(f"--self-play.magnet-rate must be in (0, 1], got {sp.magnet_rate}")
        if not sp.magnet_coef and sp.magnet_rate != SelfPlayConfig.magnet_rate:
            raise FastPPOError(
                f"--self-play.magnet-rate {sp.magnet_rate} moves a magnet, and --self-play.magnet-coef is 0: give "
                "--self-play.magnet-coef C (C > 0), or drop it"
            )
        if sp.eval_every and not sp.eval_opponents:
            raise FastPPOError(
                "--self-play.eval-every needs fixed players to rate against: give --self-play.eval-opponents, e.g. "
                "random,mcts:100"
            )

    def _validate_multi_agent(self) -> None:
        if not is_pettingzoo(self.env.env_id):
            return
        if self.env.backend not in ("sync", "async"):
            raise FastPPOError(
                "PettingZoo envs step on the sync backend (the trainer's process) or async (worker processes), not "
                f"{self.env.backend}"
            )
        if self.env.capture_video:
            raise FastPPOError(
                "--capture-video does not record PettingZoo envs: record the trained run with 'fastppo record RUN_DIR'"
            )
        if self.multi_agent.policies != "shared" and not self.multi_agent.agent_ids:
            raise FastPPOError(
                f"--multi-agent.policies {self.multi_agent.policies} reads each row's policy from its agent id: drop "
                "--multi-agent.no-agent-ids"
            )
        if self.multi_agent.algorithm == "mappo" and self.policy.shared_trunk:
            raise FastPPOError(
                "a centralised critic (--multi-agent.algorithm mappo) reads more than the actor: drop "
                "--policy.shared-trunk"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        """Rebuild from ``to_dict`` output (a saved run's config); ValueError naming what is
        missing or wrong when ``data`` is not a whole valid config. ``to_dict`` writes every field:
        one that is absent is damage, never a reason to train on a default."""
        config = cls()
        if not isinstance(data, dict) or not all(isinstance(values, dict) for values in data.values()):
            raise ValueError("the config is not a mapping of sections")
        given = {f"{section}.{key}": value for section, values in data.items() for key, value in values.items()}
        # A section or field newer than the folder is the defaults: the run trained without it.
        missing = [
            key
            for key in field_index(config)
            if key not in given and key not in FIELDS_ADDED and key.split(".")[0] not in set(SECTIONS_ADDED) - set(data)
        ]
        if missing:
            raise ValueError(f"the config lacks {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
        try:
            return apply_overrides(config, ADDED_FIELDS_BEFORE | given).validate()
        except FastPPOError as exc:
            raise ValueError(f"the config is invalid: {exc}") from None


SECTIONS_ADDED = ("self_play",)
"""Config sections added after run folders were first written (fastppo 0.1.0's run folders lack them)."""
FIELDS_ADDED = (
    "policy.precision",
    "env.step_in_halves",
    "self_play.exploitability_every",
    "self_play.average_policy",
    "policy.board_channels",
    "policy.board_blocks",
    "self_play.fixed_opponents",
    "self_play.fixed_share",
    "self_play.fixed_schedule",
    "self_play.magnet_coef",
    "self_play.magnet_rate",
)
"""Fields added to a section after run folders were first written: a folder without one trained
with its default, or with its value in ``ADDED_FIELDS_BEFORE``."""
ADDED_FIELDS_BEFORE = {"policy.precision": "fp32"}
"""Added fields whose default has changed since: the value a folder without one trained with
(fp32 before --policy.precision, whose default is now auto)."""


def check_seed(seed: int, flag: str) -> int:
    """``seed``, or a FastPPOError when numpy could not take it (else a traceback from the first reset)."""
    if not 0 <= seed <= MAX_SEED:
        raise FastPPOError(f"{flag} must be in [0, {MAX_SEED}] (2**32 - 1), got {seed}")
    return seed


def sections(config: Config) -> dict[str, Any]:
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def field_index(config: Config) -> dict[str, tuple[Any, dataclasses.Field]]:
    """'section.field' -> (section object, field) for every hyperparameter."""
    index = {}
    for section_name, section in sections(config).items():
        for f in dataclasses.fields(section):
            index[f"{section_name}.{f.name}"] = (section, f)
    return index


def resolve_key(config: Config, key: str) -> str:
    """Accept 'section.field', or a bare field name when it is unique; hyphens or underscores."""
    key = key.replace("-", "_")
    index = field_index(config)
    if key in index:
        return key
    matches = [full for full in index if full.split(".", 1)[1] == key]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise FastPPOError(f"hyperparameter '{key}' is ambiguous: use one of {', '.join(matches)}")
    raise FastPPOError(f"unknown hyperparameter '{key}': 'fastppo train --help' lists them all")


def coerce(value: Any, annotation: Any, name: str) -> Any:
    """Convert a CLI string or YAML value to the field's type, or explain what was expected."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return coerce(value, inner[0], name)
    if origin is Literal:
        if value not in args:
            raise FastPPOError(f"--{name} must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if origin is tuple:
        text = "" if isinstance(value, (list, tuple)) else str(value).replace(" ", "").strip("()[]")
        items = value if isinstance(value, (list, tuple)) else text.split(",") if text else []
        if "" in items:  # random,,minimax: a typo, not two entries
            raise FastPPOError(f"--{name} has an empty entry in {value!r}: separate its entries by single commas")
        return tuple(coerce(v, args[0], name) for v in items)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise FastPPOError(f"--{name} expects true or false, got {value!r}")
    if annotation is int:
        if isinstance(value, bool):
            raise FastPPOError(f"--{name} expects an integer, got {value!r}")
        if isinstance(value, int):
            return value
        # Text as Python writes integers (1_000, 0x10), or a whole float (1e6, 2.0); anything else
        # (a YAML list or null, 1j, nan) is refused here rather than failing later.
        if isinstance(value, (str, float)):
            text = str(value).strip()
            try:
                return int(text, 0)
            except ValueError:
                pass
            try:
                number = float(text)
            except ValueError:
                number = math.nan
            if number.is_integer():
                return int(number)
        raise FastPPOError(f"--{name} expects an integer, got {value!r}")
    if annotation is float:
        if isinstance(value, bool):
            raise FastPPOError(f"--{name} expects a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: a YAML integer beyond a float
            raise FastPPOError(f"--{name} expects a number, got {value!r}") from None
    if annotation is str:
        return str(value)
    if origin is dict:
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise FastPPOError(
                    f"--{name} expects a JSON object like '{{\"max_cycles\": 25}}', got {value!r} ({exc.msg})"
                ) from None
        if not isinstance(value, dict):
            raise FastPPOError(f"--{name} expects a JSON object like '{{\"max_cycles\": 25}}', got {value!r}")
        return dict(value)
    raise TypeError(f"config field {name} has unsupported annotation {annotation}")


def apply_overrides(config: Config, overrides: dict[str, Any]) -> Config:
    """Set 'section.field' (or unique bare field) keys to values coerced to each field's type."""
    hints = {name: typing.get_type_hints(type(section)) for name, section in sections(config).items()}
    for key, value in overrides.items():
        full = resolve_key(config, key)
        section_name, field_name = full.split(".", 1)
        section = getattr(config, section_name)
        setattr(section, field_name, coerce(value, hints[section_name][field_name], full.replace("_", "-")))
    return config


def available_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_for_env(env_id: str, continuous: bool) -> str:
    """The preset used when none is named: one named after the env id (with or without its
    version; a PettingZoo ``pz:mpe2.simple_spread_v3`` also by its module's last component,
    ``simple_spread_v3`` or ``simple_spread``), else the family's (``atari`` for every ALE
    game), else CleanRL's defaults for the action type."""
    names = available_presets()
    base = env_id.split(":")[-1].split("/")[-1]
    candidates = [base, base.rsplit("-v", 1)[0]]
    if is_pettingzoo(env_id):
        module = base.rsplit(".", 1)[-1]
        candidates += [module, module.rsplit("_v", 1)[0]]
    for candidate in candidates:
        if candidate in names:
            return candidate
    if is_atari(env_id):
        return "atari"
    return "cleanrl-continuous" if continuous else "cleanrl-discrete"


def load_preset(name: str) -> dict[str, Any]:
    """A preset's overrides flattened to 'section.field' keys: a shipped preset by name, or a file
    in the same format by its path (``fastppo sweep`` writes one), told apart by a .yaml/.yml
    ending or a folder in the name."""
    is_file = name.endswith((".yaml", ".yml")) or "/" in name or "\\" in name
    path = Path(name) if is_file else PRESET_DIR / f"{name}.yaml"
    if not path.is_file():
        if is_file:
            raise FastPPOError(
                f"preset file {name} not found: give the path of a preset YAML (sections env/ppo/policy), or a preset "
                "name"
            )
        raise FastPPOError(
            f"unknown preset '{name}': available presets are {', '.join(available_presets())}, or a preset YAML file's "
            "path"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return {
            f"{section}.{key}": value
            for section, values in data.items()
            if section != "description"
            for key, value in (values or {}).items()
        }
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError) as exc:
        if isinstance(exc, UnicodeDecodeError):
            reason = f"not UTF-8 text (byte {exc.start})"
        else:
            reason = (
                exc.strerror or str(exc)
                if isinstance(exc, OSError)
                else "expected sections (env, ppo, policy) mapping fields to values"
            )
        raise FastPPOError(f"cannot read preset {path}: {reason}") from None


@functools.cache
def field_docs(section_cls: type) -> Mapping[str, str]:
    """The docstring under each dataclass field (the CLI's help text), read from the source, its
    lines joined by single spaces (a long one is wrapped in the source). Kept once read: every
    parser built in a process asks again, and reading the source parses the whole module (0.15 s
    of each in-process ``fastppo`` command, 160 s of the bad-input fuzz test)."""
    import inspect

    (class_def,) = ast.parse(inspect.getsource(section_cls)).body
    assert isinstance(class_def, ast.ClassDef)
    body = class_def.body
    docs = {}
    for node, following in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
        ):
            docs[node.target.id] = " ".join(str(following.value.value).split())
    return types.MappingProxyType(docs)

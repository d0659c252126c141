"""The preallocated [T, N] rollout buffer and the collector that fills it."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from fastppo.core.gae import compute_decision_gae, compute_gae, open_decisions, shift_values
from fastppo.core.normalize import RewardScaler, RunningMeanStd
from fastppo.envs.vector import StepResult, VecEnv, in_parts
from fastppo.policies import ActorCritic
from fastppo.policies.fused import FusedActorCritic
from fastppo.policies.memory import carry
from fastppo.policies.population import GroupedActorCritic, StackedActorCritic
from fastppo.profiling import SectionTimer
from fastppo.training.cuda_graphs import COMPILE_MODE, capture_graph, check_cudagraphs, on_side_stream

ActFn = Callable[[Tensor, Tensor | None], tuple[Tensor, Tensor, Tensor]]
TrainedPolicy = ActorCritic | GroupedActorCritic | StackedActorCritic
"""What the loop trains: one actor-critic, one per agent group, or a stack of seeds'
(``fastppo.policies.population``)."""


@dataclass
class RolloutBuffer:
    """One rollout in [T, N, ...] layout, allocated once on the training device.

    ``valid`` is false on NEXT_STEP reset rows (see fastppo.envs.vector): they hold no real
    transition, so GAE never crosses them and the loss masks them out. A recurrent policy's
    ``initial_state`` [N, state_size] is its state at the rollout's first row, from which the
    update re-runs each env's T rows as one sequence.

    A turn-based game's buffer (``turns``) has ``at_turn`` (``StepResult.live`` after each step:
    whose turn the next observation is) and one more row, first: the decisions carried in from
    the previous rollout, which ended before their seat's next turn (``carry_out``). Such a
    decision trains in the rollout where its transition ends, its reward the sum of the seat's
    rewards since it; ``valid`` marks the columns that carry one.
    """

    obs: Tensor
    actions: Tensor
    logprobs: Tensor
    values: Tensor
    rewards: Tensor
    terminated: Tensor
    truncated: Tensor
    valid: Tensor
    action_masks: Tensor | None
    initial_state: Tensor | None = None
    at_turn: Tensor | None = None

    @classmethod
    def allocate(
        cls,
        num_steps: int,
        envs: VecEnv,
        device: torch.device,
        action_mask_dim: int | None,
        state_size: int = 0,
        turns: bool = False,
    ) -> RolloutBuffer:
        T, N = num_steps + turns, envs.num_envs
        obs_space, act_space = envs.single_observation_space, envs.single_action_space
        # gymnasium types a space's shape Optional; the spaces a policy takes (Box, Discrete, ...) have one
        assert obs_space.shape is not None and act_space.shape is not None
        obs_dtype = torch.uint8 if obs_space.dtype == np.uint8 else torch.float32
        if isinstance(act_space, gym.spaces.Discrete):
            actions = torch.zeros((T, N), dtype=torch.long, device=device)
        elif isinstance(act_space, gym.spaces.MultiDiscrete):
            actions = torch.zeros((T, N, *act_space.shape), dtype=torch.long, device=device)
        else:
            actions = torch.zeros((T, N, *act_space.shape), dtype=torch.float32, device=device)

        def floats() -> Tensor:
            return torch.zeros((T, N), device=device)

        def flags() -> Tensor:
            return torch.zeros((T, N), dtype=torch.bool, device=device)

        return cls(
            obs=torch.zeros((T, N, *obs_space.shape), dtype=obs_dtype, device=device),
            actions=actions,
            logprobs=floats(),
            values=floats(),
            rewards=floats(),
            terminated=flags(),
            truncated=flags(),
            valid=flags(),
            action_masks=None
            if action_mask_dim is None
            else torch.ones((T, N, action_mask_dim), dtype=torch.bool, device=device),
            initial_state=torch.zeros((N, state_size), device=device) if state_size else None,
            at_turn=flags() if turns else None,
        )

    @property
    def first_row(self) -> int:
        """The row the rollout's first step fills: 1 where row 0 holds the carried decisions."""
        return int(self.at_turn is not None)

    def carry_in(self, carried: RolloutBuffer) -> None:
        """Row 0 := the decisions ``carry_out`` left in ``carried``."""
        assert self.at_turn is not None  # a turn-based game's buffer
        for name, row in carried.flatten().items():
            getattr(self, name)[0] = row
        self.at_turn[0] = False

    def carry_out(self, into: RolloutBuffer) -> None:
        """Into the one-row ``into``: each column's decision left open at the rollout's end
        (``open_decisions``: no ending after it, and the rollout ends on another seat's turn),
        with the sum of the column's rewards from it on; ``valid`` false where none is open."""
        assert self.at_turn is not None  # a turn-based game's buffer
        done = self.terminated | self.truncated
        ending_ahead = done.flip(0).cumsum(0).flip(0) > 0  # an ending at or after the row
        carried = open_decisions(self.valid, self.terminated, self.truncated, self.at_turn) & ~ending_ahead
        rows, columns = carried.int().argmax(0), torch.arange(carried.shape[1], device=carried.device)
        for name, row in into.flatten().items():
            row.copy_(getattr(self, name)[rows, columns])
        rewards_ahead = self.rewards.flip(0).cumsum(0).flip(0)[rows, columns]
        into.valid[0] = carried.any(0)
        into.rewards[0] = torch.where(into.valid[0], rewards_ahead, 0.0)

    def columns(self, part: slice) -> RolloutBuffer:
        """The env columns ``part`` of every field, as views (the buffer itself for all of them)."""
        if part == slice(None):
            return self
        views = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, x in views.items():
            if x is not None:
                views[name] = x[part] if name == "initial_state" else x[:, part]
        return RolloutBuffer(**views)

    def _fields(self, extra: dict[str, Tensor], initial_state: bool = False) -> dict[str, Tensor]:
        """The buffer's tensors (``initial_state`` only if asked for) plus ``extra``, None ones left out."""
        tensors = {
            f.name: getattr(self, f.name) for f in fields(self) if initial_state or f.name != "initial_state"
        } | extra
        return {k: v for k, v in tensors.items() if v is not None}

    def flatten(self, **extra: Tensor) -> dict[str, Tensor]:
        """Every [T, N, ...] field (plus ``extra`` ones like advantages) as [T*N, ...] views."""
        return {k: v.flatten(0, 1) for k, v in self._fields(extra).items()}

    def batch(self, members: int | None = None, **extra: Tensor) -> dict[str, Tensor]:
        """What ``ppo_update`` takes: the flattened rows, or for a recurrent policy the [T, N, ...]
        fields and ``initial_state``, so that minibatches can take whole env sequences. With
        ``members`` (a stack of seeds, fastppo.training.seed_stack, whose rows are seed-major), the
        same per member along a first axis: ``[members, T * N_seed, ...]`` in the order its single
        run flattens them (row t * N_seed + n), or ``[members, T, N_seed, ...]`` fields and
        ``[members, N_seed, state_size]`` initial states."""
        if members is None:
            return self.flatten(**extra) if self.initial_state is None else self._fields(extra, initial_state=True)
        if self.initial_state is None:
            return {
                k: v.unflatten(1, (members, -1)).transpose(0, 1).flatten(1, 2) for k, v in self._fields(extra).items()
            }
        fields = self._fields(extra, initial_state=True)
        return {
            k: v.unflatten(0, (members, -1)) if k == "initial_state" else v.unflatten(1, (members, -1)).transpose(0, 1)
            for k, v in fields.items()
        }


@dataclass
class EnvCursor:
    """Where the vector env stands between steps: the (normalised) observation to act on, its
    action mask, whether it is a real decision or a NEXT_STEP reset row, and a recurrent
    policy's state to act with."""

    obs: Tensor
    action_mask: Tensor | None
    valid: Tensor
    state: Tensor | None = None
    open: RolloutBuffer | None = None
    """A turn-based game's decisions open at the rollout's end (``RolloutBuffer.carry_out``): one
    row, part of the run's state."""

    @classmethod
    def at_reset(
        cls,
        first: StepResult,
        normalize_obs: ObservationNormalizer,
        update: bool,
        state: Tensor | None = None,
        open: RolloutBuffer | None = None,
    ) -> EnvCursor:
        """The cursor on a reset's rows: every row a decision, but those of a multi-agent env's
        agents not in play yet (``StepResult.live``), which join no statistics either; no
        decision ``open``."""
        valid = torch.ones_like(first.terminated) if first.live is None else first.live
        if open is not None:
            open.valid.zero_()
        return cls(normalize_obs(first.obs, update=update, mask=first.live), first.action_mask, valid, state, open)

    def split(self, parts: tuple[slice, ...]) -> list[EnvCursor]:
        """One cursor per part of the env rows (views; itself for one part), ``open`` left out."""
        if len(parts) == 1:
            return [self]
        return [
            EnvCursor(self.obs[part], rows(self.action_mask, part), self.valid[part], rows(self.state, part))
            for part in parts
        ]

    @classmethod
    def join(cls, cursors: list[EnvCursor], open: RolloutBuffer | None) -> EnvCursor:
        """The cursor of all the rows ``split`` parted, with ``open``."""
        if len(cursors) == 1:
            cursors[0].open = open
            return cursors[0]
        masks, states = [c.action_mask for c in cursors], [c.state for c in cursors]
        return cls(
            torch.cat([c.obs for c in cursors]),
            None if masks[0] is None else torch.cat(masks),  # type: ignore[arg-type]
            torch.cat([c.valid for c in cursors]),
            None if states[0] is None else torch.cat(states),  # type: ignore[arg-type]
            open,
        )


def rows(x: Tensor | None, part: slice) -> Tensor | None:
    """``x[part]``, or None for None."""
    return None if x is None else x[part]


class ObservationNormalizer:
    """Optional running normalisation of observations, shared by all envs; frozen when not training."""

    def __init__(self, rms: RunningMeanStd | None, clip: float):
        self.rms = rms
        self.clip = clip

    def __call__(self, obs: Tensor, update: bool, mask: Tensor | None = None) -> Tensor:
        """Normalised ``obs``; with ``update``, the rows ``mask`` keeps (all by default) first
        join the statistics."""
        if self.rms is None:
            return obs
        if update:
            self.rms.update(obs, mask)
        return self.rms.normalize(obs.float(), self.clip)


class PolicyStep:
    """The rollout's policy forward, ``policy.act``: eager (with actor and critic merged into one
    stack of matmuls for MLP policies, see ``fastppo.policies.fused``), compiled, and/or captured
    in a CUDA graph. ``refresh`` must run before each rollout: it picks up the updated weights.

    With ``cudagraphs`` (CUDA only) the forward and the sampling are captured once per input
    signature after a few eager warm-up calls on a side stream; a replay copies the observation
    (and mask) into static inputs. The outputs are the graph's static tensors, overwritten by the
    next call: the collector copies them into the buffer at once. Sampling draws from the default
    CUDA generator, whose seed/offset CUDA graphs advance at every replay.
    """

    WARMUP_CALLS = 3

    def __init__(self, policy: TrainedPolicy, compile: bool = False, cudagraphs: bool = False):
        on_cuda = next(policy.parameters()).device.type == "cuda"
        # On CUDA, compiling and CUDA graphs remove the per-kernel overhead the merged weights
        # save: they keep the module forward (and need no refresh). On the CPU the merged eager
        # forward beats the compiled one up to hundreds of rows (64-64 MLPs, 1 to 512 rows: 1.1-2.4x
        # less time per call; the compiled call's guards and wrappers cost more than it saves; at
        # 4 096 rows CartPole's compiled forward wins, HalfCheetah's still loses), so --compile
        # there compiles the update alone, unless the policy has no merged forward.
        self._fused = None if cudagraphs or (compile and on_cuda) else FusedActorCritic.build(policy)
        self.act: ActFn = self._fused or (torch.compile(policy.act, mode=COMPILE_MODE) if compile else policy.act)
        self.cudagraphs = cudagraphs
        if cudagraphs:
            check_cudagraphs(next(policy.parameters()).device)
        self._calls = 0
        self._graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, list[Tensor], tuple[Tensor, Tensor, Tensor]]] = {}

    def refresh(self) -> None:
        if self._fused is not None:
            self._fused.refresh()

    def __call__(self, obs: Tensor, action_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        if not self.cudagraphs:
            return self.act(obs, action_mask)
        self._calls += 1
        if self._calls <= self.WARMUP_CALLS:
            return on_side_stream(self.act, obs, action_mask)
        inputs = [obs] if action_mask is None else [obs, action_mask]
        key = tuple((x.shape, x.dtype) for x in inputs)
        if key not in self._graphs:
            static = [x.clone() for x in inputs]
            graph, outputs = (
                capture_graph(self.act, *static)
                if action_mask is not None
                else capture_graph(self.act, static[0], None)
            )
            self._graphs[key] = (graph, static, outputs)
        graph, static, outputs = self._graphs[key]
        for target, value in zip(static, inputs):
            target.copy_(value)
        graph.replay()
        return outputs


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Torch's intra-op threads set to ``threads`` inside, put back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fresh_state(policy: TrainedPolicy, num_envs: int, device: torch.device) -> Tensor | None:
    """A recurrent policy's zero state for ``num_envs`` fresh episodes on the rollout's ``device``
    (None without memory)."""
    state = policy.initial_state(num_envs)
    return None if state is None else state.to(device)


def packed_copy(tensors: Sequence[Tensor], device: torch.device) -> list[Tensor]:
    """``tensors`` (one row per env each) on ``device`` in one copy, so one host sync per step
    instead of one per tensor: packed as float32 columns (integer actions are small, exact in
    float32), then split and cast back."""
    flat = [x.reshape(x.shape[0], -1) for x in tensors]
    packed = torch.cat([x.float() for x in flat], 1).to(device)
    return [part.to(x.dtype).view_as(x) for part, x in zip(packed.split([x.shape[1] for x in flat], 1), tensors)]


def collect_rollout(
    policy: TrainedPolicy,
    envs: VecEnv,
    buf: RolloutBuffer,
    cursor: EnvCursor,
    normalize_obs: ObservationNormalizer,
    reward_scaler: RewardScaler | None,
    timer: SectionTimer,
    act: PolicyStep | None = None,
) -> tuple[EnvCursor, Tensor]:
    """Fill ``buf`` with T steps from ``cursor``; return the new cursor and V(s_T) for GAE. A turn-
    based game's buffer first takes the decisions the cursor carries (``RolloutBuffer``), and
    the new cursor carries those left open at the end.

    ``act`` is the trainer's ``PolicyStep`` (kept across iterations: it holds compiled code and
    CUDA graphs); by default an eager one. The buffer, the cursor and the statistics live on the
    rollout's device (fastppo.envs.make.rollout_device); a policy elsewhere (a GPU beside host
    envs) gets each step's inputs there and hands its outputs back, both timed as "copy".

    The env's rows step in the parts it declares (``fastppo.envs.vector.in_parts``: all rows as
    one, or the ale backend's halves), which take turns: a part's step is sent and received only
    after the policy acted on the other parts, and fills the part's own columns, so the buffer
    holds each env's steps in order whatever the parts.
    """
    act = act or PolicyStep(policy)
    act.refresh()
    here, policy_device = buf.obs.device, next(policy.parameters()).device
    hop = here != policy_device

    def decide(cursor: EnvCursor, value_only: bool = False) -> Sequence[Tensor]:
        obs, mask, state = cursor.obs, cursor.action_mask, cursor.state
        if hop:
            with timer.section("copy"):
                obs = obs.to(policy_device, non_blocking=True)
                mask, state = (None if x is None else x.to(policy_device, non_blocking=True) for x in (mask, state))
        outputs: Sequence[Tensor]
        if value_only:
            outputs = (policy.get_value(obs, state),)
        elif state is None:
            outputs = act(obs, mask)
        else:  # recurrent: eager (config refuses --compile/--cudagraphs with memory)
            action, logprob, value, next_state = policy.step(obs, state, mask)
            assert next_state is not None  # a recurrent policy's, as the state it stepped from
            outputs = (action, logprob, value, next_state)
        if hop:
            with timer.section("copy"):
                outputs = packed_copy(outputs, here)
        return outputs

    # An env stepped in parts (fastppo.envs.vector.SteppedInParts) is sent a part's actions and
    # acted on for the next part while its threads step; the loop fills each part's columns, and
    # takes a part's step into row t - 1 just before acting on it at row t (the last at the end).
    stepper = in_parts(envs)
    with torch.inference_mode():
        if buf.initial_state is not None:
            assert cursor.state is not None  # a recurrent policy's cursor holds its state
            buf.initial_state.copy_(cursor.state)
        carried = cursor.open
        if carried is not None:
            buf.carry_in(carried)
        cursors = cursor.split(stepper.parts)
        columns = [buf.columns(part) for part in stepper.parts]
        acted: list[tuple[Tensor, Tensor | None]] = [(c.valid, None) for c in cursors]  # what receive needs

        def receive(part: int, t: int) -> None:
            """The part's step into row t (rewards, flags) and into its cursor."""
            with timer.section("env"):
                step = stepper.recv(part)
            rows, (was_valid, next_state) = columns[part], acted[part]
            done = step.terminated | step.truncated
            rows.rewards[t] = (
                step.reward
                if reward_scaler is None
                else reward_scaler(step.reward, done, valid=was_valid, rows=stepper.parts[part])
            )
            rows.terminated[t] = step.terminated
            rows.truncated[t] = step.truncated
            if rows.at_turn is not None:
                assert step.live is not None  # a turn-based game says whose turn comes next
                rows.at_turn[t] = step.live
            # Rows of agents out of play (multi-agent envs) are no decisions either, and no
            # statistics; a finishing agent's final observation is one.
            valid = ~done if step.live is None else ~done & step.live
            seen = None if step.live is None else step.live | done
            cursors[part] = EnvCursor(
                normalize_obs(step.obs, update=True, mask=seen), step.action_mask, valid, next_state
            )

        for t in range(buf.first_row, buf.obs.shape[0]):
            for part, rows in enumerate(columns):
                if t > buf.first_row:
                    receive(part, t - 1)
                now = cursors[part]
                rows.obs[t] = now.obs
                rows.valid[t] = now.valid
                if rows.action_masks is not None and now.action_mask is not None:
                    rows.action_masks[t] = now.action_mask
                with timer.section("policy"):
                    action, logprob, value, *state = decide(now)
                rows.actions[t] = action
                rows.logprobs[t] = logprob
                rows.values[t] = value
                # A reset row's successor is an episode's first observation: its state starts at zeros.
                acted[part] = (now.valid, None if now.state is None else carry(state[0], now.valid))
                stepper.send(policy.action_head.env_action(action), part)  # returns at once: recv is timed
        for part in range(len(columns)):
            receive(part, buf.obs.shape[0] - 1)
        cursor = EnvCursor.join(cursors, carried)
        with timer.section("policy"):
            (last_value,) = decide(cursor, value_only=True)
        if carried is not None:
            buf.carry_out(carried)
    return cursor, last_value


def rollout_targets(buf: RolloutBuffer, last_value: Tensor, gamma: float, gae_lambda: float) -> dict[str, Tensor]:
    """What the update learns from the filled ``buf``: ``advantages`` and ``returns`` (GAE), and
    for a turn-based game, over each seat's own decisions, ``valid``: the decisions with a
    target (the open ones wait for the next rollout, ``RolloutBuffer.carry_out``)."""
    next_values = shift_values(buf.values, last_value)
    if buf.at_turn is None:
        advantages, returns = compute_gae(
            buf.rewards, buf.values, next_values, buf.terminated, buf.truncated, gamma, gae_lambda
        )
        return {"advantages": advantages, "returns": returns}
    advantages, returns = compute_decision_gae(
        buf.rewards, buf.values, next_values, buf.terminated, buf.truncated, buf.valid, gamma, gae_lambda, buf.at_turn
    )
    targeted = buf.valid & ~open_decisions(buf.valid, buf.terminated, buf.truncated, buf.at_turn)
    return {"advantages": advantages, "returns": returns, "valid": targeted}

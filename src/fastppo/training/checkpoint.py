"""Checkpoints that restore a run exactly, written atomically, read without pickle.

Layout of a run directory::

    RUN_DIR/checkpoints/000050/    one complete checkpoint per folder, named by iteration
        policy.safetensors         weights + observation statistics (the ``Agent.save`` format,
        agent.json                 so ``fastppo.load`` reads a checkpoint folder directly)
        trainer.safetensors        optimizer moments, reward scaler, torch RNG, the env cursor
        trainer.json               counters, kl_beta, the schedules' anchor, optimizer
                                   hyperparameters, python/numpy RNG, the env snapshot (see
                                   ``snapshot_envs``)
        SHA256SUMS                 the four files' checksums, verified on load (a folder written
                                   before they were kept loads without)
    RUN_DIR/checkpoints/latest     a one-line pointer to the newest folder (for humans and scripts)

A checkpoint is written into ``checkpoints/.tmp-000050-<pid>/``, every file fsynced, then the
folder is renamed into place with ``os.replace``: a folder with a final name is always complete,
so a process killed at any moment (even SIGKILL) leaves the previous checkpoint loadable. Only
safetensors and JSON are ever read: a file crafted to run code on unpickling is just a damaged
file here.

What resume restores: weights, optimizer, normaliser statistics, counters, ``kl_beta``, the
schedules' anchor and every RNG (python, numpy, torch CPU and CUDA) exactly. The envs' state is
restored exactly for the ``tensor`` backend and for envs whose whole state is plain data reachable
from the env object (``EXACT_ENV_MODULES``): gymnasium's classic-control and toy-text envs on the
``sync`` backend, PettingZoo's MPE tasks (``pz:mpe2.*``, with ``PettingZooVecEnv``'s episodes in
flight) and any Gymnasium (``sync``) or PettingZoo env class that sets ``fastppo_plain_state =
True``, each wrapper around a Gymnasium env being gym.make's, fastppo's, a stateless transform of
gymnasium's (``STATELESS_WRAPPER_MODULES``) or a class with the same flag. Their snapshot
walks the object graph (numbers, strings, numpy arrays, scalars and generators, lists, tuples,
str-keyed dicts, objects of ``PLAIN_STATE_MODULES``) into JSON; a restore sets the saved
attributes on the fresh env's own objects, in place, and what the env shared stays shared, each
checked against the fresh env's value in its place (``restore_envs``): a snapshot that does not
fit is a damaged checkpoint.
Otherwise (Box2D, MuJoCo, Atari, other PettingZoo envs, async, EnvPool) the envs restart fresh
episodes from a seed derived from the run seed and the iteration, and the rest of the run state is
still exact.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from fastppo.agents.agent import Agent, load_agent
from fastppo.config import Config
from fastppo.envs.snapshot import SIMPLE_VALUES, SnapshotMismatch, env_is_exact, restore_envs, snapshot_envs
from fastppo.envs.tensor import TensorEnv
from fastppo.errors import FastPPOError
from fastppo.files.atomic import atomic_write_text, publish_folder
from fastppo.files.checksums import checksum_problem, write_checksums
from fastppo.files.run_folder import (
    AGENT_FILE,
    CHECKPOINT_NAME,
    LATEST,
    POLICY_FILE,
    TRAINER_JSON,
    checkpoint_root,
    find_checkpoint,
    list_checkpoints,
)
from fastppo.games.league import Damaged
from fastppo.policies.population import StackedActorCritic
from fastppo.training.optim import Optimizer
from fastppo.training.rollout import EnvCursor, ObservationNormalizer, fresh_state

if TYPE_CHECKING:
    from fastppo.envs.vector import VecEnv
    from fastppo.training.state import TrainState

OPEN_DECISIONS = "cursor.open."
"""A turn-based game's open decisions in a checkpoint (``EnvCursor.open``): ``cursor.open.<field>``."""
TRAINER_TENSORS = "trainer.safetensors"
CHECKPOINT_FILES = (POLICY_FILE, AGENT_FILE, TRAINER_JSON, TRAINER_TENSORS)
FORMAT_VERSION = 1


# --- state <-> tensors + JSON ---------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """Member ``index`` of the population a run's state trains, whose tensors carry the population
    axis first (``size`` members: a stack of seeds, ``fastppo.training.seed_stack``): a member's
    checkpoint is its slice of them, the checkpoint of its single run. ``WHOLE``, a population of
    one (a single run), has no population axis: its one member's state is the state as it is."""

    index: int = 0
    size: int | None = None

    def of_member(self, value: torch.Tensor) -> torch.Tensor:
        """The member's entry of a value held once per member (``[size, ...]``: statistics, step counts)."""
        return value if self.size is None else value[self.index]

    def of_rows(self, value: torch.Tensor) -> torch.Tensor:
        """The member's block of a value held per row or element, member-major (``[size * n, ...]``:
        env rows, a flat parameter's elements)."""
        return value if self.size is None else value.unflatten(0, (self.size, -1))[self.index]

    def generator(self, state: TrainState) -> dict[str, torch.Tensor]:
        """The member's own generator as the global RNG it stands for in its single run (none: a
        population of one draws from the global RNGs)."""
        if self.size is None:
            return {}
        policy = state.agent.policy
        assert isinstance(policy, StackedActorCritic)  # a population axis: a stack of seeds
        generator = policy.noise.generators[self.index]
        return {rng_key(generator): generator.get_state()}

    def envs(self, envs: VecEnv) -> VecEnv:
        """The member's envs: its seed block of a stack's one tensor env."""
        if self.size is None:
            return envs
        assert isinstance(envs, TensorEnv)  # a stack's seeds are blocks of one tensor env
        return envs.seed_block(self.index)

    # The inverses, for restoring: a member's checkpoint written into its slice of the population's state.

    def into_member(self, whole: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
        """The inverse of ``of_member``: ``whole`` with the member's entry replaced by ``part`` (a
        copy; a population of one: ``part`` is the whole)."""
        if self.size is None:
            return part
        whole = whole.clone()
        whole[self.index] = part
        return whole

    def into_rows(self, whole: torch.Tensor | None, part: torch.Tensor) -> torch.Tensor:
        """The inverse of ``of_rows``: ``whole`` with the member's block replaced by ``part`` (a copy)."""
        if self.size is None:
            return part
        assert whole is not None  # a population's fresh state has every member's rows
        whole = whole.clone()
        whole.unflatten(0, (self.size, -1))[self.index] = part
        return whole

    def load_policy(self, policy: torch.nn.Module, saved: torch.nn.Module) -> None:
        """``saved``'s weights (the member's single run's policy) into the member's weights of ``policy``."""
        if self.size is None:
            policy.load_state_dict(saved.state_dict())
            return
        assert isinstance(policy, StackedActorCritic)
        policy.load_member(self.index, saved)

    def load_envs(self, envs: VecEnv, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """The inverse of ``envs``' snapshot: the member's saved envs into its envs."""
        if self.size is None:
            restore_envs(envs, tensors, meta)
            return
        assert isinstance(envs, TensorEnv)
        envs.load_seed_block(
            self.index, {k.removeprefix("env."): v for k, v in tensors.items() if k.startswith("env.")}
        )

    def load_generator(self, state: TrainState, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        """The inverse of ``generator``: a population of one's global RNGs, a member's own generator."""
        if self.size is None:
            restore_rng(tensors, meta["rng"])
            return
        policy = state.agent.policy
        assert isinstance(policy, StackedActorCritic)
        generator = policy.noise.generators[self.index]
        generator.set_state(tensors[rng_key(generator)])


WHOLE = Member()


def rng_key(generator: torch.Generator) -> str:
    """The checkpoint key of the global RNG ``generator`` stands for (a stacked seed's in its single run)."""
    return "rng.torch" if generator.device.type == "cpu" else f"rng.cuda.{generator.device.index or 0}"


def optimizer_to_tensors(
    optimizer: Optimizer, member: Member = WHOLE
) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    """``optimizer.state_dict()`` split into flat tensors ('optim.<param>.<slot>') and the JSON part;
    of a population, ``member``'s slice (its step count, its row of the moments)."""
    state = optimizer.state_dict()
    tensors = {
        f"optim.{index}.{slot}": (member.of_member if slot == "step" else member.of_rows)(torch.as_tensor(value))
        .detach()
        .cpu()
        .contiguous()
        for index, slots in state["state"].items()
        for slot, value in slots.items()
    }
    return tensors, state["param_groups"]


def optimizer_from_tensors(
    optimizer: Optimizer, tensors: dict[str, torch.Tensor], param_groups: list[dict[str, Any]], member: Member = WHOLE
) -> None:
    """The inverse of ``optimizer_to_tensors``: of a population, into ``member``'s slice (the other
    members' state as it is; zeros where Adam has none yet, a stack's first member restored)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    current = optimizer.state_dict()["state"]
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, value in tensors.items():
        if name.startswith("optim."):
            index, slot = name.removeprefix("optim.").split(".", 1)
            param = params[int(index)]
            if slot == "step":
                whole = current.get(int(index), {}).get(slot, torch.zeros(member.size or (), device=param.device))
                value = member.into_member(whole, value)
            else:
                value = member.into_rows(current.get(int(index), {}).get(slot, torch.zeros_like(param)), value)
            state.setdefault(int(index), {})[slot] = value
    # JSON turned tuples (Adam's betas) into lists.
    groups = [{k: tuple(v) if isinstance(v, list) and k != "params" else v for k, v in g.items()} for g in param_groups]
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def rng_state(device: torch.device) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every global RNG: torch (CPU, and CUDA when training there) as tensors, python and numpy as JSON."""
    tensors = {"rng.torch": torch.get_rng_state()}
    if device.type == "cuda":
        tensors |= {f"rng.cuda.{i}": s for i, s in enumerate(torch.cuda.get_rng_state_all())}
    version, internal, gauss = random.getstate()
    numpy_state = np.random.get_state(legacy=True)  # the default, spelled out for numpy's stubs
    assert isinstance(numpy_state, tuple)  # a legacy state is the tuple (the stubs allow the dict)
    kind, keys, pos, has_gauss, cached = numpy_state
    meta = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }
    return tensors, meta


def restore_rng(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    version, internal, gauss = meta["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


# --- save / find / load ---------------------------------------------------------------------------


def run_tensors(
    state: TrainState, envs: VecEnv, member: Member = WHOLE
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """What ``trainer.safetensors`` holds of ``member``'s slice of ``state`` but the optimizer (RNG
    states, reward scaler, env cursor, tensor envs), and ``trainer.json``'s RNG states and env snapshot."""
    rng_tensors, rng_meta = rng_state(state.agent.device)
    env_tensors, env_meta = snapshot_envs(member.envs(envs))
    tensors = rng_tensors | member.generator(state) | env_tensors
    if state.reward_scaler is not None:
        tensors |= {
            f"reward_scaler.{k}": (member.of_member if k.startswith("return_rms.") else member.of_rows)(v)
            .detach()
            .cpu()
            for k, v in state.reward_scaler.state_dict().items()
        }
    cursor = state.cursor
    tensors |= {
        "cursor.obs": member.of_rows(cursor.obs).cpu().contiguous(),
        "cursor.valid": member.of_rows(cursor.valid).cpu().contiguous(),
    }
    if cursor.action_mask is not None:
        tensors["cursor.action_mask"] = member.of_rows(cursor.action_mask).cpu().contiguous()
    if cursor.state is not None:  # a recurrent policy's live states are part of the run
        tensors["cursor.state"] = member.of_rows(cursor.state).cpu().contiguous()
    if cursor.open is not None:  # a game's decisions a rollout left open: the next one trains them
        tensors |= {f"{OPEN_DECISIONS}{name}": row.cpu().contiguous() for name, row in cursor.open.flatten().items()}
    league_tensors, league_meta = state.league.state()
    tensors |= league_tensors
    return tensors, {"rng": rng_meta, "env": env_meta} | ({} if league_meta is None else {"self_play": league_meta})


def save_checkpoint(
    run_dir: Path,
    state: TrainState,
    envs: VecEnv,
    keep: int,
    member: Member = WHOLE,
    agent: Agent | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write the checkpoint of ``state`` (at an iteration boundary) atomically; keep the newest ``keep``.
    Of a population, ``member``'s slice, its ``agent`` (its own policy and statistics, its episode
    returns): the checkpoint of its single run; ``extra`` joins the JSON metadata (a stack's
    seeds). A write that fails (a full disk, a read-only folder) is one FastPPOError naming the
    checkpoint and the cause; the checkpoints already written stay as they were."""
    agent = agent or state.agent
    bad = [name for name, p in agent.policy.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise FastPPOError(
            f"refusing to checkpoint non-finite parameters ({', '.join(bad)}); the previous checkpoint is kept"
        )
    root = checkpoint_root(run_dir)
    name = f"{state.iteration:06d}"
    tmp = root / f".tmp-{name}-{os.getpid()}"
    try:
        return _write_checkpoint(run_dir, state, envs, keep, member, agent, extra, tmp)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise FastPPOError(f"cannot write the checkpoint {root / name}: {exc.strerror or exc}") from None


def _write_checkpoint(
    run_dir: Path,
    state: TrainState,
    envs: VecEnv,
    keep: int,
    member: Member,
    agent: Agent,
    extra: dict[str, Any] | None,
    tmp: Path,
) -> Path:
    root, name = tmp.parent, f"{state.iteration:06d}"
    root.mkdir(parents=True, exist_ok=True)
    if tmp.exists():
        shutil.rmtree(tmp)
    agent.save(tmp)

    optim_tensors, param_groups = optimizer_to_tensors(state.optimizer, member)
    tensors, rng_and_env = run_tensors(state, envs, member)
    save_file(optim_tensors | tensors, str(tmp / TRAINER_TENSORS))
    meta = {
        "format": FORMAT_VERSION,
        "iteration": state.iteration,
        "global_step": state.global_step,
        "kl_beta": state.kl_beta if member.size is None else state.kl_beta[member.index],  # type: ignore[index]
        "schedule_anchor": list(state.schedule_anchor),
        "param_groups": param_groups,
        **rng_and_env,
        "episode_returns": agent.episode_returns[-100:],
        "world_size": state.world_size,
        **(extra or {}),
    }
    (tmp / TRAINER_JSON).write_text(json.dumps(meta))
    write_checksums(tmp, CHECKPOINT_FILES)
    final = root / name
    publish_folder(tmp, final)
    atomic_write_text(root / LATEST, name + "\n")
    for stale in list_checkpoints(run_dir)[:-keep]:
        # Renamed first, so that no numbered folder is ever seen half deleted.
        trash = root / f".old-{stale.name}-{os.getpid()}"
        os.replace(stale, trash)
    for leftover in [*root.glob(".tmp-*"), *root.glob(".old-*")]:
        if leftover.is_dir():  # ours, or left by a killed process
            shutil.rmtree(leftover, ignore_errors=True)
    return final


@dataclass
class Checkpoint:
    """A loaded checkpoint: the agent (weights, statistics, config) and the trainer's state."""

    path: Path
    agent: Agent
    iteration: int
    global_step: int
    kl_beta: float
    param_groups: list[dict[str, Any]]
    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any] = field(default_factory=dict)
    schedule_anchor: tuple[int, float] = (0, 0.0)

    @property
    def config(self) -> Config:
        return self.agent.config


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu", env_id: str | None = None) -> Checkpoint:
    """Read a checkpoint (a run directory's newest, or a checkpoint folder); FastPPOError if damaged:
    a file missing or unreadable, a field of trainer.json missing or wrong (``check_trainer_json``),
    a tensor not finite, a file that does not match its checksum. ``check_fits_run`` then checks its
    tensors against the run it resumes. ``env_id`` is the env the caller names (``load_agent``: a
    folder written before agent.json held its spaces rebuilds them from it)."""
    folder = find_checkpoint(path)
    for name in CHECKPOINT_FILES:
        if not (folder / name).is_file():
            raise FastPPOError(
                f"checkpoint {folder} is incomplete: {name} is missing; delete it to use the previous one"
            )
    agent = load_agent(folder, device, env_id)
    try:
        meta = json.loads((folder / TRAINER_JSON).read_text())
        tensors = load_file(str(folder / TRAINER_TENSORS))
    except FileNotFoundError as exc:
        raise FastPPOError(f"checkpoint {folder} is incomplete: {Path(exc.filename).name} is missing") from None
    except (json.JSONDecodeError, ValueError, UnicodeDecodeError, SafetensorError, OSError) as exc:
        raise FastPPOError(
            f"checkpoint {folder} is damaged or not a fastppo checkpoint "
            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); delete it to use the previous one"
        ) from None
    check_trainer_json(folder, meta, agent.config)
    weights = agent.policy.state_dict() | (
        {} if agent.obs_rms is None else {f"obs_rms.{k}": v for k, v in agent.obs_rms.state_dict().items()}
    )
    for file, named in ((POLICY_FILE, weights), (TRAINER_TENSORS, tensors)):
        bad = [name for name, t in named.items() if t.is_floating_point() and not torch.isfinite(t).all()]
        if bad:
            raise _damaged(folder, f"{file} holds NaN/Inf in {', '.join(bad[:3])}")
    # Last (load_agent checked its two files): what the checks above cannot see, a flipped bit in a plausible value.
    if (problem := checksum_problem(folder, (TRAINER_JSON, TRAINER_TENSORS))) is not None:
        raise _damaged(folder, problem)
    done, at = meta.get("schedule_anchor", (0, 0.0))  # absent from checkpoints written before it existed
    return Checkpoint(
        folder,
        agent,
        meta["iteration"],
        meta["global_step"],
        float(meta["kl_beta"]),
        meta["param_groups"],
        tensors,
        meta,
        (done, float(at)),
    )


# --- validation: a damaged checkpoint is refused before anything is restored or written ------------

REQUIRED_FIELDS = ("format", "iteration", "global_step", "kl_beta", "param_groups", "rng", "env", "episode_returns")
"""trainer.json's fields since its first format. ``schedule_anchor`` and ``world_size`` came later:
absent, they mean a run that kept its horizon and trained in one process."""
ADAM_HYPERPARAMETERS = ("lr", "betas", "eps", "weight_decay")
_BIT_GENERATORS = ("MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64")
_SNAPSHOT_KINDS = ("ref", "scalar", "tuple", "class", "ndarray", "bit_generator", "list", "dict")
Spec = tuple[tuple[int, ...], torch.dtype]


def _damaged(folder: Path, problem: str) -> FastPPOError:
    return FastPPOError(f"checkpoint {folder} is damaged: {problem}; delete it to use the previous one")


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_trainer_json(folder: Path, meta: Any, config: Config) -> None:
    """Every field of trainer.json, against ``config`` (the checkpoint's agent.json): counters that
    are the folder's iteration and the steps that many iterations take, finite coefficients, Adam
    hyperparameters, RNG states that python and numpy accept, an env snapshot that
    ``restore_envs`` can rebuild. FastPPOError naming the field."""

    def damaged(problem: str) -> FastPPOError:
        return _damaged(folder, f"{TRAINER_JSON}'s {problem}")

    if not isinstance(meta, dict):
        raise _damaged(folder, f"{TRAINER_JSON} is not an object")
    missing = [name for name in REQUIRED_FIELDS if name not in meta]
    if missing:
        raise _damaged(folder, f"{TRAINER_JSON} lacks {', '.join(missing)}")
    if meta["format"] != FORMAT_VERSION:
        raise damaged(f"format is {meta['format']!r}, not {FORMAT_VERSION}: written by another fastppo version")
    iteration, world_size = meta["iteration"], meta.get("world_size", 1)
    # 0: a run stopped during its start-up (a --seeds job's signal) saves its initial state.
    if not (_integer(iteration) and iteration >= 0) or (
        CHECKPOINT_NAME.match(folder.name) and iteration != int(folder.name)
    ):
        raise damaged(f"iteration is {iteration!r}, not the folder's {folder.name}")
    if not (_integer(world_size) and world_size >= 1):
        raise damaged(f"world_size is {world_size!r}, not a positive integer")
    steps = iteration * config.batch_size * world_size
    if meta["global_step"] != steps or not _integer(meta["global_step"]):
        raise damaged(
            f"global_step is {meta['global_step']!r}, not {steps} ({iteration} iterations of {config.batch_size} x "
            f"{world_size} steps)"
        )
    if not (_number(meta["kl_beta"]) and meta["kl_beta"] >= 0):
        raise damaged(f"kl_beta is {meta['kl_beta']!r}, not a finite number >= 0")
    anchor = meta.get("schedule_anchor", [0, 0.0])
    if not (
        isinstance(anchor, list)
        and len(anchor) == 2
        and _integer(anchor[0])
        and 0 <= anchor[0] <= iteration
        and _number(anchor[1])
        and 0 <= anchor[1] <= 1
    ):
        raise damaged(f"schedule_anchor is {anchor!r}, not [iterations done, progress in 0..1]")
    groups = meta["param_groups"]
    if not (isinstance(groups, list) and groups and all(isinstance(g, dict) for g in groups)):
        raise damaged("param_groups is not a list of parameter groups")
    for i, group in enumerate(groups):
        lacking = [key for key in (*ADAM_HYPERPARAMETERS, "params") if key not in group]
        if lacking:
            raise damaged(f"param_groups[{i}] lacks {', '.join(lacking)}")
        betas = group["betas"]
        fine = (
            _number(group["lr"]) and group["lr"] >= 0 and _number(group["eps"]) and group["eps"] > 0
            and _number(group["weight_decay"]) and group["weight_decay"] >= 0
            and isinstance(betas, list) and len(betas) == 2 and all(_number(b) and 0 <= b < 1 for b in betas)
            and isinstance(group["params"], list) and all(_integer(p) for p in group["params"])
        )  # fmt: skip
        if not fine:
            raise damaged(
                f"param_groups[{i}] is { ({k: group[k] for k in (*ADAM_HYPERPARAMETERS, 'params')}) }, not Adam's "
                "settings"
            )
    returns = meta["episode_returns"]
    if not (isinstance(returns, list) and all(_number(r) for r in returns)):
        raise damaged("episode_returns is not a list of finite returns")
    if "stack" in meta and not (isinstance(meta["stack"], list) and all(_integer(s) for s in meta["stack"])):
        raise damaged(f"stack is {meta['stack']!r}, not a list of seeds")
    rng = meta["rng"]
    try:  # throwaway generators: they check the states as the global ones would, and nothing global moves
        version, internal, gauss = rng["python"]
        random.Random().setstate((version, tuple(internal), gauss))
        kind, keys, pos, has_gauss, cached = rng["numpy"]
        np.random.RandomState().set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:
        raise damaged(
            f"rng is not a python and a numpy RNG state ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})"
        ) from None
    if meta["env"] is not None:
        try:
            _check_env_snapshot(meta["env"], config.env.num_envs)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            raise damaged(f"env snapshot {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None


def _check_env_snapshot(meta: dict[str, Any], num_envs: int) -> None:
    """ValueError (or a TypeError/KeyError on the way) where ``restore_envs`` could not rebuild ``meta``."""
    kind = meta["kind"]
    ids: set[int] = set()  # one memo for all copies, as ``snapshot_envs`` wrote them
    if kind == "pettingzoo":
        _check_snapshot_node(meta["vec"], ids)
    elif kind == "sync":
        if not (
            len(meta["autoreset"]) == len(meta["envs"]) == num_envs
            and all(isinstance(a, bool) for a in meta["autoreset"])
        ):
            raise ValueError(f"holds {len(meta['envs'])} envs, the config makes {num_envs}")
        for layers in meta["envs"]:
            for layer in layers:
                _check_snapshot_node(layer, ids)
    elif kind != "tensor":
        raise ValueError(f"is of unknown kind {kind!r}")


def _check_snapshot_node(node: Any, ids: set[int]) -> None:
    """Walk ``node`` (``_encode``'s output) as ``_restore`` would: ValueError for what it cannot
    rebuild (a value of no known kind, a reference to an object not defined before it, array data
    that does not fill its shape, a generator state numpy refuses)."""
    if isinstance(node, SIMPLE_VALUES):
        return
    if not isinstance(node, dict):
        raise ValueError(f"holds a bare {type(node).__name__}")
    kind = next((k for k in _SNAPSHOT_KINDS if k in node), None)
    if kind is None:
        raise ValueError(f"holds a value of no known kind ({', '.join(map(str, node))})")
    if kind == "ref":
        if node["ref"] not in ids:
            raise ValueError(f"refers to object {node['ref']!r}, which it does not define before")
        return
    if "id" in node:  # before the contents, which may refer back to it
        if not _integer(node["id"]) or node["id"] in ids:
            raise ValueError(f"defines object {node['id']!r} twice or with a bad id")
        ids.add(node["id"])
    if kind == "scalar":
        np.dtype(node["scalar"]).type(node["data"])
    elif kind == "ndarray":
        np.asarray(node["data"], dtype=np.dtype(node["ndarray"])).reshape(node["shape"])
    elif kind == "bit_generator":
        state = node["bit_generator"]
        if state["bit_generator"] not in _BIT_GENERATORS:
            raise ValueError(f"holds a generator of unknown kind {state['bit_generator']!r}")
        getattr(np.random, state["bit_generator"])().state = state
    elif kind == "class":
        if not isinstance(node["class"], str):
            raise ValueError(f"names class {node['class']!r}")
        for value in node["attrs"].values():
            _check_snapshot_node(value, ids)
    else:  # tuple, list, dict
        items = node[kind]
        if not isinstance(items, dict if kind == "dict" else list):
            raise ValueError(f"holds a {kind} that is a {type(items).__name__}")
        for value in items.values() if isinstance(items, dict) else items:
            _check_snapshot_node(value, ids)


def _spec(tensor: torch.Tensor) -> Spec:
    return tuple(tensor.shape), tensor.dtype


def _shown(spec: Spec) -> str:
    return f"{list(spec[0])} {str(spec[1]).removeprefix('torch.')}"


def adam_specs(optimizer: Optimizer, member: Member = WHOLE) -> dict[str, Spec]:
    """The tensors Adam's state holds for each parameter (``step``, ``exp_avg``, ``exp_avg_sq``:
    torch.optim.Adam's layout, FusedAdam's too) of ``member``, named as ``optimizer_to_tensors`` names them."""
    params = [p for group in optimizer.param_groups for p in group["params"]]  # state_dict numbers them in this order
    return {
        f"optim.{i}.{slot}": spec
        for i, p in enumerate(params)
        for slot, spec in (
            ("step", ((), torch.float32)),
            ("exp_avg", _spec(member.of_rows(p))),
            ("exp_avg_sq", _spec(member.of_rows(p))),
        )
    }


def check_fits_run(checkpoint: Checkpoint, state: TrainState, envs: VecEnv, member: Member = WHOLE) -> None:
    """Refuse a checkpoint whose tensors do not fit ``state``, the freshly built run it resumes:
    trainer.safetensors must hold the tensors a checkpoint of that run holds (Adam's moments and
    step per parameter, the RNG states, the reward scaler, the env cursor, tensor envs, the self-play
    pool's snapshots), each with their shape and dtype, and nothing else; its param_groups must number the optimizer's
    parameters. (A moment of another size crashed the optimizer's native code.) Together with
    ``load_checkpoint``'s checks, a restore that follows cannot fail halfway. Of a population,
    ``member``'s slice (a seed of a stack: the checkpoint of its single run)."""
    tensors, json_part = run_tensors(state, envs, member)
    try:  # the self-play pool's snapshots: as many as the checkpoint's league lists
        tensors |= state.league.expected_tensors(checkpoint.meta.get("self_play"))
    except Damaged as exc:
        raise _damaged(checkpoint.path, f"{TRAINER_JSON}'s self_play {exc}") from None
    saved_env, fresh_env = checkpoint.meta["env"], json_part["env"]
    if saved_env is not None and fresh_env is not None and saved_env["kind"] != fresh_env["kind"]:
        raise _damaged(
            checkpoint.path,
            f"its env snapshot is of {saved_env['kind']} envs, the config makes {fresh_env['kind']} envs",
        )
    # Adam makes its state at the first update: a checkpoint of iteration 0 (a run stopped in its start-up) has none.
    moments = adam_specs(state.optimizer, member) if checkpoint.iteration > 0 else {}
    expected = {
        name: _spec(t) for name, t in tensors.items() if not name.startswith("env.") or saved_env is not None
    } | moments
    found = {name: _spec(t) for name, t in checkpoint.tensors.items()}
    # CUDA RNG states come and go with the device ("auto" on another machine); restore_rng sets those it can.
    # A game's checkpoint written before open decisions were carried has none: it resumes with none open.
    no_open = not any(name.startswith(OPEN_DECISIONS) for name in found)
    optional = {
        name for name in found.keys() | expected.keys()
        if name.startswith("rng.cuda.")
        or (name.startswith("env.") and fresh_env is None)
        or (name.startswith(OPEN_DECISIONS) and no_open)
    }  # fmt: skip
    lacking = sorted(expected.keys() - found.keys() - optional)
    if lacking:
        raise _damaged(checkpoint.path, f"{TRAINER_TENSORS} lacks {', '.join(lacking[:3])}")
    unknown = sorted(found.keys() - expected.keys() - optional)
    if unknown:
        raise _damaged(
            checkpoint.path, f"{TRAINER_TENSORS} holds {', '.join(unknown[:3])}, which this run does not have"
        )
    for name in sorted(found.keys() & expected.keys()):
        if found[name] != expected[name]:
            raise _damaged(
                checkpoint.path,
                f"{TRAINER_TENSORS} holds {name} as {_shown(found[name])} where this run needs "
                f"{_shown(expected[name])}",
            )
    numbering = [group["params"] for group in state.optimizer.state_dict()["param_groups"]]
    if [group["params"] for group in checkpoint.param_groups] != numbering:
        raise _damaged(
            checkpoint.path,
            f"{TRAINER_JSON}'s param_groups number the parameters {[g['params'] for g in checkpoint.param_groups]}, "
            f"the optimizer {numbering}",
        )


def restore_train_state(
    state: TrainState,
    envs: VecEnv,
    checkpoints: dict[Member, Checkpoint],
    normalize_obs: ObservationNormalizer,
    fresh_seed: int | None = None,
) -> tuple[bool, list[list[float]]]:
    """Put a freshly built population into its members' checkpoints (a single run: ``{WHOLE:
    checkpoint}``; a stack of seeds: each seed's, its single run's), once ``check_fits_run`` has
    found that every one fits (nothing is changed otherwise). Returns whether the envs were
    restored exactly (else they restart fresh episodes, seeded from the run seed and the
    iteration), and each member's recent episode returns (a checkpoint keeps the last 100).

    With ``fresh_seed`` (a torchrun rank: the checkpoint's envs and RNG states are rank 0's) the
    envs restart fresh episodes from that seed and the RNGs are left as the caller seeded them."""
    for member, checkpoint in checkpoints.items():
        check_fits_run(checkpoint, state, envs, member)
    restored = [
        _restore_member(state, envs, member, checkpoint, normalize_obs, fresh_seed)
        for member, checkpoint in checkpoints.items()
    ]
    return all(exact for exact, _ in restored), [returns for _, returns in restored]


def _restore_member(
    state: TrainState,
    envs: VecEnv,
    member: Member,
    checkpoint: Checkpoint,
    normalize_obs: ObservationNormalizer,
    fresh_seed: int | None,
) -> tuple[bool, list[float]]:
    """``member``'s checkpoint into its slice of ``state``, the inverse of saving it: the envs first,
    whose snapshot is checked against them as it is restored (a FastPPOError where it does not fit:
    the part-restored run is to be discarded, nothing was written); RNGs last."""
    agent, tensors, meta = state.agent, checkpoint.tensors, checkpoint.meta
    exact = fresh_seed is None and meta["env"] is not None and env_is_exact(envs)
    if exact:  # first: only a restore into the envs finds a snapshot that does not fit them
        try:
            member.load_envs(envs, tensors, meta["env"])
        except SnapshotMismatch as exc:
            raise _damaged(checkpoint.path, f"{TRAINER_JSON}'s env snapshot {exc}") from None
    state.league.load(tensors, meta.get("self_play"))
    device = envs.device  # the rollout's (fastppo.envs.make.rollout_device)
    member.load_policy(agent.policy, checkpoint.agent.policy)
    if agent.obs_rms is not None and checkpoint.agent.obs_rms is not None:
        whole = agent.obs_rms.state_dict()
        agent.obs_rms.load_state_dict(
            {k: member.into_member(whole[k], v) for k, v in checkpoint.agent.obs_rms.state_dict().items()}
        )
    returns = list(meta.get("episode_returns", []))
    if member.size is None:  # a single run's returns are its agent's
        agent.episode_returns = returns
    optimizer_from_tensors(state.optimizer, tensors, checkpoint.param_groups, member)
    if state.reward_scaler is not None:
        whole = state.reward_scaler.state_dict()
        state.reward_scaler.load_state_dict(
            {
                k: (member.into_member if k.startswith("return_rms.") else member.into_rows)(
                    whole[k], tensors[f"reward_scaler.{k}"].to(device)
                )
                for k in whole
            }
        )
    state.iteration, state.global_step = checkpoint.iteration, checkpoint.global_step
    state.schedule_anchor = checkpoint.schedule_anchor
    if member.size is None:
        state.kl_beta = checkpoint.kl_beta
    else:  # one per member
        state.kl_beta[member.index] = checkpoint.kl_beta  # type: ignore[index]
    if exact:
        mask, memory, carried, cursor = (
            tensors.get("cursor.action_mask"),
            tensors.get("cursor.state"),
            state.cursor.open,
            state.cursor,
        )
        for name, row in carried.flatten().items() if carried is not None else ():
            row.copy_(tensors.get(OPEN_DECISIONS + name, torch.zeros_like(row)))  # none saved: none open
        state.cursor = EnvCursor(
            member.into_rows(cursor.obs, tensors["cursor.obs"].to(device)),
            None if mask is None else member.into_rows(cursor.action_mask, mask.to(device)),
            member.into_rows(cursor.valid, tensors["cursor.valid"].to(device)),
            None if memory is None else member.into_rows(cursor.state, memory.to(device)),
            carried,
        )
    else:  # fresh episodes start from fresh recurrent states, with no decision open (a stack's envs are exact)
        first = envs.reset(seed=checkpoint.config.run.seed + checkpoint.iteration if fresh_seed is None else fresh_seed)
        state.cursor = EnvCursor.at_reset(
            first,
            normalize_obs,
            update=False,
            state=fresh_state(agent.policy, envs.num_envs, device),
            open=state.cursor.open,
        )
        if state.reward_scaler is not None:
            state.reward_scaler.discounted_return.zero_()
    if fresh_seed is None:
        member.load_generator(state, tensors, meta)
    return exact, returns


def _metrics_lines(path: Path) -> list[tuple[str, dict[str, Any], float]]:
    """(line, record, its global_step) of each record of a metrics.jsonl; a line that is no record
    (cut short by a kill) left out, and a record without a numeric global_step placed after every step."""
    found: list[tuple[str, dict[str, Any], float]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
        if isinstance(record, dict):
            step = record.get("global_step")
            found.append((line, record, step if _number(step) else math.inf))
    return found


def check_metrics_reach(run_dir: Path, checkpoint: Checkpoint) -> None:
    """A FastPPOError unless ``run_dir``'s metrics.jsonl holds the record of the checkpoint's
    iteration (logged before the checkpoint was saved): a file cut short would go on from the
    checkpoint with a silent gap. Reads only: called before anything of the run is written."""
    if checkpoint.iteration == 0:  # saved during start-up, before a first record
        return
    path = Path(run_dir) / "metrics.jsonl"
    try:
        steps = [step for _, _, step in _metrics_lines(path)] if path.exists() else []
    except OSError as exc:
        raise FastPPOError(f"cannot read {path}: {exc.strerror or exc}") from None
    if checkpoint.global_step not in steps:
        last = max((step for step in steps if step < checkpoint.global_step), default=None)
        ends = "holds no records" if last is None else f"ends at step {last}"
        raise FastPPOError(
            f"{path} {ends}, short of the step of its checkpoint {checkpoint.path} ({checkpoint.global_step}): the "
            "file was cut short, and resuming would leave a gap in it; put the whole file back, or start a new run"
        )


def rewind_metrics(run_dir: Path, global_step: int) -> list[dict[str, Any]]:
    """Cut ``metrics.jsonl`` back to the records at or before ``global_step`` (a process killed after
    its last checkpoint logged iterations that the resumed run logs again) and return them."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    kept = [(line, record) for line, record, step in _metrics_lines(path) if step <= global_step]
    atomic_write_text(path, "".join(f"{line}\n" for line, _ in kept))
    return [record for _, record in kept]

"""Data-parallel training on torchrun: the torch.distributed glue, and nothing else.

``torchrun --nproc-per-node N -m fastppo train ...`` starts N processes (ranks) and tells each its
place through the environment (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR/PORT). Every rank runs
the one trainer loop on its own envs, with the ``World`` below handed to it as data; the ranks meet
only in these collectives (CleanRL's ppo_atari_multigpu.py scheme):

- the initial weights, broadcast from rank 0;
- per minibatch, the flat gradient (a weighted mean); per epoch, each minibatch's valid rows and
  advantage moments (for the weights and the advantages' global mean/std) and the target-KL test;
- per iteration, the observation/return statistics (``SyncedStatistics``), the finished episodes
  (for rank 0's log), the logged losses and a stop signal.

Outside torchrun (WORLD_SIZE unset or 1) the trainer gets the ``LoneWorld``: a world of one whose
collectives are identities, so the loop is the same code with or without torchrun and a lone
process makes no collective call at all.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

from fastppo.config import RunConfig, check_seed
from fastppo.core.normalize import RunningMeanStd
from fastppo.envs.vector import Episodes
from fastppo.errors import FastPPOError

T = TypeVar("T")
"""Whatever picklable value ``gather_objects`` collects from the ranks."""


def _launch_variable(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise FastPPOError(
            f"{name}={text!r} in the environment is not an integer: torchrun sets it; unset it to train in one process"
        ) from None


def launched_world_size() -> int:
    """How many ranks this launch has: torchrun's WORLD_SIZE, 1 outside torchrun."""
    return _launch_variable("WORLD_SIZE", 1)


def launched_rank() -> int:
    """This process's rank (torchrun's RANK), 0 outside torchrun."""
    return _launch_variable("RANK", 0)


RANK_ZERO_GRACE_S = 5.0
"""How long a rank other than 0 waits before it reports an error itself (``defer_to_rank_zero``)."""


class ReportedError(FastPPOError):
    """A rank's error that ``joined`` has printed already, naming the rank: the CLI exits 2
    without saying it again."""


def defer_to_rank_zero() -> str | None:
    """Called before this process reports an error and exits; returns the message's prefix, or
    None where the error is said already and this process says nothing.

    Under torchrun every rank meets bad input alike (a different world size on resume), and the
    first rank to exit makes torchrun stop the others: a rank other than 0 waits, so that rank 0
    says it once and its exit stops this rank (None). If that does not come, the error was this
    rank's alone (no GPU of its own) and it speaks, naming itself."""
    try:
        rank = launched_rank()
    except FastPPOError:  # the error being reported is the bad RANK itself: say it at once
        return ""
    if rank == 0:
        return ""
    return None if _stopped_while_waiting(RANK_ZERO_GRACE_S) else f"rank {rank}: "


def _stopped_while_waiting(seconds: float) -> bool:
    """Wait ``seconds``; whether torchrun stopped this rank meanwhile (its SIGTERM, a
    ``KeyboardInterrupt`` by ``fastppo.cli.main.console``'s handler), as it does once another rank exited."""
    try:
        time.sleep(seconds)
    except KeyboardInterrupt:
        return True
    return False


def check_world_size(run_dir: object, trained_on: int) -> None:
    """A run trained by ``trained_on`` ranks resumes only with as many: each rank's batch is part of
    every update, so another count would be another run."""
    world_size = launched_world_size()
    if world_size != trained_on:
        how = (
            "without torchrun"
            if trained_on == 1
            else f"with torchrun, {trained_on} processes in all (--nnodes x --nproc-per-node)"
        )
        raise FastPPOError(
            f"{run_dir} was trained by {trained_on} rank{'s' * (trained_on > 1)}, this launch has {world_size}: resume "
            f"it {how}"
        )


def rank_device(device: torch.device) -> torch.device:
    """The device this rank trains on: under torchrun, ``--device cuda`` is the GPU of the rank's
    LOCAL_RANK (one process per GPU); CPU stays CPU."""
    if device.type != "cuda" or launched_world_size() == 1:
        return device
    if device.index is not None:
        raise FastPPOError(
            f"--device {device} under torchrun: every rank takes the GPU of its local rank, give --device cuda"
        )
    local_rank, gpus = _launch_variable("LOCAL_RANK", 0), torch.cuda.device_count()
    if local_rank >= gpus:
        raise FastPPOError(
            f"local rank {local_rank} has no GPU of its own ({gpus} on this machine): start at most {gpus} processes "
            f"per node (--nproc-per-node {gpus})"
        )
    return torch.device("cuda", local_rank)


@dataclass(frozen=True)
class World:
    """This rank's place among the ranks of a torchrun launch, and the collectives the trainer uses
    (each one is called by every rank, in the same order)."""

    rank: int
    size: int
    device: torch.device
    """Where collective tensors live: the rank's GPU for NCCL, the CPU for gloo."""

    @property
    def main(self) -> bool:
        """Rank 0: the one that logs, shows progress and writes checkpoints."""
        return self.rank == 0

    def seed(self, seed: int, num_envs: int, iteration: int = 0) -> int:
        """This rank's seed: ``seed + rank * num_envs``, so that its envs (seeded seed, seed + 1, ...
        by the vector env) never share a seed with another rank's, rank 0 keeping ``seed``; plus the
        ``iteration`` a resumed run restarts its envs and random streams at."""
        return check_seed(seed + self.rank * num_envs + iteration, "--run.seed + rank x num_envs + iteration")

    def sum_(self, tensor: Tensor) -> Tensor:
        """``tensor`` summed over the ranks, in place."""
        dist.all_reduce(tensor)
        return tensor

    def mean_(self, tensor: Tensor) -> Tensor:
        """``tensor`` averaged over the ranks, in place."""
        return self.sum_(tensor).div_(self.size)

    def max(self, value: int) -> int:
        """The largest of the ranks' ``value``."""
        tensor = torch.tensor([value], device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor)

    def broadcast_module(self, module: nn.Module) -> None:
        """Give every rank rank 0's weights and buffers (in place: views of the flat parameter stay views)."""
        self.broadcast_(module.state_dict().values())

    def broadcast_(self, tensors: Iterable[Tensor]) -> None:
        """Give every rank rank 0's values of ``tensors``, in place."""
        for tensor in tensors:
            dist.broadcast(tensor, src=0)

    def gather(self, tensor: Tensor) -> Tensor:
        """Every rank's ``tensor`` (the same shape on each) concatenated along dim 0, rank 0's first, on every rank."""
        parts = [torch.empty_like(tensor) for _ in range(self.size)]
        dist.all_gather(parts, tensor.contiguous())
        return torch.cat(parts)

    def gather_objects(self, value: T) -> list[T]:
        """Every rank's picklable ``value``, by rank, on every rank."""
        parts: list[Any] = [None] * self.size  # each rank's slot filled by all_gather_object
        dist.all_gather_object(parts, value)
        return parts

    def synced(self, stats: list[RunningMeanStd]) -> SyncedStatistics | Unsynced:
        """``stats`` kept identical on every rank (``SyncedStatistics``)."""
        return SyncedStatistics(self, stats)

    def restart_seed(self, seed: int) -> int | None:
        """The seed a resumed rank restarts its envs and random streams from (the checkpoint holds
        rank 0's); None where the checkpoint's own are restored (``LoneWorld``)."""
        return seed

    relaunch = "the same torchrun launch, -m "
    """What a resume command needs before ``fastppo train --resume``."""

    def gather_episodes(self, episodes: Episodes) -> Episodes:
        """Every rank's finished episodes, rank 0's first, on every rank (for the log and the
        checkpoint's recent returns)."""
        parts = self.gather_objects(episodes)
        by_agent: dict[str, list[float]] = {}
        by_group: dict[str, list[float]] = {}
        for part in parts:
            for merged, own in ((by_agent, part.by_agent), (by_group, part.by_group)):
                for name, returns in (own or {}).items():
                    merged.setdefault(name, []).extend(returns)
        return Episodes(
            [r for p in parts for r in p.returns],
            [n for p in parts for n in p.lengths],
            by_agent or None,
            by_group=by_group or None,
        )


@dataclass(frozen=True)
class LoneWorld(World):
    """The world of a process training alone: rank 0 of 1, whose collectives are identities (no
    arithmetic at all: a lone run's numbers are those it would have without a world)."""

    rank: int = 0
    size: int = 1
    device: torch.device = torch.device("cpu")
    relaunch = ""

    def seed(self, seed: int, num_envs: int, iteration: int = 0) -> int:
        return seed

    def sum_(self, tensor: Tensor) -> Tensor:
        return tensor

    def mean_(self, tensor: Tensor) -> Tensor:
        return tensor

    def max(self, value: int) -> int:
        return value

    def broadcast_(self, tensors: Iterable[Tensor]) -> None:
        pass

    def gather(self, tensor: Tensor) -> Tensor:
        return tensor

    def gather_objects(self, value: T) -> list[T]:
        return [value]

    def gather_episodes(self, episodes: Episodes) -> Episodes:
        return episodes

    def synced(self, stats: list[RunningMeanStd]) -> Unsynced:
        return Unsynced()

    def restart_seed(self, seed: int) -> None:
        return None


LONE = LoneWorld()


@contextmanager
def ranks(device: torch.device, timeout_s: float = RunConfig.collective_timeout) -> Iterator[World]:
    """``joined``, with the ``LoneWorld`` outside torchrun: the trainer's world."""
    with joined(device, timeout_s) as world:
        yield LONE if world is None else world


@contextmanager
def joined(device: torch.device, timeout_s: float = RunConfig.collective_timeout) -> Iterator[World | None]:
    """The World of this torchrun launch (None outside torchrun), its process group set up for the
    block and torn down after: NCCL for a CUDA ``device`` (``rank_device``), gloo for the CPU. A
    process group the caller set up already is used and left alone.

    A collective waits ``timeout_s`` for the other ranks. An error in the block reaches the user as
    one line naming this rank, said before the teardown tells the other ranks (``ReportedError``):
    this rank's FastPPOError, said once (a rank other than 0 first waits for rank 0 to say an error
    that every rank meets alike), or a collective that failed because another rank stopped or
    stalled (gloo's error; NCCL's watchdog ends the process itself)."""
    if launched_world_size() == 1:
        yield None
        return
    owned = not dist.is_initialized()
    missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if owned and missing:
        raise FastPPOError(
            f"WORLD_SIZE={launched_world_size()} is set but not {', '.join(missing)}: launch with torchrun, or unset "
            "WORLD_SIZE to train in one process"
        )
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's object collectives (the episodes) use the current device
    if owned:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend, device_id=device if device.type == "cuda" else None, timeout=timedelta(seconds=timeout_s)
        )
    rank = dist.get_rank()
    try:
        yield World(rank, dist.get_world_size(), device if dist.get_backend() == "nccl" else torch.device("cpu"))
    except FastPPOError as exc:
        if not owned:
            raise
        # Not longer than half the timeout: rank 0, waiting in a collective, must hear this rank first.
        if rank == 0 or not _stopped_while_waiting(min(RANK_ZERO_GRACE_S, timeout_s / 2)):
            _say(rank, str(exc))
        raise ReportedError(str(exc)) from None
    except RuntimeError as exc:  # gloo raises RuntimeError, NCCL DistBackendError (a RuntimeError)
        if not owned or not _raised_by_torch_distributed(exc):
            raise
        if any(word in str(exc).lower() for word in ("timed out", "timeout")):
            problem = (
                f"no answer from the other ranks within {timeout_s:g} s (--run.collective-timeout): a rank stalled "
                "or died"
            )
        else:
            problem = "another rank stopped the run: see its error, or torchrun's summary for a rank that died"
        _say(rank, problem)
        raise ReportedError(problem) from None
    finally:
        if owned:
            dist.destroy_process_group()


def _say(rank: int, message: str) -> None:
    print(f"fastppo: error: rank {rank}: {message}", file=sys.stderr, flush=True)


def _raised_by_torch_distributed(exc: BaseException) -> bool:
    """Whether ``exc`` came out of torch.distributed's code (a collective, FSDP), not the trainer's."""
    frames = traceback.extract_tb(exc.__traceback__)
    return (
        isinstance(exc, dist.DistError) or bool(frames) and f"torch{os.sep}distributed{os.sep}" in frames[-1].filename
    )


class SyncedStatistics:
    """Running statistics (observation normaliser, reward scaler) kept identical on every rank.

    Between merges each rank folds its own batches into its copy, starting from the statistics all
    ranks shared at the last merge (the base). ``merge`` sums the moments each rank added since
    (``RunningMeanStd.moments_since``) over the ranks and folds the sum into the base: Chan et al.'s
    parallel merge, so that every rank ends with the statistics of one process that saw every
    rank's batches.
    """

    def __init__(self, world: World, stats: list[RunningMeanStd]):
        self.world = world
        self.stats = stats
        self.rebase()

    def rebase(self) -> None:
        """Take the current statistics as the shared base (they must be equal on every rank: fresh,
        just merged, or just loaded from a checkpoint)."""
        self._bases = [rms.snapshot() for rms in self.stats]

    def merge(self) -> None:
        if not self.stats:
            return
        moments = [rms.moments_since(base) for rms, base in zip(self.stats, self._bases)]
        # NCCL sums on the GPU; the statistics may live on the CPU (host envs: envs.make.rollout_device).
        summed = (
            self.world.sum_(torch.cat(moments).to(self.world.device))
            .to(moments[0].device)
            .split([m.numel() for m in moments])
        )
        for rms, base, total in zip(self.stats, self._bases, summed):
            rms.fold_moments(base, total)
        self.rebase()


class Unsynced:
    """A lone process's statistics: nothing to merge with."""

    def rebase(self) -> None:
        pass

    def merge(self) -> None:
        pass

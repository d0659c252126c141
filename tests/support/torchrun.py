"""Processes as ranks: spawned workers that join a torchrun-like world, and the fastppo command under torchrun."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.multiprocessing as mp

from fastppo.training.distributed import World, joined


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def rank_of(rank: int, size: int, port: int) -> Iterator[World]:
    """This spawned process as rank ``rank`` of a torchrun-like launch (the variables torchrun sets)."""
    os.environ.update(
        WORLD_SIZE=str(size), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    with joined(torch.device("cpu"), timeout_s=60) as world:  # ranks out of step fail the test, not hang it
        yield world


def spawn(worker, out: Path, size: int = 2) -> None:
    mp.spawn(worker, args=(size, free_port(), str(out)), nprocs=size, join=True)


def torchrun(*argv: str, ranks: int = 2) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={ranks}",
        "-m",
        "fastppo",
        *argv,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def fastppo_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("fastppo: error")]

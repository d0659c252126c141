"""The opt-in speed layers' shared pieces: torch.compile's mode (``--compile``), and the CUDA-graph
plumbing shared by the rollout's policy step and the update's minibatch step (``--cudagraphs``):
warm-up calls on a side stream, capture, and the device check.

A captured graph replays the same kernels on the same memory: its inputs are static tensors the
caller copies new values into, and its outputs are the tensors the capture returned, overwritten
by every replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fastppo.errors import FastPPOError

COMPILE_MODE = "default"
"""torch.compile mode for the policy forward and the loss. Not "reduce-overhead": that would
capture CUDA graphs itself; ``--cudagraphs`` does its own capture of the *whole* step (forward,
backward, clip, optimizer), so the two flags stay separate layers that can be measured one by one.
Not "max-autotune": minutes of autotuning for 64-unit MLPs that gain nothing measurable."""


def check_cudagraphs(device: torch.device) -> None:
    if device.type != "cuda":
        raise FastPPOError(
            f"--cudagraphs needs --device cuda (CUDA graphs capture GPU kernels), but the run is on {device}: drop "
            "--cudagraphs or use --device cuda"
        )


def on_side_stream(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on a fresh CUDA stream, ordered after and before the current one: the
    warm-up calls before a capture must not run on the default stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    return out


def capture_graph(fn: Callable[..., Any], *args: Any) -> tuple[torch.cuda.CUDAGraph, Any]:
    """Capture ``fn(*args)`` (``args`` being static tensors) into a CUDA graph: returns the graph and
    ``fn``'s outputs, which each ``graph.replay()`` recomputes in place from the static inputs."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    return graph, out

"""``--device`` of every command (train, rlhf, dpo, reward-model), checked to exist on this
machine: a missing one fails in one line, not in a traceback from the first tensor moved to it."""

from __future__ import annotations

import torch

from fastppo.errors import FastPPOError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    # torch names more device types than it can train on here (meta holds no data; xla, hpu...
    # need their own packages): only the ones checked below get past this line.
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise FastPPOError(f"unknown device '{name}': use cpu, cuda, cuda:N, mps or auto")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise FastPPOError(f"--device {name} asked for, but torch sees no CUDA GPU: use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise FastPPOError(
            f"--device {name} asked for, but torch sees {torch.cuda.device_count()} CUDA GPU(s): use cuda:0 to "
            f"cuda:{torch.cuda.device_count() - 1}"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise FastPPOError(f"--device {name} asked for, but torch sees no Apple MPS GPU: use --device cpu")
    return device

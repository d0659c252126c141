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


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively: a CUDA GPU from Ampere on, or an x86 CPU with
    AVX512-BF16 or AMX. Elsewhere bf16 autocast is emulated, slower than fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type != "cpu":
        return False
    cpu = torch.cpu
    return any(
        getattr(cpu, check, lambda: False)() for check in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    )


def check_precision(precision: str, device: torch.device) -> None:
    """``--policy.precision`` on ``device``: bf16 only where it is native (``native_bf16``)."""
    if precision == "bf16" and not native_bf16(device):
        where = {"cpu": "a CPU without it (no AVX512-BF16 or AMX)", "cuda": "a GPU without it (before Ampere)"}
        raise FastPPOError(
            f"--policy.precision bf16 on {where.get(device.type, device.type)}: use --policy.precision fp32"
        )

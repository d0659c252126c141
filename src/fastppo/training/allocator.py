"""glibc malloc settings for a training process.

The update's temporaries (activations and gradients of every row of a minibatch; for a stack of
64 seeds, 8 MB each) are allocated and freed many times per iteration. With glibc's defaults a
block that large may be handed back to the OS when freed (by munmap, or by trimming the heap's
top) and the next allocation faults its pages in afresh: 2.7M page faults in a 64-seed CartPole
run of 32k steps per seed. Raising the mmap threshold to its maximum (32 MiB) and the trim
threshold far above it keeps freed blocks in the heap for reuse: 96k faults, the update 25% faster
(benchmarks/README.md). The cost is that the process keeps its peak heap until it exits, which a
training process does anyway. Setting either threshold alone does not help (the trim one alone
turns off glibc's own adaptive threshold and made that run twice as slow), so both are set.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = (1 << 31) - 1  # mallopt takes an int: in effect, never trim


def reuse_freed_memory() -> bool:
    """Keep freed large blocks in this process's heap (glibc on Linux; True when set). Left alone
    where the user set either threshold (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or their
    GLIBC_TUNABLES) or the C library has no ``mallopt`` (musl, macOS, Windows)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if (
        not sys.platform.startswith("linux")
        or "MALLOC_MMAP_THRESHOLD_" in os.environ
        or "MALLOC_TRIM_THRESHOLD_" in os.environ
    ):
        return False
    if "malloc.mmap_threshold" in tunables or "malloc.trim_threshold" in tunables:
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the process's own C library
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))

"""fastppo.training.allocator: freed large blocks stay in the heap, so allocating them again costs no page
faults (counted by the kernel: no timing involved)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fastppo.training.allocator import reuse_freed_memory

CHURN = """
import resource, sys
import numpy as np
if sys.argv[1] == "tuned":
    from fastppo.training.allocator import reuse_freed_memory
    assert reuse_freed_memory()
def churn():  # three 8 MB temporaries at a time, freed together, as an update's activations are
    for _ in range(10):
        blocks = [np.ones(1 << 20) for _ in range(3)]
        del blocks
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str, env: dict[str, str] | None = None) -> int:
    out = subprocess.run(
        [sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True, env=env
    ).stdout
    return int(out)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_blocks_are_reused_without_page_faults():
    default, tuned = page_faults("default"), page_faults("tuned")
    assert default > 5000  # glibc gave the blocks back and faulted them in again, round after round
    assert tuned < 100


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MALLOC_MMAP_THRESHOLD_", "131072"),
        ("MALLOC_TRIM_THRESHOLD_", "131072"),
        ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072"),
    ],
)
def test_a_users_own_thresholds_are_left_alone(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    assert not reuse_freed_memory()

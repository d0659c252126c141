"""Stop a run part-way and compare it with the run in one go: weights and metrics equal, bit for bit."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fastppo.training.logger import RunLogger

ITERATIONS = 6  # of 32 steps x 4 envs
UNTIMED = ("time", "charts/SPS")


def stop_after(monkeypatch: pytest.MonkeyPatch, iterations: int) -> None:
    """Deliver SIGINT to this process right after iteration ``iterations`` is logged."""
    log = RunLogger.log

    def log_then_signal(self, step, metrics):
        log(self, step, metrics)
        if len(self.history) == iterations:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(RunLogger, "log", log_then_signal)


def metrics(run_dir: Path) -> list[dict]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(UNTIMED)} for r in records]


def assert_same_run(a: Path, b: Path) -> None:
    wa, wb = load_file(str(a / "policy.safetensors")), load_file(str(b / "policy.safetensors"))
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key
    ma, mb = metrics(a), metrics(b)
    assert len(ma) == ITERATIONS
    assert ma == mb

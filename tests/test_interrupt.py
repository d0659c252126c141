"""Ctrl-C / SIGTERM during training: the current iteration finishes, a checkpoint is saved, the
process says how to resume and exits 128 + the signal (a real subprocess, a real signal)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

import fastppo
from fastppo.checkpoint import load_checkpoint
from fastppo.cli import main
from fastppo.logger import RunLogger
from fastppo.trainer import StopRequest


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_saves_a_checkpoint_and_exits_128_plus_the_signal(tmp_path, sig):
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "fastppo.cli", "train", "CartPole-v1", "--run-dir", str(run),
            "--total-timesteps", "100000000", "--progress", "false", "--checkpoint-every", "0"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err  # 130 / 143, as a shell reports a process the signal killed
    assert f"fastppo train --resume {run}" in err
    logged = [json.loads(line) for line in metrics.read_text().splitlines()]
    checkpoint = load_checkpoint(run)
    # The checkpoint is the iteration that was running when the signal came, and the last logged.
    assert checkpoint.global_step == logged[-1]["global_step"]
    assert checkpoint.iteration == len(logged)
    assert (run / "policy.safetensors").exists()  # the agent so far, for fastppo eval
    assert "steps" in out


def test_a_run_stopped_by_a_signal_resumes(tmp_path):
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "fastppo.cli", "train", "CartPole-v1", "--run-dir", str(run),
            "--total-timesteps", "100000000", "--progress", "false", "--tensorboard", "false"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = run / "metrics.jsonl"
    while not metrics.exists() or not metrics.read_text():
        assert proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    checkpoint = load_checkpoint(run)
    step, batch = checkpoint.global_step, checkpoint.config.batch_size
    assert main(["train", "--resume", str(run), "--total-timesteps", str(step + batch)]) == 0
    steps = [json.loads(line)["global_step"] for line in metrics.read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == step + batch


def test_the_api_returns_an_interrupted_agent_that_says_so(tmp_path, monkeypatch):
    log = RunLogger.log
    monkeypatch.setattr(RunLogger, "log", lambda self, step, metrics: (log(self, step, metrics), signal.raise_signal(signal.SIGINT)))
    tiny = {"total_timesteps": 512, "num_envs": 2, "num_steps": 64, "progress": False, "tensorboard": False}
    agent = fastppo.train("CartPole-v1", run_dir=tmp_path / "stopped", **tiny)
    assert agent.interrupted_by == signal.SIGINT and len(agent.history) == 1
    monkeypatch.undo()
    assert fastppo.train("CartPole-v1", run_dir=tmp_path / "finished", **tiny).interrupted_by is None


def test_a_second_signal_stops_at_once_but_not_a_repeat_in_a_seeds_workers_grace(monkeypatch):
    """A single run: the second signal raises KeyboardInterrupt at once. A ``--seeds`` worker
    (repeat_grace 1 s) takes a repeat within the grace for the same request (a scheduler's SIGTERM
    and its parent's passing it on), and a later one as a second."""
    with StopRequest(enabled=True) as stop:
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested and stop.signal == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
    monkeypatch.setattr(StopRequest, "repeat_grace", 1.0)
    with StopRequest(enabled=True) as stop:
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # within the grace: the same request
        assert stop.signal == signal.SIGTERM
        stop._since -= 2.0  # the grace has passed
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are put back

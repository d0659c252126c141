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
from fastppo.cli.main import main
from fastppo.errors import Interrupted
from fastppo.training.checkpoint import load_checkpoint
from fastppo.training.logger import RunLogger
from fastppo.training.signals import StopRequest
from tests.support.paths import ROOT


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
    monkeypatch.setattr(
        RunLogger, "log", lambda self, step, metrics: (log(self, step, metrics), signal.raise_signal(signal.SIGINT))
    )
    tiny = {"total_timesteps": 512, "num_envs": 2, "num_steps": 64, "progress": False, "tensorboard": False}
    agent = fastppo.train("CartPole-v1", run_dir=tmp_path / "stopped", **tiny)
    assert agent.interrupted_by == signal.SIGINT and len(agent.history) == 1
    monkeypatch.undo()
    assert fastppo.train("CartPole-v1", run_dir=tmp_path / "finished", **tiny).interrupted_by is None


def test_a_second_signal_stops_at_once_where_the_state_is_cut_but_not_a_repeat_in_a_seeds_workers_grace(monkeypatch):
    """A single run: a second signal while the loop would lose work (``at_once``) raises
    ``Interrupted`` with that signal and what is lost; where the state is whole it waits for the
    save. A ``--seeds`` worker (repeat_grace 1 s) takes a repeat within the grace for the same
    request (a scheduler's SIGTERM and its parent's passing it on), and a later one as a second."""
    with StopRequest(enabled=True) as stop:
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested and stop.signal == signal.SIGTERM
        signal.raise_signal(signal.SIGINT)  # the state is whole: the loop goes on to its save
        stop.at_once, stop.lost = True, "the 2 iterations since checkpoint 000003 are lost"
        with pytest.raises(Interrupted) as raised:
            signal.raise_signal(signal.SIGTERM)
        assert (
            raised.value.signum == signal.SIGTERM
            and raised.value.note == "SIGTERM again: stopped at once; the 2 iterations since checkpoint 000003 are lost"
        )
    monkeypatch.setattr(StopRequest, "repeat_grace", 1.0)
    with StopRequest(enabled=True) as stop:
        stop.at_once = True
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # within the grace: the same request
        assert stop.signal == signal.SIGTERM
        stop._since -= 2.0  # the grace has passed
        with pytest.raises(Interrupted):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are put back


def test_a_second_signal_cuts_the_iteration_short_and_says_what_is_lost(tmp_path, monkeypatch, capsys):
    """Ctrl-C twice in one iteration's update: the run stops there, without a traceback (the CLI
    prints the note), its newest checkpoint kept, and says which iterations are lost."""
    import fastppo.training.trainer

    update, calls = fastppo.training.trainer.ppo_update, []

    def twice_in_the_fourth(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
        return update(*args, **kwargs)

    monkeypatch.setattr(fastppo.training.trainer, "ppo_update", twice_in_the_fourth)
    run = tmp_path / "run"
    assert main(["train", "CartPole-v1", "--num-envs", "2", "--num-steps", "64", "--total-timesteps", "2048",
                 "--checkpoint-every", "2", "--no-progress", "--no-tensorboard", "--run-dir",
                 str(run)]) == 130  # fmt: skip
    err = capsys.readouterr().err
    assert err == (
        "fastppo: SIGINT again: stopped at once; the 2 iterations since checkpoint 000002 are lost; resume "
        f"with: fastppo train --resume {run}\n"
    )
    assert load_checkpoint(run).iteration == 2


def test_a_second_signal_after_the_update_waits_for_the_save(tmp_path, monkeypatch):
    log = RunLogger.log
    monkeypatch.setattr(
        RunLogger,
        "log",
        lambda self, step, metrics: (
            log(self, step, metrics),
            signal.raise_signal(signal.SIGTERM),
            signal.raise_signal(signal.SIGTERM),
        ),
    )
    tiny = {
        "total_timesteps": 512,
        "num_envs": 2,
        "num_steps": 64,
        "progress": False,
        "tensorboard": False,
        "checkpoint_every": 0,
    }
    agent = fastppo.train("CartPole-v1", run_dir=tmp_path / "run", **tiny)
    assert agent.interrupted_by == signal.SIGTERM and load_checkpoint(tmp_path / "run").iteration == 1


def test_a_double_sigterm_exits_143_without_a_traceback(tmp_path):
    """Two real SIGTERMs a moment apart during a long iteration: exit 143, no traceback, and either
    the second cut the iteration short (one line says what is lost) or it came at the save, which
    then ended the run with the iteration's checkpoint."""
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "fastppo.cli", "train", "CartPole-v1", "--run-dir", str(run), "--num-envs", "4",
            "--num-steps", "2048", "--total-timesteps", "100000000", "--no-progress", "--no-tensorboard",
            "--checkpoint-every", "1"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (run / "checkpoints").is_dir():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    logged = [json.loads(line)["global_step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    if "stopped at once" in err:
        assert [line for line in err.splitlines() if "stopped at once" in line] == [
            line for line in err.splitlines() if line.startswith("fastppo:")
        ], err
        assert "iteration since checkpoint" in err or "iterations since checkpoint" in err
    else:
        assert load_checkpoint(run).global_step == logged[-1]


def test_ctrl_c_during_start_up_is_one_line_and_exit_130(tmp_path):
    # Sent once the command says it is building its env (which then takes a minute): in start-up
    # whatever the machine's load, not after a sleep that a slow start-up may outlast.
    argv = [
        sys.executable,
        "-m",
        "fastppo.cli",
        "train",
        "tests.support.fake_envs:SlowToBuildEnv",
        "--run-dir",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline() == "fastppo test: building the env\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=50)  # long before the env's minute is over
    assert proc.returncode == 130
    assert len(err.splitlines()) == 1 and err.startswith("fastppo: SIGINT"), err
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_ctrl_c_that_start_up_drops_still_stops_the_command(tmp_path):
    """A SIGINT whose KeyboardInterrupt Python drops (its handler ran inside a finalizer, as it
    may anywhere in start-up's imports and env building) stops the run before its first
    iteration; it trained to its end."""
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "fastppo.cli", "train", "tests.support.fake_envs:SignalLosingEnv", "--run-dir",
            str(run), "--no-progress", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "64",
            "--no-tensorboard"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 130, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert lines[-1] == "fastppo: SIGINT during start-up: stopped before the first iteration, nothing was trained", (
        done.stderr
    )
    assert [line for line in lines if line.startswith("fastppo:")] == lines[
        -1:
    ]  # above it, only Python's "Exception ignored in" report
    assert not (run / "checkpoints").exists() and (run / "metrics.jsonl").read_text() == ""  # not one iteration


def test_a_stopped_run_on_user_code_says_the_resume_command_that_works(tmp_path, monkeypatch, capsys):
    """A run folder never makes fastppo import code, so a user-code run resumes with its env named
    again: the stop message gives that command, and it resumes."""
    log = RunLogger.log
    monkeypatch.setattr(
        RunLogger, "log", lambda self, step, metrics: (log(self, step, metrics), signal.raise_signal(signal.SIGINT))
    )
    run, env = tmp_path / "run", "tests.support.fake_envs:TargetEnv"
    tiny = ["--num-envs", "2", "--num-steps", "16", "--total-timesteps", "128", "--no-progress", "--no-tensorboard"]
    assert main(["train", env, *tiny, "--run-dir", str(run)]) == 130
    assert f"fastppo: resume with: fastppo train --resume {run} {env}\n" in capsys.readouterr().err
    monkeypatch.setattr(RunLogger, "log", log)
    assert main(["train", "--resume", str(run), env]) == 0
    assert load_checkpoint(run).global_step == 128


def test_a_signal_once_the_command_is_done_exits_with_its_code_without_a_traceback():
    """torchrun ends the other ranks of a failed launch with SIGTERM: one that arrives while a
    finished command shuts down must not print a traceback (it did, from threading._shutdown)."""
    script = (
        "import atexit, os, signal, time\n"
        "import fastppo.cli.main as cli\n"
        "cli.main = lambda: 2\n"
        "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(5)))\n"
        "cli.console()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (2, "")

"""Many seeds of one config as worker processes: ``fastppo train ENV --seeds 1-10 --workers K``."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import fastppo
from fastppo.cli.main import main
from fastppo.errors import FastPPOError
from fastppo.experiments import seeds as seeds_module
from fastppo.experiments.seeds import parse_seeds, seed_list
from fastppo.training.checkpoint import load_checkpoint

TINY = ["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "512", "--no-tensorboard", "--no-progress"]


@pytest.mark.parametrize(
    ("spec", "seeds"),
    [
        ("1-4", [1, 2, 3, 4]),
        ("1,3,5", [1, 3, 5]),
        ("1-3,8, 0", [1, 2, 3, 8, 0]),
        ("7", [7]),
        ("4294967295", [4294967295]),
    ],
)
def test_seed_specs(spec, seeds):
    assert parse_seeds(spec) == seeds


def test_the_most_seeds_a_command_takes_are_parsed_in_order():
    assert parse_seeds("1-5000,5001-10000") == list(range(1, 10001))
    assert seed_list(range(10000)) == list(range(10000))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("a", "--seeds expects whole numbers >= 0 and ranges like 1-10 or 1,3,5, got 'a'"),
        ("-3", "--seeds expects whole numbers >= 0 and ranges like 1-10 or 1,3,5, got '-3'"),
        ("1.5", "--seeds expects whole numbers >= 0 and ranges like 1-10 or 1,3,5, got '1.5'"),
        ("1-", "--seeds expects whole numbers >= 0 and ranges like 1-10 or 1,3,5, got '1-'"),
        ("9" * 30, "--seeds expects whole numbers >= 0"),
        ("3-1", "--seeds range 3-1 runs backwards: write 1-3"),
        ("4294967296", "--seeds must be in [0, 4294967295] (2**32 - 1), got 4294967296"),
        ("1-4294967296", "--seeds must be in [0, 4294967295] (2**32 - 1), got 4294967296"),
        (
            "1-4294967295",
            "--seeds 1-4294967295 names 4294967295 seeds, more than the 10000 one command trains: split them "
            "over several commands, each with its own --run-dir",
        ),
        ("1-20000,20001-40000", "--seeds 1-20000,20001-40000 names 40000 seeds, more than the 10000"),
        ("1-10000,0", "--seeds 1-10000,0 names 10001 seeds, more than the 10000"),
        ("1-4,3", "--seeds 1-4,3 names seed 3 twice: name each seed once"),
        ("1-5000,4000-6000", "--seeds 1-5000,4000-6000 names seed 4000 twice: name each seed once"),
    ],
)
def test_bad_seed_specs_are_one_line_errors(spec, message):
    with pytest.raises(FastPPOError) as error:
        parse_seeds(spec)
    assert str(error.value).startswith(message)


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        (range(1, 2**32), "seeds: more than the 10000 seeds one call trains"),
        ([1, 2, 1], "seeds names seed 1 twice"),
        ([-1], "must be in [0"),
    ],
)
def test_bad_seed_lists_of_the_api_are_errors(seeds, message):
    with pytest.raises(FastPPOError) as error:
        seed_list(seeds)
    assert message in str(error.value)


def without_times(run_dir: Path) -> list[dict]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("time", "charts/SPS"))} for r in records]


def test_each_seed_trains_exactly_as_its_single_run(tmp_path, capsys):
    assert (
        main(["train", "CartPole-v1", *TINY, "--seeds", "1-2", "--workers", "2", "--run-dir", str(tmp_path / "seeds")])
        == 0
    )
    out = capsys.readouterr().out
    assert "seed 1:" in out and "seed 2:" in out and f"fastppo report {tmp_path / 'seeds'}" in out
    for seed in (1, 2):
        assert (
            main(["train", "CartPole-v1", *TINY, "--seed", str(seed), "--run-dir", str(tmp_path / f"single_{seed}")])
            == 0
        )
        many, single = tmp_path / "seeds" / f"seed_{seed}", tmp_path / f"single_{seed}"
        assert without_times(many) == without_times(single)
        weights, reference = load_file(str(many / "policy.safetensors")), load_file(str(single / "policy.safetensors"))
        assert all((weights[k] == reference[k]).all() for k in reference)
    assert without_times(tmp_path / "seeds" / "seed_1") != without_times(tmp_path / "seeds" / "seed_2")


def test_a_seeds_job_prints_its_progress_while_workers_train(tmp_path, capsys, monkeypatch):
    # Worker processes show no bar: the parent prints a line every PROGRESS_EVERY seconds (10 by
    # default) from the steps the workers report. Here every pass of its loop, every report.
    monkeypatch.setattr(seeds_module, "PROGRESS_EVERY", 0.0)
    monkeypatch.setattr(seeds_module, "REPORT_EVERY", 0.0)  # forked workers inherit it
    tiny = [*TINY[:4], "--total-timesteps", "4096", *TINY[6:]]
    assert (
        main(["train", "CartPole-v1", *tiny, "--seeds", "1-2", "--workers", "2", "--run-dir", str(tmp_path / "seeds")])
        == 0
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("fastppo: seeds: ")]
    assert lines[0].startswith("fastppo: seeds: 0/2 done, 0 running, elapsed ")
    with_steps = [
        re.fullmatch(
            r"fastppo: seeds: [01]/2 done, [12] running \((seed \d at step \d+/4096(, )?)+\), elapsed \d+ s", line
        )
        for line in lines
    ]
    assert any(with_steps), lines


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "1-2", "--seed", "3"], "keep one"),
        (["--seeds", "1-2", "--workers", "0"], "--workers must be >= 1"),
        (["--seeds", "x"], "ranges like"),
    ],
)
def test_bad_seeds_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path):
    assert main(["train", "CartPole-v1", *TINY, *argv, "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


API_TINY = {"num_envs": 2, "num_steps": 64, "total_timesteps": 512, "tensorboard": False, "progress": False}


@pytest.mark.parametrize(
    "backend, workers, seeds",
    [("tensor", 1, [2, 1]), ("tensor", 2, [3, 1, 4, 2]), ("sync", 1, [2, 1])],
    ids=["stack", "stacks", "workers"],
)
def test_train_seeds_api_returns_each_seeds_agent(tmp_path, capsys, backend, workers, seeds):
    # fastppo.train_seeds runs what `fastppo train ENV --seeds` runs: the agents, in the order the
    # seeds are given (not sorted), are those their run folders hold, each with its own history;
    # each seed's printed line names its own folder and its own return.
    agents = fastppo.train_seeds(
        "CartPole-v1", seeds, run_dir=tmp_path / "s", workers=workers, backend=backend, **API_TINY
    )
    assert [a.config.run.seed for a in agents] == seeds
    assert [a.run_dir for a in agents] == [tmp_path / "s" / f"seed_{seed}" for seed in seeds]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("fastppo: seed ")]
    assert sorted(lines) == sorted(
        (
            f"fastppo: seed {a.config.run.seed}: "
            f"{sum(a.episode_returns[-20:]) / len(a.episode_returns[-20:]):.1f} mean return over the last 20 "
            f"episodes ({a.run_dir})"
        )
        for a in agents
    )
    for agent in agents:
        saved = load_file(str(agent.run_dir / "policy.safetensors"))
        assert all(torch.equal(v.detach().cpu(), saved[f"policy.{k}"]) for k, v in agent.policy.state_dict().items())
        logged = [json.loads(line) for line in (agent.run_dir / "metrics.jsonl").read_text().splitlines()]
        assert [r["global_step"] for r in agent.history] == [r["global_step"] for r in logged] == [128, 256, 384, 512]
        assert [r["losses/value_loss"] for r in agent.history] == [r["losses/value_loss"] for r in logged]
        assert agent.episode_returns and all(r > 0 for r in agent.episode_returns)
    assert len({a.history[-1]["losses/value_loss"] for a in agents}) == len(seeds)


def test_train_seeds_api_errors(tmp_path):
    with pytest.raises(FastPPOError, match="--seeds and --seed both name the seed: keep one"):
        fastppo.train_seeds("CartPole-v1", [1, 2], seed=3, **API_TINY)
    with pytest.raises(FastPPOError, match="--seeds names no seed: give at least one"):
        fastppo.train_seeds("CartPole-v1", [], **API_TINY)
    with pytest.raises(FastPPOError, match="runs backwards"):
        fastppo.train_seeds("CartPole-v1", "2-1", **API_TINY)
    with pytest.raises(FastPPOError, match="2 of 2 seeds failed; seed 1: the cnn encoder needs"):
        fastppo.train_seeds("CartPole-v1", [1, 2], run_dir=tmp_path / "bad", workers=2, encoder="cnn", **API_TINY)
    assert not (tmp_path / "bad").exists()


def seeds_job(parent: Path, seeds: str, *flags: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "fastppo.cli", "train", "CartPole-v1", "--backend", "sync", "--num-envs", "2",
            "--num-steps", "64", "--no-progress", "--no-tensorboard", "--seeds", seeds, "--workers", "2", "--run-dir",
            str(parent), *flags]  # fmt: skip
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )  # a group of its own: the signal reaches the parent alone


def wait_for(proc: subprocess.Popen, ready) -> None:
    deadline = time.monotonic() + 60
    while not ready():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)


def logged_steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["global_step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_sigint_to_the_parent_alone_stops_every_worker_and_starts_no_seed(tmp_path):
    parent = tmp_path / "seeds"
    proc = seeds_job(parent, "1-6", "--total-timesteps", "100000000", "--checkpoint-every", "0")
    wait_for(
        proc,
        lambda: all(
            (parent / f"seed_{s}" / "metrics.jsonl").is_file() and len(logged_steps(parent / f"seed_{s}")) >= 2
            for s in (1, 2)
        ),
    )
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    for seed in (1, 2):  # each worker's seed: a checkpoint where it stopped, and said so
        run = parent / f"seed_{seed}"
        assert load_checkpoint(run).global_step == logged_steps(run)[-1]
        assert f"seed {seed}: stopped at step {logged_steps(run)[-1]}" in out
    for seed in (3, 4, 5, 6):
        assert not (parent / f"seed_{seed}").exists() and f"seed {seed}: not started" in out
    assert (
        "final returns" not in out
        and f"6 of the 6 seeds are not finished (stopped or not started): fastppo train --resume {parent}" in out
    )


def test_a_sigterm_stops_a_job_of_short_seeds_and_a_resume_trains_the_rest(tmp_path, capsys):
    parent, seeds = tmp_path / "seeds", range(1, 9)
    proc = seeds_job(parent, "1-8", "--total-timesteps", "512")
    wait_for(proc, lambda: sum((parent / f"seed_{s}" / "policy.safetensors").is_file() for s in seeds) >= 2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    started = [s for s in seeds if (parent / f"seed_{s}").exists()]
    assert len(started) < 6, out  # the job stopped: the seeds after stay untouched
    for (
        seed
    ) in started:  # each seed it reached ended with a checkpoint, finished or stopped (one in its start-up: at step 0)
        assert (
            load_checkpoint(parent / f"seed_{seed}").global_step == ([0] + logged_steps(parent / f"seed_{seed}"))[-1]
        ), out
    assert f"seed {max(seeds)}: not started" in out
    assert main(["train", "--resume", str(parent)]) == 0
    assert "not started yet" in capsys.readouterr().out
    for seed in seeds:  # every seed now a finished run: its whole budget, its agent
        run = parent / f"seed_{seed}"
        assert (
            logged_steps(run) == [128, 256, 384, 512]
            and load_checkpoint(run).global_step == 512
            and (run / "policy.safetensors").is_file()
        )
    assert main(["train", "--resume", str(parent)]) == 2
    assert f"every seed in {parent} is finished" in capsys.readouterr().err


def test_a_resume_deletes_only_what_a_seed_that_never_checkpointed_wrote_once_every_check_passed(tmp_path, capsys):
    """A seed killed in its start-up left its first files and an unfinished save, no checkpoint: a
    resume starts it again, deleting those, never a file of the user's, and nothing at all when it
    refuses (it deleted the whole folder, user files in it, then refused a flag)."""
    parent = tmp_path / "seeds"
    argv = [
        "train",
        "CartPole-v1",
        "--backend",
        "sync",
        "--seeds",
        "1-2",
        "--workers",
        "1",
        *TINY,
        "--total-timesteps",
        "256",
        "--run-dir",
        str(parent),
    ]
    assert main(argv) == 0
    seed = parent / "seed_2"
    shutil.rmtree(seed / "checkpoints")
    (seed / "agent.json").unlink()
    (seed / "policy.safetensors").unlink()
    (seed / "checkpoints" / ".tmp-000001-4242").mkdir(parents=True)
    (seed / "checkpoints" / ".tmp-000001-4242" / "trainer.json").write_text("{")
    (seed / "notes.txt").write_text("the user's")
    before = {str(p.relative_to(parent)): p.read_bytes() if p.is_file() else None for p in sorted(parent.rglob("*"))}
    capsys.readouterr()
    for flags, message in (
        (["--learning-rate", "0.1"], "cannot change ppo.learning_rate when resuming"),
        ([], f"{seed} holds notes.txt, which no fastppo run wrote: move it out of the folder"),
    ):
        assert main(["train", "--resume", str(parent), *flags]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
        assert {
            str(p.relative_to(parent)): p.read_bytes() if p.is_file() else None for p in sorted(parent.rglob("*"))
        } == before
    (seed / "notes.txt").unlink()
    assert main(["train", "--resume", str(parent)]) == 0
    assert "1 not started yet" in capsys.readouterr().out
    assert logged_steps(seed) == [128, 256] and sorted(p.name for p in (seed / "checkpoints").iterdir()) == [
        "000002",
        "latest",
    ]

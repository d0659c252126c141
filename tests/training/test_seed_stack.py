"""Seeds trained in one process as one batched computation (fastppo.training.seed_stack):
``fastppo train ENV --backend tensor --seeds 1-64``."""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fastppo import evaluate, load
from fastppo.cli.main import main
from fastppo.envs.tensor import make_tensor_env
from fastppo.errors import FastPPOError
from fastppo.training.checkpoint import load_checkpoint
from fastppo.training.optim import FusedAdam

TINY = [
    "--backend",
    "tensor",
    "--num-envs",
    "4",
    "--num-steps",
    "64",
    "--total-timesteps",
    "1024",
    "--no-tensorboard",
    "--no-progress",
]
COMPARED = (
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/grad_norm",
    "losses/explained_variance",
)
# Small enough that seeds 3 and 5 stop their epochs at different points (3 after 1 epoch of its
# first update, 5 after 2) and adapt their betas apart (their first updates halve 5's, double 3's).
TARGET_KL = ["--target-kl", "0.003"]
KL_OBJECTIVE = ["--objective", "kl", "--kl-target", "0.003"]
PER_SEED_STOPS = [*TARGET_KL, *KL_OBJECTIVE]
ONE_STACK = ["--workers", "1"]  # every seed in this process (else one process per CPU core, each a stack of its share)


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    ("env_id", "extra"),
    [
        ("CartPole-v1", []),
        # Gaussian head, per-seed observation and reward statistics, minibatches of unequal size.
        ("Pendulum-v1", ["--normalize-obs", "--normalize-reward", "--num-minibatches", "8"]),
        # One trunk under both heads.
        ("CartPole-v1", ["--policy.shared-trunk"]),
        # Recurrent: each seed's env sequences, shuffled by env, re-run from their stored states
        # with the resets the rollout saw; an LSTM per head, or one GRU under a shared trunk.
        ("CartPoleNoVelocity-v1", ["--policy.memory", "lstm", "--num-minibatches", "2"]),
        ("CartPoleNoVelocity-v1", ["--policy.memory", "gru", "--policy.shared-trunk", "--num-minibatches", "2"]),
    ],
)
def test_each_stacked_seed_trains_as_its_single_run(tmp_path, env_id, extra):
    """Same draws, same minibatches, same updates: equal up to float summation order (a batched
    matmul sums in another order than the single run's fused forward)."""
    assert (
        main(["train", env_id, *TINY, *extra, "--seeds", "3,5", *ONE_STACK, "--run-dir", str(tmp_path / "stack")]) == 0
    )
    for seed in (3, 5):
        assert (
            main(["train", env_id, *TINY, *extra, "--seed", str(seed), "--run-dir", str(tmp_path / f"single_{seed}")])
            == 0
        )
        stacked, single = records(tmp_path / "stack" / f"seed_{seed}"), records(tmp_path / f"single_{seed}")
        assert [r["global_step"] for r in stacked] == [r["global_step"] for r in single]
        for a, b in zip(stacked, single):
            assert ("charts/episodic_return" in a) == ("charts/episodic_return" in b)
            assert a.get("charts/episodic_return", 0.0) == pytest.approx(b.get("charts/episodic_return", 0.0), rel=1e-5)
            for name in COMPARED:
                assert math.isclose(a[name], b[name], rel_tol=1e-3, abs_tol=1e-5), (seed, name, a[name], b[name])
        stacked_agent, single_agent = load(tmp_path / "stack" / f"seed_{seed}"), load(tmp_path / f"single_{seed}")
        assert stacked_agent.config.run.seed == seed
        for (name, p), q in zip(stacked_agent.policy.named_parameters(), single_agent.policy.parameters()):
            assert torch.allclose(p, q, atol=1e-5), name
        if single_agent.obs_rms is not None:
            assert torch.allclose(stacked_agent.obs_rms.mean, single_agent.obs_rms.mean)
            assert torch.allclose(stacked_agent.obs_rms.var, single_agent.obs_rms.var)


def test_seed_folders_are_ordinary_runs(tmp_path, capsys):
    parent = tmp_path / "stack"
    assert main(["train", "CartPole-v1", *TINY, "--seeds", "1-3", "--workers", "2", "--run-dir", str(parent)]) == 0
    out = capsys.readouterr().out
    assert "3 seeds as 2 batched runs, one process each" in out and f"fastppo report {parent}" in out
    assert sorted(p.name for p in parent.iterdir()) == [
        "seed_1",
        "seed_2",
        "seed_3",
        "seeds.json",
    ]  # seeds.json: the job's plan, for a resume
    for seed in (1, 2, 3):
        assert (parent / f"seed_{seed}" / "policy.safetensors").exists()
        assert main(["eval", str(parent / f"seed_{seed}"), "--episodes", "2"]) == 0
    capsys.readouterr()
    # The parent folder: eval plays each seed's agent, plot draws the seeds, load names a seed to give.
    assert main(["eval", str(parent), "--episodes", "2", "--seed", "3", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["run_dir"] for row in rows] == [str(parent / f"seed_{seed}") for seed in (1, 2, 3)]
    assert rows[0]["returns"] == evaluate(parent / "seed_1", episodes=2, seed=3).returns
    assert main(["eval", str(parent), "--episodes", "2", "--seed", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    means = [row["mean_return"] for row in rows]
    assert lines[-1].startswith(
        f"fastppo: mean return over the 3 seeds {sum(means) / 3:.1f} (min {min(means):.1f}, max {max(means):.1f})"
    )
    assert (
        main(["plot", str(parent), "--out", str(parent / "seeds.png")]) == 0
        and (parent / "seeds.png").stat().st_size > 0
    )
    with pytest.raises(
        FastPPOError, match=f"{parent} holds the runs of 3 seeds .*give one of them, e.g. {parent / 'seed_1'}"
    ):
        load(parent)
    # Different seeds learn differently.
    finals = {json.dumps(records(parent / f"seed_{seed}")[-1]["losses/value_loss"]) for seed in (1, 2, 3)}
    assert len(finals) == 3


def test_seeds_split_between_processes_train_as_in_one_stack(tmp_path):
    """The default on CPU cores: one process per core, each a stack of its share of the seeds on
    one thread (seeds 1 | 2-3 here). Each seed trains as in one stack of all of them, up to float
    rounding (a stack's width changes its summation order)."""
    flags = [*TINY, "--normalize-obs", "--normalize-reward", "--seeds", "1-3"]
    assert main(["train", "CartPole-v1", *flags, "--workers", "2", "--run-dir", str(tmp_path / "split")]) == 0
    assert (
        main(
            ["train", "CartPole-v1", *flags, *ONE_STACK, "--run.torch-threads", "1", "--run-dir", str(tmp_path / "one")]
        )
        == 0
    )
    for seed in (1, 2, 3):
        split, one = tmp_path / "split" / f"seed_{seed}", tmp_path / "one" / f"seed_{seed}"
        assert load(split).config.run.torch_threads == 1  # each process's share of the cores, saved for a resume
        assert load_checkpoint(split).meta["stack"] == ([1] if seed == 1 else [2, 3])
        assert (
            [r["global_step"] for r in records(split)]
            == [r["global_step"] for r in records(one)]
            == [256, 512, 768, 1024]
        )
        for a, b in zip(records(split), records(one)):
            assert a.get("charts/episodic_return", 0.0) == pytest.approx(b.get("charts/episodic_return", 0.0), rel=1e-5)
            for name in COMPARED:
                assert math.isclose(a[name], b[name], rel_tol=1e-3, abs_tol=1e-5), (seed, name, a[name], b[name])
        for p, q in zip(load(split).policy.parameters(), load(one).policy.parameters()):
            assert torch.allclose(p, q, atol=1e-5)


def test_seeds_split_between_processes_resume_exactly(tmp_path, capsys):
    """A run of stacks in processes that stopped at different iterations (seeds 1-2 in one
    process, 3-4 in the other, each with only its newest checkpoint) resumes each seed from its
    own, bit for bit as the run that was not stopped."""
    flags = [*TINY, "--checkpoint-every", "1", "--keep-checkpoints", "10", "--seeds", "1-4", "--workers", "2"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert main(["train", "CartPole-v1", *flags, "--run-dir", str(whole)]) == 0
    shutil.copytree(whole, stopped)
    for seed in (1, 2, 3, 4):
        kept = 2 if seed <= 2 else 3
        for checkpoint in (stopped / f"seed_{seed}" / "checkpoints").iterdir():
            if checkpoint.name.isdigit() and int(checkpoint.name) != kept:
                shutil.rmtree(checkpoint)
        (stopped / f"seed_{seed}" / "checkpoints" / "latest").write_text(f"{kept:06d}\n")
    capsys.readouterr()
    assert main(["train", "--resume", str(stopped)]) == 0
    assert "resuming the 4 seeds" in capsys.readouterr().out
    for seed in (1, 2, 3, 4):
        assert learning(stopped / f"seed_{seed}") == learning(whole / f"seed_{seed}")
        for p, q in zip(
            load(stopped / f"seed_{seed}").policy.parameters(), load(whole / f"seed_{seed}").policy.parameters()
        ):
            assert torch.equal(p, q)


@pytest.mark.parametrize(
    ("sig", "group"),
    [(signal.SIGTERM, False), (signal.SIGINT, True), (signal.SIGTERM, True)],
    ids=["kill PID", "Ctrl-C", "scheduler"],
)
def test_a_signal_stops_every_worker_with_a_checkpoint(tmp_path, sig, group):
    """``kill PID`` reaches only the process the user started, which passes it on; a terminal's
    Ctrl-C reaches the whole process group; a job scheduler's SIGTERM reaches every process, and
    the workers also get it passed on. Each way, each worker saves its seeds' checkpoints after its
    current iteration (not at once, which would leave no checkpoint: --checkpoint-every 0), and
    the run exits 128 + the signal."""
    parent = tmp_path / "stack"
    argv = [sys.executable, "-m", "fastppo.cli", "train", "CartPole-v1", "--backend", "tensor", "--num-envs", "4",
            "--num-steps", "64", "--total-timesteps", "100000000", "--no-progress", "--no-tensorboard",
            "--checkpoint-every", "0", "--seeds", "1-4", "--workers", "2", "--run-dir", str(parent)]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )  # a group of its own, as a shell's job
    metrics = [parent / f"seed_{seed}" / "metrics.jsonl" for seed in (1, 2, 3, 4)]
    deadline = time.monotonic() + 60
    while not all(m.exists() and m.read_text().count("\n") >= 2 for m in metrics):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    for seed in (1, 2, 3, 4):
        run = parent / f"seed_{seed}"
        assert load_checkpoint(run).global_step == records(run)[-1]["global_step"] > 256
    assert f"fastppo train --resume {parent}" in err
    assert (
        main(
            [
                "train",
                "--resume",
                str(parent),
                "--total-timesteps",
                str(max(records(parent / f"seed_{s}")[-1]["global_step"] for s in (1, 2, 3, 4)) + 256),
            ]
        )
        == 0
    )


def test_a_worker_that_dies_is_a_failed_seed_and_the_others_finish(tmp_path, capsys, monkeypatch):
    import fastppo.training.trainer

    train_seed_stack = fastppo.training.trainer.train_seed_stack

    def killed_with_seed_2(config, seeds, *args, **kwargs):  # in the forked worker: as the OOM killer would
        if 2 in seeds:
            os.kill(os.getpid(), signal.SIGKILL)
        return train_seed_stack(config, seeds, *args, **kwargs)

    monkeypatch.setattr(fastppo.training.trainer, "train_seed_stack", killed_with_seed_2)
    parent = tmp_path / "stack"
    assert main(["train", "CartPole-v1", *TINY, "--seeds", "1-2", "--workers", "2", "--run-dir", str(parent)]) == 1
    out = capsys.readouterr().out
    assert f"seed 2: failed: its worker process ended without a result (exit code {-signal.SIGKILL})" in out
    assert "seed 1: " in out and (parent / "seed_1" / "policy.safetensors").exists()


def test_seed_blocks_draw_as_single_envs():
    stacked = make_tensor_env("CartPole-v1", 6, seed_blocks=3)
    first = stacked.reset(seed=[4, 5, 6]).obs
    actions = torch.zeros(6, dtype=torch.long)
    for _ in range(30):  # through a reset or two: each block's resets come from its own stream
        last = stacked.step(actions).obs
    for block, seed in enumerate((4, 5, 6)):
        single = make_tensor_env("CartPole-v1", 2)
        assert torch.equal(single.reset(seed=seed).obs, first[2 * block : 2 * block + 2])
        for _ in range(30):
            obs = single.step(actions[:2]).obs
        assert torch.equal(obs, last[2 * block : 2 * block + 2])


def learning(run_dir: Path) -> list[dict]:
    """A run's metrics but its clock readings."""
    return [
        {k: v for k, v in r.items() if k not in ("time", "charts/SPS") and not k.startswith("time/")}
        for r in records(run_dir)
    ]


@pytest.mark.parametrize(("flags", "per_seed"), [(TARGET_KL, "losses/epochs"), (KL_OBJECTIVE, "losses/kl_beta")])
def test_each_stacked_seed_stops_its_epochs_and_adapts_its_beta_as_its_single_run(tmp_path, flags, per_seed):
    """--target-kl: a seed whose KL passed the target sits out the other seeds' remaining steps (no
    Adam step or step count, no permutation drawn, its means over the steps it took); --objective
    kl: each seed adapts its own beta. Every metric as its single run's (up to float summation
    order, as above), epochs and betas exactly, and the weights."""
    assert (
        main(
            ["train", "CartPole-v1", *TINY, *flags, "--seeds", "3,5", *ONE_STACK, "--run-dir", str(tmp_path / "stack")]
        )
        == 0
    )
    values = {}
    for seed in (3, 5):
        assert (
            main(
                [
                    "train",
                    "CartPole-v1",
                    *TINY,
                    *flags,
                    "--seed",
                    str(seed),
                    "--run-dir",
                    str(tmp_path / f"single_{seed}"),
                ]
            )
            == 0
        )
        stacked, single = learning(tmp_path / "stack" / f"seed_{seed}"), learning(tmp_path / f"single_{seed}")
        assert len(stacked) == len(single) == 4
        for a, b in zip(stacked, single):
            assert a.keys() == b.keys() and a[per_seed] == b[per_seed]
            for name in a:
                assert math.isclose(a[name], b[name], rel_tol=1e-3, abs_tol=1e-5), (seed, name, a[name], b[name])
        for p, q in zip(
            load(tmp_path / "stack" / f"seed_{seed}").policy.parameters(),
            load(tmp_path / f"single_{seed}").policy.parameters(),
        ):
            assert torch.allclose(p, q, atol=1e-5)
        values[seed] = [r[per_seed] for r in stacked]
    assert values[3] != values[5]  # the seeds did stop (adapt) apart in the stack
    if per_seed == "losses/epochs":
        assert min(values[3] + values[5]) < 4  # and before the 4 epochs ran out


def test_seed_adam_steps_each_seed_as_its_single_runs_adam_and_leaves_out_the_stopped():
    """A stack's Adam: seed s's row steps as its single run's FusedAdam, bit for bit (as a tensor of
    its own: the fused kernel's rounding depends on an element's position), with its own step
    count; a seed left out of a step keeps its weights, moments and count; a loaded state steps on."""
    torch.manual_seed(0)
    seeds, size = 3, 1001
    flat = torch.nn.Parameter(torch.randn(seeds * size))
    flat.grad = torch.zeros_like(flat)
    singles = [torch.nn.Parameter(row.detach().clone()) for row in flat.view(seeds, -1)]
    stack_opt, single_opts = (
        FusedAdam([flat], lr=1e-2, eps=1e-5, members=seeds),
        [FusedAdam([p], lr=1e-2, eps=1e-5) for p in singles],
    )
    grads = torch.randn(6, seeds, size)
    actives = [None, [True, False, True], [False, False, True], None, [True, True, False], None]

    def stack_steps(start: int, stop: int) -> None:
        for grad, active in zip(grads[start:stop], actives[start:stop]):
            flat.grad.copy_(grad.view(-1))
            stack_opt.step(active)

    for s, (p, opt) in enumerate(zip(singles, single_opts)):
        for grad, active in zip(grads, actives):
            if active is None or active[s]:
                p.grad = grad[s].clone()
                opt.step()
    stack_steps(0, 3)
    saved, weights = copy.deepcopy(stack_opt.state_dict()), flat.detach().clone()
    stack_steps(3, 6)
    stack_opt.load_state_dict(saved)  # back to after 3 steps: the next steps must step the loaded state
    with torch.no_grad():
        flat.copy_(weights)
    stack_steps(3, 6)
    state = stack_opt.state_dict()["state"][0]
    assert state["step"].tolist() == [5, 4, 5]
    for s, opt in enumerate(single_opts):
        single = opt.state_dict()["state"][0]
        assert torch.equal(flat.view(seeds, -1)[s], singles[s]) and torch.equal(state["step"][s], single["step"])
        for slot in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state[slot].view(seeds, -1)[s], single[slot])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--cudagraphs"], "no --cudagraphs"),
        (["--device", "mps"], "--device cpu, cuda or auto"),
    ],
)
def test_what_a_stack_cannot_do_is_a_one_line_error(tmp_path, capsys, flags, message):
    assert (
        main(
            ["train", "CartPole-v1", *TINY, *flags, "--seeds", "1-2", *ONE_STACK, "--run-dir", str(tmp_path / "stack")]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert message in err and "another --backend" in err and "Traceback" not in err


@pytest.mark.parametrize("extra", [[], PER_SEED_STOPS])
def test_each_seed_checkpoints_as_its_single_run_and_resumes_alone(tmp_path, extra):
    """A stack writes each seed's checkpoint as its single run's (its generator as torch's RNG, its
    env rows, Adam moments and step count, statistics, kl_beta): resumed alone, a seed goes on as
    its single run does."""
    # Constant schedules: the run goes on past its first budget. lr 1e-3, not the preset's 1e-2:
    # Adam turns rounding-level gradient differences into weight differences that grow with the lr.
    flags = [
        *TINY,
        *extra,
        "--normalize-obs",
        "--normalize-reward",
        "--lr-schedule",
        "constant",
        "--clip-schedule",
        "constant",
        "--learning-rate",
        "1e-3",
    ]
    assert (
        main(["train", "CartPole-v1", *flags, "--seeds", "3,5", *ONE_STACK, "--run-dir", str(tmp_path / "stack")]) == 0
    )
    assert main(["train", "CartPole-v1", *flags, "--seed", "5", "--run-dir", str(tmp_path / "single")]) == 0
    for run in (tmp_path / "stack" / "seed_5", tmp_path / "single"):
        assert main(["train", "--resume", str(run), "--total-timesteps", "2048"]) == 0
    stacked, single = records(tmp_path / "stack" / "seed_5"), records(tmp_path / "single")
    assert [r["global_step"] for r in stacked] == [r["global_step"] for r in single] and stacked[-1][
        "global_step"
    ] == 2048
    for a, b in zip(stacked, single):
        assert a.get("charts/episodic_return", 0.0) == pytest.approx(b.get("charts/episodic_return", 0.0), rel=1e-5)
        for name in COMPARED:
            assert math.isclose(a[name], b[name], rel_tol=1e-3, abs_tol=1e-5), (name, a[name], b[name])
    for p, q in zip(
        load(tmp_path / "stack" / "seed_5").policy.parameters(), load(tmp_path / "single").policy.parameters()
    ):
        assert torch.allclose(p, q, atol=1e-5)


@pytest.mark.parametrize(
    ("env_id", "extra"),
    [
        ("Pendulum-v1", ["--normalize-obs", "--normalize-reward"]),
        ("CartPole-v1", PER_SEED_STOPS),
        ("CartPoleNoVelocity-v1", ["--policy.memory", "lstm"]),
    ],
)
def test_a_stopped_stack_resumes_as_one_exactly(tmp_path, capsys, env_id, extra):
    """``fastppo train --resume RUN_DIR`` on a stack's folder continues every seed in one process,
    bit for bit as the uninterrupted stack, also when a kill during a save left one seed a
    checkpoint ahead (the stack resumes where all seeds stand), and with each seed's own beta and
    Adam step count (--objective kl, --target-kl)."""
    flags = [*TINY, *extra, "--checkpoint-every", "1", "--keep-checkpoints", "10"]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    assert main(["train", env_id, *flags, "--seeds", "3,5", *ONE_STACK, "--run-dir", str(whole)]) == 0
    if extra == PER_SEED_STOPS:  # where the stack resumes (iteration 2), the seeds' betas and step counts differ
        kept = [load_checkpoint(whole / f"seed_{seed}" / "checkpoints" / "000002") for seed in (3, 5)]
        assert kept[0].kl_beta != kept[1].kl_beta and not torch.equal(
            kept[0].tensors["optim.0.step"], kept[1].tensors["optim.0.step"]
        )
    shutil.copytree(whole, stopped)
    for seed, gone in ((3, ("000003", "000004")), (5, ("000004",))):  # seed 5 "saved" iteration 3, seed 3 did not
        for name in gone:
            shutil.rmtree(stopped / f"seed_{seed}" / "checkpoints" / name)
    capsys.readouterr()
    assert main(["train", "--resume", str(stopped)]) == 0
    assert "resuming the 2 seeds" in capsys.readouterr().out
    for seed in (3, 5):
        assert learning(stopped / f"seed_{seed}") == learning(whole / f"seed_{seed}")
        for p, q in zip(
            load(stopped / f"seed_{seed}").policy.parameters(), load(whole / f"seed_{seed}").policy.parameters()
        ):
            assert torch.equal(p, q)


def test_a_stack_stopped_by_an_error_points_to_its_seeds_checkpoints(tmp_path, capsys, monkeypatch):
    import fastppo.training.trainer

    def diverge_at_iteration_3(metrics, agent, optimizer, iteration, global_step):
        if iteration == 3:
            raise FastPPOError(f"training stopped at iteration {iteration}: loss became NaN/Inf")

    monkeypatch.setattr(fastppo.training.trainer, "check_finite", diverge_at_iteration_3)
    parent = tmp_path / "stack"
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                *TINY,
                "--checkpoint-every",
                "1",
                "--seeds",
                "1-2",
                *ONE_STACK,
                "--run-dir",
                str(parent),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "iteration 3" in err and f"{parent}/seed_<n>/checkpoints/000002" in err and f"--resume {parent})" in err
    assert all((parent / f"seed_{s}" / "checkpoints" / "000002").is_dir() for s in (1, 2))


def test_a_stack_whose_seeds_differ_is_not_resumed_as_one(tmp_path, capsys):
    parent, flags = (
        tmp_path / "stack",
        [*TINY, "--total-timesteps", "512", "--lr-schedule", "constant", "--clip-schedule", "constant"],
    )
    assert main(["train", "CartPole-v1", *flags, "--seeds", "1-2", "--run-dir", str(parent)]) == 0
    shutil.rmtree(parent / "seed_2")
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                *flags,
                "--seed",
                "2",
                "--learning-rate",
                "1e-3",
                "--run-dir",
                str(parent / "seed_2"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["train", "--resume", str(parent), "--total-timesteps", "1024"]) == 2
    err = capsys.readouterr().err.strip()
    assert "different configs" in err and len(err.splitlines()) == 1


def test_resuming_a_finished_folder_of_seeds_trained_as_processes_is_a_one_line_error(tmp_path, capsys):
    """With its plan (seeds.json), a job resumes as a whole: finished, it has nothing to train; a
    folder from before plans were written says to resume each seed alone."""
    parent = tmp_path / "seeds"
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                "--backend",
                "sync",
                "--num-envs",
                "2",
                "--num-steps",
                "32",
                "--total-timesteps",
                "128",
                "--no-progress",
                "--seeds",
                "1-2",
                "--workers",
                "1",
                "--run-dir",
                str(parent),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["train", "--resume", str(parent)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"every seed in {parent} is finished" in err and len(err.splitlines()) == 1
    (parent / "seeds.json").unlink()
    assert main(["train", "--resume", str(parent)]) == 2
    err = capsys.readouterr().err.strip()
    assert "resume each alone" in err and f"{parent}/seed_<n>" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "2"], "add --seeds"),
        (["--seeds", "1-2", "--workers", "0"], "--workers must be >= 1"),
        (["--seeds", "1-2", "--backend", "sync", "--workers", "0"], "--workers must be >= 1"),
    ],
)
def test_bad_seed_flags_are_one_line_errors(tmp_path, capsys, flags, message):
    assert main(["train", "CartPole-v1", "--no-progress", "--run-dir", str(tmp_path / "runs"), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and not (tmp_path / "runs").exists()


def test_resume_with_seeds_is_a_one_line_error(tmp_path, capsys):
    assert main(["train", "CartPole-v1", *TINY, "--run-dir", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "run"), "--seeds", "1-2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "drop --seeds" in err and len(err.splitlines()) == 1


def test_each_seed_of_a_stack_gets_its_own_health_warnings(tmp_path, capsys):
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                *TINY,
                "--learning-rate",
                "0.5",
                "--seeds",
                "1-2",
                *ONE_STACK,
                "--run-dir",
                str(tmp_path / "stack"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    for seed in (1, 2):
        assert f"warning: seed {seed}: clip_fraction" in err


STOPPING = [
    *TINY,
    "--total-timesteps",
    "4096",
    "--stop-return",
    "60",
    "--stop-window",
    "5",
    "--checkpoint-every",
    "1",
    "--keep-checkpoints",
    "20",
]
STOPS = {3: 1792, 1: 2304, 2: 3072}  # where seeds 1-3 of that config reach a mean of 60 over 5 episodes


@pytest.mark.parametrize(
    "device",
    ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)],
)
def test_a_stack_ends_each_seed_at_its_stop_return_and_trains_the_others_on(tmp_path, capsys, device):
    """Seeds that reach --stop-return leave the stack as finished runs (final checkpoint and agent
    at that step); the others go on as in the whole stack, equal but for float rounding (the
    update pads minibatches to the longest seed's), bit for bit until the first seed leaves."""
    flags = [*STOPPING, "--device", device]
    assert (
        main(["train", "CartPole-v1", *flags, "--seeds", "1-3", *ONE_STACK, "--run-dir", str(tmp_path / "stopping")])
        == 0
    )
    out = "".join(capsys.readouterr())
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                *flags,
                "--stop-return",
                "none",
                "--seeds",
                "1-3",
                *ONE_STACK,
                "--run-dir",
                str(tmp_path / "whole"),
            ]
        )
        == 0
    )
    stops = {seed: records(tmp_path / "stopping" / f"seed_{seed}")[-1]["global_step"] for seed in STOPS}
    if device == "cpu":  # a GPU's generators draw other streams
        assert stops == STOPS
    assert len(set(stops.values())) > 1 and max(stops.values()) < 4096  # they left one by one, before the budget
    first = min(stops.values())
    for seed, step in stops.items():
        assert f"seed {seed}: mean return" in out and f"--run.stop-return 60 at step {step}: stopped" in out
        stopping, whole = records(tmp_path / "stopping" / f"seed_{seed}"), records(tmp_path / "whole" / f"seed_{seed}")
        assert stopping[-1]["global_step"] == step and whole[-1]["global_step"] == 4096
        for a, b in zip(stopping, whole):
            if a["global_step"] <= first:
                assert {k: a[k] for k in COMPARED} == {k: b[k] for k in COMPARED}
            for name in COMPARED:
                assert math.isclose(a[name], b[name], rel_tol=1e-3, abs_tol=1e-5), (seed, name, a[name], b[name])
        final = load_checkpoint(tmp_path / "stopping" / f"seed_{seed}")
        assert final.global_step == step and sum(final.meta["episode_returns"][-5:]) / 5 >= 60
        assert load(tmp_path / "stopping" / f"seed_{seed}").config.run.seed == seed
    assert main(["train", "--resume", str(tmp_path / "stopping")]) == 2
    assert "every seed in" in capsys.readouterr().err


def test_a_stack_killed_after_a_seed_stopped_resumes_the_others_exactly(tmp_path, capsys):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert main(["train", "CartPole-v1", *STOPPING, "--seeds", "1-3", *ONE_STACK, "--run-dir", str(whole)]) == 0
    shutil.copytree(whole, killed)
    for checkpoint in (killed / "seed_2" / "checkpoints").iterdir():  # killed after seed 1 stopped, before seed 2 did
        if checkpoint.name.isdigit() and int(checkpoint.name) > STOPS[1] // 256:
            shutil.rmtree(checkpoint)
    (killed / "seed_2" / "checkpoints" / "latest").write_text(f"{STOPS[1] // 256:06d}\n")
    capsys.readouterr()
    assert main(["train", "--resume", str(killed)]) == 0
    assert "resuming the 1 seed" in capsys.readouterr().out
    assert learning(killed / "seed_2") == learning(whole / "seed_2")
    for p, q in zip(load(killed / "seed_2").policy.parameters(), load(whole / "seed_2").policy.parameters()):
        assert torch.equal(p, q)


def test_a_single_run_ends_at_its_stop_return_and_a_resume_trains_no_further(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "CartPole-v1", *STOPPING, "--seed", "3", "--run-dir", str(run)]) == 0
    assert "--run.stop-return 60 at step 1792: stopped" in "".join(capsys.readouterr())
    assert records(run)[-1]["global_step"] == 1792 and load_checkpoint(run).global_step == 1792
    assert main(["train", "--resume", str(run)]) == 0
    assert records(run)[-1]["global_step"] == 1792


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--stop-return", "nan"], "--run.stop-return must be a finite return"),
        (["--stop-return", "inf"], "--run.stop-return must be a finite return"),
        (["--stop-window", "0"], "between 1 and 100"),
        (["--stop-window", "101"], "between 1 and 100"),
    ],
)
def test_bad_stop_flags_are_one_line_errors(tmp_path, capsys, flags, message):
    assert main(["train", "CartPole-v1", *flags, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_signal_in_the_iteration_that_reaches_the_stop_return_leaves_a_finished_run(tmp_path, capsys, monkeypatch):
    import signal

    from fastppo.training.logger import RunLogger

    log = RunLogger.log

    def log_then_signal(self, step, metrics):
        log(self, step, metrics)
        if step == STOPS[3]:
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(RunLogger, "log", log_then_signal)
    assert main(["train", "CartPole-v1", *STOPPING, "--seed", "3", "--run-dir", str(tmp_path / "run")]) == 0  # not 130
    assert "stopped after iteration" not in capsys.readouterr().err

"""Data-parallel training on torchrun (fastppo.training.distributed): 2 gloo ranks on the CPU.

- one PPO update on 2 ranks x B/2 rows ends with the weights of 1 process updating on the same B
  rows with the same minibatches (every rank's minibatch i is half of the single process's), its
  target-KL stop taken on the ranks' mean KL (each rank's own would stop them after different epochs);
- the normaliser and reward-scaler statistics after a 2-rank run are those of one process that saw
  both ranks' batches, and both ranks end with the same weights;
- `torchrun -m fastppo train` runs, writes one checkpoint from rank 0, resumes, and refuses another
  world size in one line;
- an error on rank 1 alone, and a rank that stalls past --collective-timeout, end the run with one
  line naming the rank, no rank's traceback; Ctrl-C saves a checkpoint and says so, while torchrun
  itself exits 1.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from safetensors.torch import load_file, save_file

import fastppo
from fastppo.agents.agent import build_agent
from fastppo.config import Config, PPOConfig
from fastppo.core.normalize import RunningMeanStd
from fastppo.errors import FastPPOError
from fastppo.training.resume import resume_config
from fastppo.training.update import MinibatchStep, UpdateCoefficients, make_optimizer, ppo_update
from tests.support.torchrun import fastppo_errors, rank_of, spawn, torchrun

pytestmark = pytest.mark.torchrun

ROWS, MINIBATCHES, EPOCHS = 64, 4, 3
HALF = ROWS // 2
TARGET_KL = 0.02
"""Between the ranks' own KLs after the first epoch (make_batch): only their mean stops both ranks there."""
COEFS = UpdateCoefficients(clip_coef=0.2, ent_coef=0.01, kl_beta=1.0)
SCENARIOS = {
    # name: (PPO settings, the rows every rank leaves invalid (NEXT_STEP reset rows),
    #        the ranks' seeds before the update)
    "all_valid": ({"target_kl": TARGET_KL}, (), 100),
    "reset_rows": ({}, (3, 4, 5, 9, 20, 40, 41, 50, 51, 52, 60), 200),
}
LOSSES = ("pg_loss", "v_loss", "entropy", "approx_kl", "clipfrac", "grad_norm", "epochs")


def make_policy() -> torch.nn.Module:
    box = gym.spaces.Box(-1.0, 1.0, (4,))
    return build_agent(Config(), box, gym.spaces.Discrete(2), torch.device("cpu")).policy


def make_batch(invalid: tuple[int, ...] = ()) -> dict[str, torch.Tensor]:
    """A made-up flattened rollout of ROWS rows (the same in every process)."""
    g = torch.Generator().manual_seed(1)
    values = torch.randn(ROWS, generator=g)
    advantages = 0.5 + 2.0 * torch.randn(ROWS, generator=g)
    valid = torch.ones(ROWS, dtype=torch.bool)
    valid[list(invalid)] = False
    return {
        "obs": torch.randn(ROWS, 4, generator=g),
        "actions": torch.randint(0, 2, (ROWS,), generator=g),
        # Rank 0's rows (the first half) far from the policy's own log-probs, rank 1's close: rank 0's
        # own approx KL is above TARGET_KL, rank 1's below, their mean above.
        "logprobs": math.log(0.5) + torch.tensor([0.5] * HALF + [0.01] * HALF) * torch.randn(ROWS, generator=g),
        "values": values,
        "advantages": advantages,
        "returns": values + advantages,
        "valid": valid,
    }


def ppo_config(**overrides) -> PPOConfig:
    return PPOConfig(num_minibatches=MINIBATCHES, update_epochs=EPOCHS, **overrides)


def flat_weights(policy: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in policy.parameters()]).clone()


def update_worker(rank: int, size: int, port: int, out: str) -> None:
    with rank_of(rank, size, port) as world:
        weights, losses = {}, {}
        for name, (settings, invalid, seed) in SCENARIOS.items():
            torch.manual_seed(rank)  # each rank builds other weights: the broadcast must give it rank 0's
            policy = make_policy()
            world.broadcast_module(policy)
            optimizer = make_optimizer(policy, 3e-3, 1e-5, torch.device("cpu"))
            cfg = ppo_config(**settings)
            batch = {k: v[rank * HALF : (rank + 1) * HALF] for k, v in make_batch(invalid).items()}
            torch.manual_seed(seed + rank)  # the minibatch shuffles, replayed by the test
            losses[name] = ppo_update(
                policy, optimizer, batch, cfg, COEFS, MinibatchStep(policy, optimizer, cfg, world=world)
            )
            weights[name] = flat_weights(policy)
        save_file(weights, f"{out}/weights{rank}.safetensors")
        Path(f"{out}/losses{rank}.json").write_text(json.dumps(losses))


def rank_permutations(seed: int) -> list[list[torch.Tensor]]:
    """The shuffles each rank drew in update_worker: one randperm per epoch from its seed."""
    permutations = []
    for rank in range(2):
        torch.manual_seed(seed + rank)
        permutations.append([torch.randperm(HALF) for _ in range(EPOCHS)])
    return permutations


def joint_minibatches(seed: int, epoch: int) -> list[torch.Tensor]:
    """Minibatch i of one process holding both ranks' rows (rank 1's from HALF on): rank 0's
    minibatch i and rank 1's minibatch i together."""
    size = HALF // MINIBATCHES
    perms = [p[epoch] for p in rank_permutations(seed)]
    return [
        torch.cat([perms[0][i * size : (i + 1) * size], HALF + perms[1][i * size : (i + 1) * size]])
        for i in range(MINIBATCHES)
    ]


def test_an_update_on_two_ranks_equals_one_process_updating_on_both_ranks_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    spawn(update_worker, tmp_path)
    ranks = [load_file(str(tmp_path / f"weights{rank}.safetensors")) for rank in range(2)]
    rank_losses = [json.loads((tmp_path / f"losses{rank}.json").read_text()) for rank in range(2)]
    torch.manual_seed(0)
    start = flat_weights(make_policy())  # rank 0's initial weights

    # Every row valid: fastppo's own single-process ppo_update, its shuffle replaced by the one
    # whose minibatch i is the union of the ranks' minibatches i.
    settings, _, seed = SCENARIOS["all_valid"]
    shuffles = iter([torch.cat(joint_minibatches(seed, epoch)) for epoch in range(EPOCHS)])
    monkeypatch.setattr(torch, "randperm", lambda n, device=None: next(shuffles))
    torch.manual_seed(0)
    policy = make_policy()
    optimizer = make_optimizer(policy, 3e-3, 1e-5, torch.device("cpu"))
    losses = ppo_update(policy, optimizer, make_batch(), ppo_config(**settings), COEFS)
    monkeypatch.undo()
    references = {"all_valid": flat_weights(policy)}
    assert (
        losses["epochs"] == 1
    )  # the target-KL stop was reached: on the ranks' mean KL, by both ranks after the same epoch
    for name in LOSSES:
        for rank in range(2):
            assert rank_losses[rank]["all_valid"][name] == pytest.approx(losses[name], rel=1e-4, abs=1e-6), name

    # Reset rows (a different number per rank in most minibatches): one process's step on each
    # joint minibatch, masked as the trainer masks reset rows.
    settings, invalid, seed = SCENARIOS["reset_rows"]
    torch.manual_seed(0)
    policy = make_policy()
    optimizer = make_optimizer(policy, 3e-3, 1e-5, torch.device("cpu"))
    step, batch = MinibatchStep(policy, optimizer, ppo_config(**settings)), make_batch(invalid)
    for epoch in range(EPOCHS):
        for rows in joint_minibatches(seed, epoch):
            step({k: v[rows] for k, v in batch.items()}, COEFS)
    references["reset_rows"] = flat_weights(policy)

    for name, reference in references.items():
        assert torch.equal(ranks[0][name], ranks[1][name]), f"{name}: the ranks' weights differ"
        assert not torch.allclose(reference, start, atol=1e-3), f"{name}: the update did not move the weights"
        torch.testing.assert_close(ranks[0][name], reference, rtol=1e-5, atol=1e-6, msg=name)


def statistics_worker(rank: int, size: int, port: int, out: str) -> None:
    """A 2-iteration run with both normalisers; records every batch folded into each statistic."""
    seen: dict[tuple[int, ...], list[torch.Tensor]] = {}  # by the statistics' shape: (4,) obs, () returns
    final: dict[tuple[int, ...], RunningMeanStd] = {}
    update = RunningMeanStd.update

    def recording_update(self: RunningMeanStd, batch: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        rows = batch if mask is None else batch[mask]
        seen.setdefault(tuple(self.mean.shape), []).append(rows.to(torch.float64).reshape(len(rows), -1).clone())
        final[tuple(self.mean.shape)] = self
        update(self, batch, mask)

    RunningMeanStd.update = recording_update
    with rank_of(rank, size, port):
        agent = fastppo.train(
            "CartPole-v1",
            num_envs=4,
            num_steps=16,
            total_timesteps=2 * 2 * 64,
            normalize_obs=True,
            normalize_reward=True,
            progress=False,
            tensorboard=False,
        )
    tensors = {"weights": flat_weights(agent.policy)}
    for shape, rms in final.items():
        key = "obs" if shape else "return"
        tensors |= {
            f"{key}.seen": torch.cat(seen[shape]),
            f"{key}.mean": rms.mean,
            f"{key}.var": rms.var,
            f"{key}.count": torch.as_tensor(float(rms.count), dtype=torch.float64),
        }
    save_file(tensors, f"{out}/rank{rank}.safetensors")
    Path(f"{out}/rank{rank}.json").write_text(
        json.dumps({"global_step": agent.history[-1]["global_step"], "episode_returns": agent.episode_returns})
    )


def test_statistics_after_a_two_rank_run_are_those_of_one_process_that_saw_both_ranks_batches(tmp_path: Path):
    spawn(statistics_worker, tmp_path)
    ranks = [load_file(str(tmp_path / f"rank{rank}.safetensors")) for rank in range(2)]
    for key in ("obs", "return"):
        reference = RunningMeanStd((4,) if key == "obs" else ())
        for rank in ranks:
            reference.update(rank[f"{key}.seen"].reshape(-1, *reference.mean.shape))
        for rank in ranks:
            torch.testing.assert_close(rank[f"{key}.mean"], reference.mean, rtol=1e-9, atol=1e-12)
            torch.testing.assert_close(rank[f"{key}.var"], reference.var, rtol=1e-9, atol=1e-12)
            assert float(rank[f"{key}.count"]) == pytest.approx(reference.count, rel=1e-12)
        assert torch.equal(ranks[0][f"{key}.mean"], ranks[1][f"{key}.mean"]) and torch.equal(
            ranks[0][f"{key}.var"], ranks[1][f"{key}.var"]
        )
    assert torch.equal(ranks[0]["weights"], ranks[1]["weights"])  # same start (broadcast), same gradients
    logs = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert logs[0] == logs[1]  # every rank's episodes gathered on each
    assert logs[0]["global_step"] == 256  # 2 iterations x 2 ranks x 4 envs x 16 steps


TINY = (
    "--num-envs",
    "4",
    "--num-steps",
    "64",
    "--no-progress",
    "--no-tensorboard",
    "--lr-schedule",
    "constant",
    "--clip-schedule",
    "constant",
)


def test_torchrun_trains_checkpoints_once_resumes_and_refuses_another_world_size(tmp_path: Path):
    run_dir = tmp_path / "run"
    first = torchrun(
        "train", "CartPole-v1", "--run-dir", str(run_dir), "--total-timesteps", "1024", "--checkpoint-every", "0", *TINY
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("fastppo: results in") == 1  # rank 0 speaks for the run
    assert [p.name for p in (run_dir / "checkpoints").iterdir() if p.is_dir()] == [
        "000002"
    ]  # 1024 steps = 2 iterations x 2 ranks x 256
    meta = json.loads((run_dir / "checkpoints" / "000002" / "trainer.json").read_text())
    assert (meta["world_size"], meta["global_step"]) == (2, 1024)
    steps = [json.loads(line)["global_step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [512, 1024]

    resumed = torchrun("train", "--resume", str(run_dir), "--total-timesteps", "2048", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    steps = [json.loads(line)["global_step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [512, 1024, 1536, 2048]
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "000004"

    alone = subprocess.run(
        [sys.executable, "-m", "fastppo", "train", "--resume", str(run_dir), "--total-timesteps", "4096"],
        capture_output=True,
        text=True,
    )
    assert alone.returncode == 2
    assert alone.stderr.strip().splitlines() == [
        f"fastppo: error: {run_dir} was trained by 2 ranks, this launch has 1: resume it with torchrun, 2 "
        "processes in all (--nnodes x --nproc-per-node)"
    ]


def launch_failure_lines(stderr: str) -> list[str]:
    """The fastppo lines of a failed launch's stderr, after checking that no rank printed a
    traceback: torch prefixes a rank's with "[rank<n>]:", and the one traceback left is torchrun's
    own ChildFailedError (PyTorch's launcher reports every failed launch so)."""
    assert not [line for line in stderr.splitlines() if line.startswith("[rank")], stderr
    assert stderr.count("Traceback (most recent call last)") == 1 and "ChildFailedError" in stderr, stderr
    return fastppo_errors(stderr)


def test_an_error_on_rank_1_alone_is_one_line_naming_rank_1(tmp_path: Path):
    failed = torchrun(
        "train",
        "tests.support.torchrun_envs:NaNRewardOnRank1Env",
        "--run-dir",
        str(tmp_path / "run"),
        "--total-timesteps",
        "4096",
        *TINY,
    )
    assert failed.returncode == 1  # torchrun's code for a failed launch
    first, *others = launch_failure_lines(failed.stderr)
    assert re.fullmatch(
        r"fastppo: error: rank 1: training stopped at iteration \d+: env \d returned a NaN/Inf reward at "
        r"rollout step \d+ .*",
        first,
    ), failed.stderr
    # Rank 0 (in a collective when rank 1 left) says why it stopped, unless torchrun's SIGTERM came first.
    assert others in (
        [],
        [
            "fastppo: error: rank 0: another rank stopped the run: see its error, or torchrun's summary for a "
            "rank that died"
        ],
    ), failed.stderr


def test_a_rank_stalled_past_the_collective_timeout_ends_the_run_with_one_line(tmp_path: Path):
    began = time.monotonic()
    failed = torchrun(
        "train",
        "tests.support.torchrun_envs:StallOnRank1Env",
        "--run-dir",
        str(tmp_path / "run"),
        "--total-timesteps",
        "4096",
        "--collective-timeout",
        "2",
        *TINY,
    )
    assert failed.returncode == 1
    first, *others = launch_failure_lines(failed.stderr)
    assert first == (
        "fastppo: error: rank 0: no answer from the other ranks within 2 s (--run.collective-timeout): a rank "
        "stalled or died"
    ), failed.stderr
    # The stalled rank, once it wakes (unless torchrun's SIGTERM ends it first), finds rank 0 gone.
    assert others in (
        [],
        [
            "fastppo: error: rank 1: another rank stopped the run: see its error, or torchrun's summary for a "
            "rank that died"
        ],
    ), failed.stderr
    assert time.monotonic() - began < 60  # not the 30 min of gloo's own timeout; rank 1 stalls 8 s


def test_ctrl_c_under_torchrun_saves_and_says_so_while_torchrun_exits_1(tmp_path: Path):
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "fastppo",
        "train",
        "CartPole-v1",
        "--run-dir",
        str(run_dir),
    ]
    launch = subprocess.Popen(
        [*command, "--total-timesteps", "10000000", "--checkpoint-every", "0", *TINY],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        while not (run_dir / "metrics.jsonl").is_file() or not (run_dir / "metrics.jsonl").read_text():  # training
            assert launch.poll() is None, launch.stderr.read()
            time.sleep(0.2)
        os.killpg(launch.pid, signal.SIGINT)  # Ctrl-C: the terminal signals torchrun and every rank
        _, stderr = launch.communicate(timeout=60)
    finally:
        if launch.poll() is None:
            os.killpg(launch.pid, signal.SIGKILL)
    assert launch.returncode == 1  # torchrun's own, for any signal it gets (its SignalException traceback)
    assert "SignalException" in stderr and not [line for line in stderr.splitlines() if line.startswith("[rank")], (
        stderr
    )
    stopped = [line for line in stderr.splitlines() if line.startswith("fastppo: SIGINT")]
    assert len(stopped) == 1, stderr  # rank 0 speaks for the run
    saved = Path(
        re.fullmatch(r"fastppo: SIGINT: stopped after iteration (\d+), checkpoint saved in (.+)", stopped[0]).group(2)
    )
    assert (
        saved.parent == run_dir / "checkpoints"
        and (run_dir / "checkpoints" / "latest").read_text().strip() == saved.name
    )
    meta = json.loads((saved / "trainer.json").read_text())
    assert meta["iteration"] == int(saved.name) and meta["global_step"] < 10_000_000


def test_resuming_a_one_process_run_under_torchrun_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    fastppo.train(
        "CartPole-v1", run_dir=tmp_path, num_envs=2, num_steps=32, total_timesteps=64, progress=False, tensorboard=False
    )
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(FastPPOError, match=r"was trained by 1 rank, this launch has 2: resume it without torchrun$"):
        resume_config(tmp_path, {"total_timesteps": 128})


@pytest.mark.slow
def test_two_ranks_solve_cartpole(tmp_path: Path):
    # The CartPole-v1 preset (100k steps, now 2 x 1024 per iteration): ~30-60 s on 2 cores.
    done = torchrun("train", "CartPole-v1", "--run-dir", str(tmp_path), "--no-progress", "--no-tensorboard")
    assert done.returncode == 0, done.stderr
    latest = (tmp_path / "checkpoints" / "latest").read_text().strip()
    returns = json.loads((tmp_path / "checkpoints" / latest / "trainer.json").read_text())["episode_returns"]
    assert sum(returns[-20:]) / 20 >= 475


def test_world_size_without_the_rest_of_a_torchrun_launch_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch):
    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(
        FastPPOError,
        match="WORLD_SIZE=2 is set but not RANK, MASTER_ADDR, MASTER_PORT: launch with torchrun, or unset WORLD_SIZE",
    ):
        fastppo.train("CartPole-v1", num_envs=2, num_steps=32, total_timesteps=64, progress=False, tensorboard=False)


@pytest.mark.parametrize(
    ("environ", "argv", "message"),
    [
        ({"WORLD_SIZE": "two"}, [], "WORLD_SIZE='two' in the environment is not an integer: torchrun sets it"),
        ({"WORLD_SIZE": "2", "RANK": "zero"}, [], "RANK='zero' in the environment is not an integer"),
        (
            {"WORLD_SIZE": "2"},
            ["--seeds", "1-2"],
            "--seeds trains its seeds in worker processes of its own: launch it without torchrun",
        ),
        ({}, ["--collective-timeout", "0"], "--run.collective-timeout must be a positive number of seconds, got 0"),
    ],
)
def test_bad_torchrun_launch_input_is_one_line_and_exit_2(
    environ, argv, message, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    from fastppo.cli.main import main

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert (
        main(
            [
                "train",
                "CartPole-v1",
                "--num-envs",
                "2",
                "--num-steps",
                "32",
                "--total-timesteps",
                "64",
                "--no-progress",
                "--no-tensorboard",
                *argv,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("device", "local_rank", "gpus", "message"),
    [
        ("cuda:1", "0", 2, "every rank takes the GPU of its local rank, give --device cuda"),
        ("cuda", "1", 1, "local rank 1 has no GPU of its own (1 on this machine)"),
    ],
)
def test_a_rank_without_its_own_gpu_is_a_one_line_error(
    device, local_rank, gpus, message, monkeypatch: pytest.MonkeyPatch
):
    from fastppo.training.distributed import rank_device

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(FastPPOError, match=re.escape(message)):
        rank_device(torch.device(device))


def test_a_lone_process_has_a_world_of_one_whose_collectives_are_identities(monkeypatch):
    """Outside torchrun the trainer's world is the LoneWorld: rank 0 of 1, the run's own seed, and
    collectives that hand back their input untouched (no arithmetic: a lone run's numbers stay bit
    for bit what they were without a world)."""
    from fastppo.envs.vector import Episodes
    from fastppo.training.distributed import LONE, ranks

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with ranks(torch.device("cpu")) as world:
        assert world is LONE
    assert (LONE.main, LONE.size, LONE.seed(7, 32, iteration=5), LONE.restart_seed(7), LONE.max(3)) == (
        True,
        1,
        7,
        None,
        3,
    )
    tensor = torch.tensor([1.0, 2.0])
    assert LONE.sum_(tensor) is tensor and LONE.mean_(tensor) is tensor and LONE.gather(tensor) is tensor
    assert tensor.tolist() == [1.0, 2.0]
    episodes = Episodes([1.0], [10])
    assert LONE.gather_episodes(episodes) is episodes
    rms = RunningMeanStd((2,), torch.device("cpu"))
    rms.update(torch.tensor([[1.0, 2.0], [3.0, 5.0]]))
    before = {k: v.clone() for k, v in rms.state_dict().items()}
    statistics = LONE.synced([rms])
    rms.update(torch.tensor([[0.0, 1.0]]))
    after = {k: v.clone() for k, v in rms.state_dict().items()}
    statistics.merge()
    assert all(torch.equal(v, after[k]) for k, v in rms.state_dict().items()) and not all(
        torch.equal(v, before[k]) for k, v in after.items()
    )

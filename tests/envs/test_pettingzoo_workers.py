"""PettingZoo copies stepped in worker processes (``--env.backend async``): the same rows, runs and
episodes as the sync backend, and clear errors when a worker fails."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal

import numpy as np
import pytest
import torch

import fastppo
import fastppo.envs.make as env_make
from fastppo.config import EnvConfig, MultiAgentConfig
from fastppo.envs.make import make_pettingzoo_env
from fastppo.envs.pettingzoo_vec import make_parallel_env
from fastppo.envs.pettingzoo_workers import PettingZooWorkers
from fastppo.errors import FastPPOError
from fastppo.files.run_folder import list_checkpoints
from fastppo.training.resume import resume_config
from fastppo.training.trainer import train
from tests.support.multi_agent import RELAY, TINY
from tests.support.resume import metrics, stop_after

CPU = torch.device("cpu")
PADDED = {"actions": [3, 2, 3], "obs_sizes": [2, 3, 2], "die_at": 3, "length": 6, "join_at": 2}
"""Relay with a dead agent, one that joins after reset, unequal spaces (padding: action masks) and
episodes that end mid-rollout."""


def env_pair(
    monkeypatch, copies: int, cpus: int, env_id: str = RELAY, env_kwargs: dict | None = None, **multi_agent
) -> tuple:
    """The same copies on the sync backend and split into ``cpus`` blocks (all but the first in worker processes)."""
    monkeypatch.setattr(env_make, "available_cpus", lambda: cpus)
    cfg = EnvConfig(env_id=env_id, num_envs=copies, env_kwargs=env_kwargs or {})
    ma = MultiAgentConfig(**multi_agent)
    sync = make_pettingzoo_env(cfg, ma, CPU)
    split = make_pettingzoo_env(dataclasses.replace(cfg, backend="async"), ma, CPU)
    assert isinstance(split, PettingZooWorkers) and len(split._processes) == min(cpus, copies) - 1
    return sync, split


@pytest.mark.parametrize("cpus", [1, 2, 5])
@pytest.mark.parametrize(
    ("env_id", "env_kwargs", "multi_agent"),
    [
        (RELAY, PADDED, {"pad": True, "algorithm": "mappo"}),
        ("pz:mpe2.simple_spread_v3", {"max_cycles": 5}, {"algorithm": "mappo"}),
    ],
    ids=["relay-padded", "simple-spread"],
)
def test_worker_rows_equal_the_sync_rows_step_by_step(monkeypatch, cpus, env_id, env_kwargs, multi_agent):
    """Every field of every step (masks, live, flags), and the episodes in the order they ended,
    with the copies split in blocks of any size (5 CPUs for 5 copies: one each)."""
    sync, split = env_pair(monkeypatch, 5, cpus, env_id, env_kwargs, **multi_agent)
    try:
        rng = np.random.default_rng(0)
        pairs = [(sync.reset(seed=7), split.reset(seed=7))]
        for _ in range(13):
            mask = pairs[-1][0].action_mask
            actions = torch.as_tensor(
                [rng.choice(np.flatnonzero(m)) for m in mask] if mask is not None else rng.integers(0, 5, sync.num_envs)
            )
            pairs.append((sync.step(actions), split.step(actions)))
        for a, b in pairs:
            for field, x, y in zip(a._fields, a, b):
                assert (x is None) == (y is None), field
                assert x is None or torch.equal(x, y), field
        episodes = sync.pop_episodes()
        assert episodes.returns and episodes == split.pop_episodes()
    finally:
        sync.close()
        split.close()


def test_an_async_run_equals_the_sync_run(tmp_path, monkeypatch):
    """Same seed, sync vs async with the copies in two blocks (one in a worker): the same weights,
    metrics and episodes."""
    monkeypatch.setattr(env_make, "available_cpus", lambda: 2)
    overrides = TINY | {
        "num_envs": 3,
        "env_kwargs": json.dumps(PADDED),
        "multi_agent.pad": True,
        "multi_agent.algorithm": "mappo",
    }
    runs = {
        backend: train(
            fastppo.make_config(RELAY, "cleanrl-discrete", overrides | {"backend": backend}), tmp_path / backend
        )
        for backend in ("sync", "async")
    }
    for name, value in runs["sync"].policy.state_dict().items():
        assert torch.equal(value, runs["async"].policy.state_dict()[name]), name
    assert runs["sync"].episode_returns and runs["sync"].episode_returns == runs["async"].episode_returns
    assert metrics(tmp_path / "sync") == metrics(tmp_path / "async")


def test_an_async_run_resumes_from_its_checkpoint_with_fresh_episodes(tmp_path, monkeypatch):
    """The workers' envs are not in the checkpoint (as gymnasium's async envs'): the run goes on
    from the rest of its state, with fresh episodes, to the end of its budget."""
    overrides = TINY | {"num_steps": 7, "total_timesteps": 6 * 2 * 7, "checkpoint_every": 0, "backend": "async"}
    with monkeypatch.context() as patch:
        stop_after(patch, 3)
        train(fastppo.make_config(RELAY, "cleanrl-discrete", overrides), tmp_path)
    resumed, checkpoint = resume_config(tmp_path, env_id=RELAY)  # a test module: user code, named again
    assert checkpoint.meta["env"] is None and resumed.env.backend == "async"
    agent = train(resumed, tmp_path, checkpoint)
    assert agent.history[-1]["global_step"] == 6 * 2 * 7  # env steps of the copies
    assert len(list_checkpoints(tmp_path)) >= 2


def test_an_env_that_fails_to_build_in_a_worker_raises_its_one_line_error():
    good, bad = (functools.partial(make_parallel_env, RELAY, kwargs) for kwargs in ({}, {"bogus": 1}))
    with pytest.raises(FastPPOError, match="rejected --env-kwargs") as raised:
        PettingZooWorkers([good, bad], MultiAgentConfig(), CPU, cpus=2)  # the second copy, in the worker, fails
    assert "\n" not in str(raised.value)


def test_an_env_error_in_a_worker_is_raised_with_the_workers_traceback(monkeypatch):
    sync, split = env_pair(monkeypatch, 2, 2)
    sync.close()
    try:
        split.reset(seed=0)
        with pytest.raises(RuntimeError, match=r"(?s)a PettingZoo env worker failed.*AssertionError"):
            split.step(torch.tensor([0, 1, 2, 0, 1, 7]))  # 7: no such action in the second copy
        split.step(torch.tensor([0, 1, 2, 0, 1, 2]))  # the worker still answers
    finally:
        split.close()


def test_a_killed_worker_is_a_clear_error_and_close_still_works(monkeypatch):
    sync, split = env_pair(monkeypatch, 2, 2)
    sync.close()
    split.reset(seed=0)
    os.kill(split._processes[0].pid, signal.SIGKILL)
    split._processes[0].join()
    with pytest.raises(FastPPOError, match="worker process died"):
        split.step(torch.tensor([0, 1, 2, 0, 1, 2]))
    split.close()
    assert not split._processes


def test_workers_ignore_ctrl_c_and_close_leaves_none_running(monkeypatch):
    """Ctrl-C reaches every process of the group; the trainer decides to stop, then closes them."""
    sync, split = env_pair(monkeypatch, 4, 3)
    sync.close()
    processes = list(split._processes)
    split.reset(seed=0)
    for process in processes:
        os.kill(process.pid, signal.SIGINT)
    assert split.step(torch.zeros(12, dtype=torch.int64)).obs.shape == (12, split.single_observation_space.shape[0])
    split.close()
    assert not any(process.is_alive() for process in processes)

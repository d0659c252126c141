"""PettingZoo env copies stepped in worker processes (``--env.backend async``).

PettingZoo envs are Python all the way down (MPE's physics is numpy on 2-vectors), so the env
can be most of a sync run's time (simple_spread: ~70% before its copies were stepped at once,
fastppo.envs.mpe; ~30% since) and no amount of trainer speed gets past it. Here the copies are
split into one contiguous block per CPU this process may run on (at most one per copy). The
trainer's process steps the first block itself, since it would otherwise sit idle waiting, and
each other block lives in a worker process as an ordinary ``PettingZooVecEnv``: a step sends
every worker its actions, steps the first block, then gathers the rows in copy order. Copy
``c`` is seeded ``seed + c`` and finished episodes are merged in the order the sync backend
records them, so a run on ``async`` equals the same run on ``sync`` (rows, rewards, flags,
masks, episodes, hence weights), only the env time is divided among the workers.

Workers ignore SIGINT: Ctrl-C reaches the whole process group, and the trainer, not the workers,
decides when to stop (it checkpoints, then closes them). A worker whose trainer died sees its
pipe close and exits. A checkpoint of an async run does not hold the envs' state (as for
gymnasium's async envs): a resumed run restarts fresh episodes (fastppo.training.checkpoint).
"""

from __future__ import annotations

import multiprocessing
import signal
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from fastppo.config import MultiAgentConfig
from fastppo.envs.pettingzoo_vec import MASKS_SOMETIMES, FinishedEpisode, PettingZooVecEnv, team_episodes
from fastppo.envs.vector import Episodes, HostCopies, StepResult
from fastppo.errors import FastPPOError

DIED = "a PettingZoo env worker process died (out of memory, or killed): run again, or use --env.backend sync"


def _serve(conn: Connection, env_fns: list[Callable[[], Any]], cfg: MultiAgentConfig) -> None:
    """A worker's loop: build the block's copies, then answer reset/step/close until told to
    close or the trainer's end of the pipe closes. Every answer is ("ok", value) or ("error",
    (is a FastPPOError, message, traceback))."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    envs = None
    try:
        envs = PettingZooVecEnv(env_fns, cfg, torch.device("cpu"))
        conn.send(("ok", envs.spaces))
        while True:
            command, argument = conn.recv()
            if command == "close":
                break
            try:
                if command == "reset":
                    result: Any = envs.reset_host(argument)
                else:  # step: the step's results and the episodes that ended in it
                    result = envs.step_host(argument), envs.pop_finished()
                conn.send(("ok", result))
            except Exception as exc:  # the trainer raises it; the worker stays up for close
                conn.send(("error", (isinstance(exc, FastPPOError), str(exc), traceback.format_exc())))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the trainer is gone
    except Exception as exc:  # building the copies failed
        conn.send(("error", (isinstance(exc, FastPPOError), str(exc), traceback.format_exc())))
    finally:
        if envs is not None:
            envs.close()
        conn.close()


class PettingZooWorkers(HostCopies):
    """``len(env_fns)`` PettingZoo copies as ``PettingZooVecEnv``'s rows, split into ``cpus``
    blocks: the first stepped in this process, each other one in a worker process (see the
    module docstring)."""

    def __init__(self, env_fns: Sequence[Callable[[], Any]], cfg: MultiAgentConfig, device: torch.device, cpus: int):
        blocks = [block.tolist() for block in np.array_split(np.arange(len(env_fns)), max(1, min(cpus, len(env_fns))))]
        self._offsets = [block[0] for block in blocks]
        self._pipes: list[Connection] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []
        context = multiprocessing.get_context()  # the platform's default, as gymnasium's AsyncVectorEnv
        self._local: PettingZooVecEnv | None = None
        try:
            for block in blocks[1:]:
                ours, theirs = context.Pipe()
                process = context.Process(
                    target=_serve,
                    args=(theirs, [env_fns[c] for c in block], cfg),
                    daemon=True,
                    name="fastppo-pettingzoo",
                )
                process.start()
                theirs.close()
                self._pipes.append(ours)
                self._processes.append(process)
            self._local = PettingZooVecEnv([env_fns[c] for c in blocks[0]], cfg, torch.device("cpu"))
            self._ask([None] * len(self._pipes), lambda: None)  # each worker reports once its copies are built
        except BaseException:
            self.close()
            raise
        self.spaces = self._local.spaces
        self.agents = self.spaces.agents
        self.num_envs = len(env_fns) * len(self.agents)
        self.single_observation_space = self.spaces.observation_space
        self.single_action_space = self.spaces.action_space
        self.layout = self.spaces.layout
        self.device = device
        self._block_rows = [len(block) * len(self.agents) for block in blocks]
        self._episodes: list[FinishedEpisode] = []

    def _receive(self, pipe: Connection) -> Any:
        try:
            status, value = pipe.recv()
        except (EOFError, OSError):
            raise FastPPOError(DIED) from None
        if status == "ok":
            return value
        is_fastppo, message, trace = value
        if is_fastppo:
            raise FastPPOError(message)
        raise RuntimeError(f"a PettingZoo env worker failed:\n{trace}")

    def _ask(self, messages: list[tuple[str, Any] | None], local: Callable[[], Any]) -> list[Any]:
        """Sends each worker its message (None: nothing, only the answer), runs ``local`` (the
        first block's share) meanwhile, and returns the answers, ``local``'s first. Every worker
        that got its message answers before an error is raised: no answer is left in a pipe."""
        sent = []
        for pipe, message in zip(self._pipes, messages):
            try:
                if message is not None:
                    pipe.send(message)
                sent.append(True)
            except OSError:  # BrokenPipeError: that worker is gone
                sent.append(False)
        answers: list[Any] = []
        errors: list[Exception] = []
        try:
            answers.append(local())
        except Exception as exc:
            errors.append(exc)
        for pipe, ok in zip(self._pipes, sent):
            try:
                if not ok:
                    raise FastPPOError(DIED)
                answers.append(self._receive(pipe))
            except (FastPPOError, RuntimeError) as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        return answers

    def reset(self, seed: int | None = None) -> StepResult:
        seeds = [None if seed is None else seed + offset for offset in self._offsets]
        local = self._local
        assert local is not None, "reset() after close()"
        rows, masks, live = zip(*self._ask([("reset", s) for s in seeds[1:]], lambda: local.reset_host(seeds[0])))
        return self.first_step(np.concatenate(rows), _join(masks), live=np.concatenate(live))

    def step(self, actions: torch.Tensor) -> StepResult:
        host = self.to_host(actions)
        blocks = np.split(host, np.cumsum(self._block_rows)[:-1])
        local = self._local
        assert local is not None, "step() after close()"
        steps, episodes = zip(
            *self._ask(
                [("step", block) for block in blocks[1:]],
                lambda: (local.step_host(blocks[0]), local.pop_finished()),
            )
        )
        # the sync backend records a step's episodes in copy order, and the blocks are in copy order
        self._episodes.extend(episode for block in episodes for episode in block)
        rows, reward, terminated, truncated, masks, live = zip(*steps)
        return self.to_device(
            np.concatenate(rows),
            np.concatenate(reward),
            np.concatenate(terminated),
            np.concatenate(truncated),
            _join(masks),
            np.concatenate(live),
        )

    def pop_episodes(self) -> Episodes:
        episodes = self._episodes
        self._episodes = []
        return team_episodes(episodes, self.spaces)

    def close(self) -> None:
        for pipe in self._pipes:
            try:
                pipe.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
        for pipe in self._pipes:
            pipe.close()
        self._pipes, self._processes = [], []
        if self._local is not None:
            self._local.close()
            self._local = None


def _join(masks: tuple[np.ndarray | None, ...]) -> np.ndarray | None:
    published = [m for m in masks if m is not None]
    if not published:
        return None
    if len(published) < len(masks):
        raise FastPPOError(MASKS_SOMETIMES)
    return np.concatenate(published)

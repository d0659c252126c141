"""Stopping a run by signal: after the current iteration with a checkpoint (``StopRequest``), or
during its start-up with one line (``during_start_up``)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from fastppo.errors import Interrupted, take_pending_signal
from fastppo.training.distributed import LONE, World


class StopRequest:
    """SIGINT/SIGTERM handlers that ask the loop to stop after the current iteration and save a
    checkpoint, instead of dying mid-update.

    A second signal stops at once where the state is half way through an iteration (``Interrupted``,
    its note saying which iterations are lost); where the state is whole (the iteration's update is
    done) and a save takes under a second, the loop goes on to its save (``at_once``).

    Under torchrun (a ``world`` of several ranks) the ranks see a signal at different moments, or only some of them
    do: a signal counts once ``agree`` (once per iteration, on every rank) has told every rank that
    some rank saw one, so that all stop after the same iteration. There a repeat does not stop at
    once: torchrun forwards the signal it gets, so a Ctrl-C reaches each rank twice (from the
    terminal and from torchrun), and torchrun kills ranks still running 30 s later anyway.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    repeat_grace = 0.0
    """Seconds after the first signal in which a repeat is the same stop request arriving twice,
    not a second one: 1 in a ``--seeds`` worker process (fastppo.experiments.seeds), whose parent passes on a
    signal that the terminal (Ctrl-C) or a job scheduler (SIGTERM to every process) sent it too."""
    job: Any = None
    """In a ``--seeds`` worker, the stop of the whole job, shared by its processes: ``job.value`` is
    the signal (0: none). A signal that came before this run's handlers were set (in its start-up)
    stops it too, and one that this run took stops the worker's next seeds."""

    def __init__(self, enabled: bool, world: World = LONE):
        # Python only lets the main thread install signal handlers.
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.world = world
        self.signal: int | None = None
        self.at_once = False
        """Whether a second signal raises ``Interrupted`` now (set by the loop while it would be lost)."""
        self.lost = ""
        """What a stop at once loses, in words (kept current by the loop)."""
        self._seen: int | None = None  # under torchrun, until agreed
        self._since = 0.0  # when the first signal came
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.world.size > 1:
            self._seen = self._seen or signum
            return
        if self.signal is not None:
            if time.monotonic() - self._since >= self.repeat_grace and self.at_once:
                raise Interrupted(signum, f"{signal.Signals(signum).name} again: stopped at once; {self.lost}")
            return
        self.signal, self._since = signum, time.monotonic()
        if self.job is not None:
            self.job.value = self.job.value or signum

    def agree(self) -> None:
        """Under torchrun, make a signal seen by any rank a stop request on every rank (a collective)."""
        if self.enabled and self.world.size > 1 and self.signal is None:
            self.signal = self.world.max(self._seen or 0) or None

    @property
    def requested(self) -> bool:
        if self.signal is None and self.enabled and self.job is not None and self.job.value:
            self.signal, self._since = self.job.value, time.monotonic()
        return self.signal is not None

    def __enter__(self) -> StopRequest:
        if self.enabled:
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
            pending = (
                take_pending_signal()
            )  # one that start-up lost (fastppo.errors.stop_at_once): a stop before the first iteration
            if pending is not None:
                self.__exit__()
                raise Interrupted(pending)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)


def lost_since(checkpoint: Path | None, iteration: int, resume: str) -> str:
    """What a stop at once in ``iteration`` (cut short, or done but not yet saved) loses, in words;
    ``resume`` is the command that continues the run."""
    if checkpoint is None:
        return f"no checkpoint had been saved: the run's {iteration} iterations are lost"
    lost = iteration - int(checkpoint.name)
    return (
        f"the {lost} iteration{'s' if lost > 1 else ''} since checkpoint {checkpoint.name} "
        f"{'are' if lost > 1 else 'is'} lost; resume with: {resume}"
    )


@contextmanager
def during_start_up() -> Iterator[None]:
    """A signal that stops a run before its loop's handlers are set (building envs and policy):
    one line saying so. (Those the loop handles return normally, or raise ``Interrupted`` with a note.)"""
    try:
        yield
    except KeyboardInterrupt as exc:
        if getattr(exc, "note", None):
            raise
        name = signal.Signals(getattr(exc, "signum", signal.SIGINT)).name
        raise Interrupted(
            getattr(exc, "signum", signal.SIGINT),
            f"{name} during start-up: stopped before the first iteration, nothing was trained",
        ) from None

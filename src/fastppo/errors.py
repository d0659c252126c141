"""Errors a user can cause. The CLI prints them as one line and exits with code 2; and the stop of
a command by a signal."""

from __future__ import annotations

from types import FrameType


class FastPPOError(Exception):
    """Bad input (env id, preset, hyperparameter, space, file): the message names the problem and
    the fix. Raised anywhere; turned into ``fastppo: error: <message>`` and exit code 2 by the CLI."""


def install_extra(extra: str) -> str:
    """The command that installs one of fastppo's extras, for an error's fix: fastppo is installed
    from its repository (``pip install -e .``), so ``pip install 'fastppo[...]'`` finds nothing
    outside a clone."""
    return f'pip install -e ".[{extra}]" in the fastppo repository'


class Interrupted(KeyboardInterrupt):
    """A stop at once by a signal (a second Ctrl-C or SIGTERM in training, or one outside it):
    the CLI prints ``fastppo: <note>`` and exits 128 + ``signum``, as a shell reports a process
    the signal killed, without a traceback. ``note`` says what was lost (None: nothing to say)."""

    def __init__(self, signum: int, note: str | None = None):
        super().__init__(note)
        self.signum, self.note = signum, note


_pending_signal: int | None = None


def stop_at_once(signum: int, frame: FrameType | None) -> None:
    """The command's SIGINT and SIGTERM handler where no training loop's waits for them
    (``fastppo.cli.main.console`` sets it first thing): ``Interrupted`` now. Python drops an
    exception raised where none can propagate (in a ``__del__``, a garbage-collector or weakref
    callback), and start-up (imports, envs) runs many of those: the signal is kept too, and a run
    takes it (``take_pending_signal``) before its first iteration, so that no Ctrl-C is lost."""
    global _pending_signal
    _pending_signal = signum
    raise Interrupted(signum)


def take_pending_signal() -> int | None:
    """The signal ``stop_at_once`` took since the last call, if any (None: none)."""
    global _pending_signal
    signum, _pending_signal = _pending_signal, None
    return signum

"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""


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

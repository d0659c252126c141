"""Errors a user can cause. The CLI prints them as one line and exits with code 2."""


class FastPPOError(Exception):
    """Bad input (env id, preset, hyperparameter, space, file): the message names the problem and
    the fix. Raised anywhere; turned into ``fastppo: error: <message>`` and exit code 2 by the CLI."""

"""What every subcommand's parser shares: one-line usage errors and the boolean flag spellings."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from fastppo.errors import FastPPOError


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse prints usage plus the error over several lines; we want one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise FastPPOError(f"{message} (see '{self.prog} --help')")


def add_boolean_flag(
    group: Any,
    flags: list[str],
    dest: str,
    text: str,
    shown: Any,
    default: Any = argparse.SUPPRESS,
    parse: Callable[[str], Any] | None = None,
) -> None:
    """A boolean option in the spellings every command accepts: ``--x`` (true), ``--x V`` (true,
    false, yes, no, 1, 0...: read by ``parse``, else left as text) and ``--no-x`` (false;
    ``--section.no-x`` for ``--section.x``). ``text`` is the help, ``shown`` the default it names."""
    negations = [f"--{prefix}{dot}no-{name}" for prefix, dot, name in (flag[2:].rpartition(".") for flag in flags)]
    group.add_argument(
        *flags,
        dest=dest,
        default=default,
        nargs="?",
        const=True,
        type=parse,
        metavar="V",
        help=f"{text} (default: {shown}; {negations[-1]}: false)",
    )
    # A separate flag that takes no value, so that `--no-progress CartPole-v1` leaves the env id alone.
    group.add_argument(
        *negations, dest=dest, default=default, action="store_const", const=False, help=argparse.SUPPRESS
    )

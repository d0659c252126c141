"""`fastppo` command line: one subcommand per job, each registered by the module that owns it.

Any FastPPOError becomes one line on stderr and exit code 2; argparse's own usage errors are
shortened to one line too.
"""

from __future__ import annotations

import argparse
import sys

from fastppo.errors import FastPPOError


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse prints usage plus the error over several lines; we want one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise FastPPOError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="fastppo", description="Proximal Policy Optimization, fast and readable.")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=OneLineErrorParser)
    # Each module adds its subcommand(s) and sets `func` (args -> exit code); none imports a
    # heavy optional dependency (transformers, matplotlib, onnx) until its command runs.
    from fastppo import run_cli, train_cli
    from fastppo.rlhf import cli as rlhf_cli

    for module in (train_cli, run_cli, rlhf_cli):
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except FastPPOError as exc:
        print(f"fastppo: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

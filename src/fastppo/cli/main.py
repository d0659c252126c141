"""`fastppo` command line: one subcommand per job, each registered by the module that owns it.

Any FastPPOError becomes one line on stderr and exit code 2; argparse's own usage errors are
shortened to one line too.
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
import threading

from fastppo.cli.flags import OneLineErrorParser
from fastppo.errors import FastPPOError, Interrupted, stop_at_once


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="fastppo", description="Proximal Policy Optimization, fast and readable.")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=OneLineErrorParser)
    # Each module adds its subcommand(s) and sets `func` (args -> exit code); none imports a
    # heavy optional dependency (transformers, matplotlib, onnx) until its command runs.
    from fastppo.cli import play, report, rlhf, run, sweep, train

    for module in (train, run, play, report, sweep, rlhf):
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except FastPPOError as exc:
        from fastppo.training.distributed import ReportedError, defer_to_rank_zero

        prefix = None if isinstance(exc, ReportedError) else defer_to_rank_zero()
        if prefix is not None:
            print(f"fastppo: error: {prefix}{exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C (or SIGTERM: ``console``) where no handler of ours waits for it
        signum = getattr(exc, "signum", signal.SIGINT)
        print(
            f"fastppo: {getattr(exc, 'note', None) or f'{signal.Signals(signum).name}: stopped at once'}",
            file=sys.stderr,
        )
        return 128 + signum  # as a shell reports a process the signal killed


def console() -> None:
    """The ``fastppo`` command: ``main()``, then a quick exit once it has returned.

    Python's own shutdown frees every module and object one by one, and with torch loaded that
    takes ~0.4-0.8 s on 2 cores after the command's work is done (benchmarks/README.md, "Cold
    start"). Every command closes its files, env workers and TensorBoard writer before returning,
    so once the interpreter's own thread shutdown has run, the ``atexit`` handlers run and the
    streams flushed (as the interpreter would), the process ends with ``os._exit``. An exception
    other than a FastPPOError takes the normal path (traceback, exit code 1).
    """
    # Before anything else: SIGTERM as Ctrl-C (one line and exit 143, not a silent death), and
    # neither lost where start-up drops the exception (fastppo.errors.stop_at_once).
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop_at_once)
    code = main()
    # The command is done: a signal now (torchrun ending the other ranks of a failed launch) only
    # hurries the exit, with the command's own code, never a traceback from the shutdown below;
    # one that lands while the handlers are being swapped meets stop_at_once still, and the same.
    try:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: _exit(code))
    except Interrupted:
        _exit(code)
    # In the interpreter's order: threads, atexit, streams. threading._shutdown first runs the
    # threads' exit hooks, which tell idle thread pools (torch.compile's) to stop, then joins the
    # non-daemon threads: joining those pools' workers directly would wait forever.
    threading._shutdown()  # type: ignore[attr-defined]  # private, so not in typeshed's threading
    atexit._run_exitfuncs()
    _exit(code)


def _exit(code: int) -> None:
    """Flush the streams and end the process with ``code`` at once."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`fastppo eval --json | head -c 10`)
            pass
    os._exit(code)


if __name__ == "__main__":
    console()

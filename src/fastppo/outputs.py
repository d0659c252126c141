"""Where a command writes (a run directory, an ONNX file, a video, a plot), checked before the
expensive work: a path that cannot be written is one FastPPOError line up front, not a traceback
after minutes of training or rendering. Missing parent folders are created."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastppo.errors import FastPPOError


def output_file(path: str | Path, what: str) -> Path:
    """``path`` as a file that can be written (its folder created), else a FastPPOError naming
    ``what`` (e.g. "--onnx") and the problem."""
    path = Path(path)
    if path.is_dir():
        raise FastPPOError(f"{what} {path} is a folder: give a file path")
    _writable_folder(path.parent, what, path)
    return path


def output_dir(path: str | Path, what: str) -> Path:
    """``path`` as a folder that can be written (created with its parents), else a FastPPOError."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FastPPOError(f"{what} {path} is a file, not a folder: give a folder path (or remove the file)")
    _writable_folder(path, what, path)
    return path


@contextmanager
def writing(path: str | Path, what: str) -> Iterator[None]:
    """Turn an OSError while writing ``path`` (disk full, a folder gone) into the same one line."""
    try:
        yield
    except OSError as exc:
        raise FastPPOError(f"cannot write {what} {path}: {_reason(exc, Path(path))}") from None


def _writable_folder(folder: Path, what: str, path: Path) -> None:
    with writing(path, what):
        folder.mkdir(parents=True, exist_ok=True)
        # Permission bits prove nothing (root ignores them; a read-only mount or /proc refuses anyway):
        # create a nameless file there.
        with tempfile.TemporaryFile(dir=folder):
            pass


def _reason(exc: OSError, path: Path) -> str:
    blocker = next((p for p in (*reversed(path.parents), path) if p.exists() and not p.is_dir()), None)
    if blocker is not None and blocker != path:
        return f"{blocker} is a file, not a folder: pick another path"
    return f"{exc.strerror or exc}: pick a writable folder"

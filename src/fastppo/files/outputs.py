"""Where a command writes (a run directory, an ONNX file, a video, a plot), checked before the
expensive work: a path that cannot be written is one FastPPOError line up front, not a traceback
after minutes of training or rendering. Missing parent folders are created."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from fastppo.errors import FastPPOError


def output_file(path: str | Path, what: str, suffixes: Collection[str] = ()) -> Path:
    """``path`` as a file that can be written (its folder created), else a FastPPOError naming
    ``what`` (e.g. "--onnx") and the problem; ``suffixes`` (".png", ...), if given, are the
    endings the writer understands. A link at ``path`` is refused (``no_links``)."""
    path = Path(path)
    no_links(path, what)
    if path.is_dir():
        raise FastPPOError(f"{what} {path} is a folder: give a file path")
    if suffixes and path.suffix.lower() not in suffixes:
        problem = (
            f"ends in '{path.suffix}', a file type it cannot be written as"
            if path.suffix
            else "has no file type ending"
        )
        raise FastPPOError(f"{what} {path} {problem}: end the name in {', '.join(sorted(suffixes))}")
    _writable_folder(path.parent, what, path)
    return path


def no_links(path: Path, what: str, inside: Path | None = None) -> None:
    """A FastPPOError when ``path`` is a symbolic link (writing it would write wherever the link
    points), or, with ``inside`` (the run folder a default output lies in, e.g. RUN/videos/...),
    when a folder between ``inside`` and ``path`` is one: outputs are regular files in the folder."""
    between = (
        [] if inside is None else [inside / part for part in path.relative_to(inside).parents if part != Path(".")]
    )
    link = next((p for p in (path, *between) if p.is_symlink()), None)
    if link is not None:
        where = "is a symbolic link" if link == path else f"lies in {link}, a symbolic link"
        raise FastPPOError(
            f"{what} {path} {where}, and fastppo writes no file through one: remove the link, or give another path"
        )


def output_dir(path: str | Path, what: str) -> Path:
    """``path`` as a folder that can be written (created with its parents), else a FastPPOError."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FastPPOError(f"{what} {path} is a file, not a folder: give a folder path (or remove the file)")
    _writable_folder(path, what, path)
    return path


def check_creatable_folder(path: str | Path, what: str) -> None:
    """A FastPPOError when the folder ``path`` could not be made (a file on its way, a folder that
    refuses writes); nothing is created, so a command that then fails on other input leaves no trace."""
    path = Path(path)
    nearest = next(p for p in (path, *path.parents) if p.exists())
    with writing(path, what):
        if not nearest.is_dir():
            raise NotADirectoryError(f"{nearest} is not a folder")
        with tempfile.TemporaryFile(dir=nearest):
            pass


@contextmanager
def writing(path: str | Path, what: str) -> Iterator[None]:
    """Turn an OSError while writing ``path`` (disk full, a folder gone) into the same one line."""
    try:
        yield
    except OSError as exc:
        raise FastPPOError(f"cannot write {what} {path}: {_reason(exc, Path(path))}") from None


def new_folders(*paths: Path | None) -> list[Path]:
    """The folders among ``paths`` (None skipped) and their ancestors that do not exist yet, deepest first."""
    fresh = {
        folder
        for path in paths
        if path is not None
        for folder in (Path(path), *Path(path).parents)
        if not folder.exists()
    }
    return sorted(fresh, key=lambda folder: len(folder.parts), reverse=True)


def remove_if_empty(folders: list[Path]) -> None:
    """Remove each of ``folders`` that holds no file at any depth (a failed start's leftovers:
    nothing in them can be lost)."""
    for folder in folders:
        if folder.is_dir() and not any(p.is_file() or p.is_symlink() for p in folder.rglob("*")):
            shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def removed_if_left_empty(*paths: Path | None) -> Iterator[None]:
    """Run the block; if it raises, remove the folders of ``paths`` it made (their new parents
    too) that are still empty. A run that cannot start (an env that does not build, a policy that
    does not fit it) then leaves no empty run folder in runs/, where ``fastppo report runs/``
    would stop at it."""
    fresh = new_folders(*paths)
    try:
        yield
    except BaseException:
        remove_if_empty(fresh)
        raise


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

"""Files and folders replaced atomically: a reader (or a resume after a crash, even a power cut)
sees the old version or the new one, never half of either."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` so that a reader sees the old or the new file, never half."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def publish_folder(tmp: Path, final: Path) -> None:
    """Give the complete folder ``tmp`` the name ``final``: every file and folder in it fsynced
    first, so that a folder with a final name is complete even after a power cut. An existing
    ``final`` (an iteration saved again after a resume) is moved aside before and deleted after,
    never deleted while it is the only copy."""
    for folder, _, files in os.walk(tmp, topdown=False):
        for name in files:
            _fsync_file(Path(folder, name))
        _fsync_dir(Path(folder))
    if final.exists():
        old = final.with_name(f".old-{final.name}-{os.getpid()}")
        os.replace(final, old)
        try:
            os.replace(tmp, final)
        except OSError:
            os.replace(old, final)  # the good one back under its name
            raise
        shutil.rmtree(old)
    else:
        os.replace(tmp, final)
    _fsync_dir(final.parent)

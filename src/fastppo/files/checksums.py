"""SHA-256 checksums of the files a save writes, kept beside them in ``SHA256SUMS`` (the format of
``sha256sum``: ``sha256sum -c SHA256SUMS`` checks a folder by hand). A flipped byte that leaves a
safetensors file readable, its values finite, is seen only this way. A folder without the file
(written before checksums were kept) is read as it is."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from fastppo.files.atomic import atomic_write_text

CHECKSUMS_FILE = "SHA256SUMS"
_LINE = re.compile(r"([0-9a-f]{64})  ([^/\\\n]+)")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: Path, names: Iterable[str]) -> None:
    """Replace ``folder``'s SHA256SUMS by the checksums of its files ``names`` (atomically)."""
    atomic_write_text(folder / CHECKSUMS_FILE, "".join(f"{sha256(folder / name)}  {name}\n" for name in names))


def checksum_problem(folder: Path, names: Iterable[str]) -> str | None:
    """What is wrong with ``folder``'s files ``names`` by its SHA256SUMS (a file whose bytes are
    not the ones written, one the list lacks, a damaged list), or None: all match, or the folder
    keeps no checksums."""
    listing = folder / CHECKSUMS_FILE
    if not listing.is_file():
        return None
    try:
        lines = listing.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return f"{CHECKSUMS_FILE} cannot be read ({exc})"
    listed: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        match = _LINE.fullmatch(line)
        if match is None:
            return f"{CHECKSUMS_FILE} line {number} is not '<sha256>  <file>'"
        listed[match[2]] = match[1]
    for name in names:
        if name not in listed:
            return f"{CHECKSUMS_FILE} lists no checksum for {name}"
        if sha256(folder / name) != listed[name]:
            return f"{name} changed since it was written (its SHA-256 is not the one in {CHECKSUMS_FILE})"
    return None

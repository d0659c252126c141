"""TensorBoard event files for scalars and a text table, written directly (no tensorboard import).

``torch.utils.tensorboard.SummaryWriter`` costs a fresh process ~150 ms of imports (tensorboard's
summary package pulls in its TensorFlow stub, absl flags and fsspec) and, during training, one
protobuf, one hand-off to a writer thread and one pure-Python CRC per scalar: with ~25 scalars
an iteration and its queue of 10, the loop waited on that thread for milliseconds per iteration
on 2 cores (benchmarks/README.md, "Cold start"). ``EventWriter`` writes the same records — the
TFRecord framing (length, masked CRC-32C, data, masked CRC-32C) around ``Event`` protobufs,
encoded here by hand — with one event per logged step holding all its scalars, and flushes
after each, so a live TensorBoard shows every iteration as it ends. tests/test_tensorboard.py reads
the files back with TensorBoard's own loader and compares them with SummaryWriter's.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from pathlib import Path

FILE_VERSION = b"brain.Event:2"
WRITER = b"fastppo.tensorboard"
"""Named in the first event's source metadata, as SummaryWriter names its own writer module."""
_writer_ids = itertools.count()


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``, masked as TFRecord stores it."""
    crc, table = 0xFFFFFFFF, _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF  # int64 as protobuf encodes it (a negative step takes 10 bytes)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (string, bytes or message)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(step: int | None = None, *, file_version: bytes = b"", summary: bytes = b"", session_start: bool = False, source: bytes = b"") -> bytes:
    """tensorboard's ``Event``: wall_time = 1 (double), step = 2, file_version = 3, summary = 5,
    session_log = 7 (``SessionLog.status`` = 1, START = 1), source_metadata = 10 (writer = 1)."""
    out = b"\x09" + struct.pack("<d", time.time())
    if step is not None:
        out += b"\x10" + _varint(step)
    if file_version:
        out += _field(3, file_version)
    if summary:
        out += _field(5, summary)
    if session_start:
        out += _field(7, b"\x08\x01")
    if source:
        out += _field(10, _field(1, source))
    return out


def scalar_value(tag: str, value: float) -> bytes:
    """``Summary.Value`` with tag = 1 and simple_value = 2 (float32), as SummaryWriter.add_scalar."""
    return _field(1, _field(1, tag.encode()) + b"\x15" + struct.pack("<f", float(value)))


def text_value(tag: str, text: str) -> bytes:
    """``Summary.Value`` as SummaryWriter.add_text makes it: tag ``TAG/text_summary``, metadata
    (9) naming the "text" plugin, and a DT_STRING (7) tensor (8) of shape [1] holding the text."""
    metadata = _field(1, _field(1, b"text"))
    tensor = b"\x08\x07" + _field(2, _field(2, b"\x08\x01")) + _field(8, text.encode())
    return _field(1, _field(1, f"{tag}/text_summary".encode()) + _field(8, tensor) + _field(9, metadata))


class EventWriter:
    """Writes ``events.out.tfevents.*`` into ``log_dir`` (named as SummaryWriter names them).

    ``purge_step``: on resume, TensorBoard hides the events an interrupted run logged at that step
    or later (SummaryWriter's ``purge_step``: a file-version event and a session START at it).
    """

    def __init__(self, log_dir: str | Path, purge_step: int | None = None):
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_writer_ids)}"
        self.path = log_dir / name
        self._file = self.path.open("wb")
        self._write(_event(file_version=FILE_VERSION, source=WRITER))
        if purge_step is not None:
            self._write(_event(purge_step, file_version=FILE_VERSION))
            self._write(_event(purge_step, session_start=True))
        self._file.flush()

    def _write(self, event: bytes) -> None:
        header = struct.pack("<Q", len(event))
        self._file.write(header + struct.pack("<I", masked_crc32c(header)) + event + struct.pack("<I", masked_crc32c(event)))

    def add_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """One event at ``step`` holding every scalar of ``scalars`` (tag -> value)."""
        self._write(_event(step, summary=b"".join(scalar_value(tag, value) for tag, value in scalars.items())))
        self._file.flush()

    def add_text(self, tag: str, text: str, step: int | None = None) -> None:
        self._write(_event(step, summary=text_value(tag, text)))
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

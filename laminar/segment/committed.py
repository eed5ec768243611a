"""The ``committed`` file: a persisted lower bound of a replica's high watermark.

Raft keeps the commit index in memory only: a restarted replica learns it again
from its leader. Readers of the segment files themselves (the offline Spark
reader, ``laminar_spark.offline``) have no leader to ask, so each partition
directory holds a small ``committed`` file: every offset below the value it holds
was known committed by this replica when it was written. The node writes it when
the high watermark has moved, at most once per ``HostConfig.committed_save_ms``
per partition (only the changed ones, in one batch for the whole node) and on a
clean close.

It is created as ``committed.tmp`` renamed over ``committed``, then overwritten
in place (24 bytes at offset 0, within one disk sector): a rename per save cost
about 0.45 ms of journal work, and a failover that moves thousands of watermarks
at once spent seconds of a thread on it and slowed the node's filesystem syncs. A
reader that catches a write half done sees a checksum mismatch and reads again.
There is no fsync: after a crash the file may hold an older value (or be missing,
or damaged, which counts as missing), and an older value is still a lower bound.
The value may exceed the log's end after a crash that lost unsynced appends (only
with fsync off); readers cut it to the data they find, and the node removes such a
file when it opens the log (see ``ReplicaHost.open_replica``).

Layout (24 bytes, little-endian)::

    offset size  field
         0    4  magic     b"LMCT"
         4    1  version   1
         5    3  reserved  0
         8    8  offset    i64, >= 0: every offset below it is committed
        16    8  checksum  xxh3-64 of bytes [0, 16)
"""

from __future__ import annotations

import contextlib
import os
import struct

import xxhash

from laminar.errors import StorageError
from laminar.segment.layout import COMMITTED_FILE, committed_path, replace_file

__all__ = [
    "COMMITTED_FILE",
    "FILE_BYTES",
    "CommittedFileError",
    "committed_path",
    "decode_committed",
    "encode_committed",
    "read_committed",
    "remove_committed",
    "write_committed",
]

_MAGIC = b"LMCT"
_VERSION = 1
_BODY = struct.Struct("<4sB3xq")
_CHECKSUM = struct.Struct("<Q")
FILE_BYTES = _BODY.size + _CHECKSUM.size
_OFFSET_MAX = 2**63 - 1


class CommittedFileError(StorageError):
    """A ``committed`` file that is not one (wrong size, magic, version or checksum)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"bad committed file {path}: {reason}")
        self.path = path
        self.reason = reason


def encode_committed(offset: int) -> bytes:
    """The file's 24 bytes for ``offset``."""
    if not 0 <= offset <= _OFFSET_MAX:
        raise ValueError(f"committed offset must be in [0, 2**63), got {offset}")
    body = _BODY.pack(_MAGIC, _VERSION, offset)
    return body + _CHECKSUM.pack(xxhash.xxh3_64_intdigest(body))


def decode_committed(data: bytes, path: str) -> int:
    """The offset held by a file's bytes; raises :class:`CommittedFileError`."""
    if len(data) != FILE_BYTES:
        raise CommittedFileError(path, f"{len(data)} bytes, expected {FILE_BYTES}")
    magic, version, offset = _BODY.unpack_from(data)
    if magic != _MAGIC:
        raise CommittedFileError(path, f"magic {magic!r}, expected {_MAGIC!r}")
    if version != _VERSION:
        raise CommittedFileError(path, f"version {version}, this code reads {_VERSION}")
    (stored,) = _CHECKSUM.unpack_from(data, _BODY.size)
    if stored != xxhash.xxh3_64_intdigest(data[: _BODY.size]):
        raise CommittedFileError(path, "checksum mismatch")
    if offset < 0:
        raise CommittedFileError(path, f"negative offset {offset}")
    return int(offset)


def write_committed(directory: str, offset: int) -> None:
    """Set ``directory``'s committed file to ``offset``: in place when it exists,
    else created whole by rename (no fsync: see the module docstring). Raises
    ``OSError`` (e.g. the directory is gone)."""
    path = committed_path(directory)
    data = encode_committed(offset)
    try:
        descriptor = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        replace_file(path, data, durable=False)
        return
    try:
        in_place = os.fstat(descriptor).st_size == FILE_BYTES  # else: replaced whole
        if in_place and os.pwrite(descriptor, data, 0) != len(data):  # never split in practice
            raise OSError(f"short write to {path}")
    finally:
        os.close(descriptor)
    if not in_place:
        replace_file(path, data, durable=False)


def read_committed(directory: str) -> int | None:
    """The offset in ``directory``'s committed file; None when there is none.

    Opens the file read-only and never changes anything. Raises
    :class:`CommittedFileError` for a damaged file, ``OSError`` when it cannot be read.
    """
    path = committed_path(directory)
    for _ in range(_READ_ATTEMPTS - 1):
        data = _read_bytes(path)
        if data is None:
            return None
        with contextlib.suppress(CommittedFileError):  # maybe a write under way
            return decode_committed(data, path)
    data = _read_bytes(path)
    return None if data is None else decode_committed(data, path)


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read(FILE_BYTES + 1)
    except FileNotFoundError:
        return None


_READ_ATTEMPTS = 3
"""Reads of a file whose checksum fails (a node may be overwriting it) before it
counts as damaged."""


def remove_committed(directory: str) -> None:
    """Delete ``directory``'s committed file if there is one."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(committed_path(directory))

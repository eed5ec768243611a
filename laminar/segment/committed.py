"""The ``committed`` file: a persisted lower bound of a replica's high watermark.

Raft keeps the commit index in memory only: a restarted replica learns it again
from its leader. Readers of the segment files themselves (the offline Spark
reader, ``laminar_spark.offline``) have no leader to ask, so each partition
directory holds a small ``committed`` file: every offset below the value it holds
was known committed by this replica when it was written. The node writes it when
the high watermark has moved, at most once per ``HostConfig.committed_save_ms``
per partition (only the changed ones, in one batch for the whole node) and on a
clean close.

It is written to ``committed.tmp`` and renamed over ``committed``, so a reader
sees the old value or the new one, never a mix; there is no fsync: after a crash
the file may hold an older value (or be missing), and an older value is still a
lower bound. The value may exceed the log's end after a crash that lost unsynced
appends (only with fsync off); readers cut it to the data they find, and the
node removes such a file when it opens the log (see ``ReplicaHost.open_replica``).

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

__all__ = [
    "COMMITTED_FILE",
    "FILE_BYTES",
    "CommittedFileError",
    "decode_committed",
    "encode_committed",
    "read_committed",
    "remove_committed",
    "write_committed",
]

COMMITTED_FILE = "committed"
_TEMPORARY_SUFFIX = ".tmp"
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
    """Atomically replace ``directory``'s committed file with ``offset`` (no fsync:
    see the module docstring). Raises ``OSError`` (e.g. the directory is gone)."""
    path = os.path.join(directory, COMMITTED_FILE)
    temporary = path + _TEMPORARY_SUFFIX
    data = encode_committed(offset)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if os.write(descriptor, data) != len(data):  # 24 bytes: never split in practice
            raise OSError(f"short write to {temporary}")
    finally:
        os.close(descriptor)
    os.replace(temporary, path)


def read_committed(directory: str) -> int | None:
    """The offset in ``directory``'s committed file; None when there is none.

    Opens the file read-only and never changes anything. Raises
    :class:`CommittedFileError` for a damaged file, ``OSError`` when it cannot be read.
    """
    path = os.path.join(directory, COMMITTED_FILE)
    try:
        with open(path, "rb") as file:
            data = file.read(FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    return decode_committed(data, path)


def remove_committed(directory: str) -> None:
    """Delete ``directory``'s committed file if there is one."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(directory, COMMITTED_FILE))

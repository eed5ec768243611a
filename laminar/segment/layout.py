"""A node's data directory: the name of every file and directory in it, and the
one way to replace a file in it.

The tree (``docs/disk.md`` specifies each file byte by byte)::

    <data_dir>/
      node.json                       the node's identity           NODE_FILE
      founded                         the founded offset            FOUNDED_FILE
      keyring.json                    gossip keys, if any           KEYRING_FILE
      partitions/                                                   PARTITIONS_DIR
        <topic>/<partition>/          one replica's log             partition_directory()
          <base:020d>.log             a segment: batches            segment_path()
          <base:020d>.index           its offset index (sealed)     index_path()
          <base:020d>.timeindex       its time index (sealed)       time_index_path()
          <base:020d>.log.tmp         a segment's replacement       replacement_path()
          state                       consensus state, two slots    STATE_FILE
          committed                   a committed-offset bound      COMMITTED_FILE
      quarantine/                     damaged files set aside       QUARANTINE_DIR
        <topic>/<partition>/<time>/   one finding                   quarantine_entry_directory()
          note.json, <file>, <file>.from-<position>

A file replaced whole is written as ``<name>.tmp`` in the same directory and
renamed over ``<name>`` (:func:`replace_file`), so that a reader or a crash sees
the old file or the new one, never a mix. Opening a log removes any ``*.tmp`` left
in its directory by a crash; the node-level ones are overwritten by the next save.

Only this module spells these names; writers and readers (the node, the segment
log, the offline Spark reader) ask it for paths, and parse names with it.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

__all__ = [
    "COMMITTED_FILE",
    "FOUNDED_FILE",
    "INDEX_SUFFIX",
    "INDEX_SUFFIXES",
    "KEYRING_FILE",
    "NODE_FILE",
    "NOTE_FILE",
    "PARTITIONS_DIR",
    "QUARANTINE_DIR",
    "SEGMENT_DIGITS",
    "SEGMENT_SUFFIX",
    "SEGMENT_SUFFIXES",
    "STATE_FILE",
    "TEMPORARY_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "ReplicaDirectory",
    "committed_path",
    "excerpt_name",
    "founded_path",
    "fsync_directory",
    "index_path",
    "is_temporary",
    "keyring_path",
    "node_path",
    "parse_partition",
    "parse_segment_name",
    "partition_directory",
    "partitions_directory",
    "pwrite_all",
    "quarantine_directory",
    "quarantine_entry_directory",
    "replace_file",
    "replacement_path",
    "replica_directories",
    "segment_base_of",
    "segment_bases",
    "segment_name",
    "segment_path",
    "state_path",
    "temporary_path",
    "time_index_path",
]

NODE_FILE = "node.json"
FOUNDED_FILE = "founded"
KEYRING_FILE = "keyring.json"
"""The default place of the gossip keyring (``[gossip_encryption] keyring_file``
may put it elsewhere)."""
PARTITIONS_DIR = "partitions"
QUARANTINE_DIR = "quarantine"
NOTE_FILE = "note.json"
"""What a quarantine entry found and did (:class:`laminar.segment.quarantine.DamageNote`)."""
STATE_FILE = "state"
COMMITTED_FILE = "committed"
TEMPORARY_SUFFIX = ".tmp"

SEGMENT_SUFFIX = "log"
INDEX_SUFFIX = "index"
TIME_INDEX_SUFFIX = "timeindex"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
"""A segment's index files (written when it is sealed; rebuilt from the log)."""
SEGMENT_SUFFIXES = (SEGMENT_SUFFIX, *INDEX_SUFFIXES)
"""Every file of one segment, the log first."""
SEGMENT_DIGITS = 20
"""Digits of a segment's base offset in its names (zero-padded: 2**63 - 1 has 19)."""
_SEGMENT_NAME = re.compile(rf"([0-9]{{{SEGMENT_DIGITS}}})\.({'|'.join(SEGMENT_SUFFIXES)})")
_PARTITION_NAME = re.compile(r"0|[1-9][0-9]*")


# ---------------------------------------------------------------------- node files


def node_path(data_dir: str) -> str:
    return os.path.join(data_dir, NODE_FILE)


def founded_path(data_dir: str) -> str:
    return os.path.join(data_dir, FOUNDED_FILE)


def keyring_path(data_dir: str) -> str:
    """The keyring file's default path (see :data:`KEYRING_FILE`)."""
    return os.path.join(data_dir, KEYRING_FILE)


# ---------------------------------------------------------------------- replicas


def partitions_directory(data_dir: str) -> str:
    return os.path.join(data_dir, PARTITIONS_DIR)


def partition_directory(data_dir: str, topic: str, partition: int) -> str:
    """The directory of the replica of ``topic`` / ``partition`` (topic names hold
    no ``/``: :data:`laminar.server.metadata.TOPIC_NAME_PATTERN`)."""
    return os.path.join(data_dir, PARTITIONS_DIR, topic, str(partition))


def parse_partition(name: str) -> int | None:
    """The partition number a replica directory's name spells (``"0"``, ``"17"``);
    None for any other name (not written by a node: ignored)."""
    return int(name) if _PARTITION_NAME.fullmatch(name) else None


@dataclass(frozen=True, slots=True)
class ReplicaDirectory:
    """A replica directory found under ``partitions/``."""

    topic: str
    partition: int
    directory: str


def replica_directories(data_dir: str) -> list[ReplicaDirectory]:
    """Every replica directory under ``data_dir``'s ``partitions/``, by topic name
    then partition number; empty when there is no ``partitions/``. Entries that a
    node does not write (files, other names) are skipped."""
    root = partitions_directory(data_dir)
    if not os.path.isdir(root):
        return []
    found = []
    for topic in sorted(os.listdir(root)):
        topic_directory = os.path.join(root, topic)
        if not os.path.isdir(topic_directory):
            continue
        numbered = []
        for name in os.listdir(topic_directory):
            partition = parse_partition(name)
            directory = os.path.join(topic_directory, name)
            if partition is not None and os.path.isdir(directory):
                numbered.append((partition, directory))
        found += [ReplicaDirectory(topic, p, d) for p, d in sorted(numbered)]
    return found


def state_path(directory: str) -> str:
    """The state file of the replica in ``directory`` (:mod:`laminar.segment.statefile`)."""
    return os.path.join(directory, STATE_FILE)


def committed_path(directory: str) -> str:
    """The committed file of the replica in ``directory`` (:mod:`laminar.segment.committed`)."""
    return os.path.join(directory, COMMITTED_FILE)


# ---------------------------------------------------------------------- segments


def segment_name(base_offset: int, suffix: str = SEGMENT_SUFFIX) -> str:
    """``00000000000000000042.log`` for base offset 42 (``suffix``: one of
    :data:`SEGMENT_SUFFIXES`)."""
    assert 0 <= base_offset < 10**SEGMENT_DIGITS, base_offset
    assert suffix in SEGMENT_SUFFIXES, suffix
    return f"{base_offset:0{SEGMENT_DIGITS}d}.{suffix}"


def segment_path(directory: str, base_offset: int, suffix: str = SEGMENT_SUFFIX) -> str:
    return os.path.join(directory, segment_name(base_offset, suffix))


def index_path(directory: str, base_offset: int) -> str:
    return segment_path(directory, base_offset, INDEX_SUFFIX)


def time_index_path(directory: str, base_offset: int) -> str:
    return segment_path(directory, base_offset, TIME_INDEX_SUFFIX)


def replacement_path(directory: str, base_offset: int) -> str:
    """Where the new version of a sealed segment's ``.log`` is written before it is
    renamed over the old one (keyed compaction; a crash leaves it behind, and
    opening the log removes it: :func:`is_temporary`)."""
    return temporary_path(segment_path(directory, base_offset))


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """``(base offset, suffix)`` of a segment file's name; None for any other name."""
    match = _SEGMENT_NAME.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2)


def segment_base_of(name: str) -> int | None:
    """The base offset of a segment's ``.log`` file name; None for any other name
    (its index files included)."""
    parsed = parse_segment_name(name)
    return parsed[0] if parsed is not None and parsed[1] == SEGMENT_SUFFIX else None


def segment_bases(directory: str) -> list[int]:
    """The base offsets of the ``.log`` files in ``directory``, ascending."""
    bases = (segment_base_of(name) for name in os.listdir(directory))
    return sorted(base for base in bases if base is not None)


# ---------------------------------------------------------------------- quarantine


def quarantine_directory(data_dir: str) -> str:
    return os.path.join(data_dir, QUARANTINE_DIR)


def quarantine_entry_directory(data_dir: str, topic: str, partition: int, stamp: str) -> str:
    """Where one finding of damage to ``topic`` / ``partition`` is set aside
    (``stamp``: the UTC time it was found, ``20260101T120000.123456789Z``)."""
    return os.path.join(data_dir, QUARANTINE_DIR, topic, str(partition), stamp)


def excerpt_name(name: str, position: int) -> str:
    """The quarantine copy of file ``name`` from byte ``position`` on."""
    return f"{name}.from-{position}"


# ---------------------------------------------------------------------- writing


def temporary_path(path: str) -> str:
    """Where a new version of ``path`` is written before it is renamed over it."""
    return path + TEMPORARY_SUFFIX


def is_temporary(name: str) -> bool:
    """Whether ``name`` is a new version a crash left unrenamed (to be removed)."""
    return name.endswith(TEMPORARY_SUFFIX)


def replace_file(
    path: str,
    data: bytes,
    *,
    durable: bool = True,
    mode: int = 0o644,
    file_bytes: int | None = None,
) -> None:
    """Replace the file at ``path`` with ``data``, atomically: write
    :func:`temporary_path` in the same directory, rename it over ``path``. A reader,
    or the file after a crash, is the old version or the new one, never a mix.

    ``durable``: the temporary file is fsynced before the rename and the directory
    after it, so the new version survives a crash once this returns. False for a
    caller that accepts losing the write (the committed file) or syncs the whole
    filesystem later (a batch of new state files). ``mode``: of a newly created
    temporary file (before the umask). ``file_bytes``: the file's size when larger
    than ``data`` (the rest a hole, never written). Raises ``OSError``; the
    temporary file is removed then."""
    temporary = temporary_path(path)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            pwrite_all(descriptor, data, 0)
            if file_bytes is not None and file_bytes > len(data):
                os.ftruncate(descriptor, file_bytes)
            if durable:
                os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    if durable:
        fsync_directory(os.path.dirname(path) or ".")


def fsync_directory(directory: str) -> None:
    """Make the directory's entries (files created, renamed, removed) durable. The
    descriptor is opened for the call only: a log keeps no descriptor of its
    directory open (thousands of replicas, one file descriptor each saved)."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def pwrite_all(descriptor: int, data: bytes, position: int) -> None:
    """Write all of ``data`` at ``position`` of the open file (``pwrite`` may write less)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(descriptor, view, position)
        view = view[written:]
        position += written

"""Damaged files set aside: ``<data dir>/quarantine/``.

When a replica's storage is found damaged (a batch failing its checksums, a state
file with no valid copy, an unreadable committed file), the files involved are
copied (the damaged segment from the damage on, up to 64 MiB: the log keeps what
comes before; later segments hold nothing damaged and are deleted, to be repaired
from the peers) or moved (a file replaced anew) to
``quarantine/<topic>/<partition>/<time>/``, with ``note.json`` saying what was
found where: the file, the offset and byte position of the first damaged batch,
the stored and computed checksums when a checksum failed, the reason and the
time, and what the node did. Nothing in the quarantine is ever read again by the
node; an operator may inspect it and delete it (``laminar node start`` reports
its size at start).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from laminar.errors import CorruptSegmentError
from laminar.segment.layout import (
    NOTE_FILE,
    excerpt_name,
    fsync_directory,
    quarantine_directory,
    quarantine_entry_directory,
)

_LOG = logging.getLogger(__name__)

EXCERPT_BYTES_MAX = 64 << 20
"""The most of a damaged segment kept from the damage on: enough to study the
damaged batch and its neighbours, not a second copy of a 1 GiB segment (a disk
that rots may be short of space too)."""


@dataclass(frozen=True, slots=True)
class DamageNote:
    """What was found, and what was done (written as ``note.json``)."""

    replica: str
    """``topic/partition``."""
    reason: str
    file: str
    action: str
    offset: int | None = None
    position: int | None = None
    expected_checksum: str | None = None
    found_checksum: str | None = None
    time: str = ""

    @classmethod
    def of_segment(cls, replica: str, error: CorruptSegmentError, action: str) -> DamageNote:
        return cls(
            replica=replica,
            reason=error.reason,
            file=error.path,
            action=action,
            offset=error.offset,
            position=error.position,
            expected_checksum=None if error.expected is None else f"{error.expected:#018x}",
            found_checksum=None if error.found is None else f"{error.found:#018x}",
        )


def set_aside(
    data_dir: str,
    topic: str,
    partition: int,
    note: DamageNote,
    *,
    copy: Sequence[str] = (),
    move: Sequence[str] = (),
    excerpts: Sequence[tuple[str, int]] = (),
) -> str | None:
    """Copy ``copy`` and move ``move`` (paths; missing ones are skipped) into a new
    quarantine directory of the replica with ``note``; its path. ``excerpts``:
    ``(path, position)``, the bytes of ``path`` from ``position`` on (what a cut at
    ``position`` drops: the damaged batch and what followed it), at most
    :data:`EXCERPT_BYTES_MAX`, kept as ``<name>.from-<position>``. Durable when it
    returns (the files, the note and the directories are fsynced).

    Never fails for want of space or a failing disk, since the replica must open
    all the same: a copy that cannot be made is left out (the note says so), a file
    that cannot be moved is deleted (the caller needs it gone), and None is
    returned when not even the note could be written (the caller logs the note)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() % 10**9:09d}Z"
    directory = quarantine_entry_directory(data_dir, topic, partition, stamp)
    missing: list[str] = []
    try:
        os.makedirs(directory)
    except OSError as error:
        _LOG.error("cannot create quarantine directory %s: %s", directory, error)
        for path in move:
            _remove(path)
        return None
    for path in copy:
        if os.path.exists(path):
            target = os.path.join(directory, os.path.basename(path))
            try:
                shutil.copyfile(path, target)
                _fsync_file(target)
            except OSError as error:
                missing.append(f"no copy of {os.path.basename(path)} ({error.strerror})")
                _remove(target)
    for path, position in excerpts:
        target = os.path.join(directory, excerpt_name(os.path.basename(path), position))
        try:
            _copy_range(path, position, EXCERPT_BYTES_MAX, target)
        except FileNotFoundError:
            continue
        except OSError as error:
            missing.append(f"no copy of {os.path.basename(path)} ({error.strerror})")
            _remove(target)
    for path in move:
        if os.path.exists(path):
            try:
                os.replace(path, os.path.join(directory, os.path.basename(path)))
            except OSError as error:
                missing.append(f"{os.path.basename(path)} deleted, not kept ({error.strerror})")
                _remove(path)
    noted = note if note.time else _with_time(note)
    if missing:
        noted = DamageNote(**{**asdict(noted), "action": f"{noted.action}; {'; '.join(missing)}"})
    note_path = os.path.join(directory, NOTE_FILE)
    try:
        # A new file in a new directory: no older version to replace.
        with open(note_path, "w", encoding="utf-8") as file:
            json.dump(asdict(noted), file, indent=2)
            file.write("\n")
            file.flush()
            os.fsync(file.fileno())
        fsync_directory(directory)
        for path in move:
            fsync_directory(os.path.dirname(path))
        fsync_directory(os.path.dirname(directory))
    except OSError as error:
        _LOG.error("cannot write %s: %s", note_path, error)
        return None
    return directory


def _copy_range(path: str, position: int, length: int, target: str) -> None:
    with open(path, "rb") as source, open(target, "wb") as sink:
        source.seek(position)
        left = length
        while left > 0 and (chunk := source.read(min(left, 1 << 20))):
            sink.write(chunk)
            left -= len(chunk)
        sink.flush()
        os.fsync(sink.fileno())


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as error:
        _LOG.error("cannot delete %s: %s", path, error)


def quarantined_bytes(data_dir: str) -> int:
    """Bytes held in ``data_dir``'s quarantine (0 when there is none)."""
    total = 0
    for root, _dirs, files in os.walk(quarantine_directory(data_dir)):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                continue
    return total


def _with_time(note: DamageNote) -> DamageNote:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return DamageNote(**{**asdict(note), "time": now})


def _fsync_file(path: str) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)

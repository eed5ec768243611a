"""Staged consensus state: visible at once, durable only after sync()."""

from __future__ import annotations

from pathlib import Path

import pytest

from laminar.errors import StorageError
from laminar.segment import LogConfig, SegmentLog
from laminar.segment.memory import MemoryLog
from laminar.segment.statefile import SLOT_BYTES, StateFile, decode_slot


def on_disk(directory: Path) -> bytes | None:
    """What a restart would read from the state file."""
    return StateFile(str(directory)).load()


def slots(directory: Path) -> list[tuple[int, bytes] | None]:
    data = (directory / "state").read_bytes()
    size = len(data) // 2
    return [decode_slot(data[i * size : (i + 1) * size], size) for i in (0, 1)]


def tear(directory: Path, slot: int) -> None:
    """A crash in the middle of writing ``slot``: its bytes are garbage."""
    path = directory / "state"
    data = bytearray(path.read_bytes())
    size = len(data) // 2
    data[slot * size + 10 : slot * size + 40] = b"\xff" * 30
    path.write_bytes(bytes(data))


def test_segment_log_staged_state_is_written_by_sync(tmp_path: Path) -> None:
    with SegmentLog.open(str(tmp_path), LogConfig()) as log:
        log.save_state(b"one")
        log.stage_state(b"two")
        assert log.load_state() == b"two"
        assert on_disk(tmp_path) == b"one"  # not yet on disk
    with SegmentLog.open(str(tmp_path), LogConfig()) as log:
        assert log.load_state() == b"one"  # closed without a sync: the stage is gone
        log.stage_state(b"three")
        log.sync()
        assert on_disk(tmp_path) == b"three"
        log.stage_state(b"four")
        log.save_state(b"five")  # a durable save replaces any staged state
        log.sync()
    with SegmentLog.open(str(tmp_path), LogConfig()) as log:
        assert log.load_state() == b"five"


def test_memory_log_staged_state_is_lost_in_a_crash_before_sync() -> None:
    log = MemoryLog(fsync=False)
    log.save_state(b"one")
    log.stage_state(b"two")
    assert log.load_state() == b"two"
    assert log.crash().load_state() == b"one"
    log.sync()
    assert log.crash().load_state() == b"two"


def test_saves_alternate_slots_so_a_torn_write_leaves_the_previous_state(
    tmp_path: Path,
) -> None:
    with SegmentLog.open(str(tmp_path), LogConfig()) as log:
        log.save_state(b"one")
        log.save_state(b"two")
        log.save_state(b"three")
    assert (tmp_path / "state").stat().st_size == 2 * SLOT_BYTES
    written = slots(tmp_path)
    assert sorted(slot for slot in written if slot is not None) == [(2, b"two"), (3, b"three")]
    newest = 0 if written[0] == (3, b"three") else 1
    tear(tmp_path, newest)
    assert on_disk(tmp_path) == b"two"  # the slot written last was torn: the one before
    with SegmentLog.open(str(tmp_path), LogConfig()) as log:
        assert log.load_state() == b"two"
        log.save_state(b"four")  # goes over the torn slot, not over "two"
    assert on_disk(tmp_path) == b"four"
    tear(tmp_path, newest)
    assert on_disk(tmp_path) == b"two"


def test_saves_not_yet_durable_never_overwrite_the_last_durable_state(tmp_path: Path) -> None:
    with SegmentLog.open(str(tmp_path), LogConfig()) as log:
        log.save_state(b"durable")
        for state in (b"staged 1", b"staged 2", b"staged 3"):
            log.stage_state(state)
            log.begin_sync()  # written in place, but the filesystem sync never came
        assert on_disk(tmp_path) == b"staged 3"
        for slot in (0, 1):
            if slots(tmp_path)[slot] != (1, b"durable"):
                tear(tmp_path, slot)  # every unsynced write went to this one slot
        assert on_disk(tmp_path) == b"durable"
        log.stage_state(b"synced")
        ticket = log.begin_sync()
        log.end_sync(ticket)  # the caller synced the filesystem: the next may alternate
        log.save_state(b"after")
    assert sorted(s for s in slots(tmp_path) if s is not None)[-2:] == [
        (5, b"synced"),
        (6, b"after"),
    ]


def test_a_state_file_of_the_previous_format_is_read_and_rewritten(tmp_path: Path) -> None:
    with SegmentLog.open(str(tmp_path), LogConfig()):
        pass
    (tmp_path / "state").write_bytes(b"legacy state")  # whole file, written by rename
    with SegmentLog.open(str(tmp_path), LogConfig()) as log:
        assert log.load_state() == b"legacy state"
        log.save_state(b"new")
    assert (tmp_path / "state").stat().st_size == 2 * SLOT_BYTES
    assert on_disk(tmp_path) == b"new"


def test_a_state_larger_than_a_slot_gets_larger_slots(tmp_path: Path) -> None:
    big = bytes(range(256)) * 40  # 10 KiB: a long configuration history
    with SegmentLog.open(str(tmp_path), LogConfig()) as log:
        log.save_state(b"small")
        log.save_state(big)
        log.save_state(big[::-1])
    size = (tmp_path / "state").stat().st_size
    assert size > 2 * SLOT_BYTES and size % (2 * SLOT_BYTES) == 0
    assert on_disk(tmp_path) == big[::-1]


def test_a_state_file_never_made_durable_reads_as_none_and_garbage_as_corrupt(
    tmp_path: Path,
) -> None:
    (tmp_path / "state").write_bytes(bytes(2 * SLOT_BYTES))  # created, crash before sync
    assert on_disk(tmp_path) is None
    (tmp_path / "state").write_bytes(b"\x01" * (2 * SLOT_BYTES))
    with pytest.raises(StorageError, match="neither slot"):
        on_disk(tmp_path)

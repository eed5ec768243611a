"""The bounded cache of segment descriptors (laminar.segment.files) on its own and
under SegmentLog: bounds, LRU order, pins, deletion while read, exhaustion."""

from __future__ import annotations

import dataclasses
import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar.errors import ConfigError, OffsetOutOfRangeError, StorageError
from laminar.records import iter_batches
from laminar.segment import FsyncPolicy, LogConfig, SegmentLog
from laminar.segment import files as files_module
from laminar.segment.files import SegmentFile, SegmentFiles
from tests.segment.support import open_files_under, records_of, simple_batch

CONFIG = LogConfig(
    segment_bytes_max=1024,
    index_interval_bytes=256,
    fsync_policy=FsyncPolicy.NEVER,
    retention_ms=None,
    preallocate_bytes_max=0,
)


def _files(tmp_path: Path, count: int) -> list[SegmentFile]:
    paths = []
    for index in range(count):
        path = tmp_path / f"{index}.log"
        path.write_bytes(bytes([index]) * 8)
        paths.append(SegmentFile(str(path)))
    return paths


def _is_open(descriptor: int) -> bool:
    try:
        os.fstat(descriptor)
    except OSError:
        return False
    return True


def test_idle_descriptors_are_bounded_least_recently_used_first(tmp_path: Path) -> None:
    cache = SegmentFiles(capacity=2)
    segment_files = _files(tmp_path, 5)
    for file in segment_files:
        assert os.pread(cache.pin(file), 1, 0) == bytes([segment_files.index(file)])
        cache.unpin(file)
    assert cache.idle == 2
    assert [file.descriptor >= 0 for file in segment_files] == [False, False, False, True, True]
    assert (cache.opens, cache.evictions) == (5, 3)
    assert len(open_files_under(tmp_path)) == 2
    # Using an idle file makes it the most recent: the other one goes next.
    cache.pin(segment_files[3])
    cache.unpin(segment_files[3])
    cache.pin(segment_files[0])
    cache.unpin(segment_files[0])
    assert [file.descriptor >= 0 for file in segment_files] == [True, False, False, True, False]
    assert cache.opens == 6


def test_a_pinned_file_is_never_closed(tmp_path: Path) -> None:
    cache = SegmentFiles(capacity=0)
    first, second = _files(tmp_path, 2)
    descriptor = cache.pin(first)
    cache.pin(second)
    cache.unpin(second)
    assert second.descriptor < 0 and _is_open(descriptor)
    assert os.pread(descriptor, 1, 0) == b"\x00"
    cache.unpin(first)
    assert first.descriptor < 0 and not _is_open(descriptor)


def test_a_deleted_file_is_closed_by_its_last_unpin(tmp_path: Path) -> None:
    cache = SegmentFiles(capacity=4)
    (file,) = _files(tmp_path, 1)
    descriptor = cache.pin(file)
    cache.pin(file)
    cache.discard(file)
    cache.unpin(file)
    assert _is_open(descriptor)
    cache.unpin(file)
    assert not _is_open(descriptor)
    assert cache.idle == 0  # never back in the cache
    cache.discard(file)  # twice is harmless


def test_a_deleted_file_is_closed_outside_the_cache_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last close of a deleted file frees its pages (about 12 ms for 64 MiB):
    every log of the node takes the cache's lock to read, so it is not held then."""
    cache = SegmentFiles(capacity=4)
    idle, pinned = _files(tmp_path, 2)
    cache.pin(idle)
    cache.unpin(idle)  # open and idle
    cache.pin(pinned)
    closes: list[bool] = []
    close = os.close

    def recording(descriptor: int) -> None:
        closes.append(cache._lock.locked())
        close(descriptor)

    monkeypatch.setattr(files_module.os, "close", recording)
    cache.discard(idle)  # no read uses it: closed by discard
    cache.discard(pinned)
    assert closes == [False]
    cache.unpin(pinned)  # closed by its last unpin
    assert closes == [False, False]


def test_the_active_file_is_held_until_let_go(tmp_path: Path) -> None:
    cache = SegmentFiles(capacity=0)
    file = cache.create(str(tmp_path / "active.log"))
    (other,) = _files(tmp_path, 1)
    cache.pin(other)
    cache.unpin(other)
    assert file.descriptor >= 0 and cache.hold(file) == file.descriptor
    cache.let_go(file)
    assert file.descriptor < 0  # capacity 0: closed at once
    descriptor = cache.hold(file)  # active again (a truncation into a sealed segment)
    assert _is_open(descriptor)
    cache.discard(file)
    assert not _is_open(descriptor)


@pytest.mark.parametrize("use", ["pin", "create"])
def test_running_out_of_descriptors_gives_back_the_idle_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, use: str
) -> None:
    cache = SegmentFiles(capacity=8)
    segment_files = _files(tmp_path, 4)
    idle = segment_files[:3]
    for file in idle:
        cache.pin(file)
        cache.unpin(file)
    real_open = os.open

    def exhausted(path: str, flags: int, mode: int = 0o777) -> int:
        # No descriptor left until the idle ones are given back.
        if any(file.descriptor >= 0 for file in idle):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)

    monkeypatch.setattr(files_module.os, "open", exhausted)
    if use == "pin":
        descriptor = cache.pin(segment_files[3])
    else:
        descriptor = cache.create(str(tmp_path / "new.log")).descriptor
    assert _is_open(descriptor)
    assert cache.idle == 0 and cache.evictions == 3


def test_a_file_that_cannot_be_opened_is_a_storage_error(tmp_path: Path) -> None:
    cache = SegmentFiles()
    file = SegmentFile(str(tmp_path / "missing.log"))
    with pytest.raises(StorageError, match=r"cannot open segment file .*missing\.log"):
        cache.pin(file)
    assert file.pins == 0


def test_negative_capacity_is_refused() -> None:
    with pytest.raises(ConfigError):
        SegmentFiles(capacity=-1)


def _fill(log: SegmentLog, batches: int, tag: int) -> None:
    for index in range(batches):
        log.append(simple_batch(2, value_bytes=100, timestamp_ms=tag * 1000 + index))


def test_logs_sharing_a_cache_hold_one_file_each_plus_its_capacity(tmp_path: Path) -> None:
    cache = SegmentFiles(capacity=1)
    logs = [
        SegmentLog.open(str(tmp_path / f"log-{index}"), CONFIG, files=cache) for index in range(3)
    ]
    try:
        for index, log in enumerate(logs):
            _fill(log, 40, index)
            assert log.segment_count >= 8
        assert len(open_files_under(tmp_path)) <= 3 + 1
        for _ in range(2):
            for index, log in enumerate(logs):
                records = records_of(_read_all(log))
                assert [record.timestamp_ms for record in records[::2]] == [
                    index * 1000 + batch for batch in range(40)
                ]
                assert len(open_files_under(tmp_path)) <= 3 + 1
        assert cache.evictions > 0
    finally:
        for log in logs:
            log.close()
    assert open_files_under(tmp_path) == []


def _read_all(log: SegmentLog) -> bytes:
    chunks = []
    offset = log.start_offset
    while offset < log.end_offset:
        data = log.read(offset, 300)
        assert data, offset
        chunks.append(data)
        for _, header in iter_batches(data):
            offset = header.next_offset
    return b"".join(chunks)


def test_reopening_a_log_opens_no_sealed_file_beyond_the_cache(tmp_path: Path) -> None:
    with SegmentLog.open(str(tmp_path / "log"), CONFIG) as log:
        _fill(log, 60, 0)
        segments = log.segment_count
    cache = SegmentFiles(capacity=2)
    with SegmentLog.open(str(tmp_path / "log"), CONFIG, files=cache) as log:
        assert log.segment_count == segments >= 10
        assert len(open_files_under(tmp_path)) <= 1 + 2
        assert len(records_of(_read_all(log))) == 120


def test_truncating_into_an_evicted_segment_makes_it_active_again(tmp_path: Path) -> None:
    cache = SegmentFiles(capacity=0)
    directory = str(tmp_path / "log")
    with SegmentLog.open(directory, CONFIG, files=cache) as log:
        _fill(log, 30, 0)
        assert log.segment_count >= 5
        cut = 20  # inside an early, sealed (and closed) segment
        assert log.truncate_suffix(cut) == cut
        assert log.segment_count < 5
        assert log.append(simple_batch(2, value_bytes=100, timestamp_ms=999)) == cut
        assert len(open_files_under(tmp_path)) == 1
        expected = [*range(10), 999]
        timestamps = [record.timestamp_ms for record in records_of(_read_all(log))[::2]]
        assert timestamps == expected
    with SegmentLog.open(directory, CONFIG) as reopened:
        assert reopened.end_offset == cut + 2
        assert [r.timestamp_ms for r in records_of(_read_all(reopened))[::2]] == expected


def test_lookups_pin_sealed_files_too(tmp_path: Path) -> None:
    cache = SegmentFiles(capacity=0)
    with SegmentLog.open(str(tmp_path / "log"), CONFIG, files=cache) as log:
        for index in range(30):
            log.append(simple_batch(2, value_bytes=100, timestamp_ms=index * 10), term=index // 10)
        assert log.term_at(1) == 0 and log.term_at(25) == 1
        assert log.offset_for_timestamp(101) == 21  # batch 10: records at 100, 101
        assert len(open_files_under(tmp_path)) == 1


def test_reads_racing_retention_and_eviction_never_see_another_file(tmp_path: Path) -> None:
    """Readers pread outside the log lock while retention deletes segments and other
    logs' reads evict: a descriptor closed under a read could be reused by another
    file, and the read would return its bytes. Every read must return this log's
    batches (checked by offset and checksum) or say the offset is gone."""
    cache = SegmentFiles(capacity=1)
    config = dataclasses.replace(CONFIG, retention_bytes=4096)
    logs = [
        SegmentLog.open(str(tmp_path / f"log-{index}"), config, files=cache) for index in range(2)
    ]
    stop = threading.Event()
    failures: list[str] = []
    reads = [0]

    def reader(log: SegmentLog) -> None:
        while not stop.is_set():
            start = log.start_offset
            try:
                data = log.read(start, 600)
            except OffsetOutOfRangeError:
                continue  # retention moved the start meanwhile
            except Exception as error:  # reported to the test
                failures.append(repr(error))
                return
            expected = start
            for _, header in iter_batches(data):  # verifies every checksum
                if header.base_offset != expected:
                    failures.append(f"offset {header.base_offset}, expected {expected}")
                    return
                expected = header.next_offset
            reads[0] += 1

    threads = [threading.Thread(target=reader, args=(log,)) for log in logs for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 1.5
        batch = 0
        while time.monotonic() < deadline and not failures:
            for log in logs:
                log.append(simple_batch(2, value_bytes=100, timestamp_ms=batch))
            batch += 1
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        for log in logs:
            log.close()
    assert not failures, failures[:3]
    assert reads[0] > 100 and cache.evictions > 0
    assert open_files_under(tmp_path) == []


# ----------------------------------------------------------------------------- freeing

FREER = "laminar-segment-freeing"


def _unlinked(
    tmp_path: Path, cache: SegmentFiles, name: str = "old.log"
) -> tuple[SegmentFile, int]:
    """A synced 64 KiB file, pinned in ``cache``, whose name is then removed."""
    path = tmp_path / name
    with open(path, "wb") as handle:
        handle.write(b"x" * 65536)
        os.fsync(handle.fileno())
    file = SegmentFile(str(path))
    descriptor = cache.pin(file)
    path.unlink()
    return file, descriptor


def _record_closes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Every descriptor the cache closes from here on, with the closing thread's name."""
    closes: list[tuple[int, str]] = []
    close = os.close

    def recording(descriptor: int) -> None:
        closes.append((descriptor, threading.current_thread().name))
        close(descriptor)

    monkeypatch.setattr(files_module.os, "close", recording)
    return closes


def _wait_until(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_an_unlinked_file_is_closed_by_the_freeing_thread_after_its_delay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its last close frees its pages and blocks (about 12 ms for 64 MiB): the
    freeing thread makes it once nothing was queued for the delay, and counts its
    blocks until then; wait_freed hurries it."""
    cache = SegmentFiles(freeing_delay_ms=600_000)
    file, descriptor = _unlinked(tmp_path, cache)
    closes = _record_closes(monkeypatch)
    cache.discard(file, unlinked=True)  # a read still has it pinned
    assert cache.freeing_bytes == 0
    cache.unpin(file)  # the last unpin queues it
    assert closes == []  # the delay (ten minutes) has not passed
    assert cache.freeing_bytes >= 65536
    assert _is_open(descriptor)
    assert cache.wait_freed(timeout_s=30)
    assert closes == [(descriptor, FREER)]
    assert (cache.freeing_bytes, cache.freed_later) == (0, 1)
    assert cache.wait_freed(timeout_s=0)  # nothing queued: at once


def test_the_freeing_thread_closes_at_once_past_half_its_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = SegmentFiles(freeing_bytes_max=100_000, freeing_delay_ms=600_000)
    file, descriptor = _unlinked(tmp_path, cache)
    closes = _record_closes(monkeypatch)
    cache.discard(file, unlinked=True)
    cache.unpin(file)
    _wait_until(lambda: cache.freeing_bytes == 0)  # no wait_freed: not hurried
    assert closes == [(descriptor, FREER)]


def test_deleted_files_beyond_the_freeing_room_are_closed_by_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most freeing_bytes_max of deleted files' blocks wait for the thread; a
    file that does not fit, one whose name stays (a log closed), and every one
    with freeing_bytes_max 0 are closed at once, by the thread deleting them."""
    main = threading.current_thread().name
    cache = SegmentFiles(freeing_bytes_max=100_000, freeing_delay_ms=600_000)
    first, first_descriptor = _unlinked(tmp_path, cache, "first.log")
    second, second_descriptor = _unlinked(tmp_path, cache, "second.log")
    (kept,) = _files(tmp_path, 1)
    kept_descriptor = cache.pin(kept)
    closes = _record_closes(monkeypatch)
    cache.discard(first, unlinked=True)
    cache.unpin(first)  # queued: its 64 KiB fit
    cache.discard(second, unlinked=True)
    cache.unpin(second)  # 128 KiB would not
    cache.discard(kept)
    cache.unpin(kept)
    assert (second_descriptor, main) in closes
    assert (kept_descriptor, main) in closes
    assert cache.wait_freed(timeout_s=30)
    assert (first_descriptor, FREER) in closes and len(closes) == 3

    never = SegmentFiles(freeing_bytes_max=0)
    third, third_descriptor = _unlinked(tmp_path, never, "third.log")
    never.unpin(third)
    never.discard(third, unlinked=True)  # idle: closed by discard
    assert closes[-1] == (third_descriptor, main)
    assert never.freed_later == 0


def test_without_a_thread_to_be_had_the_caller_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = SegmentFiles(freeing_delay_ms=600_000)
    file, descriptor = _unlinked(tmp_path, cache)
    closes = _record_closes(monkeypatch)

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(files_module.threading.Thread, "start", refuse)
    cache.discard(file, unlinked=True)
    cache.unpin(file)
    assert closes == [(descriptor, threading.current_thread().name)]
    assert cache.freeing_bytes == 0
    assert cache.wait_freed(timeout_s=0)


def test_negative_freeing_limits_are_refused() -> None:
    with pytest.raises(ConfigError, match="freeing_bytes_max"):
        SegmentFiles(freeing_bytes_max=-1)
    with pytest.raises(ConfigError, match="freeing_delay_ms"):
        SegmentFiles(freeing_delay_ms=-1)


def test_a_replaced_segment_is_freed_by_the_freeing_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """replace_segment holds the old file open across its rename, even when the
    cache had closed it (capacity 0): else the rename itself would free it, under
    the log's lock. Its last close is the freeing thread's, after the swap."""
    cache = SegmentFiles(capacity=0, freeing_delay_ms=600_000)
    with SegmentLog.open(str(tmp_path), CONFIG, files=cache) as log:
        _fill(log, 12, 0)
        base, _ = log.sealed_segments()[0]
        old = open_files_under(tmp_path)
        closes = _record_closes(monkeypatch)
        log.replace_segment(base, [])
        assert cache.freeing_bytes > 0
        assert [name for _, name in closes if name == FREER] == []
        assert cache.wait_freed(timeout_s=30)
        assert [name for _, name in closes if name == FREER] == [FREER]
        assert open_files_under(tmp_path) == old  # the active segment's only
        assert log.sealed_segments()[0][0] == base
        assert log.read(base, 1 << 20)  # the batches after the emptied segment

"""SegmentLog.scrub and check_batch_at: re-verifying stored batches while the log runs.

Bit rot is simulated by flipping one byte of a segment file under an open log (its
reads see the page cache, so the flip is what a later read of the disk would
return). Expected positions and offsets come from what the test wrote, never from
the log's own bookkeeping.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from laminar.errors import InvalidInputError, OffsetOutOfRangeError
from laminar.records import HEADER_BYTES
from laminar.segment import LogConfig, SegmentLog
from laminar.segment.log import ScrubCursor
from tests.segment.support import FakeClock, flip, scrub_pass, simple_batch
from tests.segment.test_log_unit import _config as unit_config

SEGMENT_BYTES = 4096


@dataclass(frozen=True)
class Stored:
    """One appended batch: where it lives on disk."""

    base_offset: int
    next_offset: int
    path: str
    position: int
    length: int


def _config(**overrides: Any) -> LogConfig:
    return unit_config(**{"segment_bytes_max": SEGMENT_BYTES, **overrides})


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[Callable[..., SegmentLog]]:
    opened: list[SegmentLog] = []

    def opener(**overrides: Any) -> SegmentLog:
        log = SegmentLog.open(str(tmp_path / "log"), _config(**overrides), clock_ms=FakeClock())
        opened.append(log)
        return log

    yield opener
    for log in opened:
        log.close()


def write(log: SegmentLog, count: int, *, records: int = 3, value_bytes: int = 100) -> list[Stored]:
    """Append ``count`` batches; where each one is stored (segments roll by size, so a
    batch starts a new file exactly when the previous file would overflow)."""
    stored: list[Stored] = []
    for _ in range(count):
        batch = simple_batch(records, value_bytes=value_bytes)
        base = log.append(batch, term=1)
        name = os.path.join(log.directory, f"{_segment_base(log, base):020d}.log")
        previous = stored[-1] if stored and stored[-1].path == name else None
        position = previous.position + previous.length if previous else 0
        stored.append(Stored(base, base + records, name, position, len(batch)))
    return stored


def _segment_base(log: SegmentLog, offset: int) -> int:
    bases = sorted(int(n.split(".")[0]) for n in os.listdir(log.directory) if n.endswith(".log"))
    return max(b for b in bases if b <= offset)


def file_bytes(log: SegmentLog) -> int:
    directory = log.directory
    return sum(
        os.path.getsize(os.path.join(directory, n))
        for n in os.listdir(directory)
        if n.endswith(".log")
    )


def test_a_clean_log_scrubs_clean_in_bounded_calls(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log()
    stored = write(log, 60)
    assert log.segment_count >= 4
    total, damage, calls = scrub_pass(log, 1000)
    assert damage == []
    assert total == sum(s.length for s in stored) == file_bytes(log)
    # Whole batches of about 1000 bytes per call, and one call per segment at least.
    assert calls >= total // 1000
    # A second pass reads everything again (verified before or not).
    assert scrub_pass(log, 1 << 20)[:2] == (total, [])


@pytest.mark.parametrize("where", ["payload", "header", "header_checksum", "length"])
def test_a_flipped_byte_in_a_sealed_segment_is_found_with_its_offset(
    open_log: Callable[..., SegmentLog], where: str
) -> None:
    log = open_log()
    stored = write(log, 60)
    # Every batch was written by this log, so its reads already count it as good.
    for batch in stored:
        assert log.read(batch.base_offset, 1 << 20)
    sealed = [s for s in stored if s.path == stored[20].path]
    victim = sealed[2]
    assert victim.path != stored[-1].path, "the victim must be in a sealed segment"
    inside = {
        "payload": HEADER_BYTES + (victim.length - HEADER_BYTES) // 2,
        "header": 33,
        "header_checksum": 75,
        "length": 1,
    }[where]
    flip(victim.path, victim.position + inside)

    total, damage, _ = scrub_pass(log, 700)
    assert len(damage) == 1
    found = damage[0]
    assert (found.path, found.offset, found.position) == (
        victim.path,
        victim.base_offset,
        victim.position,
    )
    # The pass went on with the next segment: everything but the rest of that one.
    rest_of_segment = sum(s.length for s in sealed if s.position >= victim.position)
    assert total == file_bytes(log) - rest_of_segment


def test_a_flipped_byte_in_the_active_segment_is_found(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log()
    stored = write(log, 30)
    active = [s for s in stored if s.path == stored[-1].path]
    assert len(active) >= 2
    victim = active[1]
    flip(victim.path, victim.position + victim.length - 1)
    _, damage, _ = scrub_pass(log, 1 << 20)
    assert [(d.path, d.offset) for d in damage] == [(victim.path, victim.base_offset)]


def test_a_sealed_segment_that_lost_its_tail_is_damage(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log()
    stored = write(log, 40)
    first = [s for s in stored if s.path == stored[0].path]
    last = first[-1]
    os.truncate(last.path, last.position)  # whole batches left, the last one gone
    expected = [(last.path, last.base_offset, last.position)]
    _, damage, _ = scrub_pass(log, 1 << 20)  # the log still knows the old size
    assert [(d.path, d.offset, d.position) for d in damage] == expected
    log.close()
    reopened = open_log()  # it takes the file's size as the segment's
    # Whole batches missing at a sealed segment's end are now a gap, which keyed
    # compaction leaves there too (docs/disk.md): the scrub cannot tell them apart.
    _, damage, _ = scrub_pass(reopened, 1 << 20)
    assert damage == []


def test_batches_overlapping_the_next_segment_are_damage(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log()
    stored = write(log, 40)
    first = [s for s in stored if s.path == stored[0].path]
    second = [s for s in stored if s.path == stored[len(first)].path]
    log.close()
    # The first segment's file gains a copy of the second segment's first batch.
    with open(second[0].path, "rb") as source:
        copied = source.read(second[0].length)
    with open(first[0].path, "ab") as target:
        target.write(copied)
    reopened = open_log()
    _, damage, _ = scrub_pass(reopened, 1 << 20)
    assert len(damage) == 1
    assert "past the next one's start" in damage[0].reason


def test_a_batch_larger_than_max_bytes_is_read_whole(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log(segment_bytes_max=1 << 20)
    stored = write(log, 3, records=10, value_bytes=3000)
    assert all(s.length > 30_000 for s in stored)
    total, damage, calls = scrub_pass(log, 100)
    assert (total, damage, calls) == (sum(s.length for s in stored), [], 3)


def test_the_cursor_survives_retention_of_its_segment(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log()
    stored = write(log, 60)
    result = log.scrub(None, 500)
    assert result.cursor is not None and result.damage is None
    # Retention drops the segment being scrubbed and the one after it.
    segments = sorted({s.path for s in stored})
    third_base = min(s.base_offset for s in stored if s.path == segments[2])
    log.delete_before(third_base)
    assert log.start_offset == third_base
    total, damage, _ = scrub_pass(log, 500, result.cursor)
    assert damage == []
    assert total == file_bytes(log)


def test_a_truncation_between_calls_restarts_the_segment_without_false_damage(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log()
    stored = write(log, 60)
    segments = sorted({s.path for s in stored})
    in_second = [s for s in stored if s.path == segments[1]]
    # Scrub into the middle of the second segment.
    cursor: ScrubCursor | None = None
    scrubbed = 0
    while scrubbed < sum(s.length for s in stored if s.path == segments[0]) + 600:
        result = log.scrub(cursor, 300)
        assert result.cursor is not None and result.damage is None
        cursor, scrubbed = result.cursor, scrubbed + result.scrubbed_bytes
    # Cut the second segment after its first batch and write different batches there.
    log.truncate_suffix(in_second[1].base_offset)
    write(log, 10, records=1, value_bytes=10)
    total, damage, _ = scrub_pass(log, 300, cursor)
    assert damage == []
    # The second segment (now the active one) was scrubbed again from its start.
    assert total == os.path.getsize(segments[1])


def test_a_pass_ends_at_the_log_end_when_it_started(open_log: Callable[..., SegmentLog]) -> None:
    log = open_log()
    stored = write(log, 20)
    first = log.scrub(None, 300)
    assert first.cursor is not None
    more = write(log, 20)
    total, damage, _ = scrub_pass(log, 300, first.cursor)
    assert damage == []
    assert first.scrubbed_bytes + total == sum(s.length for s in stored)
    assert more  # written, not scrubbed by this pass
    assert scrub_pass(log, 1 << 20)[0] == sum(s.length for s in stored + more)


def test_check_batch_at_verifies_the_batch_holding_the_offset(
    open_log: Callable[..., SegmentLog],
) -> None:
    log = open_log()
    stored = write(log, 40)
    victim = stored[7]
    for offset in range(victim.base_offset, victim.next_offset):
        assert log.check_batch_at(offset) is None
    flip(victim.path, victim.position + victim.length - 2)
    for offset in range(victim.base_offset, victim.next_offset):
        damage = log.check_batch_at(offset)
        assert damage is not None
        assert (damage.path, damage.offset, damage.position) == (
            victim.path,
            victim.base_offset,
            victim.position,
        )
    assert log.check_batch_at(stored[8].base_offset) is None
    flip(stored[12].path, stored[12].position + 40)  # in the header
    damage = log.check_batch_at(stored[12].base_offset + 1)
    assert damage is not None and damage.offset == stored[12].base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.check_batch_at(log.end_offset)
    with pytest.raises(InvalidInputError):
        log.scrub(None, 0)

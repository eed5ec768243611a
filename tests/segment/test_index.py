"""Unit tests of SparseIndex: lookups, truncation, the file format and its sanity checks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import xxhash

from laminar.segment.index import TRAILER_BYTES, SparseIndex

TIMESTAMP_MIN = -(2**63)


def _index(entries: list[tuple[int, int, int]]) -> SparseIndex:
    """An index built by ``add`` from (relative offset, position, running max ts) triples."""
    index = SparseIndex()
    for relative_offset, position, running_max_timestamp_ms in entries:
        index.add(relative_offset, position, running_max_timestamp_ms)
    return index


# Batches at relative offsets 0, 10, 20, 30 at positions 0, 100, 200, 300. The running
# maximum timestamp before each: none, 5, 5 (the batch at 10 went back in time), 9.
SAMPLE = [(0, 0, TIMESTAMP_MIN), (10, 100, 5), (20, 200, 5), (30, 300, 9)]


def _paths(tmp_path: Path) -> tuple[str, str]:
    return str(tmp_path / "0.index"), str(tmp_path / "0.timeindex")


def test_add_keeps_time_entries_only_when_the_running_maximum_grows() -> None:
    index = _index(SAMPLE)
    assert list(index.relative_offsets) == [0, 10, 20, 30]
    assert list(index.positions) == [0, 100, 200, 300]
    assert list(index.timestamps_ms) == [TIMESTAMP_MIN, 5, 9]
    assert list(index.time_relative_offsets) == [0, 10, 30]
    assert index.max_timestamp_ms == 9


@pytest.mark.parametrize(
    ("relative_offset", "expected"),
    [
        (0, (0, 0)),
        (9, (0, 0)),
        (10, (10, 100)),
        (29, (20, 200)),
        (30, (30, 300)),
        (2**32, (30, 300)),
    ],
)
def test_floor_finds_the_last_entry_at_or_below(
    relative_offset: int, expected: tuple[int, int]
) -> None:
    assert _index(SAMPLE).floor(relative_offset) == expected


def test_floor_of_an_empty_index_is_the_segment_start() -> None:
    assert SparseIndex().floor(7) == (0, 0)
    assert SparseIndex().time_floor(7) == 0
    assert SparseIndex().max_timestamp_ms is None


@pytest.mark.parametrize(
    ("timestamp_ms", "expected"),
    # Every batch before the returned offset has timestamps below the target.
    [(TIMESTAMP_MIN, 0), (-1, 0), (5, 0), (6, 10), (9, 10), (10, 30), (10**15, 30)],
)
def test_time_floor_never_skips_a_batch_that_may_match(timestamp_ms: int, expected: int) -> None:
    assert _index(SAMPLE).time_floor(timestamp_ms) == expected


def test_max_timestamp_zero_is_a_timestamp_not_a_missing_value() -> None:
    index = _index([(0, 0, TIMESTAMP_MIN), (1, 50, 0)])
    assert index.max_timestamp_ms == 0


@pytest.mark.parametrize(
    ("position", "offsets", "time_offsets"),
    [
        (0, [], []),
        (1, [0], [0]),
        (100, [0], [0]),
        (101, [0, 10], [0, 10]),
        (250, [0, 10, 20], [0, 10]),
        (300, [0, 10, 20], [0, 10]),
        (301, [0, 10, 20, 30], [0, 10, 30]),
        (10_000, [0, 10, 20, 30], [0, 10, 30]),
    ],
)
def test_truncate_drops_entries_at_or_after_position(
    position: int, offsets: list[int], time_offsets: list[int]
) -> None:
    index = _index(SAMPLE)
    index.truncate(position)
    assert list(index.relative_offsets) == offsets
    assert list(index.positions) == [offset * 10 for offset in offsets]
    assert list(index.time_relative_offsets) == time_offsets
    assert len(index.timestamps_ms) == len(time_offsets)


def test_truncate_then_add_continues_consistently() -> None:
    index = _index(SAMPLE)
    index.truncate(250)
    index.add(25, 250, 7)
    assert list(index.relative_offsets) == [0, 10, 20, 25]
    assert list(index.timestamps_ms) == [TIMESTAMP_MIN, 5, 7]
    assert list(index.time_relative_offsets) == [0, 10, 25]
    assert index.entries_are_sane(251)


def test_write_read_roundtrip(tmp_path: Path) -> None:
    index = _index([(0, 0, TIMESTAMP_MIN), (3, 4000, -2), (2**32 - 2, 2**32 - 100, 2**62)])
    offset_path, time_path = _paths(tmp_path)
    index.write(offset_path, time_path)
    assert Path(offset_path).stat().st_size == 3 * 8 + TRAILER_BYTES
    assert Path(time_path).stat().st_size == 3 * 12
    loaded = SparseIndex.read(offset_path, time_path)
    assert loaded is not None
    assert list(loaded.relative_offsets) == list(index.relative_offsets)
    assert list(loaded.positions) == list(index.positions)
    assert list(loaded.timestamps_ms) == list(index.timestamps_ms)
    assert list(loaded.time_relative_offsets) == list(index.time_relative_offsets)
    assert loaded.entries_are_sane(2**32 - 1)


def test_file_layout_is_little_endian_entries_and_a_checksum_trailer(tmp_path: Path) -> None:
    offset_path, time_path = _paths(tmp_path)
    _index([(0, 0, -3), (2, 300, 70)]).write(offset_path, time_path)
    entries = struct.pack("<IIII", 0, 0, 2, 300)
    times = struct.pack("<qIqI", -3, 0, 70, 2)
    checksum = xxhash.xxh3_64_intdigest(entries + times)
    assert Path(offset_path).read_bytes() == entries + struct.pack("<Q", checksum) + b"LMIDX\0\0\1"
    assert Path(time_path).read_bytes() == times


@pytest.mark.parametrize("which", ["index", "timeindex"])
@pytest.mark.parametrize("position", [0, 5, 9, 12])
def test_read_of_a_flipped_byte_is_none(which: str, position: int, tmp_path: Path) -> None:
    """A flipped byte that keeps every entry in order (a position moved by 4 bytes,
    a timestamp lowered) passes the sanity checks; the checksum catches it."""
    offset_path, time_path = _paths(tmp_path)
    _index(SAMPLE).write(offset_path, time_path)
    path = Path(offset_path if which == "index" else time_path)
    data = bytearray(path.read_bytes())
    data[position] ^= 0x04
    path.write_bytes(bytes(data))
    assert SparseIndex.read(offset_path, time_path) is None


def test_read_of_a_file_without_trailer_is_none(tmp_path: Path) -> None:
    """An index written before the trailer existed is rebuilt once, not trusted."""
    offset_path, time_path = _paths(tmp_path)
    Path(offset_path).write_bytes(struct.pack("<IIII", 0, 0, 2, 300))
    Path(time_path).write_bytes(struct.pack("<qIqI", -3, 0, 70, 2))
    assert SparseIndex.read(offset_path, time_path) is None


def test_empty_index_roundtrip(tmp_path: Path) -> None:
    offset_path, time_path = _paths(tmp_path)
    SparseIndex().write(offset_path, time_path)
    loaded = SparseIndex.read(offset_path, time_path)
    assert loaded is not None
    assert len(loaded.positions) == 0
    assert loaded.entries_are_sane(0)
    assert not loaded.entries_are_sane(1)


@pytest.mark.parametrize("missing", ["index", "timeindex"])
def test_read_of_missing_file_is_none(missing: str, tmp_path: Path) -> None:
    offset_path, time_path = _paths(tmp_path)
    _index(SAMPLE).write(offset_path, time_path)
    Path(offset_path if missing == "index" else time_path).unlink()
    assert SparseIndex.read(offset_path, time_path) is None


@pytest.mark.parametrize("which", ["index", "timeindex"])
def test_read_of_partial_entry_is_none(which: str, tmp_path: Path) -> None:
    offset_path, time_path = _paths(tmp_path)
    _index(SAMPLE).write(offset_path, time_path)
    path = Path(offset_path if which == "index" else time_path)
    path.write_bytes(path.read_bytes()[:-1])
    assert SparseIndex.read(offset_path, time_path) is None


def _raw(offsets: list[tuple[int, int]], times: list[tuple[int, int]]) -> SparseIndex:
    """An index as it could come off a damaged disk (bypassing ``add``)."""
    index = SparseIndex()
    for relative_offset, position in offsets:
        index.relative_offsets.append(relative_offset)
        index.positions.append(position)
    for timestamp_ms, relative_offset in times:
        index.timestamps_ms.append(timestamp_ms)
        index.time_relative_offsets.append(relative_offset)
    return index


def test_sane_index_passes() -> None:
    assert _index(SAMPLE).entries_are_sane(301)
    assert _raw([(0, 0), (4, 90)], [(1, 0), (2, 4)]).entries_are_sane(91)


def test_index_of_a_compacted_segment_may_start_after_its_base() -> None:
    """Keyed compaction can remove a sealed segment's first batches (the segment
    keeps its name): the first entry is then past relative offset 0."""
    assert _raw([(7, 0), (9, 90)], [(1, 7), (2, 9)]).entries_are_sane(91)


@pytest.mark.parametrize(
    ("offsets", "times", "log_bytes"),
    [
        pytest.param([], [], 10, id="empty-index-for-non-empty-log"),
        pytest.param([], [(1, 0)], 0, id="time-entries-without-offset-entries"),
        pytest.param([(1, 0)], [(1, 2)], 100, id="first-time-entry-off-first-offset"),
        pytest.param([(0, 5)], [(1, 0)], 100, id="first-position-not-zero"),
        pytest.param([(0, 0), (4, 90)], [], 100, id="no-time-entry"),
        pytest.param([(0, 0), (4, 90)], [(1, 4)], 100, id="first-time-entry-not-zero"),
        pytest.param([(0, 0), (4, 90)], [(1, 0), (2, 3)], 100, id="time-entry-off-an-offset-entry"),
        pytest.param([(0, 0), (4, 90)], [(1, 0)], 90, id="position-past-log-end"),
        pytest.param([(0, 0), (4, 90), (5, 90)], [(1, 0)], 100, id="positions-not-increasing"),
        pytest.param([(0, 0), (4, 50), (4, 90)], [(1, 0)], 100, id="offsets-not-increasing"),
        pytest.param([(0, 0), (4, 50)], [(3, 0), (3, 4)], 100, id="timestamps-not-increasing"),
        pytest.param([(0, 0), (4, 50)], [(3, 0), (7, 0)], 100, id="time-offsets-not-increasing"),
    ],
)
def test_insane_index_is_rejected(
    offsets: list[tuple[int, int]], times: list[tuple[int, int]], log_bytes: int
) -> None:
    assert not _raw(offsets, times).entries_are_sane(log_bytes)


def test_garbage_files_read_back_as_none(tmp_path: Path) -> None:
    offset_path, time_path = _paths(tmp_path)
    Path(offset_path).write_bytes(bytes(range(32)))
    Path(time_path).write_bytes(bytes(range(24)))
    assert SparseIndex.read(offset_path, time_path) is None

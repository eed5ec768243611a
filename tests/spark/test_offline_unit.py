"""The offline reader's planning and reading on segment files written by a real
:class:`SegmentLog` (no Spark session, no cluster)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from laminar_spark.offline import (
    OfflineOptions,
    SegmentTask,
    parse_offline_options,
    plan,
    read_segment,
)
from laminar_spark.pushdown import Pushed

from laminar.errors import CorruptSegmentError, InvalidInputError
from laminar.records import HEADER_BYTES, encode_batch, encode_control_batch, parse_header
from laminar.segment.committed import write_committed
from laminar.segment.config import LogConfig
from laminar.segment.log import SegmentLog

BASE_MS = 1_700_000_000_000
BATCHES = 40  # of 5 records: offsets 0..199 plus one control batch (offset 200) at the end
CONFIG = LogConfig(segment_bytes_max=8 * 1024, index_interval_bytes=1024, retention_ms=None)


def _write_log(directory: Path, *, committed: int | None) -> None:
    """Batch ``n`` holds offsets ``[5n, 5n + 5)`` stamped ``BASE_MS + n`` s; the
    log rolls into several segments; a control batch ends it."""
    with SegmentLog.open(str(directory), CONFIG) as log:
        for number in range(BATCHES):
            values = [b"v%d-%d" % (number, i) + b"x" * 150 for i in range(5)]
            keys = [None if i == 0 else b"k%d" % i for i in range(5)]
            log.append(
                encode_batch(
                    values,
                    keys=keys,
                    timestamps_ms=BASE_MS + number * 1000,
                    headers=[[("h", b"%d" % i)] for i in range(5)],
                ),
                term=1,
            )
        log.append(encode_control_batch(b"noop", b"", 5), term=1)
    if committed is not None:
        write_committed(str(directory), committed)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    _write_log(tmp_path / "node" / "partitions" / "events" / "0", committed=150)
    _write_log(tmp_path / "node" / "partitions" / "events" / "1", committed=201)
    return tmp_path / "node"


def _options(path: Path, **more: str) -> OfflineOptions:
    return parse_offline_options({"path": str(path), **more})


def _read(options: OfflineOptions, pushed: Pushed | None = None) -> pa.Table:
    batches = []
    for task in plan(options, pushed):
        batches.extend(read_segment(task, headers=options.include_headers))
    from laminar_client.arrow import arrow_schema

    return pa.Table.from_batches(batches, schema=arrow_schema(headers=options.include_headers))


def _offsets(table: pa.Table, partition: int) -> list[int]:
    rows = [
        o
        for o, p in zip(table["offset"].to_pylist(), table["partition"].to_pylist(), strict=True)
        if p == partition
    ]
    assert rows == sorted(rows)
    return rows


def test_reads_committed_records_of_every_partition(data_dir: Path) -> None:
    table = _read(_options(data_dir, includeHeaders="true"))
    assert _offsets(table, 0) == list(range(150))  # committed bound of partition 0
    assert _offsets(table, 1) == list(range(200))  # the control batch is skipped
    first = table.slice(0, 2).to_pylist()
    assert first[0]["key"] is None and first[1]["key"] == b"k1"
    assert first[1]["value"] == b"v0-1" + b"x" * 150
    assert first[1]["headers"] == [{"key": "h", "value": b"1"}]
    assert first[1]["timestamp"].timestamp() * 1000 == BASE_MS
    assert set(table["topic"].to_pylist()) == {"events"}


def test_include_uncommitted_and_a_partition_directory(data_dir: Path) -> None:
    partition_dir = data_dir / "partitions" / "events" / "0"
    table = _read(_options(partition_dir, includeUncommitted="true"))
    assert _offsets(table, 0) == list(range(200))
    assert set(table["partition"].to_pylist()) == {0}


def test_no_committed_file_fails_the_default_read_and_names_the_option(tmp_path: Path) -> None:
    _write_log(tmp_path / "partitions" / "t" / "0", committed=None)
    with pytest.raises(InvalidInputError, match="includeUncommitted=true"):
        plan(_options(tmp_path))
    assert len(_offsets(_read(_options(tmp_path, includeUncommitted="TRUE")), 0)) == 200


def test_several_segments_and_index_ranges_become_tasks(data_dir: Path) -> None:
    whole = plan(_options(data_dir, subscribe="events"))
    segments = {task.path for task in whole}
    assert len(segments) == len(whole) > 2
    split = plan(_options(data_dir, bytesPerTask="2000"))
    assert len(split) > len(whole)
    assert _offsets(_read(_options(data_dir, bytesPerTask="2000")), 1) == list(range(200))


def test_offset_and_partition_filters_prune_segments(data_dir: Path) -> None:
    options = _options(data_dir)
    everything = [t for t in plan(options) if t.partition == 1]
    pushed = Pushed(partitions=frozenset({1}), offset_min=120, offset_end=131)
    pruned = plan(options, pushed)
    assert {t.partition for t in pruned} == {1}
    assert 1 <= len(pruned) < len(everything)
    assert pruned[0].start_position > 0 or pruned[0].start_offset > 0
    assert _offsets(_read(options, pushed), 1) == list(range(120, 131))


def test_a_time_bound_starts_tasks_late_and_skips_older_batches(data_dir: Path) -> None:
    options = _options(data_dir, assign='{"events": [1]}')
    bound_ms = BASE_MS + 30 * 1000  # batches 30.. (offsets 150..)
    pushed = Pushed(timestamp_min_ms=bound_ms)
    tasks = plan(options, pushed)
    planned_bytes = sum(
        (t.end_position or os.path.getsize(t.path)) - t.start_position for t in tasks
    )
    all_bytes = sum(
        (t.end_position or os.path.getsize(t.path)) - t.start_position for t in plan(options)
    )
    assert planned_bytes < all_bytes / 2
    assert _offsets(_read(options, pushed), 1) == list(range(150, 200))


def _copy_partition(data_dir: Path, tmp_path: Path, partition: int) -> Path:
    copy = tmp_path / "copy" / "partitions" / "events" / str(partition)
    shutil.copytree(data_dir / "partitions" / "events" / str(partition), copy)
    return copy


def _segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def test_a_torn_tail_reads_up_to_the_last_whole_batch(data_dir: Path, tmp_path: Path) -> None:
    copy = _copy_partition(data_dir, tmp_path, 1)
    last = _segments(copy)[-1]
    data = last.read_bytes()
    # Drop the control batch and half of the batch before it.
    control = parse_header(data[-(len(data) - _batch_starts(data)[-1]) :])
    before = _batch_starts(data)[-2]
    with open(last, "r+b") as file:
        file.truncate(before + (len(data) - control.length - before) // 2)
    options = _options(copy.parents[2], includeUncommitted="true")
    assert _offsets(_read(options), 1) == list(range(195))
    # Zeros where the tail should be (a crash's unwritten pages): the same.
    with open(last, "ab") as file:
        file.write(bytes(3 * HEADER_BYTES))
    assert _offsets(_read(options), 1) == list(range(195))


def _batch_starts(data: bytes) -> list[int]:
    starts, position = [], 0
    while position < len(data):
        starts.append(position)
        position += parse_header(data, position).length
    return starts


def test_a_flipped_bit_raises_naming_file_offset_and_position(
    data_dir: Path, tmp_path: Path
) -> None:
    copy = _copy_partition(data_dir, tmp_path, 1)
    segment = _segments(copy)[0]
    data = bytearray(segment.read_bytes())
    second = _batch_starts(bytes(data))[1]
    data[second + HEADER_BYTES + 20] ^= 0x04  # a payload bit of the second batch
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptSegmentError) as caught:
        _read(_options(copy.parents[2]))
    message = str(caught.value)
    assert str(segment) in message
    assert "offset 5 " in message and f"position {second})" in message
    assert "payload checksum" in message
    # A read that does not need the batch is not stopped by it.
    assert _offsets(_read(_options(copy.parents[2]), Pushed(offset_min=10)), 1)[0] == 10


def test_a_flipped_bit_in_the_last_segment_is_not_taken_for_a_torn_tail(
    data_dir: Path, tmp_path: Path
) -> None:
    copy = _copy_partition(data_dir, tmp_path, 1)
    segment = _segments(copy)[-1]
    data = bytearray(segment.read_bytes())
    data[HEADER_BYTES + 3] ^= 0x01
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptSegmentError, match="payload checksum"):
        _read(_options(copy.parents[2]))


def test_reading_changes_no_file(data_dir: Path) -> None:
    before = {
        path: (path.stat().st_mtime_ns, path.stat().st_size)
        for path in data_dir.rglob("*")
        if path.is_file()
    }
    os.chmod(data_dir / "partitions" / "events" / "1", 0o555)
    try:
        _read(_options(data_dir))
    finally:
        os.chmod(data_dir / "partitions" / "events" / "1", 0o755)
    after = {
        path: (path.stat().st_mtime_ns, path.stat().st_size)
        for path in data_dir.rglob("*")
        if path.is_file()
    }
    assert after == before


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option 'path' must name"),
        ({"path": "/x", "servers": "a:1"}, "unknown option 'servers'.*allowed: path"),
        ({"path": "/x", "subscribe": "a", "assign": '{"a": [0]}'}, "at most one"),
        ({"path": "/x", "includeUncommitted": "yes"}, "'includeUncommitted' must be true"),
        ({"path": "/x", "bytesPerTask": "0"}, "'bytesPerTask' must be an integer"),
        ({"path": "/x", "assign": "[1]"}, "option 'assign' must be"),
    ],
)
def test_bad_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_offline_options(options)


def test_bad_paths_and_filters(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="is not a directory"):
        plan(_options(tmp_path / "missing"))
    with pytest.raises(InvalidInputError, match="neither a node's data directory"):
        plan(_options(data_dir / "partitions"))
    with pytest.raises(InvalidInputError, match=r"no partition of nope.*topics there: events"):
        plan(_options(data_dir, subscribe="nope"))
    with pytest.raises(InvalidInputError, match="no directory for events-7"):
        plan(_options(data_dir, assign='{"events": [0, 7]}'))
    assert plan(_options(data_dir, subscribePattern="ev.*")) == plan(_options(data_dir))
    assert plan(_options(data_dir, subscribePattern="other")) == []


def test_a_task_is_small_when_pickled(data_dir: Path) -> None:
    import pickle

    task = plan(_options(data_dir))[0]
    assert isinstance(task, SegmentTask)
    assert len(pickle.dumps(task)) < 1024


def test_internal_topics_only_when_named(data_dir: Path) -> None:
    """A data directory's ``__cluster`` partition (the catalogue) is not user data:
    left out by default and by a pattern, read when subscribed to by name or when
    the path is its own directory."""
    internal = data_dir / "partitions" / "__cluster" / "0"
    _write_log(internal, committed=201)

    def topics(options: OfflineOptions) -> set[str]:
        return {task.topic for task in plan(options)}

    assert topics(_options(data_dir)) == {"events"}
    assert topics(_options(data_dir, subscribePattern=".*")) == {"events"}
    assert topics(_options(data_dir, subscribe="__cluster")) == {"__cluster"}
    assert topics(_options(internal)) == {"__cluster"}


# ---------------------------------------------------------------------- keyed compaction


def _compact(directory: Path) -> list[int]:
    """Replace each sealed segment of the log in ``directory`` as keyed compaction
    would (the segments keep their names): keep one batch in three of every sealed
    segment but the second, which loses all its batches. The offsets held after."""
    with SegmentLog.open(str(directory), CONFIG) as log:
        for number, (base, _) in enumerate(log.sealed_segments()):
            kept = [
                batch
                for index, batch in enumerate(log.read_segment(base))
                if number != 1 and (index % 3 == 1)
            ]
            log.replace_segment(base, kept)
        offsets = []
        for base, _ in [*log.sealed_segments(), (log.sealed_segments()[-1][1], 0)]:
            for batch in log.read_segment(base):
                header = parse_header(batch)
                if not header.is_control:
                    offsets += range(header.base_offset, header.next_offset)
    return offsets


def test_a_compacted_partition_reads_every_record_it_holds(data_dir: Path, tmp_path: Path) -> None:
    copy = _copy_partition(data_dir, tmp_path, 1)
    held = _compact(copy)
    assert 0 < len(held) < 200
    assert held[0] > 0  # the first segment's first batch is gone: a gap at its start
    root = copy.parents[2]
    options = _options(root)
    assert _offsets(_read(options), 1) == held
    assert _offsets(_read(_options(root, bytesPerTask="500")), 1) == held
    pushed = Pushed(offset_min=60, offset_end=170)
    assert _offsets(_read(options, pushed), 1) == [o for o in held if 60 <= o < 170]
    bound = Pushed(timestamp_min_ms=BASE_MS + 30 * 1000)
    assert _offsets(_read(options, bound), 1) == [o for o in held if o >= 150]


def test_a_batch_overlapping_the_one_before_is_still_damage(data_dir: Path, tmp_path: Path) -> None:
    copy = _copy_partition(data_dir, tmp_path, 1)
    first = _segments(copy)[0]
    data = first.read_bytes()
    starts = _batch_starts(data)
    second = data[starts[1] : starts[2]]
    # The second batch twice: its copy starts below the end of the batch before it.
    first.write_bytes(data[: starts[2]] + second + data[starts[2] :])
    with pytest.raises(CorruptSegmentError, match="expected 10 or more"):
        _read(_options(copy.parents[2]))

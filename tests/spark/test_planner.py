"""The planner's pure steps and the task reader, without Spark."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from laminar_client import Client
from laminar_client.client import FetchResult, PartitionOffsets
from laminar_spark.options import EARLIEST, parse_options
from laminar_spark.planner import (
    DataLossError,
    OffsetRange,
    resolve_ranges,
    resolve_times,
    select_partitions,
    split_ranges,
)
from laminar_spark.reader import read_range

from laminar.errors import (
    ChecksumMismatchError,
    InvalidInputError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from laminar.records import encode_batch, encode_control_batch, with_leader_fields
from tests.spark.conftest import Produced

SERVERS = "127.0.0.1:1"


def options(**extra: str) -> Any:
    return parse_options({"servers": SERVERS, **extra})


OFFSETS = {"t": {0: PartitionOffsets(100, 150, None), 1: PartitionOffsets(0, 10, None)}}


def test_option_names_are_case_insensitive() -> None:
    parsed = options(SUBSCRIBE="t", includeheaders="TRUE", MinPartitions="3")
    assert parsed.subscribe == ("t",)
    assert parsed.include_headers
    assert parsed.min_partitions == 3


def test_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="unknown option 'path'"):
        parse_options({"servers": SERVERS, "subscribe": "t", "path": "/x"})


def test_select_partitions() -> None:
    counts = {"a": 2, "ab": 1, "__cluster": 1}
    assert select_partitions(options(subscribePattern="a.*"), counts) == {"a": [0, 1], "ab": [0]}
    assert select_partitions(options(subscribePattern=".*"), counts) == {"a": [0, 1], "ab": [0]}
    assert select_partitions(options(assign='{"a": [1, 0, 1]}'), counts) == {"a": [0, 1]}
    with pytest.raises(UnknownTopicOrPartitionError, match="unknown topic"):
        select_partitions(options(subscribe="a,zz"), counts)


def test_resolve_earliest_latest_and_json() -> None:
    selected = {"t": [0, 1]}
    assert resolve_ranges(options(subscribe="t"), selected, OFFSETS) == [
        OffsetRange("t", 0, 100, 150),
        OffsetRange("t", 1, 0, 10),
    ]
    latest = options(subscribe="t", startingOffsets="latest")
    assert [r.size for r in resolve_ranges(latest, selected, OFFSETS)] == [0, 0]
    json_spec = options(
        subscribe="t",
        startingOffsets='{"t": {"0": 120, "1": -1}}',
        endingOffsets='{"t": {"0": 130}}',
    )
    assert resolve_ranges(json_spec, selected, OFFSETS) == [
        OffsetRange("t", 0, 120, 130),
        OffsetRange("t", 1, 10, 10),
    ]


def test_fail_on_data_loss_names_partition_and_range() -> None:
    below = options(subscribe="t", startingOffsets='{"t": {"0": 40}}')
    with pytest.raises(DataLossError, match=r"t-0: offsets \[40, 100\) are no longer available"):
        resolve_ranges(below, {"t": [0, 1]}, OFFSETS)


def test_no_fail_on_data_loss_skips_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    below = options(
        subscribe="t",
        startingOffsets='{"t": {"0": 40}}',
        failOnDataLoss="false",
    )
    with caplog.at_level(logging.WARNING, logger="laminar_spark"):
        ranges = resolve_ranges(below, {"t": [0, 1]}, OFFSETS)
    assert ranges[0] == OffsetRange("t", 0, 100, 150)
    assert "t-0: 60 offsets [40, 100)" in caplog.text
    # an end below the log start: nothing left to read
    gone = options(
        subscribe="t",
        startingOffsets='{"t": {"0": 40}}',
        endingOffsets='{"t": {"0": 70}}',
        failOnDataLoss="false",
    )
    assert resolve_ranges(gone, {"t": [0]}, OFFSETS)[0].size == 0


@pytest.mark.parametrize(
    ("min_partitions", "max_records"),
    [(None, None), (None, 7), (5, None), (12, None), (4, 20), (1000, None)],
)
def test_split_covers_each_range_exactly(
    min_partitions: int | None, max_records: int | None
) -> None:
    ranges = [
        OffsetRange("t", 0, 100, 150),
        OffsetRange("t", 1, 0, 10),
        OffsetRange("t", 2, 5, 5),
        OffsetRange("u", 0, 3, 4),
    ]
    tasks = split_ranges(ranges, min_partitions=min_partitions, max_records=max_records)
    covered = sorted((t.topic, t.partition, o) for t in tasks for o in range(t.start, t.end))
    expected = sorted((r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert covered == expected
    assert all(t.size > 0 for t in tasks)
    if max_records is not None:
        assert max(t.size for t in tasks) <= max_records
    if min_partitions is not None:
        assert len(tasks) >= min(min_partitions, 61)
    if (min_partitions, max_records) == (None, None):
        assert len(tasks) == 3


class FakeClient:
    """Fetch answers from a list of encoded batches, with a log start."""

    def __init__(self, batches: list[bytes], log_start: int) -> None:
        self.batches = batches
        self.log_start = log_start
        self.fetches: list[int] = []

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int) -> FetchResult:
        self.fetches.append(offset)
        if offset < self.log_start:
            raise OffsetOutOfRangeError(offset, self.log_start, 100)
        data = b"".join(self.batches)
        return FetchResult(data, 100, self.log_start, "fake")

    def list_offsets(self, topic: str, partitions: list[int]) -> dict[int, PartitionOffsets]:
        return {p: PartitionOffsets(self.log_start, 100, None) for p in partitions}


def batch(base: int, count: int) -> bytes:
    encoded = encode_batch([f"v{base + i}".encode() for i in range(count)], timestamps_ms=5)
    return with_leader_fields(encoded, base, 1)


def values(batches: Iterator[Any]) -> list[bytes]:
    return [v for b in batches for v in b.column("value").to_pylist()]


def test_read_range_cuts_batches_to_the_range() -> None:
    client = FakeClient([batch(0, 10), batch(10, 10), batch(20, 10)], 0)
    got = values(read_range(client, OffsetRange("t", 0, 5, 23)))  # type: ignore[arg-type]
    assert got == [f"v{i}".encode() for i in range(5, 23)]


def test_read_range_skips_control_batches_and_verifies_checksums() -> None:
    control = with_leader_fields(encode_control_batch(b"x", b"", 5), 10, 1)
    client = FakeClient([batch(0, 10), control, batch(11, 5)], 0)
    got = values(read_range(client, OffsetRange("t", 0, 8, 14)))  # type: ignore[arg-type]
    assert got == [b"v8", b"v9", b"v11", b"v12", b"v13"]
    broken = bytearray(batch(0, 10))
    broken[-1] ^= 1
    client = FakeClient([bytes(broken)], 0)
    with pytest.raises(ChecksumMismatchError):
        list(read_range(client, OffsetRange("t", 0, 0, 10)))  # type: ignore[arg-type]


def test_read_range_below_log_start_mid_read() -> None:
    client = FakeClient([batch(20, 10)], 20)
    with pytest.raises(DataLossError, match=r"t-0: offsets \[5, 20\) were deleted"):
        list(read_range(client, OffsetRange("t", 0, 5, 25)))  # type: ignore[arg-type]
    got = values(read_range(client, OffsetRange("t", 0, 5, 25), fail_on_data_loss=False))  # type: ignore[arg-type]
    assert got == [f"v{i}".encode() for i in range(20, 25)]


def test_read_range_from_the_cluster(produced: Produced) -> None:
    """A task's range straight from the cluster: the rows produced, checksums verified."""
    expected = [r for r in produced.rows["events"] if r[3] == 1 and 3 <= r[4] < 150]
    with Client(produced.servers) as client:
        batches = list(read_range(client, OffsetRange("events", 1, 3, 150), headers=True))
    got = [
        (row["key"], row["value"], row["topic"], row["partition"], row["offset"])
        for b in batches
        for row in b.to_pylist()
    ]
    assert got == [r[:5] for r in expected]


def test_invalid_input_error_is_raised_for_bad_json() -> None:
    with pytest.raises(InvalidInputError, match="option 'startingOffsets' is not valid JSON"):
        options(subscribe="t", startingOffsets="{oops")


class TrailingReplicaClient(FakeClient):
    """The first fetch lands on a replica whose log ends before the offset asked."""

    def __init__(self, batches: list[bytes], log_start: int) -> None:
        super().__init__(batches, log_start)
        self.trailing = 1

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int) -> FetchResult:
        if self.trailing:
            self.trailing -= 1
            raise OffsetOutOfRangeError(offset, 0, offset - 1)
        return super().fetch(topic, partition, offset, max_bytes=max_bytes)


def test_read_range_waits_out_a_replica_behind_the_position() -> None:
    """Past the end of the replica that answered is not data loss: read again."""
    client = TrailingReplicaClient([batch(0, 10)], 0)
    task = OffsetRange("t", 0, 5, 10)
    got = values(read_range(client, task, sleep=lambda _: None))  # type: ignore[arg-type]
    assert got == [f"v{i}".encode() for i in range(5, 10)]


def test_timestamp_options_parse_and_take_precedence() -> None:
    parsed = options(subscribe="t", startingTimestamp="1000", startingOffsets="latest")
    assert parsed.starting_time == 1000 and parsed.ending_time is None
    parsed = options(subscribe="t", endingOffsetsByTimestamp='{"t": {"0": 5, "1": 7}}')
    assert parsed.ending_time == {"t": {0: 5, 1: 7}}
    both = options(
        subscribe="t", startingTimestamp="9", startingOffsetsByTimestamp='{"t": {"0": 5}}'
    )
    assert both.starting_time == 9  # the time for every partition wins, as in Spark
    for bad in (
        {"startingTimestamp": "soon"},
        {"endingOffsetsByTimestamp": '{"t": {"0": "x"}}'},
        {"startingOffsetsByTimestampStrategy": "earliest"},
    ):
        with pytest.raises(InvalidInputError, match="option"):
            options(subscribe="t", **bad)


def test_times_resolve_through_list_offsets() -> None:
    """The first offset at or after each time; a partition without a time keeps its
    offsets option; no record after the starting time fails or starts at the end."""
    selected = {"t": [0, 1]}
    known = {"t": {0: PartitionOffsets(0, 100, None), 1: PartitionOffsets(0, 50, None)}}
    asked: list[tuple[str, list[int], int]] = []

    def lookup(topic: str, partitions: list[int], *, timestamp_ms: int) -> Any:
        asked.append((topic, partitions, timestamp_ms))
        at = {0: 40 if timestamp_ms <= 400 else None, 1: 20 if timestamp_ms <= 400 else None}
        return {p: PartitionOffsets(0, 100, at[p]) for p in partitions}

    resolved = resolve_times(
        options(subscribe="t", startingOffsetsByTimestamp='{"t": {"0": 400}}'),
        selected,
        known,
        lookup,
    )
    assert resolved.starting == {"t": {0: 40, 1: EARLIEST}}
    assert asked == [("t", [0], 400)]
    late = options(subscribe="t", startingTimestamp="999")
    with pytest.raises(InvalidInputError, match="no record at or after the starting time"):
        resolve_times(late, selected, known, lookup)
    latest = options(
        subscribe="t", startingTimestamp="999", startingOffsetsByTimestampStrategy="latest"
    )
    assert resolve_times(latest, selected, known, lookup).starting == {"t": {0: 100, 1: 50}}
    ending = resolve_times(options(subscribe="t", endingTimestamp="999"), selected, known, lookup)
    assert ending.ending == {"t": {0: 100, 1: 50}}  # no record after: the end

"""The planner's pure steps and the task reader, without Spark."""

from __future__ import annotations

import bisect
import logging
import random
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from laminar_client import Client
from laminar_client.client import FetchResult, PartitionOffsets
from laminar_spark.options import EARLIEST, parse_options
from laminar_spark.planner import (
    DataLossError,
    OffsetRange,
    ReadTask,
    plan,
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
from laminar.records import encode_batch, encode_control_batch, parse_header, with_leader_fields
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
    latest = parse_options(
        {"servers": SERVERS, "subscribe": "t", "startingOffsets": "latest"}, streaming=True
    )
    assert [r.size for r in resolve_ranges(latest, selected, OFFSETS)] == [0, 0]
    json_spec = options(
        subscribe="t",
        startingOffsets='{"t": {"0": 120, "1": -2}}',
        endingOffsets='{"t": {"0": 130, "1": -1}}',
    )
    assert resolve_ranges(json_spec, selected, OFFSETS) == [
        OffsetRange("t", 0, 120, 130),
        OffsetRange("t", 1, 0, 10),
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"startingOffsets": "latest"}, "'startingOffsets' cannot be 'latest' in a batch read"),
        ({"startingOffsets": " LATEST "}, "'startingOffsets' cannot be 'latest' in a batch read"),
        ({"startingOffsets": '{"t": {"0": 5, "1": -1}}'}, "t-1 cannot start at -1 \\(latest\\)"),
        ({"endingOffsets": "earliest"}, "'endingOffsets' cannot be earliest"),
        ({"endingOffsets": '{"t": {"0": -2}}'}, "t-0 cannot end at -2 \\(earliest\\)"),
    ],
)
def test_a_batch_read_cannot_start_at_latest_nor_end_at_earliest(
    extra: dict[str, str], message: str
) -> None:
    """Spark's Kafka source's ``validateBatchOptions``; a stream may start at latest."""
    with pytest.raises(InvalidInputError, match=message):
        options(subscribe="t", **extra)
    if "startingOffsets" in extra:
        streamed = parse_options({"servers": SERVERS, "subscribe": "t", **extra}, streaming=True)
        assert streamed.starting != EARLIEST


def test_a_starting_time_takes_precedence_over_a_latest_start() -> None:
    """As in Kafka's source, the offsets are not looked at when a time is given."""
    parsed = options(subscribe="t", startingOffsets="latest", startingTimestamp="1000")
    assert parsed.starting_time == 1000


@pytest.mark.parametrize(
    "option", ["startingOffsets", "endingOffsets", "startingOffsetsByTimestamp"]
)
def test_a_json_must_name_every_partition_read(option: str) -> None:
    """Spark's Kafka source asserts the JSON's partitions equal those assigned."""
    value = '{"t": {"0": 120}}' if option != "endingOffsets" else '{"t": {"0": 130}}'
    partial = options(subscribe="t", **{option: value})
    lookup = fake_lookup({0: 120, 1: 5})
    with pytest.raises(InvalidInputError, match=f"'{option}' must name every partition.*t-1"):
        resolve_ranges(
            resolve_times(partial, {"t": [0, 1]}, OFFSETS, lookup), {"t": [0, 1]}, OFFSETS
        )


def fake_lookup(found: dict[int, int | None]) -> Any:
    def lookup(topic: str, partitions: list[int], *, timestamp_ms: int) -> Any:
        return {p: PartitionOffsets(0, 150, found[p]) for p in partitions}

    return lookup


def test_fail_on_data_loss_names_partition_and_range() -> None:
    below = options(subscribe="t", startingOffsets='{"t": {"0": 40, "1": -2}}')
    with pytest.raises(DataLossError, match=r"t-0: offsets \[40, 100\) are no longer available"):
        resolve_ranges(below, {"t": [0, 1]}, OFFSETS)


def test_no_fail_on_data_loss_skips_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    below = options(
        subscribe="t",
        startingOffsets='{"t": {"0": 40, "1": -2}}',
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
    """The first offset at or after each time (one lookup per distinct time); no
    record after the starting time fails or starts at the end."""
    selected = {"t": [0, 1]}
    known = {"t": {0: PartitionOffsets(0, 100, None), 1: PartitionOffsets(0, 50, None)}}
    asked: list[tuple[str, list[int], int]] = []

    def lookup(topic: str, partitions: list[int], *, timestamp_ms: int) -> Any:
        asked.append((topic, partitions, timestamp_ms))
        at = {0: 40 if timestamp_ms <= 400 else None, 1: 20 if timestamp_ms <= 400 else None}
        return {p: PartitionOffsets(0, 100, at[p]) for p in partitions}

    resolved = resolve_times(
        options(subscribe="t", startingOffsetsByTimestamp='{"t": {"0": 400, "1": 300}}'),
        selected,
        known,
        lookup,
    )
    assert resolved.starting == {"t": {0: 40, 1: 20}}
    assert asked == [("t", [0], 400), ("t", [1], 300)]
    late = options(subscribe="t", startingTimestamp="999")
    with pytest.raises(InvalidInputError, match="no record at or after the starting time"):
        resolve_times(late, selected, known, lookup)
    latest = options(
        subscribe="t", startingTimestamp="999", startingOffsetsByTimestampStrategy="latest"
    )
    assert resolve_times(latest, selected, known, lookup).starting == {"t": {0: 100, 1: 50}}
    ending = resolve_times(options(subscribe="t", endingTimestamp="999"), selected, known, lookup)
    assert ending.ending == {"t": {0: 100, 1: 50}}  # no record after: the end


def test_a_read_ends_at_the_leaders_high_watermark() -> None:
    """A read planned right after an acknowledged write includes it: the end comes
    from each partition's leader, not a follower that trails it by a heartbeat."""

    class Cluster:
        def __init__(self) -> None:
            self.asked: list[bool] = []

        def metadata(self, *, refresh: bool) -> Any:
            return SimpleNamespace(topics={"t": SimpleNamespace(partitions=[0, 1])}, filtered=False)

        def list_offsets(
            self, topic: str, partitions: list[int], *, leader: bool = False
        ) -> dict[int, PartitionOffsets]:
            self.asked.append(leader)
            high_watermark = 30 if leader else 20  # a follower has not heard of 20..29
            return {p: PartitionOffsets(0, high_watermark, None) for p in partitions}

    cluster = Cluster()
    tasks = plan(options(subscribe="t"), cluster)  # type: ignore[arg-type]
    assert {(t.partition, t.end) for t in tasks} == {(0, 30), (1, 30)}
    assert cluster.asked == [True]


# ----------------------------------------------------------------- soft split points


class LogClient:
    """A fetch as a node answers it: whole batches from the one holding the offset,
    up to ``max_bytes`` (at least one); past the end, an empty answer."""

    def __init__(self, batches: list[bytes]) -> None:
        self.batches = batches
        self.bases = [parse_header(b).base_offset for b in batches]
        self.end = parse_header(batches[-1]).next_offset
        self.fetched_bytes = 0

    def fetch(self, topic: str, partition: int, offset: int, *, max_bytes: int) -> FetchResult:
        if offset >= self.end:
            return FetchResult(b"", self.end, 0, "fake")
        index = bisect.bisect_right(self.bases, offset) - 1
        taken = [self.batches[index]]
        size = len(taken[0])
        for batch in self.batches[index + 1 :]:
            if size + len(batch) > max_bytes:
                break
            taken.append(batch)
            size += len(batch)
        self.fetched_bytes += size
        return FetchResult(b"".join(taken), self.end, 0, "fake")


def crafted_log(rng: random.Random, batches_max: int = 30) -> list[bytes]:
    """Batches of 1 to 60 records (some of one, some large), control batches among them."""
    log, base = [], 0
    for _ in range(rng.randint(1, batches_max)):
        if rng.random() < 0.1:
            log.append(with_leader_fields(encode_control_batch(b"x", b"", 5), base, 1))
            base += 1
            continue
        count = rng.choice([1, 1, 2, 5, 17, 60])
        log.append(batch(base, count))
        base += count
    return log


def data_offsets(log: list[bytes]) -> list[int]:
    offsets = []
    for encoded in log:
        header = parse_header(encoded)
        if not header.is_control:
            offsets += range(header.base_offset, header.next_offset)
    return offsets


def read_tasks(client: Any, tasks: list[ReadTask], **kwargs: Any) -> list[bytes]:
    return [v for task in tasks for v in values(read_range(client, task, **kwargs))]


@pytest.mark.parametrize("seed", range(40))
def test_splitting_reads_each_record_once(seed: int) -> None:
    """Any range of a crafted log, split in any number of tasks at soft points, reads
    exactly the records in the range, each once, in order."""
    rng = random.Random(seed)
    log = crafted_log(rng)
    client = LogClient(log)
    offsets = data_offsets(log)
    for _ in range(10):
        start = rng.randrange(client.end)
        end = rng.randint(start, client.end)
        whole = OffsetRange("t", 0, start, end)
        expected = [f"v{o}".encode() for o in offsets if start <= o < end]
        for parts in (1, 2, 3, 7, end - start):
            tasks = split_ranges([whole], min_partitions=parts)
            assert read_tasks(client, tasks) == expected, (seed, start, end, parts)
        tasks = split_ranges([whole], max_records=rng.randint(1, 40))
        assert read_tasks(client, tasks, fetch_bytes=300) == expected


def test_a_batch_straddling_split_points_is_decoded_by_one_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Split points inside one 60-record batch: the task owning its base offset
    yields it whole, the others yield nothing, and it is decoded once."""
    import laminar_spark.reader as reader_module

    decoded: list[int] = []
    column_view = reader_module.column_view

    def counting(buffer: Any, position: int, **kwargs: Any) -> Any:
        view = column_view(buffer, position, **kwargs)
        decoded.append(view.header.base_offset)
        return view

    monkeypatch.setattr(reader_module, "column_view", counting)
    client = LogClient([batch(0, 10), batch(10, 60), batch(70, 10)])
    tasks = split_ranges([OffsetRange("t", 0, 5, 75)], max_records=7)  # 10 tasks
    per_task = [values(read_range(client, task)) for task in tasks]  # type: ignore[arg-type]
    assert [v for vs in per_task for v in vs] == [f"v{i}".encode() for i in range(5, 75)]
    assert sorted(decoded) == [0, 10, 70]
    # [5, 12) owns the batch at 0 (holding the range's start) and the one at 10 whole.
    assert (tasks[0].start, tasks[0].end) == (5, 12)
    assert len(per_task[0]) == 5 + 60
    assert all(not vs for vs in per_task[1:9])  # their starts fall inside the batch at 10
    assert per_task[9] == [f"v{i}".encode() for i in range(70, 75)]  # cut at the range end


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        # a soft start inside a batch: skip it; a soft end inside one: read it whole
        (ReadTask("t", 0, 15, 25, 0, 40), range(20, 30)),
        # a hard start inside a batch: cut it there
        (ReadTask("t", 0, 15, 25, 15, 40), range(15, 30)),
        # a soft start at a batch boundary, a hard end inside a batch
        (ReadTask("t", 0, 20, 25, 0, 25), range(20, 25)),
        # a soft start and a soft end inside the same batch: nothing
        (ReadTask("t", 0, 22, 27, 0, 40), range(0)),
        # the task that owns that batch, cut at the range's end
        (ReadTask("t", 0, 20, 22, 0, 27), range(20, 27)),
    ],
)
def test_task_boundaries(task: ReadTask, expected: range) -> None:
    client = LogClient([batch(0, 10), batch(10, 10), batch(20, 10), batch(30, 10)])
    assert values(read_range(client, task)) == [f"v{i}".encode() for i in expected]  # type: ignore[arg-type]


def test_read_task_checks_its_bounds() -> None:
    with pytest.raises(InvalidInputError, match=r"must lie in its range"):
        ReadTask("t", 0, 5, 50, 10, 40)


def test_fetches_ask_for_about_what_is_left() -> None:
    """A task's first fetch asks for at most 64 KiB, later ones for its remaining
    offsets at the size seen: a small task does not pull its neighbours' data."""
    log = [batch(i * 100, 100) for i in range(1000)]  # ~1.8 KB per batch
    client = LogClient(log)
    tasks = split_ranges([OffsetRange("t", 0, 0, 100_000)], min_partitions=20)
    assert len(read_tasks(client, tasks)) == 100_000
    total = sum(len(b) for b in log)
    assert client.fetched_bytes < 2 * total  # not 20 first fetches of the rest of the log

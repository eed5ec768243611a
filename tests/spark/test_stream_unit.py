"""The streaming reader's logic without Spark: offsets, admission, data loss, the
driver calls against an in-memory cluster, and the streaming options."""

from __future__ import annotations

import json
import logging
import pickle
from dataclasses import dataclass, field

import pytest
from laminar_client.client import PartitionOffsets
from laminar_spark.options import (
    EARLIEST,
    LATEST,
    MAX_TRIGGER_DELAY_S_MAX,
    parse_duration_s,
    parse_options,
)
from laminar_spark.planner import DataLossError, OffsetRange
from laminar_spark.source import spark_schema
from laminar_spark.stream import (
    LaminarStreamReader,
    next_end,
    offsets_from_json,
    offsets_to_json,
    rate_limit,
    reconcile,
    stream_ranges,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from laminar.errors import InvalidInputError, UnknownTopicOrPartitionError

A0, A1, A2, B0 = ("a", 0), ("a", 1), ("a", 2), ("b", 0)


def known(**entries: tuple[int, int]) -> dict[tuple[str, int], PartitionOffsets]:
    """``a1=(log_start, high)`` -> ``{("a", 1): PartitionOffsets(...)}``."""
    return {(k[:-1], int(k[-1])): PartitionOffsets(lo, hi, None) for k, (lo, hi) in entries.items()}


# --------------------------------------------------------------------------- offsets


def test_offsets_json_round_trip_is_canonical() -> None:
    position = {B0: 7, A2: 3, ("a", 10): 1, A0: 0}
    offsets = offsets_to_json(position)
    text = json.dumps(offsets)
    # Topics by name, partitions by number (10 after 2): one position, one text.
    assert text == '{"a": {"0": 0, "2": 3, "10": 1}, "b": {"0": 7}}'
    assert offsets_from_json(json.loads(text)) == position
    assert json.dumps(offsets_to_json(offsets_from_json(json.loads(text)))) == text
    assert offsets_to_json({}) == {}


@pytest.mark.parametrize(
    "bad",
    [[], {"a": [1]}, {"a": {"x": 1}}, {"a": {"0": -1}}, {"a": {"0": "5"}}, {"a": {"0": True}}],
)
def test_offsets_from_json_rejects_other_shapes(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="start offset"):
        offsets_from_json(bad, "start offset")


# --------------------------------------------------------------------------- rate limit


def test_rate_limit_under_the_limit_reads_everything() -> None:
    begins = {A0: 0, A1: 5}
    highs = {A0: 10, A1: 5}
    assert rate_limit(begins, highs, 10) == highs
    assert rate_limit(begins, highs, 1000) == highs


def test_rate_limit_shares_in_proportion_to_lag_exactly() -> None:
    begins = {A0: 0, A1: 100, A2: 0, B0: 7}
    highs = {A0: 600, A1: 400, A2: 100, B0: 7}  # lags 600, 300, 100, 0
    ends = rate_limit(begins, highs, 100)
    shares = {tp: ends[tp] - begins[tp] for tp in ends}
    assert sum(shares.values()) == 100
    assert shares == {A0: 60, A1: 30, A2: 10, B0: 0}
    # Equal lags: the remainder goes to the partition first in order.
    ends = rate_limit({A0: 0, A1: 0, A2: 0}, {A0: 50, A1: 50, A2: 50}, 100)
    assert ends == {A0: 34, A1: 33, A2: 33}


def test_rate_limit_does_not_starve_a_small_partition() -> None:
    begins = {A0: 0, A1: 0, A2: 0}
    highs = {A0: 10_000, A1: 10_000, A2: 1}
    ends = rate_limit(begins, highs, 10)
    assert ends[A2] == 1  # Kafka's rule: a lagging partition gets at least one offset
    assert sum(ends.values()) == 10


def test_rate_limit_below_the_number_of_lagging_partitions() -> None:
    begins = {A0: 0, A1: 0, A2: 0}
    highs = {A0: 5, A1: 9, A2: 9}
    assert rate_limit(begins, highs, 2) == {A0: 0, A1: 1, A2: 1}
    with pytest.raises(InvalidInputError):
        rate_limit(begins, highs, 0)


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 99, 100, 101, 999])
def test_rate_limit_never_passes_the_limit_or_the_high_watermark(limit: int) -> None:
    begins = {A0: 3, A1: 0, A2: 50, B0: 0}
    highs = {A0: 400, A1: 1, A2: 52, B0: 17}
    ends = rate_limit(begins, highs, limit)
    assert all(begins[tp] <= ends[tp] <= highs[tp] for tp in highs)
    total = sum(highs[tp] - begins[tp] for tp in highs)
    assert sum(ends[tp] - begins[tp] for tp in highs) == min(limit, total)


# --------------------------------------------------------------------------- next_end


def test_next_end_waits_for_the_minimum_until_the_delay() -> None:
    begins, highs = {A0: 0, A1: 0}, {A0: 3, A1: 4}
    wait = {"max_offsets": None, "min_offsets": 8, "max_trigger_delay_s": 60.0}
    assert next_end(begins, highs, waited_s=10.0, **wait) is None
    assert next_end(begins, highs, waited_s=60.0, **wait) == highs  # the delay passed
    assert next_end(begins, {A0: 4, A1: 4}, waited_s=0.0, **wait) == {A0: 4, A1: 4}


def test_next_end_minimum_then_maximum() -> None:
    begins, highs = {A0: 0}, {A0: 50}
    end = next_end(
        begins, highs, max_offsets=20, min_offsets=10, waited_s=0.0, max_trigger_delay_s=1.0
    )
    assert end == {A0: 20}
    end = next_end(
        begins, highs, max_offsets=None, min_offsets=None, waited_s=0.0, max_trigger_delay_s=1.0
    )
    assert end == highs


# --------------------------------------------------------------------------- reconcile


def test_reconcile_new_partitions_begin_at_their_log_start() -> None:
    begins, highs = reconcile({A0: 5}, known(a0=(0, 9), a1=(4, 12)), fail_on_data_loss=True)
    assert begins == {A0: 5, A1: 4}
    assert highs == {A0: 9, A1: 12}


def test_reconcile_a_trailing_replica_is_no_new_data() -> None:
    begins, highs = reconcile({A0: 20}, known(a0=(0, 15)), fail_on_data_loss=True)
    assert begins == highs == {A0: 20}


def test_reconcile_offsets_below_the_log_start(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(DataLossError, match=r"a-0: offsets \[3, 10\) are no longer available"):
        reconcile({A0: 3}, known(a0=(10, 30)), fail_on_data_loss=True)
    with caplog.at_level(logging.WARNING, "laminar_spark"):
        begins, _ = reconcile({A0: 3}, known(a0=(10, 30)), fail_on_data_loss=False)
    assert begins == {A0: 10}
    assert "a-0: 7 offsets [3, 10)" in caplog.text


def test_reconcile_a_partition_that_is_gone(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(DataLossError, match=r"b-0 is gone.*offsets from 4 on cannot be read"):
        reconcile({A0: 1, B0: 4}, known(a0=(0, 2)), fail_on_data_loss=True)
    with caplog.at_level(logging.WARNING, "laminar_spark"):
        begins, highs = reconcile({A0: 1, B0: 4}, known(a0=(0, 2)), fail_on_data_loss=False)
    assert begins == {A0: 1} and highs == {A0: 2}
    assert "b-0 is gone" in caplog.text


# --------------------------------------------------------------------------- stream_ranges


def test_stream_ranges_between_two_offsets() -> None:
    ranges = stream_ranges(
        {A0: 5, A1: 7},
        {A0: 9, A1: 7, B0: 3},  # b-0 is new: from 0
        known(a0=(0, 20), b0=(0, 3)),
        fail_on_data_loss=True,
    )
    assert ranges == [OffsetRange("a", 0, 5, 9), OffsetRange("b", 0, 0, 3)]


def test_stream_ranges_below_the_log_start(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(DataLossError, match=r"b-0: offsets \[0, 2\) are no longer available"):
        stream_ranges({}, {B0: 6}, known(b0=(2, 6)), fail_on_data_loss=True)
    with caplog.at_level(logging.WARNING, "laminar_spark"):
        ranges = stream_ranges({A0: 0}, {A0: 6}, known(a0=(9, 9)), fail_on_data_loss=False)
    assert ranges == []
    assert "a-0: 6 offsets [0, 6)" in caplog.text


def test_stream_ranges_gone_or_backwards() -> None:
    with pytest.raises(DataLossError, match=r"a-0 is gone.*\[1, 4\) cannot be read"):
        stream_ranges({A0: 1}, {A0: 4}, {}, fail_on_data_loss=True)
    with pytest.raises(DataLossError, match="ends at 2, before its start 5"):
        stream_ranges({A0: 5}, {A0: 2}, known(a0=(0, 9)), fail_on_data_loss=True)
    assert stream_ranges({A0: 5}, {A0: 2}, known(a0=(0, 9)), fail_on_data_loss=False) == []


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900.0), ("30s", 30.0), ("250ms", 0.25), ("2h", 7200.0), ("1d", 86400.0),
     ("500", 0.5), ("0", 0.0), (" 3MIN ", 180.0), ("1000us", 0.001)],
)  # fmt: skip
def test_trigger_delay_durations(text: str, seconds: float) -> None:
    assert parse_duration_s("maxTriggerDelay", text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "m", "-5s", "1.5s", "10 parsecs", "8d", "1w", "9" * 5000])
def test_bad_trigger_delays(text: str) -> None:
    with pytest.raises(InvalidInputError, match="option 'maxTriggerDelay' must be"):
        parse_duration_s("maxTriggerDelay", text)
    assert MAX_TRIGGER_DELAY_S_MAX == 7 * 86400


def test_streaming_defaults_and_batch_defaults() -> None:
    base = {"servers": "h:1", "subscribe": "a"}
    stream = parse_options(base, streaming=True)
    assert stream.starting == LATEST  # Kafka's streaming default
    assert (stream.max_offsets_per_trigger, stream.min_offsets_per_trigger) == (None, None)
    assert stream.max_trigger_delay_s == 900.0
    batch = parse_options(base)
    assert batch.starting == EARLIEST
    limited = parse_options(
        {
            **base,
            "maxOffsetsPerTrigger": "100",
            "MINOFFSETSPERTRIGGER": "10",
            "maxTriggerDelay": "5s",
        },
        streaming=True,
    )
    assert limited.max_offsets_per_trigger == 100
    assert limited.min_offsets_per_trigger == 10
    assert limited.max_trigger_delay_s == 5.0
    assert parse_options({**base, "maxOffsetsPerTrigger": "5"}).max_offsets_per_trigger == 5


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"endingOffsets": "latest"}, "option 'endingOffsets' is not allowed for a streaming"),
        ({"endingTimestamp": "1"}, "option 'endingTimestamp' is not allowed"),
        ({"endingOffsetsByTimestamp": "{}"}, "option 'endingOffsetsByTimestamp' is not allowed"),
        ({"maxOffsetsPerTrigger": "-5"}, "option 'maxOffsetsPerTrigger' must be an integer >= 1"),
        ({"maxOffsetsPerTrigger": "0"}, "option 'maxOffsetsPerTrigger' must be an integer >= 1"),
        ({"maxOffsetsPerTrigger": str(2**63)}, "option 'maxOffsetsPerTrigger' must be at most"),
        ({"minOffsetsPerTrigger": "many"}, "option 'minOffsetsPerTrigger' must be an integer"),
        (
            {"minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "10"},
            "'minOffsetsPerTrigger' \\(50\\) must not be above 'maxOffsetsPerTrigger' \\(10\\)",
        ),
        ({"maxTriggerDelay": "soon"}, "option 'maxTriggerDelay' must be a duration"),
        ({"maxOffsetPerTrigger": "5"}, "unknown option 'maxOffsetPerTrigger'"),
    ],
)
def test_bad_streaming_options(extra: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        parse_options({"servers": "h:1", "subscribe": "a", **extra}, streaming=True)


# --------------------------------------------------------------------------- the reader


@dataclass
class FakePartition:
    pass


@dataclass
class FakeTopic:
    partitions: list[FakePartition]


@dataclass
class FakeMetadata:
    topics: dict[str, FakeTopic]
    replicas: int
    filtered: bool = False  # the cluster showed every topic

    def live_replicas(self, topic: str, partition: int) -> tuple[str, ...]:
        return tuple(f"n{i}" for i in range(self.replicas))


@dataclass
class FakeCluster:
    """Per partition ``[log_start, high)`` as the leader has it; replicas take turns
    answering ``ListOffsets``, the last one trailing by ``trail`` offsets."""

    logs: dict[tuple[str, int], tuple[int, int]]
    replicas: int = 3
    trail: int = 0
    calls: list[str] = field(default_factory=list)
    turn: int = 0
    closed: bool = False

    def metadata(self, *, refresh: bool = False) -> FakeMetadata:
        counts: dict[str, int] = {}
        for topic, partition in self.logs:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        topics = {t: FakeTopic([FakePartition()] * n) for t, n in counts.items()}
        return FakeMetadata(topics, self.replicas)

    def list_offsets(
        self, topic: str, partitions: list[int], *, timestamp_ms: int | None = None
    ) -> dict[int, PartitionOffsets]:
        self.calls.append(topic)
        if not any(t == topic for t, _ in self.logs):
            raise UnknownTopicOrPartitionError(topic)
        trailing = self.turn % self.replicas == self.replicas - 1
        self.turn += 1
        answers = {}
        for p in partitions:
            low, high = self.logs[(topic, p)]
            answers[p] = PartitionOffsets(low, high - (self.trail if trailing else 0), None)
        return answers

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def stream(cluster: FakeCluster, clock: Clock | None = None, **extra: str) -> LaminarStreamReader:
    options = {"servers": "h:1", "subscribe": "a", **extra}
    reader = LaminarStreamReader(options, spark_schema(), clock=clock or Clock())
    reader._client = cluster  # type: ignore[assignment]
    return reader


def test_initial_offset_resolves_starting_offsets() -> None:
    cluster = FakeCluster({A0: (0, 10), A1: (2, 5)}, trail=3)
    # latest asks every replica, so a trailing one does not move the start back.
    assert stream(cluster).initialOffset() == {"a": {"0": 10, "1": 5}}
    assert stream(cluster, startingOffsets="earliest").initialOffset() == {"a": {"0": 0, "1": 2}}
    explicit = json.dumps({"a": {"0": -2, "1": 4}})
    assert stream(cluster, startingOffsets=explicit).initialOffset() == {"a": {"0": 0, "1": 4}}
    to_latest = json.dumps({"a": {"0": -1, "1": 4}})  # -1: valid in a stream, not a batch
    assert stream(cluster, startingOffsets=to_latest).initialOffset() == {"a": {"0": 10, "1": 4}}
    with pytest.raises(InvalidInputError, match=r"must name every partition.*missing: a-0"):
        stream(cluster, startingOffsets=json.dumps({"a": {"1": 4}})).initialOffset()
    with pytest.raises(DataLossError, match=r"a-1: offsets \[0, 2\)"):
        stream(cluster, startingOffsets=json.dumps({"a": {"0": 0, "1": 0}})).initialOffset()
    with pytest.raises(UnknownTopicOrPartitionError, match="unknown topic"):
        stream(cluster, subscribe="a,zz").initialOffset()


def test_latest_offset_with_limits_and_new_partitions() -> None:
    cluster = FakeCluster({A0: (0, 100), A1: (0, 50)})
    reader = stream(cluster, maxOffsetsPerTrigger="30")
    assert reader.getDefaultReadLimit() == ReadMaxRows(30)
    start = {"a": {"0": 40, "1": 20}}  # lags 60 and 30
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end == {"a": {"0": 60, "1": 30}}
    assert reader.reportLatestOffset() == {"a": {"0": 100, "1": 50}}
    # Trigger.Once / the engine asking for everything: no limit.
    assert reader.latestOffset(start, ReadAllAvailable()) == {"a": {"0": 100, "1": 50}}
    # A new partition starts at its log start, and shares the limit.
    cluster.logs[A2] = (7, 37)
    end = reader.latestOffset({"a": {"0": 100, "1": 50}}, reader.getDefaultReadLimit())
    assert end == {"a": {"0": 100, "1": 50, "2": 37}}
    # No new data: the start comes back unchanged, the same JSON text.
    same = {"a": {"0": 100, "1": 50, "2": 37}}
    assert json.dumps(reader.latestOffset(same, ReadMaxRows(30))) == json.dumps(same)


def test_latest_offset_subscribe_pattern_finds_new_topics() -> None:
    cluster = FakeCluster({A0: (0, 4)})
    reader = LaminarStreamReader(
        {"servers": "h:1", "subscribePattern": "[ab]", "startingOffsets": "earliest"},
        spark_schema(),
    )
    reader._client = cluster  # type: ignore[assignment]
    start = reader.initialOffset()
    assert start == {"a": {"0": 0}}
    cluster.logs[B0] = (0, 3)
    assert reader.latestOffset(start, ReadAllAvailable()) == {"a": {"0": 4}, "b": {"0": 3}}


def test_min_offsets_waits_until_the_delay() -> None:
    clock = Clock()
    cluster = FakeCluster({A0: (0, 5)})
    reader = stream(cluster, clock, minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(10)
    # The first call after a start never waits (Kafka's too).
    assert reader.latestOffset({"a": {"0": 0}}, limit) == {"a": {"0": 5}}
    cluster.logs[A0] = (0, 9)
    clock.now_s += 10
    assert reader.latestOffset({"a": {"0": 5}}, limit) == {"a": {"0": 5}}  # 4 < 10: wait
    cluster.logs[A0] = (0, 15)
    assert reader.latestOffset({"a": {"0": 5}}, limit) == {"a": {"0": 15}}  # 10 new
    cluster.logs[A0] = (0, 16)
    clock.now_s += 29
    assert reader.latestOffset({"a": {"0": 15}}, limit) == {"a": {"0": 15}}
    clock.now_s += 1  # 30 s since the last batch
    assert reader.latestOffset({"a": {"0": 15}}, limit) == {"a": {"0": 16}}


def test_trigger_available_now_stops_at_the_target() -> None:
    cluster = FakeCluster({A0: (0, 10), A1: (0, 4)}, trail=2)
    reader = stream(cluster, maxOffsetsPerTrigger="6", minOffsetsPerTrigger="5")
    assert isinstance(reader, SupportsTriggerAvailableNow)
    reader.prepareForTriggerAvailableNow()
    cluster.logs[A0] = (0, 1000)  # produced after the query started: not read
    cluster.logs[A2] = (0, 10)  # a partition added after it started: not read
    limit = reader.getDefaultReadLimit()
    position = {"a": {"0": 0, "1": 0}}
    ends = []
    for _ in range(10):
        end = reader.latestOffset(position, limit)
        if end == position:
            break
        ends.append(end)
        position = end
    # 6 per batch in proportion to the lag (10:4, then 6:2, ties to the first).
    assert ends == [{"a": {"0": 4, "1": 2}}, {"a": {"0": 9, "1": 3}}, {"a": {"0": 10, "1": 4}}]


def test_old_pyspark_latest_offset_without_arguments() -> None:
    """PySpark 4.0/4.1: ``latestOffset()``; the reader keeps the position itself."""
    cluster = FakeCluster({A0: (0, 10)})
    reader = stream(cluster, startingOffsets="earliest", maxOffsetsPerTrigger="4")
    assert reader.latestOffset() == {"a": {"0": 10}}  # position unknown: not limited
    reader = stream(cluster, startingOffsets="earliest", maxOffsetsPerTrigger="4")
    assert reader.initialOffset() == {"a": {"0": 0}}
    assert reader.latestOffset() == {"a": {"0": 4}}
    assert reader.latestOffset() == {"a": {"0": 8}}
    restarted = stream(cluster, maxOffsetsPerTrigger="4")
    restarted.commit({"a": {"0": 8}})
    assert restarted.latestOffset() == {"a": {"0": 10}}


def test_partitions_between_offsets_and_data_loss() -> None:
    cluster = FakeCluster({A0: (0, 100), A1: (30, 60)})
    reader = stream(cluster, maxRecordsPerPartition="25")
    tasks = reader.partitions({"a": {"0": 50, "1": 40}}, {"a": {"0": 100, "1": 40}})
    assert [(t.topic, t.partition, t.start, t.end) for t in tasks] == [
        ("a", 0, 50, 75),
        ("a", 0, 75, 100),
    ]
    assert reader.partitions({"a": {"0": 5}}, {"a": {"0": 5}}) == []
    with pytest.raises(DataLossError, match=r"a-1: offsets \[10, 30\) are no longer available"):
        reader.partitions({"a": {"0": 50, "1": 10}}, {"a": {"0": 50, "1": 40}})
    lenient = stream(cluster, failOnDataLoss="false")
    tasks = lenient.partitions({"a": {"1": 10}}, {"a": {"1": 40}})
    assert [(t.start, t.end) for t in tasks] == [(30, 40)]


def test_pickles_small_and_stop_closes_the_client() -> None:
    cluster = FakeCluster({A0: (0, 10)})
    reader = stream(cluster)
    reader.latestOffset({"a": {"0": 0}}, ReadAllAvailable())
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.options == reader.options
    assert copy._client is None and copy._latest is None
    assert len(pickle.dumps(reader)) < 2000
    reader.stop()
    assert cluster.closed and reader._client is None


def test_constructor_rejects_bad_options_without_a_cluster() -> None:
    with pytest.raises(InvalidInputError, match="'endingOffsets' is not allowed"):
        LaminarStreamReader(
            {"servers": "h:1", "subscribe": "a", "endingOffsets": "latest"}, spark_schema()
        )


def test_offsets_survive_a_json_round_trip_through_the_engine() -> None:
    """What Spark does between calls: JSON text out, JSON text back in."""
    cluster = FakeCluster({A0: (0, 10), ("a", 11): (0, 3)})
    cluster.logs.update({("a", i): (0, 1) for i in range(1, 11)})
    reader = stream(cluster, startingOffsets="earliest")
    text = json.dumps(reader.initialOffset())
    end = reader.latestOffset(json.loads(text), ReadAllAvailable())
    again = reader.latestOffset(json.loads(json.dumps(end)), ReadAllAvailable())
    assert json.dumps(again) == json.dumps(end)
    assert list(end["a"]) == [str(i) for i in range(12)]

"""spark.read.format("laminar") against a live 3-node cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from laminar_client import Client
from laminar_spark import LaminarDataSource

from tests.spark.conftest import BASE_MS, Produced

COLUMNS = ["key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts"]


def read(
    spark: Any, servers: str, *, headers: bool = False, **options: str
) -> list[tuple[Any, ...]]:
    reader = spark.read.format("laminar").option("servers", servers)
    if headers:
        reader = reader.option("includeHeaders", "true")
    for name, value in options.items():
        reader = reader.option(name, value)
    df = reader.load()
    rows = df.selectExpr(*COLUMNS, *(["headers"] if headers else [])).collect()
    out = []
    for row in rows:
        key = None if row.key is None else bytes(row.key)
        value = None if row.value is None else bytes(row.value)
        record: tuple[Any, ...] = (key, value, row.topic, row.partition, row.offset, row.ts)
        if headers:
            pairs = (
                None if row.headers is None else tuple((h.key, bytes(h.value)) for h in row.headers)
            )
            record += (pairs,)
        out.append(record)
    return sorted(out, key=lambda r: (r[2], r[3], r[4]))


def without_headers(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [r[:6] for r in rows]


def test_schema_is_kafkas(spark: Any, produced: Produced) -> None:
    df = spark.read.format("laminar").option("servers", produced.servers)
    plain = df.option("subscribe", "events").load()
    kafka = (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int"
    )
    assert plain.schema.simpleString() == kafka + ">"
    with_headers = df.option("subscribe", "events").option("includeHeaders", "true").load()
    assert with_headers.schema.simpleString() == (
        kafka + ",headers:array<struct<key:string,value:binary>>>"
    )
    assert with_headers.schema["headers"].nullable  # null: a record without headers


def test_every_timestamp_type_is_create_time(spark: Any, produced: Produced) -> None:
    """``selectExpr("timestampType")`` works, and gives 0 (create time) for every
    record: Laminar keeps the producer's timestamps."""
    df = (
        spark.read.format("laminar")
        .option("servers", produced.servers)
        .option("subscribe", "events")
        .load()
    )
    counts = df.groupBy("timestampType").count().collect()
    assert [(row.timestampType, row["count"]) for row in counts] == [(0, 600)]


def test_read_all_equals_produced_with_headers(spark: Any, produced: Produced) -> None:
    rows = read(spark, produced.servers, headers=True, subscribe="events")
    assert rows == produced.rows["events"]


def test_subscribe_two_topics_without_headers(spark: Any, produced: Produced) -> None:
    rows = read(spark, produced.servers, subscribe="events, other")
    expected = without_headers(produced.rows["events"] + produced.rows["other"])
    assert rows == sorted(expected, key=lambda r: (r[2], r[3], r[4]))


def test_a_batch_read_cannot_start_at_latest(spark: Any, produced: Produced) -> None:
    """As in Spark's Kafka source; an empty topic reads as no rows."""
    with pytest.raises(Exception, match="'startingOffsets' cannot be 'latest' in a batch read"):
        read(spark, produced.servers, subscribe="events", startingOffsets="latest")
    assert read(spark, produced.servers, subscribe="empty") == []


def test_json_ranges(spark: Any, produced: Produced) -> None:
    end_of_2 = 1 + max(r[4] for r in produced.rows["events"] if r[3] == 2)
    starting = json.dumps({"events": {"0": 10, "1": -2, "2": end_of_2}})
    ending = json.dumps({"events": {"0": 50, "1": 7, "2": -1}})
    rows = read(
        spark, produced.servers, subscribe="events", startingOffsets=starting, endingOffsets=ending
    )
    expected = [
        r
        for r in without_headers(produced.rows["events"])
        if (r[3] == 0 and 10 <= r[4] < 50) or (r[3] == 1 and r[4] < 7)
    ]
    assert rows == expected


@pytest.mark.parametrize(
    "split",
    [
        {"maxRecordsPerPartition": "33"},
        {"minPartitions": "7"},
        {"minPartitions": "5", "maxRecordsPerPartition": "90"},
    ],
)
def test_splitting_gives_the_same_rows(
    spark: Any, produced: Produced, split: dict[str, str]
) -> None:
    starting = json.dumps({"events": {"0": 3, "1": -2, "2": 11}})
    rows = read(
        spark, produced.servers, headers=True, subscribe="events", startingOffsets=starting, **split
    )
    expected = [
        r
        for r in produced.rows["events"]
        if not ((r[3] == 0 and r[4] < 3) or (r[3] == 2 and r[4] < 11))
    ]
    assert rows == expected
    df = (
        spark.read.format("laminar")
        .option("servers", produced.servers)
        .option("subscribe", "events")
        .options(**split)
        .load()
    )
    tasks = df.rdd.getNumPartitions()
    if "minPartitions" in split:
        assert tasks >= int(split["minPartitions"])
    if "maxRecordsPerPartition" in split:
        assert tasks >= -(-200 // int(split["maxRecordsPerPartition"])) * 3


def test_assign(spark: Any, produced: Produced) -> None:
    rows = read(spark, produced.servers, assign=json.dumps({"events": [2], "other": [1]}))
    expected = [
        r
        for r in without_headers(produced.rows["events"] + produced.rows["other"])
        if (r[2], r[3]) in {("events", 2), ("other", 1)}
    ]
    assert rows == sorted(expected, key=lambda r: (r[2], r[3], r[4]))


def test_subscribe_pattern(spark: Any, produced: Produced) -> None:
    rows = read(spark, produced.servers, subscribePattern="oth.*")
    assert rows == without_headers(produced.rows["other"])
    assert read(spark, produced.servers, subscribePattern="nothing-matches") == []


def test_explicit_register(spark: Any, produced: Produced) -> None:
    spark.dataSource.register(LaminarDataSource)
    assert len(read(spark, produced.servers, subscribe="other")) == 40


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "events", "bogus": "1"}, "unknown option 'bogus'"),
        ({"subscribe": "events", "servers": ""}, "'servers' is required"),
        ({}, "exactly one of the options 'subscribe'"),
        ({"subscribe": "events", "assign": '{"events": [0]}'}, "exactly one of"),
        ({"assign": "{not json"}, "option 'assign' is not valid JSON"),
        ({"assign": '{"events": []}'}, "non-empty list of partitions"),
        ({"subscribePattern": "("}, "'subscribePattern' is not a valid regex"),
        ({"subscribe": "events", "startingOffsets": "soon"}, "option 'startingOffsets' must be"),
        ({"subscribe": "events", "endingOffsets": "earliest"}, "cannot be earliest"),
        ({"subscribe": "events", "endingOffsets": '{"events": {"0": -2}}'}, "cannot end at -2"),
        ({"subscribe": "events", "startingOffsets": '{"events": {"0": -5}}'}, "must be an integer"),
        ({"subscribe": "events", "minPartitions": "0"}, "'minPartitions' must be an integer >= 1"),
        ({"subscribe": "events", "maxRecordsPerPartition": "x"}, "'maxRecordsPerPartition'"),
        (
            {"subscribe": "events", "includeHeaders": "yes"},
            "'includeHeaders' must be true or false",
        ),
        ({"subscribe": "events", "failOnDataLoss": "1"}, "'failOnDataLoss' must be true or false"),
    ],
)
def test_bad_options_fail_at_load(
    spark: Any, produced: Produced, options: dict[str, str], message: str
) -> None:
    reader = spark.read.format("laminar").option("servers", produced.servers)
    with pytest.raises(Exception, match=message):
        reader.options(**options).load().collect()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "events,nope"}, "unknown topic.*nope"),
        ({"assign": '{"nope": [0]}'}, "unknown topic 'nope'"),
        ({"assign": '{"events": [0, 3]}'}, r"partitions 0..2, not \[3\]"),
        (
            {"subscribe": "events", "startingOffsets": '{"events": {"5": 0}}'},
            r"names partition\(s\) \[5\] of 'events'",
        ),
        (
            {"subscribe": "events", "startingOffsets": '{"other": {"0": 0}}'},
            "names topic 'other', which is not being read",
        ),
        (
            {"subscribe": "events", "startingOffsets": '{"events": {"0": 1}}'},
            "'startingOffsets' must name every partition.*missing: events-1, events-2",
        ),
        (
            {"subscribe": "events", "startingOffsets": '{"events": {"0": 100000, "1": 0, "2": 0}}'},
            "offset 100000 of events-0 is beyond its high watermark \\d+",
        ),
        (
            {"subscribe": "events", "endingOffsets": '{"events": {"0": 100000, "1": -1, "2": -1}}'},
            "'endingOffsets': offset 100000 of events-0 is beyond",
        ),
        (
            {
                "subscribe": "events",
                "startingOffsets": '{"events": {"0": 20, "1": -2, "2": -2}}',
                "endingOffsets": '{"events": {"0": 10, "1": -1, "2": -1}}',
            },
            "events-0: starting offset 20 is after ending offset 10",
        ),
    ],
)
def test_bad_ranges_fail_at_planning(
    spark: Any, produced: Produced, options: dict[str, str], message: str
) -> None:
    reader = spark.read.format("laminar").option("servers", produced.servers)
    with pytest.raises(Exception, match=message):
        reader.options(**options).load().collect()


def test_discovery_finds_default_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """What PySpark's ``lookup_data_sources`` worker does: import every top-level
    ``pyspark_*`` module on the path and register its ``DefaultSource`` under
    ``name()`` (``clients`` is on the path of an installed Laminar)."""
    from importlib import import_module
    from pkgutil import iter_modules

    from pyspark.sql.datasource import DataSource

    from tests.spark.conftest import CLIENTS

    monkeypatch.syspath_prepend(str(CLIENTS))
    found = {}
    for info in iter_modules():
        if info.name == "pyspark_laminar":
            module = import_module(info.name)
            assert issubclass(module.DefaultSource, DataSource)
            found[module.DefaultSource.name()] = module.DefaultSource
    assert found == {"laminar": LaminarDataSource}


def test_timestamp_ranges(spark: Any, produced: Produced) -> None:
    """startingTimestamp / endingTimestamp: the records with BASE_MS + 100 s <= time <
    BASE_MS + 300 s (timestamps grow with the offsets in every partition here)."""
    from tests.spark.conftest import BASE_MS

    low, high = BASE_MS + 100_000, BASE_MS + 300_000
    rows = read(
        spark,
        produced.servers,
        subscribe="events",
        startingTimestamp=str(low),
        endingTimestamp=str(high),
    )
    expected = [r for r in produced.rows["events"] if low <= r[5] < high]
    assert without_headers(rows) == without_headers(expected)
    # Per partition (every one named; after every record: the end), taking precedence
    # over startingOffsets, so that a batch read's 'latest' is not even looked at.
    after = 2**53
    rows = read(
        spark,
        produced.servers,
        subscribe="events",
        startingOffsets="latest",
        startingOffsetsByTimestamp=json.dumps({"events": {"0": after, "1": low, "2": after}}),
        startingOffsetsByTimestampStrategy="latest",
    )
    expected = [r for r in produced.rows["events"] if r[3] == 1 and r[5] >= low]
    assert without_headers(rows) == without_headers(expected)


def test_a_starting_time_after_every_record(spark: Any, produced: Produced) -> None:
    """No record at or after the time: an error by default, the end with 'latest'."""
    after = str(2**53)
    with pytest.raises(Exception, match="no record at or after the starting time"):
        read(spark, produced.servers, subscribe="events", startingTimestamp=after)
    rows = read(
        spark,
        produced.servers,
        subscribe="events",
        startingTimestamp=after,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert rows == []


# ----------------------------------------------------------------- filter pushdown

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture
def pushdown(spark: Any) -> Iterator[None]:
    """Filter pushdown on for one test (off is PySpark's default)."""
    spark.conf.set(PUSHDOWN, "true")
    try:
        yield
    finally:
        spark.conf.unset(PUSHDOWN)


def filtered(spark: Any, servers: str, where: str) -> tuple[list[tuple[Any, ...]], int]:
    """The rows of ``events`` passing ``where``, and how many tasks read them (10
    offsets per task at most, so tasks count the offsets planned)."""
    df = (
        spark.read.format("laminar")
        .option("servers", servers)
        .option("subscribe", "events")
        .option("maxRecordsPerPartition", "10")
        .load()
        .where(where)
    )
    rows = sorted(
        (r.partition, r.offset, None if r.value is None else bytes(r.value))
        for r in df.select("value", "partition", "offset").collect()
    )
    return rows, df.rdd.getNumPartitions()


def expected_rows(produced: Produced, keep: Any) -> list[tuple[Any, ...]]:
    return sorted((r[3], r[4], r[1]) for r in produced.rows["events"] if keep(r))


def first_at(produced: Produced, partition: int, keep: Any) -> int:
    """The first offset of ``partition`` whose row passes ``keep``."""
    return min(r[4] for r in produced.rows["events"] if r[3] == partition and keep(r))


LATE_MS = BASE_MS + 450_000
WHERES: list[tuple[str, Any, Any]] = [
    # (where, keep(row), planned ranges {partition: (start, end)} from the ends
    # {partition: high watermark} and the rows produced)
    (
        "partition = 1 AND offset >= 50 AND offset < 120",
        lambda r: r[3] == 1 and 50 <= r[4] < 120,
        lambda ends, p: {1: (50, 120)},
    ),
    (
        "partition IN (0, 2) AND offset > 189",
        lambda r: r[3] in (0, 2) and r[4] > 189,
        lambda ends, p: {0: (190, ends[0]), 2: (190, ends[2])},
    ),
    (
        "offset IN (5, 33) AND partition <= 0",
        lambda r: r[3] == 0 and r[4] in (5, 33),
        lambda ends, p: {0: (5, 34)},
    ),
    (
        f"timestamp >= timestamp_millis({LATE_MS})",
        lambda r: r[5] >= LATE_MS,
        lambda ends, p: {q: (first_at(p, q, lambda r: r[5] >= LATE_MS), ends[q]) for q in ends},
    ),
    (
        f"timestamp > timestamp_millis({LATE_MS}) AND topic = 'events'",
        lambda r: r[5] > LATE_MS,
        lambda ends, p: {q: (first_at(p, q, lambda r: r[5] > LATE_MS), ends[q]) for q in ends},
    ),
    # an upper time bound narrows nothing; Spark filters
    (
        f"timestamp < timestamp_millis({BASE_MS + 30_000})",
        lambda r: r[5] < BASE_MS + 30_000,
        lambda ends, p: {q: (0, ends[q]) for q in ends},
    ),
    ("topic = 'other'", lambda r: False, lambda ends, p: {}),
]


def tasks_for(ranges: dict[int, tuple[int, int]]) -> int:
    """Tasks of at most 10 offsets; none planned still runs PySpark's one empty task."""
    return sum(-(-(end - start) // 10) for start, end in ranges.values()) or 1


@pytest.mark.parametrize(("where", "keep", "planned"), WHERES, ids=[w[0] for w in WHERES])
def test_pushed_filters_read_less_and_the_same_rows(
    spark: Any, produced: Produced, pushdown: None, where: str, keep: Any, planned: Any
) -> None:
    """With pushdown on, the plan covers only the offsets the filters allow (the
    task count shows it), and the rows are those produced that pass the filter."""
    rows, tasks = filtered(spark, produced.servers, where)
    assert rows == expected_rows(produced, keep)
    with Client(produced.servers) as client:
        ends = {q: o.high_watermark for q, o in client.list_offsets("events", [0, 1, 2]).items()}
    assert tasks == tasks_for(planned(ends, produced))


def test_without_pushdown_every_offset_is_read_and_filtered_by_spark(
    spark: Any, produced: Produced
) -> None:
    """PySpark's default (pushdown off): the reader still works, plans all 600
    offsets (60 tasks), and Spark's filter gives the same rows."""
    assert spark.conf.get(PUSHDOWN) == "false"
    where, keep, _ = WHERES[0]
    rows, planned = filtered(spark, produced.servers, where)
    assert rows == expected_rows(produced, keep)
    with Client(produced.servers) as client:
        ends = client.list_offsets("events", [0, 1, 2])
    assert planned == tasks_for({q: (0, o.high_watermark) for q, o in ends.items()})

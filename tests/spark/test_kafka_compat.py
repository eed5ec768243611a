"""A job written for Spark's Kafka source runs with ``format("laminar")``.

``docs/migrating-from-kafka.md`` ("Spark: from the Kafka source") maps every
option, column and save mode of Spark's Kafka source and sink to Laminar's. Each of
its rows is a case here, run against Laminar: the tables are read from the doc and
must list exactly the cases below, with the same verdict (same / alias / no
effect / refused), so the doc and the code cannot drift apart. Most cases parse
options or build schemas without Spark; the save modes run real writes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from laminar_client import Client
from laminar_client.arrow import arrow_schema, columns_to_arrow
from laminar_client.client import PartitionOffsets
from laminar_spark.kafka_options import warn_ignored
from laminar_spark.options import EARLIEST, LATEST, ReadOptions, parse_options
from laminar_spark.planner import resolve_ranges, resolve_times, select_partitions
from laminar_spark.source import spark_schema
from laminar_spark.write_options import WriteOptions, parse_write_options
from laminar_spark.writer import check_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from laminar.errors import InvalidInputError
from laminar.records import column_view, encode_batch, with_leader_fields
from tests.spark.conftest import KAFKA_COLUMNS, Produced, create_topic, high_watermarks

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-kafka.md"
SECTION = "## Spark: from the Kafka source"
SERVERS = "127.0.0.1:1"


# ----------------------------------------------------------------------- helpers


def read(streaming: bool | None = False, **options: str) -> ReadOptions:
    given = {"servers": SERVERS, **options}
    if not {"subscribe", "subscribePattern", "assign"} & set(options):
        given["subscribe"] = "t"
    return parse_options(given, streaming=streaming)


def write(streaming: bool = False, **options: str) -> WriteOptions:
    return parse_write_options({"servers": SERVERS, "topic": "t", **options}, streaming=streaming)


def refused(parse: Callable[[], object], *reason: str) -> str:
    with pytest.raises(InvalidInputError) as caught:
        parse()
    for text in reason:
        assert text in str(caught.value), (text, str(caught.value))
    return str(caught.value)


def ignored(options: ReadOptions | WriteOptions, name: str) -> None:
    assert any(entry.startswith(name + " (") for entry in options.ignored), options.ignored


OFFSETS = {"t": {0: PartitionOffsets(0, 100, None), 1: PartitionOffsets(0, 50, None)}}
SELECTED = {"t": [0, 1]}


def lookup(topic: str, partitions: list[int], *, timestamp_ms: int) -> Any:
    return {p: PartitionOffsets(0, 100, 10 if timestamp_ms <= 1000 else None) for p in partitions}


def ranges(options: ReadOptions) -> list[tuple[int, int, int]]:
    resolved = resolve_times(options, SELECTED, OFFSETS, lookup)
    return [(r.partition, r.start, r.end) for r in resolve_ranges(resolved, SELECTED, OFFSETS)]


# ------------------------------------------------------------------ columns read


def column(name: str) -> Callable[[], None]:
    def check() -> None:
        kind = dict(KAFKA_COLUMNS)[name]
        schema = spark_schema(headers=True)
        assert [f.name for f in schema.fields] == [n for n, _ in KAFKA_COLUMNS]
        assert schema[name].dataType.simpleString() == kind
        assert arrow_schema(headers=True).names == [n for n, _ in KAFKA_COLUMNS]

    return check


def timestamp_type_is_create_time() -> None:
    column("timestampType")()
    raw = with_leader_fields(encode_batch([b"a", b"b"], timestamps_ms=[5, 3]), 0, 1)
    batch = columns_to_arrow(column_view(raw), "t", 0)
    assert batch.column("timestampType").to_pylist() == [0, 0]


def headers_null_without_any() -> None:
    column("headers")()
    raw = with_leader_fields(encode_batch([b"a", b"b"], headers=[[("h", b"1")], []]), 0, 1)
    headers = columns_to_arrow(column_view(raw), "t", 0, headers=True).column("headers")
    assert headers.to_pylist() == [[{"key": "h", "value": b"1"}], None]
    assert "headers" not in spark_schema().names
    assert read(includeHeaders="true").include_headers


# ------------------------------------------------------------------- read options


def starting_offsets() -> None:
    assert read(startingOffsets="earliest").starting == EARLIEST
    refused(lambda: read(startingOffsets="latest"), "cannot be 'latest' in a batch read")
    refused(lambda: read(startingOffsets='{"t": {"0": 5, "1": -1}}'), "t-1 cannot start at -1")
    assert read(streaming=True).starting == LATEST  # a stream's default
    streamed = read(streaming=True, startingOffsets='{"t": {"0": 5, "1": -1}}')
    assert ranges(streamed) == [(0, 5, 100), (1, 50, 50)]
    assert ranges(read(startingOffsets='{"t": {"0": 5, "1": -2}}')) == [(0, 5, 100), (1, 0, 50)]
    with pytest.raises(InvalidInputError, match=r"must name every partition.*missing: t-1"):
        ranges(read(startingOffsets='{"t": {"0": 5}}'))


def ending_offsets() -> None:
    assert ranges(read(endingOffsets='{"t": {"0": 7, "1": -1}}')) == [(0, 0, 7), (1, 0, 50)]
    refused(lambda: read(endingOffsets="earliest"), "cannot be earliest")
    refused(lambda: read(endingOffsets='{"t": {"0": -2, "1": -1}}'), "cannot end at -2")
    refused(lambda: read(streaming=True, endingOffsets="latest"), "not allowed for a streaming")
    with pytest.raises(InvalidInputError, match="'endingOffsets' must name every partition"):
        ranges(read(endingOffsets='{"t": {"1": 3}}'))


def starting_by_timestamp() -> None:
    parsed = read(startingOffsetsByTimestamp='{"t": {"0": 1000, "1": 1000}}')
    assert ranges(parsed) == [(0, 10, 100), (1, 10, 50)]
    with pytest.raises(InvalidInputError, match=r"must name every partition.*missing: t-1"):
        ranges(read(startingOffsetsByTimestamp='{"t": {"0": 1000}}'))


def ending_by_timestamp() -> None:
    parsed = read(endingOffsetsByTimestamp='{"t": {"0": 1000, "1": 1000}}')
    assert ranges(parsed) == [(0, 0, 10), (1, 0, 10)]
    refused(
        lambda: read(streaming=True, endingOffsetsByTimestamp='{"t": {"0": 1}}'),
        "not allowed for a streaming",
    )


def per_trigger(name: str, value: str, field: str, expected: object) -> Callable[[], None]:
    def check() -> None:
        assert getattr(read(streaming=True, **{name: value}), field) == expected
        ignored(read(**{name: value}), name)  # a batch read: no effect, with a warning

    return check


def subscribe_pattern() -> None:
    parsed = read(subscribePattern="a.*")
    assert select_partitions(parsed, {"a": 1, "ab": 2, "b": 1, "__a": 1}) == {
        "a": [0],
        "ab": [0, 1],
    }


def security(write_side: bool) -> Callable[[], None]:
    def check() -> None:
        parse = write if write_side else read
        for protocol in ("SSL", "SASL_SSL", "SASL_PLAINTEXT"):
            refused(
                lambda protocol=protocol: parse(**{"kafka.security.protocol": protocol}),
                "remove it: 'tls.ca'",
                "'token' or 'tokenFile'",
            )
        ignored(parse(**{"kafka.security.protocol": "plaintext"}), "kafka.security.protocol")

    return check


SECURITY_INSTEAD = {
    "kafka.ssl.truststore.location": "use 'tls.ca', a PEM file",
    "kafka.ssl.truststore.type": "use 'tls.ca', a PEM file",
    "kafka.ssl.keystore.location": "use 'tls.cert' and 'tls.key'",
    "kafka.ssl.key.password": "use 'tls.cert' and 'tls.key'",
    "kafka.ssl.endpoint.identification.algorithm": "'tls.serverName'",
    "kafka.ssl.protocol": "'tls.ca', 'tls.cert', 'tls.key' and 'tls.serverName'",
    "kafka.sasl.jaas.config": "use 'token' or 'tokenFile'",
    "kafka.sasl.mechanism": "use 'token' or 'tokenFile'",
}
"""Kafka's security settings, refused naming the Laminar option to use instead."""


def prefixed(prefix: str, write_side: bool) -> Callable[[], None]:
    def check() -> None:
        parse = write if write_side else read
        cases = [(name, text) for name, text in SECURITY_INSTEAD.items() if name.startswith(prefix)]
        assert cases
        for name, text in cases:
            # The value (a password, a JAAS line) is never repeated.
            message = refused(lambda name=name: parse(**{name: "s3cret"}), text)
            assert "s3cret" not in message

    return check


def alias_of_servers(write_side: bool) -> None:
    def parse(options: dict[str, str]) -> ReadOptions | WriteOptions:
        if write_side:
            return parse_write_options({"topic": "t", **options}, streaming=False)
        return parse_options({"subscribe": "t", **options})

    assert parse({"kafka.bootstrap.servers": "h:1,h:2"}).servers == "h:1,h:2"
    assert parse({"KAFKA.Bootstrap.Servers": "h:3"}).servers == "h:3"
    refused(
        lambda: parse({"servers": "a:1", "kafka.bootstrap.servers": "b:1"}),
        "give one of the options 'servers' and 'kafka.bootstrap.servers'",
    )


READ: dict[str, tuple[str, Callable[[], None]]] = {
    "kafka.bootstrap.servers": ("alias of `servers`", lambda: alias_of_servers(False)),
    "assign": ("same", lambda: assert_equal(read(assign='{"t": [1, 0]}').assign, {"t": (1, 0)})),
    "subscribe": ("same", lambda: assert_equal(read(subscribe="a, b").subscribe, ("a", "b"))),
    "subscribePattern": ("same", subscribe_pattern),
    "startingOffsets": ("same", starting_offsets),
    "endingOffsets": ("same", ending_offsets),
    "startingTimestamp": (
        "same",
        lambda: assert_equal(ranges(read(startingTimestamp="1000")), [(0, 10, 100), (1, 10, 50)]),
    ),
    "startingOffsetsByTimestamp": ("same", starting_by_timestamp),
    "startingOffsetsByTimestampStrategy": (
        "same",
        lambda: assert_equal(
            ranges(read(startingTimestamp="5000", startingOffsetsByTimestampStrategy="latest")),
            [(0, 100, 100), (1, 50, 50)],
        ),
    ),
    "endingTimestamp": (
        "same",
        lambda: assert_equal(ranges(read(endingTimestamp="1000")), [(0, 0, 10), (1, 0, 10)]),
    ),
    "endingOffsetsByTimestamp": ("same", ending_by_timestamp),
    "failOnDataLoss": (
        "same",
        lambda: assert_equal(read(failOnDataLoss="false").fail_on_data_loss, False),
    ),
    "includeHeaders": (
        "same",
        lambda: assert_equal(read(includeHeaders="true").include_headers, True),
    ),
    "minPartitions": ("same", lambda: assert_equal(read(minPartitions="7").min_partitions, 7)),
    "maxRecordsPerPartition": (
        "same",
        lambda: assert_equal(read(maxRecordsPerPartition="9").max_records_per_partition, 9),
    ),
    "maxOffsetsPerTrigger": (
        "same",
        per_trigger("maxOffsetsPerTrigger", "100", "max_offsets_per_trigger", 100),
    ),
    "minOffsetsPerTrigger": (
        "same",
        per_trigger("minOffsetsPerTrigger", "10", "min_offsets_per_trigger", 10),
    ),
    "maxTriggerDelay": ("same", per_trigger("maxTriggerDelay", "2m", "max_trigger_delay_s", 120.0)),
    "kafkaConsumer.pollTimeoutMs": (
        "no effect",
        lambda: ignored(
            read(**{"kafkaConsumer.pollTimeoutMs": "512"}), "kafkaConsumer.pollTimeoutMs"
        ),
    ),
    "fetchOffset.numRetries": (
        "no effect",
        lambda: ignored(read(**{"fetchOffset.numRetries": "3"}), "fetchOffset.numRetries"),
    ),
    "fetchOffset.retryIntervalMs": (
        "no effect",
        lambda: ignored(
            read(**{"fetchOffset.retryIntervalMs": "10"}), "fetchOffset.retryIntervalMs"
        ),
    ),
    "groupIdPrefix": ("no effect", lambda: ignored(read(groupIdPrefix="jobs"), "groupIdPrefix")),
    "kafka.group.id": (
        "no effect",
        lambda: ignored(read(**{"kafka.group.id": "g"}), "kafka.group.id"),
    ),
    "kafka.auto.offset.reset": (
        "refused",
        lambda: refused(lambda: read(**{"kafka.auto.offset.reset": "earliest"}), "startingOffsets"),
    ),
    "kafka.key.deserializer": (
        "refused",
        lambda: refused(lambda: read(**{"kafka.key.deserializer": "x"}), "read as bytes"),
    ),
    "kafka.value.deserializer": (
        "refused",
        lambda: refused(lambda: read(**{"kafka.value.deserializer": "x"}), "read as bytes"),
    ),
    "kafka.enable.auto.commit": (
        "refused",
        lambda: refused(lambda: read(**{"kafka.enable.auto.commit": "true"}), "checkpoint"),
    ),
    "kafka.interceptor.classes": (
        "refused",
        lambda: refused(lambda: read(**{"kafka.interceptor.classes": "x"}), "no Kafka consumer"),
    ),
    "kafka.security.protocol": ("refused", security(False)),
    "kafka.ssl.*": ("refused", prefixed("kafka.ssl.", False)),
    "kafka.sasl.*": ("refused", prefixed("kafka.sasl.", False)),
    "kafka.*": (
        "no effect",
        lambda: ignored(
            read(**{"kafka.isolation.level": "read_committed"}), "kafka.isolation.level"
        ),
    ),
}


def assert_equal(got: object, expected: object) -> None:
    assert got == expected


# ------------------------------------------------------------------ write options

WRITE: dict[str, tuple[str, Callable[[], None]]] = {
    "kafka.bootstrap.servers": ("alias of `servers`", lambda: alias_of_servers(True)),
    "topic": ("same", lambda: assert_equal(write(topic="orders").topic, "orders")),
    "includeHeaders": (
        "no effect",
        lambda: ignored(write(includeHeaders="true"), "includeHeaders"),
    ),
    "kafka.acks": ("no effect", lambda: ignored(write(**{"kafka.acks": "1"}), "kafka.acks")),
    "kafka.key.serializer": (
        "refused",
        lambda: refused(lambda: write(**{"kafka.key.serializer": "x"}), "bytes or UTF-8"),
    ),
    "kafka.value.serializer": (
        "refused",
        lambda: refused(lambda: write(**{"kafka.value.serializer": "x"}), "bytes or UTF-8"),
    ),
    "kafka.partitioner.class": (
        "refused",
        lambda: refused(lambda: write(**{"kafka.partitioner.class": "x"}), "'partition' column"),
    ),
    "kafka.security.protocol": ("refused", security(True)),
    "kafka.ssl.*": ("refused", prefixed("kafka.ssl.", True)),
    "kafka.sasl.*": ("refused", prefixed("kafka.sasl.", True)),
    "kafka.*": ("no effect", lambda: ignored(write(**{"kafka.linger.ms": "5"}), "kafka.linger.ms")),
}


# ----------------------------------------------------------------- columns written

_HEADER = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def accepts(*fields: tuple[str, Any], topic: str | None = "t") -> None:
    schema = StructType([StructField(name, kind) for name, kind in fields])
    options = WriteOptions(servers=SERVERS, topic=topic)
    check_schema(schema, options)


def value_column() -> None:
    accepts(("value", BinaryType()))
    accepts(("value", StringType()))
    refused(lambda: accepts(("key", BinaryType())), "needs a 'value' column")


def topic_column() -> None:
    accepts(("value", BinaryType()), ("topic", StringType()), topic=None)
    refused(lambda: accepts(("value", BinaryType()), topic=None), "'topic' column")


WRITTEN: dict[str, tuple[str, Callable[[], None]]] = {
    "value": ("same", value_column),
    "key": ("same", lambda: accepts(("value", BinaryType()), ("key", StringType()))),
    "headers": ("same", lambda: accepts(("value", BinaryType()), ("headers", _HEADER))),
    "topic": ("same", topic_column),
    "partition": ("same", lambda: accepts(("value", BinaryType()), ("partition", IntegerType()))),
    "timestamp": ("same", lambda: accepts(("value", BinaryType()), ("timestamp", TimestampType()))),
    "timestampType": (
        "no effect",
        lambda: accepts(*[(f.name, f.dataType) for f in spark_schema(headers=True).fields]),
    ),
    "*": ("no effect", lambda: accepts(("value", BinaryType()), ("anything", IntegerType()))),
}


# -------------------------------------------------------------------- save modes

SAVE_MODE_TOPIC = "compat-save-modes"


def save(request: pytest.FixtureRequest, mode: str | None) -> None:
    """One row written with ``mode`` (None: no ``mode()`` call) through real Spark."""
    spark = request.getfixturevalue("spark")
    produced: Produced = request.getfixturevalue("produced")
    with Client(produced.servers) as client:
        if SAVE_MODE_TOPIC not in client.metadata(refresh=True).topics:
            create_topic(client, SAVE_MODE_TOPIC, 1)
    writer = (
        spark.createDataFrame([("x",)], "value string")
        .write.format("laminar")
        .option("kafka.bootstrap.servers", produced.servers)
        .option("topic", SAVE_MODE_TOPIC)
    )
    if mode is not None:
        writer = writer.mode(mode)
    writer.save()


def count_saved(request: pytest.FixtureRequest) -> int:
    """The leader's high watermark (one replica's may trail it by a heartbeat): with
    acks=all it covers every write acknowledged."""
    produced: Produced = request.getfixturevalue("produced")
    with Client(produced.servers) as client:
        return high_watermarks(client, SAVE_MODE_TOPIC, 1)[0]


def append_mode(request: pytest.FixtureRequest) -> None:
    save(request, "append")
    before = count_saved(request)
    save(request, "append")
    assert count_saved(request) > before


def refused_mode(mode: str | None, message: str) -> Callable[[pytest.FixtureRequest], None]:
    def check(request: pytest.FixtureRequest) -> None:
        save(request, "append")  # the topic exists: nothing below fails for its lack
        before = count_saved(request)
        with pytest.raises(Exception, match=message):
            save(request, mode)
        assert count_saved(request) == before

    return check


SAVE_MODES: dict[str, tuple[str, Callable[[pytest.FixtureRequest], None]]] = {
    "append": ("same", append_mode),
    # PySpark refuses it before Laminar runs; its message names Append. Should a
    # PySpark release let it through, this fails: then make it an append and say so.
    "errorifexists": ("refused", refused_mode(None, 'ErrorIfExists.*"Append"')),
    "overwrite": ("refused", refused_mode("overwrite", "a Laminar topic is a log")),
    "ignore": ("refused", refused_mode("ignore", 'Ignore.*"Append"')),
}

CASES: dict[tuple[str, str], tuple[str, Callable[..., None]]] = {
    **{("Columns read", name): ("same", column(name)) for name, _ in KAFKA_COLUMNS},
    ("Columns read", "timestampType"): ("same", timestamp_type_is_create_time),
    ("Columns read", "headers"): ("same", headers_null_without_any),
    **{("Read options", name): case for name, case in READ.items()},
    **{("Write options", name): case for name, case in WRITE.items()},
    **{("Columns written", name): case for name, case in WRITTEN.items()},
    **{("Save modes", name): case for name, case in SAVE_MODES.items()},
}


def doc_rows() -> dict[tuple[str, str], str]:
    """``(table heading, first cell) -> second cell`` of every row of the section's tables."""
    text = DOC.read_text()
    section = text[text.index(SECTION + "\n") + len(SECTION) :]
    following = re.search(r"^## ", section, re.MULTILINE)
    section = section[: following.start()] if following else section
    rows: dict[tuple[str, str], str] = {}
    table = ""
    for line in section.splitlines():
        if line.startswith("### "):
            table = line[4:].strip()
        elif line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            key = (table, cells[0].strip("`"))
            assert key not in rows, f"{key} twice in the doc"
            rows[key] = cells[1]
    return rows


def test_the_doc_lists_exactly_the_tested_rows_with_their_verdict() -> None:
    rows = doc_rows()
    assert sorted(set(rows) - set(CASES)) == [], "rows of the doc without a case here"
    assert sorted(set(CASES) - set(rows)) == [], "cases here without a row in the doc"
    verdicts = {key: verdict for key, (verdict, _) in CASES.items()}
    assert {key: rows[key] for key in CASES} == verdicts


UNIT_CASES = sorted(key for key in CASES if key[0] != "Save modes")


@pytest.mark.parametrize("case", UNIT_CASES, ids=[f"{t}:{n}" for t, n in UNIT_CASES])
def test_row(case: tuple[str, str]) -> None:
    CASES[case][1]()


@pytest.mark.parametrize("mode", sorted(SAVE_MODES))
def test_save_mode_row(mode: str, request: pytest.FixtureRequest) -> None:
    SAVE_MODES[mode][1](request)


# ------------------------------------------------------ messages, warnings, spark


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingoffset": "earliest"}, "unknown option 'startingoffset'.*is 'startingOffsets'"),
        ({"topic": "t"}, "unknown option 'topic'.*'subscribe' to read a topic"),
        ({"bootstrap.servers": "h:1"}, "'bootstrap.servers'.*is 'servers' \\(or 'kafka"),
        ({"MaxOffsetPerTrigger": "5"}, "'MaxOffsetPerTrigger'.*is 'maxOffsetsPerTrigger'"),
    ],
)
def test_an_unknown_option_names_the_laminar_option(options: dict[str, str], message: str) -> None:
    """The name as received (PySpark lower-cases it; a direct call keeps its case)."""
    with pytest.raises(InvalidInputError, match=message):
        read(**options)


def test_an_unknown_write_option_names_the_laminar_option() -> None:
    with pytest.raises(InvalidInputError, match=r"'subscribe'.*is 'topic' \(or a 'topic'"):
        write(subscribe="t")
    with pytest.raises(InvalidInputError, match=r"'batchrecordmax'.*is 'batchRecordsMax'"):
        write(batchrecordmax="5")


def test_one_warning_lists_every_option_without_effect(caplog: pytest.LogCaptureFixture) -> None:
    parsed = read(**{"kafka.group.id": "g", "groupIdPrefix": "p", "kafka.max.poll.records": "5"})
    with caplog.at_level(logging.WARNING, logger="laminar_spark"):
        warn_ignored(parsed.ignored, "laminar read")
        warn_ignored(read().ignored, "laminar read")  # nothing ignored: no warning
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    for name in ("kafka.group.id", "groupIdPrefix", "kafka.max.poll.records"):
        assert name in message


def test_a_kafka_job_reads_and_writes_back_unchanged(spark: Any, produced: Produced) -> None:
    """A Kafka job's read (Kafka's option names, ``select *``) written back through
    Kafka's sink options: the same records, ``timestampType`` and null headers
    included (the sink ignores ``timestampType``, as Kafka's)."""
    topic = "compat-round-trip"
    with Client(produced.servers) as client:
        create_topic(client, topic, 2)

    def load(name: str) -> Any:
        return (
            spark.read.format("laminar")
            .option("kafka.bootstrap.servers", produced.servers)
            .option("subscribe", name)
            .option("includeHeaders", "true")
            .option("kafka.group.id", "ignored")
            .load()
        )

    source = load("other")
    assert [(f.name, f.dataType.simpleString()) for f in source.schema.fields] == KAFKA_COLUMNS
    source.drop("topic").write.format("laminar").option(
        "kafka.bootstrap.servers", produced.servers
    ).option("topic", topic).option("includeHeaders", "true").mode("append").save()

    def records(df: Any) -> list[tuple[Any, ...]]:
        # Offsets differ: each partition's leader wrote a control batch of its own.
        rows = [
            (r.partition, r.timestamp, r.key, r.value, r.timestampType, r.headers)
            for r in df.collect()
        ]
        return sorted(rows, key=lambda row: (row[0], row[1]))

    assert records(load(topic)) == records(source)
    assert sum(r.headers is None for r in source.collect()) == 20  # produce(): every other

"""``df.write.format("laminar")`` and ``df.writeStream.format("laminar")``.

Columns (Spark's Kafka sink's): ``value`` (required; binary or string, null = a
tombstone), and optionally ``key`` (binary or string), ``headers``
(``array<struct<key:string,value:binary>>``), ``topic`` (string), ``partition``
(int) and ``timestamp`` (timestamp; floored to ms). Other columns are ignored. The
``topic`` option, when given, overrides the column; one of the two is required.

A record goes to its ``partition`` when given (not null), else to
``key_partition(key, partitions)`` — the function every Laminar writer uses — and a
keyless record to a sticky partition, as the client's producer does (seeded per
task, so that a retried task chooses alike). Each task groups its records per
partition into whole batches and produces them with acks=all through the Arrow
path (:class:`~pyspark.sql.datasource.DataSourceArrowWriter`, no Python object per
record); :mod:`laminar_spark.producing` explains how.

No duplicates from Spark's retries
----------------------------------
Each task writes as an idempotent producer whose id is derived from the write and
the Spark partition id — for a batch write, an id drawn when the writer is made on
the driver; for a streaming write, the query's id (kept in its checkpoint) and the
micro-batch id — and numbers each partition's records from 0. A retried task, a
speculative copy, or a micro-batch replayed after a restart sends the same batches
as the same producer, and the leaders recognise what was already written.
Guaranteed when the task's input is the same rows in the same order on every
attempt and the topic's partition count does not change in between. Not
guaranteed: a non-deterministic input (a UDF or source that gives other rows,
rows reordered by a shuffle without a sort), a new write of the same DataFrame
(another write id: ``save()`` twice writes twice), and a partition whose leaders
forgot the producer (100,000 newer producers on it, or retention deleted all its
batches). A failed write (``abort``) leaves the records its tasks acknowledged in
the log: a log cannot take records back.

Timestamps: a row without a ``timestamp`` (or with a null one) gets, in a batch
write, the time the writer was made on the driver (the same in every attempt),
and in a streaming write the time its task started (a retry's records are
deduplicated by sequence, so the first attempt's time stays).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from laminar.errors import InvalidInputError
from laminar_spark.kafka_options import warn_ignored
from laminar_spark.producing import (
    ClusterTarget,
    PartitionReport,
    TaskProducer,
    producer_id_for,
    report_totals,
)
from laminar_spark.security import open_client
from laminar_spark.write_options import WriteOptions, parse_write_options

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    STREAM_ARROW = True
else:
    try:  # PySpark 4.1+
        from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

        STREAM_ARROW = True
    except ImportError:  # PySpark 4.0: rows, turned into Arrow here
        from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriterBase

        STREAM_ARROW = False

__all__ = [
    "LaminarBatchWriter",
    "LaminarCommitMessage",
    "LaminarStreamWriter",
    "check_schema",
    "rows_to_arrow",
]

log = logging.getLogger("laminar_spark")

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The local property Spark sets on a streaming query's tasks: the query's id, kept
in its checkpoint across restarts (``StreamExecution.QUERY_ID_KEY``)."""
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The micro-batch id on each task of a micro-batch (``MicroBatchExecution.BATCH_ID_KEY``)."""
ROWS_PER_ARROW_BATCH = 10_000
"""Rows turned into one Arrow batch on PySpark 4.0's row path."""

_BYTES = (BinaryType, StringType)
_INTEGERS = (ByteType, ShortType, IntegerType, LongType)
_TIMESTAMPS = (TimestampType, TimestampNTZType)


@dataclass(frozen=True)
class LaminarCommitMessage(WriterCommitMessage):
    """What one task wrote: its producer id and one report per partition."""

    producer_id: int
    partitions: tuple[PartitionReport, ...]


def check_schema(schema: StructType, options: WriteOptions) -> None:
    """Refuse, before any task runs, a DataFrame the writer cannot write."""
    fields = {field.name: field.dataType for field in schema.fields}
    if "value" not in fields:
        raise InvalidInputError(
            "the DataFrame needs a 'value' column (binary or string); it has: " + ", ".join(fields)
        )
    _expect(fields, "value", _BYTES, "binary or string")
    _expect(fields, "key", _BYTES, "binary or string")
    _expect(fields, "topic", (StringType,), "string")
    _expect(fields, "partition", _INTEGERS, "int")
    _expect(fields, "timestamp", _TIMESTAMPS, "timestamp")
    if options.topic is None and "topic" not in fields:
        raise InvalidInputError("give the option 'topic' or a 'topic' column (string)")
    headers = fields.get("headers")
    if headers is not None and not _is_header_type(headers):
        raise InvalidInputError(
            "column 'headers' must be array<struct<key:string,value:binary>>, "
            f"got {headers.simpleString()}"
        )


def _expect(
    fields: dict[str, DataType], name: str, kinds: tuple[type[DataType], ...], what: str
) -> None:
    kind = fields.get(name)
    if kind is not None and not isinstance(kind, kinds):
        raise InvalidInputError(f"column {name!r} must be {what}, got {kind.simpleString()}")


def _is_header_type(kind: DataType) -> bool:
    if not isinstance(kind, ArrayType) or not isinstance(kind.elementType, StructType):
        return False
    entry = {field.name: field.dataType for field in kind.elementType.fields}
    return (
        set(entry) == {"key", "value"}
        and isinstance(entry["key"], StringType)
        and isinstance(entry["value"], _BYTES)
    )


def _task_context() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("write() runs in a Spark task")
    return context


def _run_task(
    options: WriteOptions,
    producer_id: int,
    timestamp_ms: int,
    batches: Iterable[Any],
    counts: dict[str, int],
) -> LaminarCommitMessage:
    """Produce every Arrow batch of one task; its commit message."""
    with (
        open_client(options.servers, options.security) as client,
        TaskProducer(
            ClusterTarget(client), options, producer_id, timestamp_ms, counts=counts
        ) as task,
    ):
        for batch in batches:
            task.write(batch)
        reports = task.finish()
    return LaminarCommitMessage(producer_id, tuple(reports))


def _totals(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int, int, int]:
    """Records, skipped records, partition reports and tasks reported."""
    reports: list[PartitionReport] = []
    tasks = 0
    for message in messages:
        if isinstance(message, LaminarCommitMessage):
            reports.extend(message.partitions)
            tasks += 1
    return (*report_totals(reports), tasks)


class LaminarBatchWriter(DataSourceArrowWriter):
    """A batch write (``df.write``); made on the driver, pickled to every task.

    Checks the options, the columns and the topic (when the option names one) before
    any task runs. ``write_id`` and ``timestamp_ms`` are drawn here, once, so every
    attempt of a task sees the same ones.
    """

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        self.options = parse_write_options(options, streaming=False)
        warn_ignored(self.options.ignored, "laminar write")
        if overwrite:
            raise InvalidInputError(
                "save mode 'overwrite' is not supported: a Laminar topic is a log, records "
                "are appended; use mode('append')"
            )
        check_schema(schema, self.options)
        self.write_id = uuid.uuid4().hex
        self.timestamp_ms = int(time.time() * 1000)
        self.counts: dict[str, int] = {}
        if self.options.topic is not None:
            with open_client(self.options.servers, self.options.security) as client:
                count = ClusterTarget(client).partition_count(self.options.topic)
            self.counts[self.options.topic] = count

    def write(self, iterator: Iterator[Any]) -> LaminarCommitMessage:
        partition = _task_context().partitionId()
        producer_id = producer_id_for("write", self.write_id, partition)
        return _run_task(self.options, producer_id, self.timestamp_ms, iterator, self.counts)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        records, skipped, partitions, tasks = _totals(messages)
        log.info(
            "write %s: %d records from %d tasks to %d partition writes "
            "(%d of them not sent again: earlier attempts wrote them)",
            self.write_id,
            records,
            tasks,
            partitions,
            skipped,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        records, _, partitions, tasks = _totals(messages)
        log.warning(
            "write %s failed: the %d records its %d finished tasks wrote (%d partition "
            "writes) stay in the log, which cannot take records back; writing the "
            "DataFrame again writes them again",
            self.write_id,
            records,
            tasks,
            partitions,
        )


class LaminarStreamWriter(_StreamWriterBase):
    """A streaming write (``df.writeStream``): each micro-batch's tasks write as the
    producers of (query id, micro-batch id, Spark partition), so a micro-batch Spark
    runs again after a restart is recognised. Checks options and columns only: the
    driver makes this object again for every commit, so it asks the cluster nothing.
    """

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        # ``overwrite`` is the complete output mode: every row is written, as Kafka's.
        self.options = parse_write_options(options, streaming=True)
        # PySpark makes the writer again for each micro-batch's commit, with nothing
        # to tell it from the query's first: the warning comes each time.
        warn_ignored(self.options.ignored, "laminar streaming write")
        check_schema(schema, self.options)
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> LaminarCommitMessage:
        context = _task_context()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        if not query_id or batch_id is None:
            raise RuntimeError(
                f"a streaming write task without {QUERY_ID_PROPERTY!r} or "
                f"{BATCH_ID_PROPERTY!r}: only micro-batch queries are supported"
            )
        producer_id = producer_id_for("stream", query_id, batch_id, context.partitionId())
        batches = iterator if STREAM_ARROW else rows_to_arrow(iterator, self.schema)
        return _run_task(self.options, producer_id, int(time.time() * 1000), batches, {})

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        records, skipped, partitions, tasks = _totals(messages)
        log.info(
            "micro-batch %d: %d records from %d tasks to %d partition writes "
            "(%d of them not sent again: an earlier run of the batch wrote them)",
            batchId,
            records,
            tasks,
            partitions,
            skipped,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        records, _, _, tasks = _totals(messages)
        log.warning(
            "micro-batch %d failed: the %d records its %d finished tasks wrote stay in the "
            "log; when Spark runs the micro-batch again they are recognised, not written twice",
            batchId,
            records,
            tasks,
        )


def rows_to_arrow(rows: Iterable[Any], schema: StructType) -> Iterator[Any]:
    """Spark ``Row`` s as ``pyarrow.RecordBatch`` es of up to
    :data:`ROWS_PER_ARROW_BATCH` rows, with the columns the writer reads
    (PySpark 4.0 hands streaming writers rows). Timestamps become ms (a Row's
    timestamp is a naive local ``datetime``)."""
    import pyarrow as pa

    fields = {field.name: field.dataType for field in schema.fields}
    types: dict[str, Any] = {}
    for name in ("key", "value"):
        if name in fields:
            types[name] = pa.binary() if isinstance(fields[name], BinaryType) else pa.string()
    headers = fields.get("headers")
    if isinstance(headers, ArrayType) and isinstance(headers.elementType, StructType):
        entry = {field.name: field.dataType for field in headers.elementType.fields}
        value_type = pa.binary() if isinstance(entry["value"], BinaryType) else pa.string()
        types["headers"] = pa.list_(
            pa.struct([pa.field("key", pa.string()), pa.field("value", value_type)])
        )
    if "topic" in fields:
        types["topic"] = pa.string()
    if "partition" in fields:
        types["partition"] = pa.int64()
    if "timestamp" in fields:
        types["timestamp"] = pa.int64()

    def cell(name: str, item: Any) -> Any:
        if item is None:
            return None
        if name == "timestamp":
            return int(item.timestamp()) * 1000 + item.microsecond // 1000
        if name == "headers":
            return [{"key": h["key"], "value": h["value"]} for h in item]
        return item

    def batch(chunk: list[Any]) -> Any:
        return pa.record_batch(
            {
                name: pa.array([cell(name, row[name]) for row in chunk], kind)
                for name, kind in types.items()
            }
        )

    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= ROWS_PER_ARROW_BATCH:
            yield batch(chunk)
            chunk = []
    if chunk:
        yield batch(chunk)

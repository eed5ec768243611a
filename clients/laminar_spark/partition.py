"""What every read mode yields and runs, with no mode's module: the rows' schema
(:func:`spark_schema`, Spark's Kafka source's), the input partition of a read of a
cluster (:class:`LaminarInputPartition`, one Spark task's range; the batch and the
streaming reader plan them) and how a task reads it (:func:`read_partition`).

A leaf of the package: :mod:`~laminar_spark.source`, :mod:`~laminar_spark.offline`
and :mod:`~laminar_spark.stream` import it, it imports none of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from laminar_spark.options import ReadOptions
from laminar_spark.planner import ReadTask
from laminar_spark.security import open_client

__all__ = ["LaminarInputPartition", "input_partitions", "read_partition", "spark_schema"]


def spark_schema(*, headers: bool = False) -> StructType:
    """Spark's Kafka source's schema, in its column order (nullability as
    :func:`laminar_client.arrow.arrow_schema`, which PySpark 4.2+ checks exactly).

    ``timestampType`` is always 0 (create time: Laminar keeps the producer's
    timestamps); ``headers`` is null for a record without headers, as in Kafka's.
    """
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), False),
        StructField("timestampType", IntegerType(), False),
    ]
    if headers:
        header = StructType(
            [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
        )
        fields.append(StructField("headers", ArrayType(header, True), True))
    return StructType(fields)


@dataclass(frozen=True)
class LaminarInputPartition(InputPartition):
    """One Spark task: a :class:`~laminar_spark.planner.ReadTask` (the batches of
    ``topic``-``partition`` whose base offset is in ``[start, end)``, their records
    cut to ``[range_start, range_end)``; a bound left None is the task's own, so
    ``LaminarInputPartition(topic, partition, start, end)`` reads exactly
    ``[start, end)``)."""

    topic: str
    partition: int
    start: int
    end: int
    range_start: int | None = None
    range_end: int | None = None

    def task(self) -> ReadTask:
        start, end = self.start, self.end
        range_start = start if self.range_start is None else self.range_start
        range_end = end if self.range_end is None else self.range_end
        return ReadTask(self.topic, self.partition, start, end, range_start, range_end)


def input_partitions(tasks: Sequence[ReadTask]) -> list[LaminarInputPartition]:
    """The input partitions of planned tasks, one each, in order."""
    return [
        LaminarInputPartition(t.topic, t.partition, t.start, t.end, t.range_start, t.range_end)
        for t in tasks
    ]


def read_partition(options: ReadOptions, partition: InputPartition) -> Iterator[Any]:
    """One task of a batch or streaming read: its range through a client of its own."""
    # Imported here, on the executor: the driver, which only plans, never needs it.
    from laminar_spark.reader import read_range

    if not isinstance(partition, LaminarInputPartition):
        return  # PySpark runs one task with ``None`` when partitions() returns []
    with open_client(options.servers, options.security) as client:
        yield from read_range(
            client,
            partition.task(),
            headers=options.include_headers,
            fail_on_data_loss=options.fail_on_data_loss,
        )

"""The PySpark data source classes (needs ``pyspark``; see the package docstring)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
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

from laminar_spark.options import ReadOptions, parse_options
from laminar_spark.planner import OffsetRange

__all__ = ["LaminarBatchReader", "LaminarDataSource", "LaminarInputPartition", "spark_schema"]


def spark_schema(*, headers: bool = False) -> StructType:
    """Spark's Kafka source's schema (nullability as
    :func:`laminar_client.arrow.arrow_schema`, which PySpark 4.2+ checks exactly)."""
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), False),
    ]
    if headers:
        header = StructType(
            [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
        )
        fields.append(StructField("headers", ArrayType(header, True), False))
    return StructType(fields)


@dataclass(frozen=True)
class LaminarInputPartition(InputPartition):
    """One Spark task: offsets ``[start, end)`` of ``topic``-``partition``."""

    topic: str
    partition: int
    start: int
    end: int


class LaminarDataSource(DataSource):
    """``spark.read.format("laminar")``: a batch read of a live cluster."""

    @classmethod
    def name(cls) -> str:
        return "laminar"

    def _options(self) -> ReadOptions:
        return parse_options(dict(self.options))

    def schema(self) -> StructType:
        return spark_schema(headers=self._options().include_headers)

    def reader(self, schema: StructType) -> LaminarBatchReader:
        return LaminarBatchReader(self._options())


class LaminarBatchReader(DataSourceReader):
    """Plans the ranges on the driver (:meth:`partitions`), reads one on an executor
    (:meth:`read`). Holds only the checked options, so it pickles small."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        from laminar_client.client import Client

        from laminar_spark.planner import plan

        with Client(self.options.servers) as client:
            tasks = plan(self.options, client)
        return [LaminarInputPartition(t.topic, t.partition, t.start, t.end) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from laminar_client.client import Client

        from laminar_spark.reader import read_range

        if not isinstance(partition, LaminarInputPartition):
            return  # PySpark runs one task with ``None`` when partitions() returns []
        task = OffsetRange(partition.topic, partition.partition, partition.start, partition.end)
        with Client(self.options.servers) as client:
            yield from read_range(
                client,
                task,
                headers=self.options.include_headers,
                fail_on_data_loss=self.options.fail_on_data_loss,
            )

"""The PySpark data source classes (needs ``pyspark``; see the package docstring)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
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

from laminar_spark.kafka_options import warn_ignored
from laminar_spark.options import ReadOptions, parse_options
from laminar_spark.planner import ReadTask
from laminar_spark.pushdown import Pushed, push_all
from laminar_spark.security import open_client

__all__ = ["LaminarBatchReader", "LaminarDataSource", "LaminarInputPartition", "spark_schema"]


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


class LaminarDataSource(DataSource):
    """``format("laminar")``: batch and streaming reads of a live cluster, offline
    reads of segment files (the ``path`` option), batch and streaming writes.

    Each mode's options are parsed by its own module; this class only dispatches.
    """

    @classmethod
    def name(cls) -> str:
        return "laminar"

    def _offline(self) -> bool:
        return any(name.lower() == "path" for name in self.options)

    def schema(self) -> StructType:
        if self._offline():
            from laminar_spark.offline import offline_schema

            return offline_schema(dict(self.options))
        # Batch or stream is not known here: the mode's own checks come with its reader.
        options = parse_options(dict(self.options), streaming=None)
        return spark_schema(headers=options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        if self._offline():
            from laminar_spark.offline import OfflineBatchReader

            return OfflineBatchReader(dict(self.options), schema)
        options = parse_options(dict(self.options))
        warn_ignored(options.ignored, "laminar read")
        return LaminarBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        from laminar_spark.stream import LaminarStreamReader

        return LaminarStreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from laminar_spark.writer import LaminarBatchWriter

        return LaminarBatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(  # noqa: N802
        self, schema: StructType, overwrite: bool
    ) -> DataSourceStreamWriter:
        from laminar_spark.writer import LaminarStreamWriter

        return LaminarStreamWriter(dict(self.options), schema, overwrite)


class _BoundPushFilters:
    """``reader.pushFilters``: calls the reader's ``_push_filters``, yet its
    ``__func__`` is ``DataSourceReader.pushFilters``, the base's.

    Why: PySpark (4.1 to 4.3 at least) refuses every read of a reader that
    overrides ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is
    false, its default (``DATA_SOURCE_PUSHDOWN_DISABLED``); it tells an override
    by ``reader.pushFilters.__func__``. The reader cannot see Spark's conf, so it
    looks unchanged to that check and does the work when called, which PySpark
    does only with pushdown enabled. Were a later PySpark to skip calling it, the
    read would still be right: every filter would be Spark's to evaluate.
    """

    __slots__ = ("__self__",)

    def __init__(self, reader: PushdownReader) -> None:
        self.__self__ = reader

    @property
    def __func__(self) -> Any:
        return _base_push_filters()

    def __call__(self, filters: list[Any]) -> list[Any]:
        return self.__self__._push_filters(filters)


class _PushFilters:
    """The descriptor behind ``PushdownReader.pushFilters`` (see
    :class:`_BoundPushFilters`); on the class it is the base's function."""

    def __get__(self, reader: PushdownReader | None, owner: type | None = None) -> Any:
        if reader is None:
            return _base_push_filters()
        return _BoundPushFilters(reader)


def _base_push_filters() -> Any:
    """``DataSourceReader.pushFilters``, or None before PySpark 4.1 (which has none)."""
    return getattr(DataSourceReader, "pushFilters", None)


class PushdownReader(DataSourceReader):
    """A batch reader that takes filters Spark pushes down into :attr:`pushed`
    (:mod:`laminar_spark.pushdown`), for its :meth:`partitions` to plan less.

    With PySpark >= 4.1 and ``spark.sql.python.filterPushdown.enabled``, Spark calls
    ``pushFilters`` with a ``where``'s simple conjuncts before ``partitions()`` (in
    the same Python process). Otherwise it is never called, and Spark evaluates
    every filter on the rows read.
    """

    pushFilters = _PushFilters()  # noqa: N815 - PySpark's name
    pushed: Pushed = Pushed()

    def _push_filters(self, filters: list[Any]) -> list[Any]:
        """Narrow :attr:`pushed` by ``filters``; return those Spark must still
        evaluate (the very objects given, as PySpark requires)."""
        described = [
            (type(f).__name__, tuple(getattr(f, "attribute", ())), getattr(f, "value", None))
            for f in filters
        ]
        self.pushed, remaining = push_all(self.pushed, described)
        return [filters[index] for index in remaining]


class LaminarBatchReader(PushdownReader):
    """Plans the ranges on the driver (:meth:`partitions`), reads one on an executor
    (:meth:`read`). Holds only the checked options and the pushed-down bounds, so
    it pickles small.

    With PySpark >= 4.1 and ``spark.sql.python.filterPushdown.enabled``, Spark calls
    ``pushFilters`` with a ``where``'s simple conjuncts before :meth:`partitions`
    (in the same Python process); those on ``topic``, ``partition``, ``offset`` and
    ``timestamp`` narrow the plan (:mod:`laminar_spark.pushdown`). Otherwise it is
    never called, and Spark evaluates every filter on the rows read.
    """

    def __init__(self, options: ReadOptions, pushed: Pushed | None = None) -> None:
        self.options = options
        self.pushed = Pushed() if pushed is None else pushed

    def partitions(self) -> Sequence[InputPartition]:
        from laminar_spark.planner import plan

        with open_client(self.options.servers, self.options.security) as client:
            tasks = plan(self.options, client, self.pushed)
        return [
            LaminarInputPartition(t.topic, t.partition, t.start, t.end, t.range_start, t.range_end)
            for t in tasks
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.options, partition)


def read_partition(options: ReadOptions, partition: InputPartition) -> Iterator[Any]:
    """One task of a batch or streaming read: its range through a client of its own."""
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

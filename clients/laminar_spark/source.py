"""The PySpark data source classes (needs ``pyspark``; see the package docstring)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from laminar_spark.kafka_options import warn_ignored
from laminar_spark.options import ReadOptions, parse_options
from laminar_spark.partition import (
    LaminarInputPartition,
    input_partitions,
    read_partition,
    spark_schema,
)
from laminar_spark.planner import plan
from laminar_spark.pushdown import Pushed
from laminar_spark.pushdown_reader import PushdownReader
from laminar_spark.security import open_client

__all__ = ["LaminarBatchReader", "LaminarDataSource", "LaminarInputPartition", "spark_schema"]


class LaminarDataSource(DataSource):
    """``format("laminar")``: batch and streaming reads of a live cluster, offline
    reads of segment files (the ``path`` option), batch and streaming writes.

    Each mode's options are parsed by its own module; this class only dispatches.
    It imports a mode's module when that mode is used: PySpark imports this one
    (through ``pyspark_laminar``) to discover the source, and each mode's module
    adds 50 to 150 ms of imports (numpy for the writer, for one). No mode's module
    imports this one.
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
        with open_client(self.options.servers, self.options.security) as client:
            tasks = plan(self.options, client, self.pushed)
        return input_partitions(tasks)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(self.options, partition)

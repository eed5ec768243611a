"""PySpark data source for Laminar: ``format("laminar")`` (PySpark >= 4.0, no JAR).

Every mode, its options and its guarantees are documented in ``docs/spark.md``;
each module's docstring explains how it works:

- batch read of a cluster: :mod:`laminar_spark.source` (``LaminarBatchReader``),
  :mod:`~laminar_spark.options`, :mod:`~laminar_spark.planner` (ranges resolved
  once on the driver, soft split points), :mod:`~laminar_spark.reader` (a task's
  range from any replica as Arrow batches), :mod:`~laminar_spark.pushdown` and
  :mod:`~laminar_spark.pushdown_reader`;
- what every read mode shares (the schema, the input partition, a task's read):
  :mod:`laminar_spark.partition`;
- batch read of segment files (the ``path`` option): :mod:`laminar_spark.offline`;
- streaming read: :mod:`laminar_spark.stream`;
- batch and streaming writes without duplicates from Spark's retries:
  :mod:`laminar_spark.writer`, :mod:`~laminar_spark.producing`,
  :mod:`~laminar_spark.write_options`;
- Spark's Kafka source and sink option names (aliases, options with no effect,
  refusals): :mod:`laminar_spark.kafka_options` (``docs/migrating-from-kafka.md``);
- TLS and bearer-token options of every mode that talks to a cluster:
  :mod:`laminar_spark.security`.

Register with ``spark.dataSource.register(LaminarDataSource)``, or rely on PySpark's
discovery of the ``pyspark_laminar`` module when Laminar is installed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LaminarBatchReader", "LaminarDataSource", "LaminarInputPartition", "spark_schema"]


def __getattr__(name: str) -> Any:
    """The Spark classes, imported on first use (``laminar_spark.options`` and
    ``laminar_spark.planner`` need no pyspark)."""
    if name in __all__:
        from laminar_spark import source

        return getattr(source, name)
    raise AttributeError(f"module 'laminar_spark' has no attribute {name!r}")

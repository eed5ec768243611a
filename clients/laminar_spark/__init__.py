"""PySpark data source for Laminar: ``spark.read.format("laminar")``.

Spark
=====

A pure-Python batch reader (PySpark >= 4.0 Python Data Source API): no JAR, no
``--packages``. Install with ``pip install 'laminar[spark]'``. Register it::

    from laminar_spark import LaminarDataSource
    spark.dataSource.register(LaminarDataSource)

or rely on PySpark's discovery: at the first data source lookup PySpark imports
every top-level module named ``pyspark_*`` on the Python path and registers its
``DefaultSource``; the ``pyspark_laminar`` module provides one, so
``format("laminar")`` works with no ``register`` call when Laminar is installed.
Then::

    df = (
        spark.read.format("laminar")
        .option("servers", "10.0.0.1:9092,10.0.0.2:9092")
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .load()
    )

Columns (Spark's Kafka source's): ``key binary, value binary, topic string,
partition int, offset long, timestamp timestamp`` and, with ``includeHeaders``,
``headers array<struct<key:string,value:binary>>``.

Options (names case-insensitive):

- ``servers`` (required): bootstrap ``host:port`` list, comma-separated.
- exactly one of ``subscribe`` (comma-separated topics), ``subscribePattern`` (a
  Python regex matched in full against the cluster's topic names; internal
  ``__`` topics excluded) and ``assign`` (JSON ``{"events": [0, 1]}``).
- ``startingOffsets``: ``earliest`` (default), ``latest`` or JSON
  ``{"events": {"0": 23, "1": -2}}`` where -2 is earliest and -1 latest.
- ``endingOffsets``: ``latest`` (default) or JSON (-1 = latest; -2 not allowed).
  In the JSON forms a partition left out starts at earliest / ends at latest; a
  topic or partition that is not being read is an error, and so is an offset
  beyond the high watermark or a start after the end.
- ``startingTimestamp`` / ``endingTimestamp`` (ms since the epoch, for every
  partition) and ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``
  (JSON ``{"events": {"0": 1700000000000}}``): start or end at the first record
  whose timestamp is at least the time (``ListOffsets``). Precedence as in Spark's
  Kafka source: the time for every partition, then the per-partition times, then
  the offsets options (which still apply to partitions a JSON leaves out). No
  record at or after a starting time fails planning, or with
  ``startingOffsetsByTimestampStrategy=latest`` starts at the partition's end; no
  record at or after an ending time ends at the partition's end.
- ``minPartitions``: at least this many Spark tasks (when there are that many
  offsets); the largest ranges are split first.
- ``maxRecordsPerPartition``: no task reads more than this many offsets.
- ``includeHeaders``: ``true``/``false`` (default false).
- ``failOnDataLoss``: ``true`` (default): a starting offset below the log start
  fails planning with the partition and the missing range; ``false``: start at the
  log start and log how many offsets were skipped (also when retention deletes
  them while a task reads).

The driver resolves every range once, at planning (``latest`` = the high
watermark seen then); tasks never read past it. Each task reads from any replica,
moves to another when one fails, verifies checksums, skips control batches and
yields Arrow batches built from the columnar payload. Unknown options and bad
values raise :class:`~laminar.errors.InvalidInputError` (a ``ValueError``) naming
the option and what is allowed; an unknown topic raises
:class:`~laminar.errors.UnknownTopicOrPartitionError`. Spark wraps both in its own
exception, whose message contains the text.

Not yet: filter pushdown, streaming, the writer, the offline
(segment file) reader.
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

"""PySpark's discovery hook: PySpark imports every top-level ``pyspark_*`` module and
registers its ``DefaultSource`` under ``DefaultSource.name()`` ("laminar")."""

from laminar_spark.source import LaminarDataSource

DefaultSource = LaminarDataSource

__all__ = ["DefaultSource"]

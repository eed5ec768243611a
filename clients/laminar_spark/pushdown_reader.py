"""The base of the batch readers that take filters Spark pushes down
(:class:`PushdownReader`: the live one in :mod:`~laminar_spark.source`, the offline
one in :mod:`~laminar_spark.offline`); the filters themselves are
:mod:`laminar_spark.pushdown`'s, which needs no pyspark."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSourceReader

from laminar_spark.pushdown import Pushed, push_all

__all__ = ["PushdownReader"]


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

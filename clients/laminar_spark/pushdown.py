"""Filters Spark pushes down, turned into bounds on what a batch read plans.

PySpark >= 4.1 hands a reader the conjuncts of a ``where`` that compare one
column with literals (``EqualTo``, ``In``, ``GreaterThan`` ...; see
``pyspark.sql.datasource.Filter``) when ``spark.sql.python.filterPushdown.enabled``
is true. This module knows nothing of pyspark: :func:`push` takes a filter's class
name, column path and value, so it is tested with plain data, and it works on the
PySpark versions that have no filter classes to import.

What narrows the plan, and how exactly:

- ``topic`` = / IN, and ``partition`` = / IN / < / <= / > / >=: only those
  partitions are read; exact (Spark need not check them again).
- ``offset`` = / < / <= / > / >=: each range is cut to those offsets; exact, since
  a task cuts records at its range's ends. ``offset IN (...)`` narrows to
  ``[min, max]`` and Spark checks it again.
- ``timestamp`` > / >= / = / IN: each range starts at the first record whose
  timestamp reaches the lowest time allowed (``ListOffsets``, at planning). Every
  record before it is older, so nothing is lost; but timestamps need not grow with
  offsets, so later records may still be older and Spark checks the filter again.
  An upper bound (< / <=) narrows nothing: a record older than the bound may come
  after the first one that is not, and only reading finds it.

Anything else (other columns, ``NOT``, ``IS NULL``, string matches, a value of an
unexpected type) is left for Spark alone.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["IN_VALUES_MAX", "Pushed", "push", "push_all"]

IN_VALUES_MAX = 10_000
"""Most values of an ``IN`` that narrows the plan; a longer list is left to Spark
(a plan holding it would be shipped to every task)."""

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MICROSECOND = datetime.timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Pushed:
    """What the pushed filters (their AND) allow; the defaults allow everything.

    Bounds are inclusive below and exclusive above (``partition_end``,
    ``offset_end``); None means unbounded. Small and picklable: the reader carries
    it from planning to its tasks.
    """

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition_min: int = 0
    partition_end: int | None = None
    offset_min: int = 0
    offset_end: int | None = None
    timestamp_min_ms: int | None = None
    """Records older than this are skipped where they come first in a partition."""

    def allows(self, topic: str, partition: int) -> bool:
        """Whether ``topic``-``partition`` is read at all."""
        return (
            (self.topics is None or topic in self.topics)
            and (self.partitions is None or partition in self.partitions)
            and partition >= self.partition_min
            and (self.partition_end is None or partition < self.partition_end)
        )

    def offsets(self, start: int, end: int) -> tuple[int, int]:
        """``[start, end)`` cut to the pushed offset bounds (may come out empty)."""
        start = max(start, self.offset_min)
        if self.offset_end is not None:
            end = min(end, self.offset_end)
        return start, max(start, end)


def push(pushed: Pushed, kind: str, column: tuple[str, ...], value: object) -> tuple[Pushed, bool]:
    """``pushed`` narrowed by the filter ``kind(column, value)`` (a filter class's
    name, e.g. ``"GreaterThan"``), and whether the narrowing is exact: True means
    every row the plan now reads passes the filter and none that passes is left
    out, so Spark need not evaluate it. A filter this cannot use returns
    ``(pushed, False)``."""
    if len(column) != 1:
        return pushed, False
    name = column[0]
    if name == "topic":
        return _topic(pushed, kind, value)
    if name == "partition":
        return _partition(pushed, kind, value)
    if name == "offset":
        return _offset(pushed, kind, value)
    if name == "timestamp":
        return _timestamp(pushed, kind, value), False
    return pushed, False


def _ints(kind: str, value: object) -> list[int] | None:
    """The integer operand(s) of a comparison or an ``IN`` (nulls in an ``IN``
    match nothing, so they are dropped), or None when any is not an integer."""
    values = _operands(kind, value)
    if values is None:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return [v for v in values if isinstance(v, int)]


def _operands(kind: str, value: object) -> list[object] | None:
    if kind != "In":
        return [value]
    if not isinstance(value, tuple | list) or len(value) > IN_VALUES_MAX:
        return None
    return [v for v in value if v is not None]


def _topic(pushed: Pushed, kind: str, value: object) -> tuple[Pushed, bool]:
    if kind not in ("EqualTo", "In"):
        return pushed, False
    values = _operands(kind, value)
    if values is None or not all(isinstance(v, str) for v in values):
        return pushed, False
    topics = frozenset(str(v) for v in values)
    if pushed.topics is not None:
        topics &= pushed.topics
    return dataclasses.replace(pushed, topics=topics), True


def _partition(pushed: Pushed, kind: str, value: object) -> tuple[Pushed, bool]:
    values = _ints(kind, value)
    if values is None:
        return pushed, False
    if kind in ("EqualTo", "In"):
        allowed = frozenset(values)
        if pushed.partitions is not None:
            allowed &= pushed.partitions
        return dataclasses.replace(pushed, partitions=allowed), True
    low, end = _bounds(kind, values[0])
    if low is None and end is None:
        return pushed, False
    return _narrowed(pushed, "partition_min", "partition_end", low, end), True


def _offset(pushed: Pushed, kind: str, value: object) -> tuple[Pushed, bool]:
    values = _ints(kind, value)
    if values is None:
        return pushed, False
    if kind == "In":
        if not values:  # IN of nulls only: no row passes
            return _narrowed(pushed, "offset_min", "offset_end", 0, 0), True
        return _narrowed(pushed, "offset_min", "offset_end", min(values), max(values) + 1), False
    low, end = _bounds(kind, values[0])
    if low is None and end is None:
        return pushed, False
    return _narrowed(pushed, "offset_min", "offset_end", low, end), True


def _bounds(kind: str, number: int) -> tuple[int | None, int | None]:
    """``(low, end)``: the integers ``x`` with ``kind(x, number)`` are ``[low, end)``."""
    match kind:
        case "EqualTo":
            return number, number + 1
        case "GreaterThan":
            return number + 1, None
        case "GreaterThanOrEqual":
            return number, None
        case "LessThan":
            return None, number
        case "LessThanOrEqual":
            return None, number + 1
    return None, None


def _narrowed(
    pushed: Pushed, low_field: str, end_field: str, low: int | None, end: int | None
) -> Pushed:
    changes: dict[str, int] = {}
    if low is not None:
        changes[low_field] = max(low, getattr(pushed, low_field))
    if end is not None:
        current = getattr(pushed, end_field)
        changes[end_field] = end if current is None else min(end, current)
    return dataclasses.replace(pushed, **changes)  # type: ignore[arg-type]


def _timestamp(pushed: Pushed, kind: str, value: object) -> Pushed:
    """The lowest time a row may have, when the filter gives one (see the module
    docstring: never exact, and upper bounds give nothing)."""
    if kind not in ("EqualTo", "In", "GreaterThan", "GreaterThanOrEqual"):
        return pushed
    values = _operands(kind, value)
    if not values:
        return pushed
    micros = [_micros(v) for v in values]
    if any(m is None for m in micros):
        return pushed
    lowest = min(m for m in micros if m is not None)
    # A record's time is in ms; the filter's in µs: ts_ms * 1000 > t_us means
    # ts_ms >= t_us // 1000 + 1, and ts_ms * 1000 >= t_us means ts_ms >= ceil(t_us / 1000).
    low_ms = lowest // 1000 + 1 if kind == "GreaterThan" else -(-lowest // 1000)
    if pushed.timestamp_min_ms is not None:
        low_ms = max(low_ms, pushed.timestamp_min_ms)
    return dataclasses.replace(pushed, timestamp_min_ms=low_ms)


def _micros(value: object) -> int | None:
    """A zone-aware datetime as µs since the epoch (a naive one, whose zone is
    unknown, gives None)."""
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        return None
    return (value - _EPOCH) // _MICROSECOND


def push_all(
    pushed: Pushed, filters: Iterable[tuple[str, tuple[str, ...], object]]
) -> tuple[Pushed, list[int]]:
    """``pushed`` narrowed by every ``(kind, column, value)``, and the indexes of
    the filters Spark must still evaluate."""
    remaining: list[int] = []
    for index, (kind, column, value) in enumerate(filters):
        pushed, exact = push(pushed, kind, column, value)
        if not exact:
            remaining.append(index)
    return pushed, remaining

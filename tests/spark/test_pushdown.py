"""Pushed-down filters as plan bounds, without Spark (laminar_spark.pushdown and
planner.narrow_ranges)."""

from __future__ import annotations

import datetime
import pickle
from typing import Any

import pytest
from laminar_client.client import PartitionOffsets
from laminar_spark.planner import OffsetRange, narrow_ranges
from laminar_spark.pushdown import IN_VALUES_MAX, Pushed, push, push_all

UTC = datetime.UTC


def pushed(*filters: tuple[str, str, object]) -> tuple[Pushed, list[int]]:
    return push_all(Pushed(), [(kind, (column,), value) for kind, column, value in filters])


@pytest.mark.parametrize(
    ("kind", "value", "allowed"),
    [
        ("EqualTo", 2, [2]),
        ("In", (1, 3, None), [1, 3]),
        ("GreaterThan", 1, [2, 3, 4]),
        ("GreaterThanOrEqual", 1, [1, 2, 3, 4]),
        ("LessThan", 2, [0, 1]),
        ("LessThanOrEqual", 2, [0, 1, 2]),
    ],
)
def test_partition_filters_are_exact(kind: str, value: object, allowed: list[int]) -> None:
    bounds, remaining = pushed((kind, "partition", value))
    assert remaining == []
    assert [p for p in range(5) if bounds.allows("t", p)] == allowed


@pytest.mark.parametrize(
    ("kind", "value", "offsets", "exact"),
    [
        ("EqualTo", 7, (7, 8), True),
        ("GreaterThan", 7, (8, 100), True),
        ("GreaterThanOrEqual", 7, (7, 100), True),
        ("LessThan", 7, (0, 7), True),
        ("LessThanOrEqual", 7, (0, 8), True),
        ("In", (9, 3, None), (3, 10), False),  # narrowed to [min, max]; Spark checks
        ("In", (None,), (0, 0), True),
        ("GreaterThan", -5, (0, 100), True),
    ],
)
def test_offset_filters(kind: str, value: object, offsets: tuple[int, int], exact: bool) -> None:
    bounds, remaining = pushed((kind, "offset", value))
    assert bounds.offsets(0, 100) == offsets
    assert remaining == ([] if exact else [0])


def test_filters_combine_as_their_and() -> None:
    bounds, remaining = pushed(
        ("GreaterThan", "offset", 10),
        ("LessThan", "offset", 50),
        ("LessThanOrEqual", "offset", 30),
        ("In", "partition", (0, 1, 2)),
        ("GreaterThan", "partition", 0),
        ("In", "topic", ("a", "b")),
        ("EqualTo", "topic", "b"),
    )
    assert remaining == []
    assert bounds.offsets(0, 100) == (11, 31)
    assert bounds.offsets(40, 100) == (40, 40)  # empty
    assert [p for p in range(4) if bounds.allows("b", p)] == [1, 2]
    assert not bounds.allows("a", 1)


@pytest.mark.parametrize(
    ("kind", "column", "value"),
    [
        ("EqualTo", "value", b"x"),  # not a column that narrows the plan
        ("EqualTo", "offset", 1.5),  # not an integer
        ("EqualTo", "offset", True),
        ("EqualTo", "partition", None),
        ("GreaterThan", "topic", "a"),  # only = and IN on topic
        ("EqualTo", "topic", 3),
        ("IsNull", "offset", None),
        ("EqualNullSafe", "offset", 3),
        ("StringStartsWith", "topic", "a"),
        ("In", "partition", tuple(range(IN_VALUES_MAX + 1))),
        ("LessThan", "timestamp", datetime.datetime(2024, 1, 1, tzinfo=UTC)),  # upper bound
        ("GreaterThan", "timestamp", datetime.datetime(2024, 1, 1)),  # naive: zone unknown
    ],
)
def test_filters_that_do_not_narrow(kind: str, column: str, value: object) -> None:
    assert push(Pushed(), kind, (column,), value) == (Pushed(), False)


def test_a_nested_column_and_not_are_left_to_spark() -> None:
    assert push(Pushed(), "EqualTo", ("headers", "key"), "x") == (Pushed(), False)
    assert push(Pushed(), "Not", (), None) == (Pushed(), False)


@pytest.mark.parametrize(
    ("kind", "value", "low_ms"),
    [
        # µs in the filter, ms in the records: > 1.0005 s is >= 1001 ms; >= is ceil.
        ("GreaterThan", datetime.datetime(1970, 1, 1, 0, 0, 1, 500, tzinfo=UTC), 1001),
        ("GreaterThanOrEqual", datetime.datetime(1970, 1, 1, 0, 0, 1, 500, tzinfo=UTC), 1001),
        ("GreaterThan", datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), 1001),
        ("GreaterThanOrEqual", datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), 1000),
        ("EqualTo", datetime.datetime(1970, 1, 1, 0, 0, 2, tzinfo=UTC), 2000),
        (
            "In",
            (
                datetime.datetime(1970, 1, 1, 0, 0, 5, tzinfo=UTC),
                datetime.datetime(1970, 1, 1, 0, 0, 3, tzinfo=UTC),
            ),
            3000,
        ),
        # another zone: the same instant
        (
            "GreaterThanOrEqual",
            datetime.datetime(
                1970, 1, 1, 1, 0, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
            ),
            1000,
        ),
    ],
)
def test_timestamp_lower_bounds_narrow_but_spark_checks(
    kind: str, value: object, low_ms: int
) -> None:
    bounds, exact = push(Pushed(), kind, ("timestamp",), value)
    assert bounds.timestamp_min_ms == low_ms
    assert not exact


def test_the_highest_lower_time_wins() -> None:
    early = datetime.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
    late = datetime.datetime(1970, 1, 1, 0, 0, 9, tzinfo=UTC)
    bounds, remaining = pushed(
        ("GreaterThan", "timestamp", late), ("GreaterThan", "timestamp", early)
    )
    assert bounds.timestamp_min_ms == 9001
    assert remaining == [0, 1]
    assert pickle.loads(pickle.dumps(bounds)) == bounds


RANGES = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 10, 50), OffsetRange("u", 0, 5, 9)]


def test_narrow_by_partitions_and_offsets() -> None:
    bounds, _ = pushed(("EqualTo", "topic", "t"), ("GreaterThanOrEqual", "offset", 20))

    def no_lookup(*_: Any, **__: Any) -> Any:
        raise AssertionError("no time pushed, no ListOffsets")

    assert narrow_ranges(RANGES, bounds, no_lookup) == [
        OffsetRange("t", 0, 20, 100),
        OffsetRange("t", 1, 20, 50),
    ]
    bounds, _ = pushed(("LessThan", "offset", 10))
    assert narrow_ranges(RANGES, bounds, no_lookup) == [
        OffsetRange("t", 0, 0, 10),
        OffsetRange("u", 0, 5, 9),
    ]


def test_narrow_by_time_starts_at_the_first_record_at_or_after_it() -> None:
    """Found: start there. None found: start at the answering replica's high
    watermark (all below it is older). A range already below the replica's log
    start keeps its start, so the read reports the loss."""
    answers = {
        ("t", 0): PartitionOffsets(0, 100, 42),
        ("t", 1): PartitionOffsets(0, 30, None),  # trails the planned end 50
        ("u", 0): PartitionOffsets(7, 9, 8),  # log start 7 > range start 5
    }
    asked: list[tuple[str, list[int], int]] = []

    def lookup(topic: str, partitions: list[int], *, timestamp_ms: int) -> Any:
        asked.append((topic, partitions, timestamp_ms))
        return {p: answers[(topic, p)] for p in partitions}

    bounds = Pushed(timestamp_min_ms=1234)
    assert narrow_ranges(RANGES, bounds, lookup) == [
        OffsetRange("t", 0, 42, 100),
        OffsetRange("t", 1, 30, 50),
        OffsetRange("u", 0, 5, 9),
    ]
    assert asked == [("t", [0, 1], 1234), ("u", [0], 1234)]
    # A time after every record of a partition the replica holds in full: nothing left.
    answers[("t", 1)] = PartitionOffsets(0, 50, None)
    assert OffsetRange("t", 1, 50, 50) not in narrow_ranges(RANGES, bounds, lookup)
    assert [r.partition for r in narrow_ranges(RANGES, bounds, lookup) if r.topic == "t"] == [0]

"""The leader's keyed compaction decision (:func:`compaction_point`), pure."""

from __future__ import annotations

from laminar.replica.compaction_control import (
    CompactionRule,
    Decision,
    LogView,
    compaction_point,
    prune_history,
)

RULE = CompactionRule(
    min_cleanable_dirty_ratio=0.5,
    min_compaction_lag_ms=0,
    max_compaction_lag_ms=-1,
    delete_retention_ms=1_000,
)
NOW = 100_000


def _view(
    batches: list[tuple[int, int, int, int]],
    *,
    dirty_from: int = 0,
    clean_bytes: int = 0,
    high_watermark: int = 1_000,
    active_base: int = 1_000,
) -> LogView:
    return LogView(high_watermark, active_base, dirty_from, clean_bytes, batches)


def _batches(
    start: int, count: int, *, size: int = 100, time_ms: int = 0
) -> list[tuple[int, int, int, int]]:
    """``count`` batches of 10 records each from ``start``."""
    return [(start + 10 * i, start + 10 * (i + 1), time_ms, size) for i in range(count)]


def test_compacts_when_the_dirty_ratio_is_reached() -> None:
    view = _view(_batches(100, 5), dirty_from=100, clean_bytes=500)
    assert compaction_point(view, RULE, [], NOW) == Decision(150, 0, "ratio")
    below = _view(_batches(100, 4), dirty_from=100, clean_bytes=500)  # 400 / 900
    assert compaction_point(below, RULE, [], NOW) is None


def test_end_stops_at_the_high_watermark_and_the_active_segment() -> None:
    batches = _batches(0, 10)
    assert compaction_point(_view(batches, high_watermark=55), RULE, [], NOW) == Decision(
        50, 0, "ratio"
    )  # the batch [50, 60) is not all committed
    assert compaction_point(_view(batches, active_base=30), RULE, [], NOW) == Decision(
        30, 0, "ratio"
    )
    assert compaction_point(_view(batches, active_base=5), RULE, [], NOW) is None


def test_end_stops_before_the_first_batch_younger_than_the_minimum_lag() -> None:
    rule = CompactionRule(0.5, min_compaction_lag_ms=1_000, max_compaction_lag_ms=-1,
                          delete_retention_ms=0)  # fmt: skip
    batches = _batches(0, 3, time_ms=NOW - 5_000) + _batches(30, 3, time_ms=NOW - 500)
    assert compaction_point(_view(batches), rule, [], NOW) == Decision(30, 0, "ratio")


def test_the_maximum_lag_forces_a_compaction_below_the_ratio() -> None:
    rule = CompactionRule(0.9, min_compaction_lag_ms=0, max_compaction_lag_ms=10_000,
                          delete_retention_ms=0)  # fmt: skip
    fresh = _view(_batches(100, 1, time_ms=NOW - 1_000), dirty_from=100, clean_bytes=10_000)
    assert compaction_point(fresh, rule, [], NOW) is None
    stale = _view(_batches(100, 1, time_ms=NOW - 20_000), dirty_from=100, clean_bytes=10_000)
    assert compaction_point(stale, rule, [], NOW) == Decision(110, 0, "lag")


def test_nothing_new_below_the_limit_means_no_command() -> None:
    assert compaction_point(_view([], dirty_from=40), RULE, [], NOW) is None
    assert (
        compaction_point(_view(_batches(40, 2), dirty_from=40, active_base=40), RULE, [], NOW)
        is None
    )


def test_a_gap_after_the_last_batch_keeps_end_at_that_batch_end() -> None:
    # Batches [0,10) and [50,60): compaction removed 10..49 before.
    batches = [(0, 10, 0, 100), (50, 60, 0, 100)]
    assert compaction_point(_view(batches, active_base=50), RULE, [], NOW) == Decision(
        10, 0, "ratio"
    )


def test_tombstones_end_is_the_newest_command_older_than_delete_retention() -> None:
    history = [(100, NOW - 5_000), (200, NOW - 2_000), (300, NOW - 500)]
    view = _view(_batches(300, 5), dirty_from=300)
    decision = compaction_point(view, RULE, history, NOW)
    assert decision is not None and decision.tombstones_end == 200
    assert compaction_point(view, RULE, history[2:], NOW) == Decision(350, 0, "ratio")


def test_history_keeps_the_newest_old_command_and_every_recent_one() -> None:
    history = [(100, NOW - 5_000), (200, NOW - 2_000), (300, NOW - 500)]
    assert prune_history(history, NOW, 1_000) == [(200, NOW - 2_000), (300, NOW - 500)]
    assert prune_history(history, NOW, 10_000) == history
    assert prune_history([], NOW, 10) == []

"""The leader's keyed compaction decision (:func:`compaction_point`), pure."""

from __future__ import annotations

from laminar.replica.compaction_control import (
    CompactionRule,
    Decision,
    LogView,
    Run,
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
    batches: list[Run],
    *,
    dirty_from: int = 0,
    clean_bytes: int = 0,
    high_watermark: int = 1_000,
    active_base: int = 1_000,
) -> LogView:
    return LogView(high_watermark, active_base, dirty_from, clean_bytes, batches)


def _batches(start: int, count: int, *, size: int = 100, time_ms: int = 0) -> list[Run]:
    """``count`` batches of 10 records each from ``start``, all stamped ``time_ms``."""
    return [Run(start + 10 * i, start + 10 * (i + 1), time_ms, time_ms, size) for i in range(count)]


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


def test_the_maximum_lag_counts_from_the_oldest_record_of_a_run() -> None:
    # A whole sealed segment is one run: its oldest record is past the maximum lag,
    # its newest is not. Due now (Kafka's meaning), not once the newest is as old.
    rule = CompactionRule(0.9, min_compaction_lag_ms=0, max_compaction_lag_ms=10_000,
                          delete_retention_ms=0)  # fmt: skip
    segment = Run(100, 200, NOW - 20_000, NOW - 1_000, 100)
    view = _view([segment], dirty_from=100, clean_bytes=10_000)
    assert compaction_point(view, rule, [], NOW) == Decision(200, 0, "lag")
    # Oldest of the runs taken: a later run's old record makes them all due.
    fresh = Run(100, 150, NOW - 2_000, NOW - 1_000, 100)
    stale = Run(150, 200, NOW - 30_000, NOW - 500, 100)
    view = _view([fresh, stale], dirty_from=100, clean_bytes=10_000)
    assert compaction_point(view, rule, [], NOW) == Decision(200, 0, "lag")
    # Only just within the lag: not due.
    within = Run(100, 200, NOW - 10_000, NOW - 1_000, 100)
    view = _view([within], dirty_from=100, clean_bytes=10_000)
    assert compaction_point(view, rule, [], NOW) is None


def test_the_minimum_lag_still_holds_against_the_newest_record_of_a_run() -> None:
    # Overdue by its oldest record, but its newest is younger than the minimum lag:
    # the run is not taken (no record younger than the minimum lag is compacted).
    rule = CompactionRule(0.9, min_compaction_lag_ms=5_000, max_compaction_lag_ms=10_000,
                          delete_retention_ms=0)  # fmt: skip
    mixed = Run(100, 200, NOW - 20_000, NOW - 1_000, 100)
    view = _view([mixed], dirty_from=100, clean_bytes=10_000)
    assert compaction_point(view, rule, [], NOW) is None
    # An older run before it is taken, and is due by its own oldest record.
    old = Run(0, 100, NOW - 20_000, NOW - 6_000, 100)
    view = _view([old, mixed], dirty_from=0, clean_bytes=10_000)
    assert compaction_point(view, rule, [], NOW) == Decision(100, 0, "lag")


def test_a_run_of_control_batches_alone_is_never_overdue() -> None:
    # Control batches carry the leader's monotonic clock, not record time: no oldest.
    rule = CompactionRule(0.9, min_compaction_lag_ms=0, max_compaction_lag_ms=10_000,
                          delete_retention_ms=0)  # fmt: skip
    controls = Run(100, 101, None, 5, 60)
    view = _view([controls], dirty_from=100, clean_bytes=10_000)
    assert compaction_point(view, rule, [], NOW) is None


def test_nothing_new_below_the_limit_means_no_command() -> None:
    assert compaction_point(_view([], dirty_from=40), RULE, [], NOW) is None
    assert (
        compaction_point(_view(_batches(40, 2), dirty_from=40, active_base=40), RULE, [], NOW)
        is None
    )


def test_a_gap_after_the_last_batch_keeps_end_at_that_batch_end() -> None:
    # Batches [0,10) and [50,60): compaction removed 10..49 before.
    batches = [Run(0, 10, 0, 0, 100), Run(50, 60, 0, 0, 100)]
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

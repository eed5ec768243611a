"""The commit rule (the offset that a majority of voters hold) and the in-sync rule."""

from __future__ import annotations

from collections.abc import Iterable


def majority_offset(match_offsets: Iterable[int]) -> int:
    """The largest offset that at least a majority of the given voters have reached.

    ``match_offsets`` holds one end offset per voter (the offset after the last
    entry it durably holds that matches the leader's log).
    """
    ordered = sorted(match_offsets, reverse=True)
    assert ordered, "a group has at least one voter"
    return ordered[len(ordered) // 2]


def in_sync(
    *,
    now_ms: int,
    heard_ms: int,
    caught_up_ms: int,
    match_offset: int,
    end_offset: int,
    quiesced: bool,
    lag_max_ms: int,
) -> bool:
    """Whether a follower counts as in sync with its leader (for health, not commit).

    Like Kafka's ``replica.lag.time.max.ms``: the follower answered the leader within
    ``lag_max_ms`` and held the leader's whole log at some moment within it. Holding
    the offset of the high watermark is not enough, since an idle partition's high
    watermark does not move while a dead follower's match offset still equals it.
    A quiesced group exchanges no messages at all (its followers held everything
    when it quiesced): there a follower is in sync when it holds the whole log, and
    the caller must also require its node to be alive by membership.
    """
    if quiesced:
        return match_offset >= end_offset
    return now_ms - heard_ms <= lag_max_ms and now_ms - caught_up_ms <= lag_max_ms

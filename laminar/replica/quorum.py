"""The commit rule: the offset that a majority of voters hold."""

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

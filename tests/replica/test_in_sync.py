"""Table tests of the in-sync rule (laminar.replica.quorum.in_sync)."""

from __future__ import annotations

import pytest

from laminar.replica.quorum import in_sync

LAG_MS = 2_000
NOW = 100_000


@pytest.mark.parametrize(
    ("heard_ago_ms", "caught_up_ago_ms", "match", "end", "quiesced", "expected"),
    [
        (50, 50, 10, 10, False, True),  # answering and holding everything
        (50, 1_500, 8, 10, False, True),  # a little behind, caught up recently
        (50, 2_500, 8, 10, False, False),  # behind for longer than the lag
        # A dead follower of an idle partition: its match still equals the log end,
        # but it has not answered: out of sync (the bug this rule fixes).
        (2_500, 2_500, 10, 10, False, False),
        (LAG_MS, LAG_MS, 10, 10, False, True),  # the bound itself is in
        # A quiesced group exchanges nothing: holding the whole log is what counts
        # (the caller adds "its node is alive by gossip").
        (60_000, 60_000, 10, 10, True, True),
        (60_000, 60_000, 9, 10, True, False),
    ],
)
def test_in_sync(
    heard_ago_ms: int,
    caught_up_ago_ms: int,
    match: int,
    end: int,
    quiesced: bool,
    expected: bool,
) -> None:
    assert (
        in_sync(
            now_ms=NOW,
            heard_ms=NOW - heard_ago_ms,
            caught_up_ms=NOW - caught_up_ago_ms,
            match_offset=match,
            end_offset=end,
            quiesced=quiesced,
            lag_max_ms=LAG_MS,
        )
        is expected
    )

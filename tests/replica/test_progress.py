"""Tests of a leader's per-peer progress and backtracking (laminar.replica.progress)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from laminar.replica.epochs import Epochs
from laminar.replica.progress import Mode, Progress, probe_after_rejection
from laminar.replica.types import NEVER_MS


def test_probe_then_replicate_with_a_window() -> None:
    progress = Progress(next_offset=10)
    assert progress.mode is Mode.PROBE
    progress.sent(10, now_ms=100, advance=False)  # an empty probe at the log end
    assert list(progress.inflight) == [10] and progress.waiting_since_ms == 100
    progress.acknowledged(10, end_offset=10, now_ms=150)
    assert progress.mode is Mode.REPLICATE and not progress.inflight
    assert progress.match_offset == 10 and progress.caught_up_ms == 150
    progress.sent(14, now_ms=200, advance=True)
    progress.sent(20, now_ms=210, advance=True)
    assert progress.next_offset == 20 and progress.waiting_since_ms == 200
    progress.acknowledged(14, end_offset=20, now_ms=220)
    assert list(progress.inflight) == [20] and progress.caught_up_ms == 150  # not at the end
    progress.acknowledged(12, end_offset=20, now_ms=230)  # a late, older answer
    assert progress.match_offset == 14 and progress.next_offset == 20


def test_an_older_answer_ends_probing_from_its_match_not_from_the_probe() -> None:
    # A learner re-added at offset 11 is probed at the leader's log end, 12; its answer
    # to an older append (it holds up to 11) comes first, and the probe is lost. The
    # leader replicates from 11: from 12, with nothing in flight, no retransmit timeout
    # would ever send it offset 11 (issue 34: a learner for good in an idle group).
    progress = Progress(next_offset=12)
    progress.sent(12, now_ms=100, advance=False)
    progress.acknowledged(11, end_offset=12, now_ms=120)
    assert progress.mode is Mode.REPLICATE and not progress.inflight
    assert progress.match_offset == 11 and progress.next_offset == 11


@given(st.lists(st.tuples(st.sampled_from(["sent", "ack", "expire", "reject"]), st.integers(0, 9))))
def test_a_replicating_peer_with_nothing_in_flight_is_sent_from_its_match(
    steps: list[tuple[str, int]],
) -> None:
    # Requests go out as the core sends them, answers come back for any request ever
    # sent (late, duplicated, or lost). In replicate mode with nothing in flight the
    # next request starts at the match: else what lies between is never sent again.
    progress = Progress(next_offset=5)
    sent: list[int] = []
    for step, value in steps:
        if step == "sent" and progress.mode is Mode.REPLICATE:
            progress.sent(progress.next_offset + value + 1, now_ms=0, advance=True)
            sent.append(progress.next_offset)
        elif step == "sent" and not progress.inflight:
            progress.sent(progress.next_offset + value, now_ms=0, advance=False)
            sent.append(progress.next_offset + value)
        elif step == "ack" and sent:
            progress.acknowledged(sent[value % len(sent)], end_offset=100, now_ms=0)
        elif step == "expire":
            progress.expire(now_ms=value, retransmit_ms=5)
        elif step == "reject":
            progress.probe(max(progress.match_offset, progress.next_offset - value, 0))
        assert progress.next_offset >= progress.match_offset
        if progress.mode is Mode.REPLICATE and not progress.inflight:
            assert progress.next_offset == progress.match_offset


def test_lost_requests_fall_back_to_probing_from_the_match() -> None:
    progress = Progress(next_offset=0, mode=Mode.REPLICATE, match_offset=5)
    progress.sent(9, now_ms=100, advance=True)
    progress.expire(now_ms=149, retransmit_ms=50)
    assert progress.mode is Mode.REPLICATE and progress.next_offset == 9
    progress.expire(now_ms=150, retransmit_ms=50)
    assert progress.mode is Mode.PROBE and not progress.inflight and progress.next_offset == 5


def test_stale_rejections() -> None:
    probing = Progress(next_offset=7)
    assert probing.stale_rejection(6) and not probing.stale_rejection(7)
    replicating = Progress(next_offset=20, mode=Mode.REPLICATE, match_offset=10)
    assert replicating.stale_rejection(9) and not replicating.stale_rejection(12)


def test_forget_log_of_a_healing_peer() -> None:
    progress = Progress(next_offset=30, mode=Mode.REPLICATE, match_offset=25, caught_up_ms=5)
    progress.sent(30, now_ms=1, advance=True)
    progress.forget_log(since=12, end_offset=28)
    assert progress.healing and progress.healing_since == 12
    assert progress.match_offset == -1 and progress.caught_up_ms == NEVER_MS
    assert progress.mode is Mode.PROBE and not progress.inflight and progress.next_offset == 28


def _epochs() -> Epochs:
    epochs = Epochs()
    epochs.note_append(1, 0)  # term 1: 0-9
    epochs.note_append(3, 10)  # term 3: 10-19
    epochs.note_append(5, 20)  # term 5: 20-29
    return epochs


def _probe(**overrides: int) -> int:
    args = {
        "conflict_term": -1,
        "conflict_start": -1,
        "follower_end": 100,
        "prev_end_offset": 25,
        "match_offset": -1,
        "log_start": 0,
        "log_end": 30,
    }
    args.update(overrides)
    return probe_after_rejection(epochs=_epochs(), **args)


def test_backtracking() -> None:
    # The follower's log is shorter: from its end (or one below the rejected start).
    assert _probe(follower_end=12) == 12
    assert _probe(follower_end=100) == 24
    # It holds term 3 up to the rejected offset: the leader holds term 3 too, so
    # the follower matches up to that term's end in the leader's log.
    assert _probe(conflict_term=3, conflict_start=10, prev_end_offset=25) == 20
    # A term the leader never had: skip it, from where it starts at the follower.
    assert _probe(conflict_term=4, conflict_start=15) == 15
    # Never below what the follower matches, nor the leader's log start...
    assert _probe(conflict_term=4, conflict_start=15, match_offset=18) == 18
    assert _probe(follower_end=2, log_start=5) == 5
    # ...and within the leader's log.
    assert _probe(follower_end=100, prev_end_offset=60) == 30

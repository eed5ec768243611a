"""The commit rule (what a leader may call committed), the rule of a leader's lease
and check-quorum (a majority heard recently), and the in-sync rule."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from laminar.replica.types import NodeId


def majority_offset(match_offsets: Iterable[int]) -> int:
    """The largest offset that at least a majority of the given voters have reached.

    ``match_offsets`` holds one end offset per voter (the offset after the last
    entry it durably holds that matches the leader's log).
    """
    ordered = sorted(match_offsets, reverse=True)
    assert ordered, "a group has at least one voter"
    return ordered[len(ordered) // 2]


def commit_offset(
    voters: Sequence[NodeId],
    *,
    leader: NodeId,
    durable_end: int,
    acked_offset: Callable[[NodeId], int],
    high_watermark: int,
    term: int,
    term_start_offset: int,
    term_at: Callable[[int], int],
) -> int:
    """The leader's new high watermark (``high_watermark`` when it does not move).

    The whole commit rule (Raft's, with record offsets as the index):

    * **durable end**: the leader counts its own log only up to ``durable_end``
      (what its shell has synced), a follower up to what it acknowledged
      (``acked_offset``: its match offset, -1 when it does not count, e.g. while it
      heals from damaged storage); a leader that is not a voter (being removed)
      does not count at all;
    * **majority**: the largest offset a majority of ``voters`` hold
      (:func:`majority_offset`);
    * **current term**: only an offset whose entry (the one just below it, by
      ``term_at``) has the leader's ``term``, and past the leader's term start
      (its no-op), commits; entries of earlier terms commit with it.

    The result never moves back, and stays at or below the largest end a voter
    reported (so at or below the leader's log end).
    """
    if not voters:
        return high_watermark
    candidate = majority_offset(
        durable_end if voter == leader else acked_offset(voter) for voter in voters
    )
    if candidate <= high_watermark or candidate <= term_start_offset:
        return high_watermark
    if term_at(candidate - 1) != term:
        return high_watermark
    return candidate


def majority_heard(
    voters: Sequence[NodeId],
    *,
    leader: NodeId,
    now_ms: int,
    window_ms: int,
    heard_ms: Callable[[NodeId], int],
    node_heard_ms: Callable[[NodeId], int] | None = None,
) -> bool:
    """Whether a majority of ``voters`` (the leader counting for itself) was heard
    within the last ``window_ms``: by their replica (``heard_ms``), or, when
    ``node_heard_ms`` is given, by anything from their node.

    With the minimum election timeout as the window and replicas only, this is the
    leader's lease (no other leader can have been elected meanwhile: voters refuse
    votes that long); with the maximum one and nodes, check-quorum.
    """
    heard = sum(
        1
        for voter in voters
        if voter == leader
        or now_ms - heard_ms(voter) < window_ms
        or (node_heard_ms is not None and now_ms - node_heard_ms(voter) < window_ms)
    )
    return heard >= len(voters) // 2 + 1


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

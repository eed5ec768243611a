"""Table tests of the commit rule (laminar.replica.quorum.commit_offset): majority,
current term, and the leader's durable end; and of majority_heard (lease, check-quorum)."""

from __future__ import annotations

import pytest

from laminar.replica.quorum import commit_offset, majority_heard
from laminar.replica.types import NEVER_MS, NodeId

A, B, C, D = NodeId("a"), NodeId("b"), NodeId("c"), NodeId("d")
TERM = 3


def _commit(
    voters: tuple[NodeId, ...],
    acked: dict[NodeId, int],
    *,
    durable_end: int = 10,
    high_watermark: int = 0,
    term_start_offset: int = 0,
    terms: tuple[tuple[int, int], ...] = ((0, TERM),),
) -> int:
    """The rule with ``a`` leading; ``terms``: (first offset, term) of each term."""

    def term_at(offset: int) -> int:
        return max((t for start, t in terms if start <= offset), default=-1)

    return commit_offset(
        voters,
        leader=A,
        durable_end=durable_end,
        acked_offset=lambda peer: acked.get(peer, -1),
        high_watermark=high_watermark,
        term=TERM,
        term_start_offset=term_start_offset,
        term_at=term_at,
    )


@pytest.mark.parametrize(
    ("voters", "acked", "durable_end", "expected"),
    [
        ((A,), {}, 10, 10),  # a group of one commits what its leader made durable
        ((A,), {}, 0, 0),
        ((A, B, C), {B: 7, C: 4}, 10, 7),  # the middle of (10, 7, 4)
        ((A, B, C), {B: 7}, 10, 7),  # a peer it knows nothing of counts as -1
        ((A, B, C), {}, 10, 0),  # no follower acknowledged: nothing commits
        # Durable end: the leader's unsynced entries do not count for it...
        ((A, B, C), {B: 9, C: 2}, 3, 3),
        # ...but a majority of followers commits without it (Raft allows it).
        ((A, B, C), {B: 9, C: 8}, 3, 8),
        ((A, B, C, D), {B: 9, C: 8, D: 1}, 10, 8),  # 3 of 4
        ((A, B, C, D), {B: 9, C: 1, D: 1}, 10, 1),
        # A leader being removed (not a voter) does not count itself.
        ((B, C, D), {B: 9, C: 8, D: 2}, 10, 8),
        ((B, C, D), {B: 9, C: 2, D: 2}, 10, 2),
        ((), {}, 10, 0),  # no voters known: nothing moves
    ],
)
def test_majority_of_durable_logs(
    voters: tuple[NodeId, ...], acked: dict[NodeId, int], durable_end: int, expected: int
) -> None:
    assert _commit(voters, acked, durable_end=durable_end) == expected


def test_only_an_entry_of_the_current_term_commits() -> None:
    # Entries 0-5 from term 2, the leader's own from 6 (its no-op): a majority
    # holding 5 commits nothing (Raft figure 8), holding 7 commits everything.
    terms = ((0, 2), (6, TERM))
    assert _commit((A, B, C), {B: 5, C: 5}, terms=terms, term_start_offset=6) == 0
    assert _commit((A, B, C), {B: 7, C: 5}, terms=terms, term_start_offset=6) == 7
    # At the term start itself (the no-op not yet held by a majority): nothing.
    assert _commit((A, B, C), {B: 6, C: 6}, terms=terms, term_start_offset=6) == 0
    # The term of the entry decides on its own too, whatever the term start says.
    assert _commit((A, B, C), {B: 5, C: 5}, terms=terms, term_start_offset=0) == 0
    assert _commit((A, B, C), {B: 7, C: 7}, terms=terms, term_start_offset=0) == 7


def test_never_moves_back() -> None:
    assert _commit((A, B, C), {B: 4, C: 4}, high_watermark=6) == 6
    assert _commit((A, B, C), {B: 6, C: 6}, high_watermark=6) == 6
    assert _commit((A, B, C), {B: 8, C: 2}, high_watermark=6) == 8


def test_majority_heard_counts_the_leader_and_recent_replicas_or_nodes() -> None:
    now = 10_000
    replica_heard = {B: now - 100, C: now - 500}
    node_heard = {C: now - 10, D: now - 10}

    def heard(window_ms: int, voters: tuple[NodeId, ...], *, nodes: bool = False) -> bool:
        return majority_heard(
            voters,
            leader=A,
            now_ms=now,
            window_ms=window_ms,
            heard_ms=lambda peer: replica_heard.get(peer, NEVER_MS),
            node_heard_ms=(lambda peer: node_heard.get(peer, NEVER_MS)) if nodes else None,
        )

    assert heard(101, (A, B, C))  # the leader and B
    assert not heard(100, (A, B, C))  # B just outside the window
    assert heard(100, (A, B, C), nodes=True)  # C's node talks to the leader
    assert not heard(500, (A, B, C, D))  # 3 of 4 needed: A and B only
    assert heard(501, (A, B, C, D))
    assert heard(100, (A, B, C, D), nodes=True)  # A, C and D by their nodes
    assert heard(0, (A,))  # a group of one: the leader alone

"""The chaos checker and gap analysis on hand-made histories (no root needed).

Each finding the chaos run asserts absent is produced here from a history that has
it, so that a clean chaos report means something.
"""

from __future__ import annotations

import pytest

from laminar.testing.chaos import (
    Ack,
    Cut,
    FaultEvent,
    FaultPlan,
    ReplicaRead,
    check,
    gaps_by_fault,
    gaps_by_fault_kind,
    nft_ruleset,
    write_gaps,
)

SENT = {b"a", b"b", b"c", b"d"}


def acks(*placed: tuple[bytes, int, int]) -> list[Ack]:
    return [Ack(partition, offset, value, 1.0) for value, partition, offset in placed]


def replica(node: str, *values: bytes, high_watermark: int | None = None) -> ReplicaRead:
    records = tuple(enumerate(values))
    mark = len(values) if high_watermark is None else high_watermark
    return ReplicaRead(node, mark, records)


def test_identical_replicas_holding_every_ack_are_clean() -> None:
    reads = {0: [replica("n0", b"a", b"b"), replica("n1", b"a", b"b")], 1: [replica("n0", b"c")]}
    findings = check(acks((b"a", 0, 0), (b"b", 0, 1), (b"c", 1, 0)), SENT, reads)
    assert findings.clean, findings


def test_an_acked_value_nobody_serves_is_lost() -> None:
    findings = check(acks((b"a", 0, 0), (b"b", 0, 1)), SENT, {0: [replica("n0", b"a")]})
    assert findings.counts == {"lost": 1}
    assert "b'b'" in findings.lost[0]


def test_a_value_at_two_offsets_is_duplicated() -> None:
    reads = {0: [replica("n0", b"a", b"a"), replica("n1", b"a", b"a")]}
    findings = check(acks((b"a", 0, 0)), SENT, reads)
    assert findings.counts == {"duplicated": 1}


def test_a_value_in_another_partition_is_duplicated_and_an_ack_elsewhere_misplaced() -> None:
    reads = {0: [replica("n0", b"b", b"a")], 1: [replica("n0", b"a")]}
    findings = check(acks((b"a", 1, 1)), SENT, reads)
    assert findings.counts == {"duplicated": 1, "misplaced": 1}


def test_an_ack_served_at_another_offset_is_misplaced() -> None:
    findings = check(acks((b"b", 0, 0)), SENT, {0: [replica("n0", b"a", b"b")]})
    assert findings.counts == {"misplaced": 1}


def test_replicas_that_differ_below_the_lowest_high_watermark_diverge() -> None:
    reads = {
        0: [
            replica("n0", b"a", b"b", b"c"),
            replica("n1", b"a", b"d", b"c"),
            replica("n2", b"a", b"b", high_watermark=2),
        ]
    }
    findings = check(acks((b"a", 0, 0)), SENT, reads)
    assert findings.counts == {"divergent": 1}, findings
    assert findings.divergent[0].startswith("0/1:")


def test_a_replica_missing_an_offset_below_the_watermark_diverges() -> None:
    full = replica("n0", b"a", b"b")
    holed = ReplicaRead("n1", 2, ((0, b"a"),))
    findings = check(acks((b"a", 0, 0)), SENT, {0: [full, holed]})
    assert findings.counts == {"divergent": 1}


def test_a_value_nobody_sent_is_unknown() -> None:
    findings = check([], SENT, {0: [replica("n0", b"zz")]})
    assert findings.counts == {"unknown": 1}


def test_longest_gap_counts_the_run_boundaries() -> None:
    history = [Ack(0, i, b"x", at_s) for i, at_s in enumerate([1.0, 2.0, 6.5, 7.0])]
    gap0, gap1 = write_gaps(history, 2, 0.0, 8.0)
    assert (gap0.length_s, gap0.from_s, gap0.to_s) == (4.5, 2.0, 6.5)
    assert (gap1.length_s, gap1.from_s, gap1.to_s) == (8.0, 0.0, 8.0)  # never written


def test_gaps_are_attributed_to_the_faults_they_overlap() -> None:
    history = [Ack(0, i, b"x", at_s) for i, at_s in enumerate([1.0, 1.5, 5.0, 5.2, 9.0])]
    events = [FaultEvent("kill", "node1", 2.0, 3.0), FaultEvent("split", "n", 6.0, 7.0)]
    by_kind = gaps_by_fault_kind(history, events, 0.0, 9.5)
    assert by_kind == {"kill": 3.5, "none": 1.0, "split": 3.8}
    assert gaps_by_fault(history, events, 0.0, 9.5) == [3.5, 3.8]


def test_a_seed_always_gives_the_same_plan_of_about_the_duration() -> None:
    plan = FaultPlan.generate(7, 60, 5, 6)
    assert plan == FaultPlan.generate(7, 60, 5, 6)
    assert plan != FaultPlan.generate(8, 60, 5, 6)
    planned_s = sum(f.hold_s + f.quiet_s for f in plan.faults)
    # Over by at most the longest fault and quiet, and a damage fault added midway.
    assert 60 <= planned_s < 60 + 17 + 9
    for fault in plan.faults:
        assert len(set(fault.minority)) == 2 and 0 <= fault.node < 5


@pytest.mark.parametrize("seed", range(20))
def test_every_plan_damages_a_disk(seed: int) -> None:
    kinds = [fault.kind for fault in FaultPlan.generate(seed, 60, 5, 6).faults]
    assert "damage" in kinds


def test_a_cut_drops_both_directions_and_closes_the_isolated_ports() -> None:
    rules = nft_ruleset(Cut(("127.0.0.11",), ("127.0.0.12", "127.0.0.13"), ("127.0.0.11",)))
    assert "ip saddr { 127.0.0.11 } ip daddr { 127.0.0.12, 127.0.0.13 } drop" in rules
    assert "ip saddr { 127.0.0.12, 127.0.0.13 } ip daddr { 127.0.0.11 } drop" in rules
    assert "ip daddr 127.0.0.11 ip saddr != 127.0.0.11" in rules
    assert "drop" not in nft_ruleset(None)

"""Balance at scale: 100,000 partitions follow the weights.

These run in the default suite on purpose: balance is the reason to use weighted
rendezvous at all, and 100,000 partitions make the sampling error small enough
(about 0.16 percentage points for a 50% share) that the bounds below are tight
statements about the function rather than about luck. The inputs are fixed, so the
outcome is deterministic.
"""

from __future__ import annotations

from laminar.placement import AssignmentTable, PlacementMember, partition_key

PARTITION_COUNT = 100_000


def _keys() -> list[str]:
    return [partition_key(f"topic-{index % 50}", index // 50) for index in range(PARTITION_COUNT)]


def test_leader_share_follows_weight_share_within_one_point() -> None:
    weights = [1.0, 1.0, 2.0, 4.0, 8.0]
    members = [
        PlacementMember(f"node-{index}", weight, f"zone-{index}")
        for index, weight in enumerate(weights)
    ]
    table = AssignmentTable.build(_keys(), members, 1)
    leader_counts = table.leader_counts()
    for member in members:
        leader_share_pp = 100.0 * leader_counts[member.node_id] / PARTITION_COUNT
        weight_share_pp = 100.0 * member.weight / sum(weights)
        assert abs(leader_share_pp - weight_share_pp) <= 1.0, member


def test_equal_weights_give_replica_counts_within_five_percent_of_the_mean() -> None:
    # Equal zones, so the zone rule does not skew the spread.
    members = [PlacementMember(f"node-{index}", 1.0, f"zone-{index % 4}") for index in range(12)]
    table = AssignmentTable.build(_keys(), members, 3)
    replica_counts = table.replica_counts()
    mean = 3 * PARTITION_COUNT / len(members)
    for node_id, count in replica_counts.items():
        assert abs(count - mean) <= 0.05 * mean, (node_id, count, mean)
    leader_counts = table.leader_counts()
    for node_id, count in leader_counts.items():
        assert abs(count - PARTITION_COUNT / 12) <= 0.05 * PARTITION_COUNT / 12, node_id

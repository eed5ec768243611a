"""Unit tests of the one-partition placement function."""

from __future__ import annotations

from collections import Counter

import pytest

from laminar.errors import InvalidInputError
from laminar.placement import PlacementMember, partition_key, replicas, score
from laminar.placement.rendezvous import select_indices

KEYS = [partition_key("orders", index) for index in range(300)]


def _members(count: int, zone_count: int, weight: float = 1.0) -> list[PlacementMember]:
    return [
        PlacementMember(f"node-{index:02d}", weight, f"zone-{index % zone_count}")
        for index in range(count)
    ]


def test_partition_key_format() -> None:
    assert partition_key("orders", 7) == "orders/7"
    with pytest.raises(InvalidInputError):
        partition_key("orders", -1)


def test_without_zones_replicas_are_the_top_k_scores() -> None:
    members = _members(8, 1)
    for key in KEYS[:50]:
        ranked = sorted(members, key=lambda member: -score(member.node_id, 1.0, key))
        assert replicas(key, members, 3) == tuple(member.node_id for member in ranked[:3])


def test_first_replica_is_the_highest_score_even_with_zones() -> None:
    members = _members(12, 3)
    for key in KEYS[:100]:
        best = max(members, key=lambda member: score(member.node_id, member.weight, key))
        assert replicas(key, members, 3)[0] == best.node_id


def test_at_least_k_zones_gives_distinct_zones() -> None:
    members = _members(15, 5)
    zone_of = {member.node_id: member.zone for member in members}
    for key in KEYS:
        chosen = replicas(key, members, 3)
        assert len(chosen) == 3
        assert len({zone_of[node_id] for node_id in chosen}) == 3


def test_fewer_zones_than_k_spreads_evenly() -> None:
    members = _members(12, 2)
    zone_of = {member.node_id: member.zone for member in members}
    for key in KEYS:
        chosen = replicas(key, members, 5)
        per_zone = Counter(zone_of[node_id] for node_id in chosen)
        assert sorted(per_zone.values()) == [2, 3]


def test_a_small_zone_that_runs_out_is_filled_from_the_others() -> None:
    members = [PlacementMember("lonely", 1.0, "small"), *_members(6, 1)]
    for key in KEYS[:50]:
        chosen = replicas(key, members, 4)
        assert "lonely" in chosen
        assert len(chosen) == 4


def test_draining_and_dead_members_get_nothing() -> None:
    members = [
        *_members(6, 3),
        PlacementMember("drained", 0.0, "zone-0"),
        PlacementMember("dead", 5.0, "zone-1", alive=False),
    ]
    for key in KEYS:
        chosen = replicas(key, members, 3)
        assert "drained" not in chosen
        assert "dead" not in chosen


def test_fewer_eligible_members_than_k_returns_what_exists() -> None:
    members = [*_members(2, 2), PlacementMember("drained", 0.0)]
    assert sorted(replicas("t/0", members, 3)) == ["node-00", "node-01"]
    assert replicas("t/0", [], 3) == ()


def test_input_order_does_not_matter() -> None:
    members = _members(9, 3)
    for key in KEYS[:50]:
        assert replicas(key, members, 3) == replicas(key, list(reversed(members)), 3)


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(InvalidInputError):
        replicas("t/0", _members(3, 1), 0)
    with pytest.raises(InvalidInputError):
        replicas("t/0", [PlacementMember("a"), PlacementMember("a", 2.0)], 1)
    with pytest.raises(InvalidInputError):
        PlacementMember("a", -1.0)
    with pytest.raises(InvalidInputError):
        PlacementMember("a", float("nan"))


def test_exact_ties_go_to_the_smaller_node_id() -> None:
    # Candidates are listed in node-id order; equal scores keep that order.
    assert select_indices([1.0, 2.0, 2.0, 1.0], [0, 1, 2, 3], 3) == [1, 2, 0]
    # Zone rank first: index 1 and 2 share zone 7, so the runner-up of zone 7
    # comes after the best of every other zone.
    assert select_indices([1.0, 3.0, 2.0, 0.5], [0, 7, 7, 3], 4) == [1, 0, 3, 2]


def test_weight_share_moves_leadership() -> None:
    light = [PlacementMember("a", 1.0), PlacementMember("b", 1.0)]
    heavy = [PlacementMember("a", 1.0), PlacementMember("b", 3.0)]
    keys = [partition_key("t", index) for index in range(4000)]
    light_b = sum(replicas(key, light, 1) == ("b",) for key in keys)
    heavy_b = sum(replicas(key, heavy, 1) == ("b",) for key in keys)
    assert 1800 < light_b < 2200
    assert 2850 < heavy_b < 3150
    # Raising b's weight only moves partitions towards b.
    for key in keys:
        if replicas(key, light, 1) == ("b",):
            assert replicas(key, heavy, 1) == ("b",)

"""Table tests of the node's protocol decisions (laminar.server.rules)."""

from __future__ import annotations

import pytest

from laminar.errors import InvalidTopicError
from laminar.ids import NodeId
from laminar.membership import Member, MemberState
from laminar.placement import PlacementMember
from laminar.server.rules import (
    METADATA_PARTITION,
    Join,
    full_last,
    join_decision,
    leader_hint,
    placement_members,
    placement_targets,
    plan_topic,
    shutdown_successor,
)


def member(node_id: str, state: MemberState = MemberState.ALIVE, weight: float = 1.0) -> Member:
    return Member(NodeId(node_id), "g", "r", weight, "", 1, state, ())


GRACE_MS = 60_000


@pytest.mark.parametrize(
    ("state", "dead_for_ms", "alive"),
    [
        (MemberState.ALIVE, None, True),
        (MemberState.SUSPECT, None, True),  # one slow probe moves nothing
        (MemberState.DEAD, 0, True),  # replicas stay through the grace...
        (MemberState.DEAD, GRACE_MS - 1, True),
        (MemberState.DEAD, GRACE_MS, False),  # ...and move after it
        (MemberState.LEFT, None, False),  # a graceful leave moves them at once
    ],
)
def test_a_dead_member_keeps_its_replicas_through_the_move_grace(
    state: MemberState, dead_for_ms: int | None, alive: bool
) -> None:
    now_ms = 1_000_000
    dead_since = {} if dead_for_ms is None else {"b": now_ms - dead_for_ms}
    members = placement_members(
        [member("a"), member("b", state)], "a", dead_since, now_ms, GRACE_MS
    )
    assert [(m.node_id, m.alive) for m in members] == [("a", True), ("b", alive)]


@pytest.mark.parametrize(
    ("in_maintenance", "dead_for_ms", "alive"),
    [
        (True, GRACE_MS, True),  # maintenance outlasts the move grace...
        (True, 10 * GRACE_MS - 1, True),
        (True, 10 * GRACE_MS, False),  # ...up to its own grace
        (False, GRACE_MS, False),  # another dead node moves after the move grace
    ],
)
def test_a_dead_member_in_maintenance_keeps_its_replicas_through_the_maintenance_grace(
    in_maintenance: bool, dead_for_ms: int, alive: bool
) -> None:
    now_ms = 1_000_000
    members = placement_members(
        [member("a"), member("b", MemberState.DEAD)],
        "a",
        {"b": now_ms - dead_for_ms},
        now_ms,
        GRACE_MS,
        maintenance=("b",) if in_maintenance else (),
        maintenance_grace_ms=10 * GRACE_MS,
    )
    assert [(m.node_id, m.alive) for m in members] == [("a", True), ("b", alive)]


def test_a_maintenance_grace_shorter_than_the_move_grace_does_not_shorten_it() -> None:
    members = placement_members(
        [member("a"), member("b", MemberState.DEAD)],
        "a",
        {"b": 0},
        GRACE_MS - 1,
        GRACE_MS,
        maintenance=("b",),
        maintenance_grace_ms=1,
    )
    assert members[1].alive


def test_a_member_of_an_incompatible_protocol_version_holds_no_replicas() -> None:
    members = placement_members(
        [member("a"), member("b"), member("c")], "a", {}, 0, GRACE_MS, refused=("b",)
    )
    assert [(m.node_id, m.alive) for m in members] == [("a", True), ("b", False), ("c", True)]


def test_this_node_always_counts_as_alive() -> None:
    members = placement_members([member("a", MemberState.SUSPECT)], "a", {}, 0, GRACE_MS)
    assert members[0].alive


@pytest.mark.parametrize(
    ("alive_count", "metadata_replicas"),
    [(1, 1), (2, 2), (3, 3), (5, 3)],
)
def test_targets_cover_the_metadata_partition_and_every_topic(
    alive_count: int, metadata_replicas: int
) -> None:
    members = [PlacementMember(f"n{i}") for i in range(alive_count)]
    targets = placement_targets(members, {"t": (2, min(3, alive_count))})
    assert len(targets[METADATA_PARTITION]) == metadata_replicas
    assert sorted(targets) == [METADATA_PARTITION, ("t", 0), ("t", 1)]
    assert all(len(targets[("t", p)]) == min(3, alive_count) for p in (0, 1))


def test_targets_skip_members_that_cannot_hold_replicas() -> None:
    members = [
        PlacementMember("a"),
        PlacementMember("b", alive=False),
        PlacementMember("c", weight=0.0),
        PlacementMember("d"),
    ]
    targets = placement_targets(members, {"t": (4, 3)})
    for target in targets.values():
        assert set(target) <= {"a", "d"}


def test_plan_topic_refuses_more_replicas_than_eligible_members() -> None:
    members = [PlacementMember("a"), PlacementMember("b"), PlacementMember("c", weight=0.0)]
    assert [len(group) for group in plan_topic("t", 3, 2, members)] == [2, 2, 2]
    with pytest.raises(InvalidTopicError, match="the cluster has 2"):
        plan_topic("t", 1, 3, members)


def test_plan_topic_founds_nothing_on_a_node_out_of_disk_space() -> None:
    members = [PlacementMember(name) for name in ("a", "b", "c", "d")]
    founders = plan_topic("t", 20, 3, members, full={"b"})
    assert all(len(group) == 3 and "b" not in group for group in founders)
    # The others keep the places they would have had: the ranking without b.
    assert founders == plan_topic("t", 20, 3, [m for m in members if m.node_id != "b"])
    with pytest.raises(InvalidTopicError, match=r"has 2 \(b, d out of disk space\)"):
        plan_topic("t", 1, 3, members, full={"b", "d"})


def test_full_nodes_go_last_in_a_target_and_stay_in_it() -> None:
    assert full_last(("a", "b", "c"), {"a"}) == ("b", "c", "a")
    assert full_last(("a", "b", "c"), {"a", "b"}) == ("c", "a", "b")
    assert full_last(("a", "b", "c"), {"x"}) == ("a", "b", "c")
    assert full_last(("a", "b", "c"), ()) == ("a", "b", "c")


@pytest.mark.parametrize(
    ("known", "seen", "has_seeds", "waited_ms", "expected"),
    [
        # A restarted node with an id.
        ("c1", ["c1"], True, 0, (Join.START, "c1")),
        ("c1", ["c1", "c2"], True, 0, (Join.START, "c1")),
        ("c1", ["c2"], True, 0, (Join.MISMATCH, "c1")),
        ("c1", [], False, 0, (Join.START, "c1")),  # no seeds: nothing to wait for
        ("c1", [], True, 9_999, (Join.WAIT, None)),
        ("c1", [], True, 10_000, (Join.START, "c1")),  # seeds quiet: they will come
        # A new node.
        (None, ["c1"], True, 0, (Join.ADOPT, "c1")),
        (None, [], True, 59_999, (Join.WAIT, None)),
        (None, ["c1", "c2"], True, 0, (Join.WAIT, None)),  # peers disagree: wait
        (None, [], True, 60_000, (Join.NO_CLUSTER, None)),
    ],
)
def test_join_decision(
    known: str | None,
    seen: list[str],
    has_seeds: bool,
    waited_ms: int,
    expected: tuple[Join, str | None],
) -> None:
    decision = join_decision(
        known,
        seen,
        has_seeds=has_seeds,
        waited_ms=waited_ms,
        restart_wait_ms=10_000,
        join_wait_ms=60_000,
    )
    assert (decision.action, decision.cluster_id) == expected


@pytest.mark.parametrize(
    ("voters", "matches", "expected"),
    [
        (["a"], {}, None),
        (["a", "b", "c"], {"b": 5, "c": 9}, "c"),
        (["a", "b", "c"], {"b": 9, "c": 9}, "b"),  # ties to the smaller id
        (["a", "b", "c"], {"c": 1}, "c"),  # an unknown match counts as -1
    ],
)
def test_shutdown_successor(voters: list[str], matches: dict[str, int], expected: str) -> None:
    assert shutdown_successor("a", voters, matches) == expected


@pytest.mark.parametrize(
    ("known_leader", "target", "gone", "expected"),
    [
        ("n4", ("n2", "n3"), {"n4"}, "n4"),  # the leader the replica knows, as it is
        (None, ("n2", "n3"), set(), "n2"),  # placement's preferred leader
        (None, ("n2", "n3"), {"n2"}, "n3"),  # not one gossip calls dead or gone
        (None, ("n1", "n2"), set(), "n2"),  # never this node (n1): the client comes back
        (None, ("n1",), set(), None),  # nobody else to name
        (None, ("n2",), {"n2"}, None),
        (None, (), set(), None),  # no target yet
    ],
)
def test_leader_hint(
    known_leader: str | None, target: tuple[str, ...], gone: set[str], expected: str | None
) -> None:
    assert leader_hint("n1", known_leader, target, gone) == expected

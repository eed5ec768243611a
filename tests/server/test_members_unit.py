"""The node's record of its peers (laminar.server.members) and placement's
bookkeeping (laminar.server.placement_keeper), driven by member events and views
without a process, a socket or a clock."""

from __future__ import annotations

from laminar.ids import NodeId
from laminar.membership import EventKind, Member, MemberEvent, MemberState
from laminar.server.members import (
    DISK_FULL,
    DISK_META,
    PROTOCOL_META,
    MemberTracker,
    full_peers,
    protocol_problem,
    react_to_event,
)
from laminar.server.metadata import METADATA_KEY, MetadataState, TopicSpec, TopicState
from laminar.server.placement_keeper import PlacementKeeper, retention_of

GRACE_MS = 60_000
MAINTENANCE_GRACE_MS = 3_600_000


def member(
    node_id: str,
    state: MemberState = MemberState.ALIVE,
    metadata: tuple[tuple[str, str], ...] = (),
) -> Member:
    return Member(NodeId(node_id), "g", f"{node_id}:7100", 1.0, "", 1, state, metadata)


def event(kind: EventKind, node: Member) -> MemberEvent:
    return MemberEvent(kind, node, 0)


def tracker(maintenance_grace_ms: int = MAINTENANCE_GRACE_MS) -> MemberTracker:
    return MemberTracker(
        "n1", replica_move_grace_ms=GRACE_MS, maintenance_grace_ms=maintenance_grace_ms
    )


def keeper(members: MemberTracker) -> PlacementKeeper:
    return PlacementKeeper(
        "n1", members, replica_move_grace_ms=GRACE_MS, maintenance_grace_ms=MAINTENANCE_GRACE_MS
    )


def catalogue(*topics: tuple[str, int, int]) -> MetadataState:
    state = MetadataState()
    for name, partitions, replication_factor in topics:
        spec = TopicSpec(name, partitions, replication_factor, retention_bytes=5, retention_ms=-1)
        state.topics[name] = TopicState(spec, (), "id", 0)
    return state


def test_a_death_is_dated_and_void_leaderships_and_replans_at_both_graces() -> None:
    peers = tracker()
    peers.note_view([member("n1"), member("n2")])
    note = peers.note_event(event(EventKind.DEAD, member("n2", MemberState.DEAD)), 1_000)
    assert note.leader_dead and not note.forget_link and not note.returned
    assert note.replan_after_s == (60.05, 3600.05)
    assert peers.dead_since_ms == {"n2": 1_000}
    assert peers.gone["n2"][1] == 1_000
    # A second event of the same death keeps the first date.
    peers.note_event(event(EventKind.DEAD, member("n2", MemberState.DEAD)), 5_000)
    assert peers.dead_since_ms == {"n2": 1_000} and peers.gone["n2"][1] == 1_000
    assert peers.note_view([member("n1"), member("n2", MemberState.DEAD)]) == []
    assert peers.alive_peers == {"n1"}


def test_only_the_move_grace_replans_when_the_maintenance_grace_is_shorter() -> None:
    note = tracker(maintenance_grace_ms=0).note_event(
        event(EventKind.LEFT, member("n2", MemberState.LEFT)), 0
    )
    assert note.replan_after_s == (60.05,)
    assert note.forget_link and note.leader_dead


def test_a_member_back_from_the_dead_is_returned_and_no_longer_gone() -> None:
    peers = tracker()
    peers.note_event(event(EventKind.DEAD, member("n2", MemberState.DEAD)), 1_000)
    note = peers.note_event(event(EventKind.ALIVE, member("n2")), 2_000)
    assert note.returned and note.check_protocol and not note.leader_dead
    assert peers.dead_since_ms == {} and peers.gone == {}
    peers.note_view([member("n1"), member("n2")])
    assert peers.alive_peers == {"n1", "n2"}
    # Joining for the first time is not a return.
    assert not peers.note_event(event(EventKind.JOINED, member("n3")), 3_000).returned


def test_a_reaped_member_is_reported_once_and_its_death_forgotten() -> None:
    peers = tracker()
    peers.note_view([member("n1"), member("n2")])
    peers.note_event(event(EventKind.DEAD, member("n2", MemberState.DEAD)), 1_000)
    assert peers.note_view([member("n1")]) == ["n2"]
    assert peers.dead_since_ms == {}
    assert "n2" in peers.gone  # placement's grace for it is not over
    assert peers.note_view([member("n1")]) == []


class _Recorder:
    """MemberActions that record each call, and whether the tracker had the
    member alive when ``peer_returned`` came."""

    def __init__(self, members: MemberTracker) -> None:
        self.calls: list[tuple[str, object]] = []
        self._members = members

    def replan_later(self, delay_s: float) -> None:
        self.calls.append(("replan_later", delay_s))

    def hint_leader_dead(self, node_id: str) -> None:
        self.calls.append(("hint_leader_dead", node_id))

    def forget_link(self, node_id: str) -> None:
        self.calls.append(("forget_link", node_id))

    def check_protocol(self, member: Member) -> None:
        self.calls.append(("check_protocol", member.node_id))

    def peer_returned(self, node_id: str) -> None:
        self.calls.append(("peer_returned", node_id in self._members.alive_peers))

    def set_full_peers(self, nodes: list[str]) -> None:
        self.calls.append(("set_full_peers", nodes))

    def replan(self) -> None:
        self.calls.append(("replan", None))


def test_react_to_event_carries_the_note_out_in_the_node_order() -> None:
    members = tracker()
    full = member("c", metadata=((DISK_META, DISK_FULL),))
    view = [member("n1"), member("b", MemberState.DEAD), full]
    actions = _Recorder(members)
    react_to_event(members, event(EventKind.DEAD, member("b")), 1_000, lambda: view, actions)
    assert actions.calls == [
        ("replan_later", GRACE_MS / 1000 + 0.05),
        ("replan_later", MAINTENANCE_GRACE_MS / 1000 + 0.05),
        ("hint_leader_dead", "b"),
        ("set_full_peers", ["c"]),
        ("replan", None),
    ]
    view = [member("n1"), member("b"), full]
    actions = _Recorder(members)
    react_to_event(members, event(EventKind.ALIVE, member("b")), 2_000, lambda: view, actions)
    assert actions.calls == [
        ("check_protocol", "b"),
        ("peer_returned", True),  # after the tracker took the view with it alive
        ("set_full_peers", ["c"]),
        ("replan", None),
    ]
    view = [member("n1"), full]  # gossip reaped b; c left
    actions = _Recorder(members)
    react_to_event(members, event(EventKind.LEFT, full), 3_000, lambda: view, actions)
    assert ("forget_link", "c") in actions.calls and ("forget_link", "b") in actions.calls
    assert actions.calls.index(("forget_link", "c")) < actions.calls.index(("forget_link", "b"))


def test_start_dates_the_members_dead_before_the_node_and_lists_the_others() -> None:
    peers = tracker()
    view = [member("n1"), member("n2", MemberState.DEAD), member("n3", MemberState.LEFT)]
    view.append(member("n4", MemberState.SUSPECT))
    assert [m.node_id for m in peers.start(view, 7)] == ["n4"]
    assert peers.dead_since_ms == {"n2": 7}
    assert sorted(peers.gone) == ["n2", "n3"]


def test_an_incompatible_peer_is_noted_once_per_version_and_the_table_is_bounded() -> None:
    peers = MemberTracker("n1", replica_move_grace_ms=0, maintenance_grace_ms=0, incompatible_max=2)
    first = peers.note_incompatible("n2", 9, "too new", "a:1", 100)
    assert first is not None and first.since_ms == 100
    assert peers.note_incompatible("n2", 9, "too new", "a:1", 200) is None
    again = peers.note_incompatible("n2", 10, "newer", "a:1", 300)
    assert again is not None and again.since_ms == 100  # refused since the first time
    peers.note_incompatible("n3", 9, "too new", "", 0)
    peers.note_incompatible("n4", 9, "too new", "", 0)
    assert list(peers.incompatible) == ["n3", "n4"]  # the oldest dropped
    peers.compatible("n3")
    assert list(peers.incompatible) == ["n4"]


def test_protocol_problem_reads_the_gossiped_version() -> None:
    assert protocol_problem(2, member("n2", metadata=((PROTOCOL_META, "2"),))) is None
    assert protocol_problem(2, member("n2", metadata=((PROTOCOL_META, "x"),))) == (
        0,
        "gossips a protocol version that is not a number",
    )
    problem = protocol_problem(2, member("n2", metadata=((PROTOCOL_META, "99"),)))
    assert problem is not None and problem[0] == 99


def test_full_peers_are_the_present_members_gossiping_a_full_disk() -> None:
    full = ((DISK_META, DISK_FULL),)
    view = [member("n1"), member("n2", metadata=full), member("n3", MemberState.DEAD, full)]
    assert full_peers(view) == ["n2"]


def test_replan_targets_every_partition_and_moves_nodes_that_may_not_lead_last() -> None:
    peers = tracker()
    places = keeper(peers)
    view = [member("n1"), member("n2"), member("n3")]
    targets = places.replan(view, 0, catalogue(("t", 4, 3)), may_not_lead={"n2"})
    assert sorted(targets) == sorted([("t", 0), ("t", 1), ("t", 2), ("t", 3), METADATA_KEY])
    for key, target in targets.items():
        assert sorted(target) == ["n1", "n2", "n3"] and target[-1] == "n2"
        assert sorted(places.target_of(key)) == sorted(target)
    assert places.accepts(("t", 3), catalogue(("t", 4, 3)))
    assert not places.accepts(("t", 4), catalogue(("t", 4, 3)))  # no such partition
    assert not places.accepts(("u", 0), catalogue(("t", 4, 3)))  # no such topic
    assert places.keeps(("t", 0))


def test_a_reaped_member_keeps_its_replicas_until_its_grace_ends_then_is_forgotten() -> None:
    peers = tracker(maintenance_grace_ms=0)
    places = keeper(peers)
    state = catalogue(("t", 1, 2))
    peers.note_view([member("n1"), member("n2")])
    assert places.replan([member("n1"), member("n2")], 0, state, set())[("t", 0)] in (
        ("n1", "n2"),
        ("n2", "n1"),
    )
    peers.note_event(event(EventKind.DEAD, member("n2", MemberState.DEAD)), 0)
    peers.note_view([member("n1")])  # gossip reaped it
    within = places.replan([member("n1")], GRACE_MS - 1, state, set())
    assert sorted(within[("t", 0)]) == ["n1", "n2"] and "n2" in peers.gone
    after = places.replan([member("n1")], GRACE_MS, state, set())
    assert after[("t", 0)] == ("n1",)
    assert "n2" not in peers.gone  # forgotten
    assert not places.keeps(("u", 0))


def test_an_incompatible_member_holds_no_replica() -> None:
    peers = tracker()
    places = keeper(peers)
    peers.note_incompatible("n2", 9, "too new", "", 0)
    targets = places.replan([member("n1"), member("n2")], 0, catalogue(("t", 1, 2)), set())
    assert targets[("t", 0)] == ("n1",)


def test_retention_of_reads_the_topic_spec() -> None:
    assert retention_of(catalogue(("t", 1, 1)), ("t", 0)) == (5, None)
    assert retention_of(catalogue(), ("t", 0)) == (None, None)

"""Unit tests of the sans-IO membership core: no sockets, no sleeps."""

from __future__ import annotations

import itertools
import random

import pytest

from laminar.errors import ConfigError
from laminar.membership import config as presets
from laminar.membership.awareness import Awareness
from laminar.membership.codec import Codec
from laminar.membership.config import MembershipConfig
from laminar.membership.core import Datagram, MembershipCore, Output
from laminar.membership.member import EventKind, MemberState, NodeId
from laminar.membership.messages import (
    Ack,
    Alive,
    Dead,
    Nack,
    Ping,
    PingRequest,
    PushPull,
    Suspect,
)
from laminar.membership.suspicion import Suspicion, remaining_timeout_ms

from .helpers import KEY, ManualCluster, as_member, local_member, open_frame, seal

CONFIG = presets.lan()


def make_core(
    name: str = "a", others: tuple[str, ...] = ("b", "c"), config: MembershipConfig = CONFIG
) -> MembershipCore:
    known = [as_member(local_member(other)) for other in others]
    return MembershipCore(config, local_member(name), KEY, random.Random(1), 0, known_members=known)


def alive(name: str, incarnation: int, **changes: object) -> Alive:
    local = local_member(name, **changes)
    return Alive(
        local.node_id,
        incarnation,
        local.gossip_address,
        local.grpc_address,
        local.weight,
        local.zone,
        local.metadata,
    )


def feed(core: MembershipCore, *messages: object, now_ms: int = 0) -> list[EventKind]:
    output = core.receive_packet(seal(messages), now_ms)  # type: ignore[arg-type]
    return [event.kind for event in output.events]


# ------------------------------------------------------------------ config


def test_presets_are_valid_and_local_is_fast() -> None:
    for factory in (presets.lan, presets.local, presets.simulation):
        config = factory()
        assert config.probe_timeout_ms < config.probe_interval_ms
    assert presets.local().probe_interval_ms == 200
    assert presets.lan().mtu_bytes == 1400


@pytest.mark.parametrize(
    "changes",
    [
        {"probe_timeout_ms": 1000},  # not below the probe interval
        {"probe_interval_ms": 0},
        {"indirect_checks": -1},
        {"mtu_bytes": 200},
        {"reap_after_ms": 10, "gossip_to_dead_ms": 20},
        {"suspicion_mult": 1},
        {"retransmit_mult": 1.5},
        {"lifeguard_enabled": 1},
    ],
)
def test_config_rejects_impossible_values(changes: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        MembershipConfig(**changes)  # type: ignore[arg-type]


def test_config_formulas() -> None:
    config = presets.lan()
    assert config.retransmit_limit(9) == 4
    assert config.retransmit_limit(10) == 8
    assert config.retransmit_limit(1000) == 16
    assert config.suspicion_min_ms(5) == 4000
    assert config.suspicion_min_ms(1000) == 12000
    assert config.push_pull_interval_scaled_ms(32) == 30_000
    assert config.push_pull_interval_scaled_ms(64) == 60_000


def test_local_member_is_validated() -> None:
    with pytest.raises(ConfigError):
        MembershipCore(CONFIG, local_member("a", weight=-1.0), KEY, random.Random(), 0)
    with pytest.raises(ConfigError):
        MembershipCore(
            CONFIG, local_member("a", metadata=(("k", "v" * 600),)), KEY, random.Random(), 0
        )
    with pytest.raises(ConfigError):
        MembershipCore(CONFIG, local_member("a"), b"", random.Random(), 0)


# --------------------------------------------------------- lifeguard pieces


def test_suspicion_timeout_shrinks_with_confirmations() -> None:
    # memberlist's table: k=3 expected, min 2 s, max 30 s.
    assert remaining_timeout_ms(0, 3, 0, 2000, 30000) == 30000
    assert remaining_timeout_ms(1, 3, 0, 2000, 30000) == 16000
    assert remaining_timeout_ms(2, 3, 0, 2000, 30000) == 7810
    assert remaining_timeout_ms(3, 3, 0, 2000, 30000) == 2000
    assert remaining_timeout_ms(3, 3, 2500, 2000, 30000) == -500
    suspicion = Suspicion(NodeId("x"), 2, 1000, 6000, start_ms=100)
    assert suspicion.deadline_ms == 6100
    assert not suspicion.confirm(NodeId("x"), 200)  # the suspector is not a confirmation
    assert suspicion.confirm(NodeId("y"), 200)
    assert not suspicion.confirm(NodeId("y"), 300)  # nor twice the same member
    assert suspicion.confirm(NodeId("z"), 300)
    assert suspicion.deadline_ms == 1100
    assert not suspicion.confirm(NodeId("w"), 300)  # beyond k


def test_awareness_scales_and_clamps() -> None:
    awareness = Awareness(8)
    awareness.apply_delta(-3)
    assert awareness.scale_ms(500) == 500
    awareness.apply_delta(20)
    assert awareness.score == 7
    assert awareness.scale_ms(500) == 4000
    disabled = Awareness(8, enabled=False)
    disabled.apply_delta(5)
    assert disabled.scale_ms(500) == 500


# ------------------------------------------------------------------ probing


def test_probe_acked_raises_no_suspicion() -> None:
    cluster = ManualCluster(CONFIG, ["a", "b"])
    cluster.advance(10_000)
    a_counters = cluster.cores["a"].counters()
    assert a_counters["probes"] >= 8
    assert "probes_failed" not in a_counters
    assert cluster.kinds("a", "b") == []
    assert cluster.state("a", "b") is MemberState.ALIVE


def test_ping_is_answered_with_ack_for_the_same_sequence() -> None:
    core = make_core("b", ("a",))
    output = core.receive_packet(seal([Ping(77, NodeId("b"), NodeId("a"), "a:7946")]), 5)
    (packet,) = output.packets
    assert packet.address == "a:7946"
    assert open_frame(packet.data)[0] == Ack(77, NodeId("b"))
    # A ping for somebody else (a stale address) is not answered.
    output = core.receive_packet(seal([Ping(78, NodeId("z"), NodeId("a"), "a:7946")]), 6)
    assert output.packets == ()
    assert core.counters()["pings_misdirected"] == 1


def test_indirect_probe_through_a_relay_avoids_suspicion() -> None:
    cut = {("a", "b"), ("b", "a")}
    cluster = ManualCluster(CONFIG, ["a", "b", "c"])
    cluster.allow = lambda source, destination: (source, destination) not in cut
    cluster.advance(20_000)
    a_counters = cluster.cores["a"].counters()
    assert a_counters["probes"] >= 15
    assert "probes_failed" not in a_counters
    assert cluster.state("a", "b") is MemberState.ALIVE
    assert EventKind.SUSPECT not in cluster.kinds("a", "b")


def test_relay_pings_target_relays_ack_and_sends_nack_on_silence() -> None:
    relay = make_core("c", ("a", "b"))
    request = PingRequest(5, NodeId("b"), "b:7946", NodeId("a"), "a:7946", True)
    output = relay.receive_packet(seal([request]), 0)
    (ping_packet,) = output.packets
    ping = open_frame(ping_packet.data)[0]
    assert isinstance(ping, Ping) and ping.target_id == "b"
    # The target answers: the ack is relayed with the requester's sequence.
    output = relay.receive_packet(seal([Ack(ping.sequence, NodeId("b"))]), 10)
    assert open_frame(output.packets[0].data)[0] == Ack(5, NodeId("b"))
    # A second request that gets no answer yields a nack after the probe timeout.
    relay.receive_packet(
        seal([PingRequest(6, NodeId("b"), "b:7946", NodeId("a"), "a:7946", True)]), 20
    )
    output = relay.tick(20 + CONFIG.probe_timeout_ms)
    nacks = [m for p in output.packets for m in open_frame(p.data) if isinstance(m, Nack)]
    assert nacks == [Nack(6, NodeId("c"))]
    assert output.packets[-1].address == "a:7946"


def test_unanswered_probe_suspects_then_declares_dead() -> None:
    cluster = ManualCluster(CONFIG, ["a", "b", "c"])
    cluster.allow = lambda source, destination: "b" not in (source, destination)
    cluster.advance(20_000, step_ms=50)
    for observer in ("a", "c"):
        kinds = cluster.kinds(observer, "b")
        assert kinds[:2] == [EventKind.SUSPECT, EventKind.DEAD], kinds
        assert cluster.state(observer, "b") is MemberState.DEAD
    # The first suspicion's timer decides (the other observer may hear the verdict
    # before its own, later-started timer fires).
    first, suspect_ms = next(
        (n, e.at_ms)
        for n, e in cluster.events
        if e.member.node_id == "b" and e.kind is EventKind.SUSPECT
    )
    dead_ms = next(e.at_ms for n, e in cluster.events if n == first and e.kind is EventKind.DEAD)
    # n=3: min = 4 * 1 * 1 s; k = 2 expected but n - 2 < 2, so the timeout is the minimum.
    assert 4000 <= dead_ms - suspect_ms <= 4000 + 1000
    assert all(e.at_ms >= suspect_ms + 4000 for _, e in cluster.events if e.kind is EventKind.DEAD)


def test_suspect_refutes_with_a_higher_incarnation() -> None:
    core = make_core("b", ("a", "c"))
    assert core.incarnation == 0
    output = core.receive_packet(seal([Suspect(NodeId("b"), 0, NodeId("a"))]), 0)
    assert core.incarnation == 1
    assert core.counters()["refutations"] == 1
    assert core.health_score == 1  # being suspected hints that we are slow
    # The refutation rides on the next packets.
    output = core.receive_packet(seal([Ping(1, NodeId("b"), NodeId("a"), "a:7946")]), 1)
    messages = open_frame(output.packets[0].data)
    assert any(isinstance(m, Alive) and m.node_id == "b" and m.incarnation == 1 for m in messages)


def test_refutation_end_to_end_via_buddy_system() -> None:
    """b drops everything for a while; a suspects b; once b hears again, it refutes
    and a sees it alive again."""
    cluster = ManualCluster(CONFIG, ["a", "b", "c", "d", "e", "f"])
    deaf = {"on": True}
    cluster.allow = lambda source, destination: not (deaf["on"] and "b" in (source, destination))
    cluster.advance(2500, step_ms=50)
    assert any(cluster.state(o, "b") is MemberState.SUSPECT for o in "acdef")
    deaf["on"] = False
    cluster.advance(12_000, step_ms=50)
    for observer in "acdef":
        assert cluster.state(observer, "b") is MemberState.ALIVE
        assert EventKind.DEAD not in cluster.kinds(observer, "b")
    assert cluster.cores["b"].incarnation >= 1


# --------------------------------------------------------------- precedence


def test_precedence_rules() -> None:
    core = make_core("a", ("b",))
    b = NodeId("b")
    assert feed(core, Suspect(b, 0, NodeId("c"))) == [EventKind.SUSPECT]
    assert feed(core, alive("b", 0)) == []  # alive(i) does not beat suspect(i)
    assert feed(core, alive("b", 1)) == [EventKind.ALIVE]  # alive(i+1) does
    assert feed(core, Suspect(b, 0, NodeId("c"))) == []  # stale suspicion
    assert feed(core, Suspect(b, 1, NodeId("c"))) == [EventKind.SUSPECT]  # suspect(i) >= alive(i)
    assert feed(core, Dead(b, 0, NodeId("c"))) == []  # stale death
    assert feed(core, Dead(b, 1, NodeId("c"))) == [EventKind.DEAD]
    assert feed(core, Suspect(b, 5, NodeId("c"))) == []  # dead stays dead
    assert feed(core, alive("b", 1)) == []  # same incarnation does not revive
    assert feed(core, alive("b", 2)) == [EventKind.JOINED]  # a newer one does
    assert feed(core, Dead(b, 2, b)) == [EventKind.LEFT]  # from itself: left
    member = core.member(b)
    assert member is not None and member.state is MemberState.LEFT and member.incarnation == 2


def test_dead_about_self_is_refuted_unless_leaving() -> None:
    core = make_core("a", ("b",))
    feed(core, Dead(NodeId("a"), 3, NodeId("b")))
    assert core.incarnation == 4
    feed(core, alive("a", 9, zone="elsewhere"))  # a stale state from a previous life
    assert core.incarnation == 10
    me = core.member(NodeId("a"))
    assert me is not None and me.zone == "z1" and me.state is MemberState.ALIVE


def test_suspicion_at_a_newer_incarnation_restarts_the_timer() -> None:
    """We missed b's refutation of suspect(b, 0); suspect(b, 1) from somebody else
    is a new accusation, not a confirmation that would shorten (here: end) the old,
    long-running timer (seen as a false death in the false-dead benchmark)."""
    core = make_core("a", ("b", "c", "d", "e"))  # n = 5: min 4 s, max 24 s, k = 2
    b = NodeId("b")
    assert feed(core, Suspect(b, 0, NodeId("c")), now_ms=0) == [EventKind.SUSPECT]
    assert feed(core, Suspect(b, 1, NodeId("d")), now_ms=20_000) == [EventKind.SUSPECT]
    member = core.member(b)
    assert member is not None and member.incarnation == 1
    kinds = [event.kind for event in core.tick(20_001).events]
    assert EventKind.DEAD not in kinds
    assert core.member(b) == member
    # The new timer runs from the new accusation: its maximum, then dead.
    assert EventKind.DEAD not in [event.kind for event in core.tick(43_999).events]
    assert [event.kind for event in core.tick(44_000).events] == [EventKind.DEAD]


def test_stale_accusation_about_self_resends_the_refutation() -> None:
    core = make_core("b", ("a", "c"))
    feed(core, Suspect(NodeId("b"), 0, NodeId("a")))
    assert core.incarnation == 1
    refutation = alive("b", 1)
    now_ms = 0
    for _ in range(200):  # send the refutation its full retransmit count
        now_ms += 50
        core.tick(now_ms)
    ping = Ping(7, NodeId("b"), NodeId("c"), "c:7946")
    output = core.receive_packet(seal([ping]), now_ms)
    assert refutation not in open_frame(output.packets[0].data)
    # c still suspects b at 0 (it missed every copy of the refutation): b answers
    # c's buddy probe with its alive again, without raising its incarnation.
    stale = Suspect(NodeId("b"), 0, NodeId("c"))
    output = core.receive_packet(seal([stale, ping]), now_ms)
    messages = open_frame(output.packets[0].data)
    assert isinstance(messages[0], Ack) and refutation in messages
    assert core.incarnation == 1
    assert core.counters()["refutations_repeated"] == 1
    # Same for a stale death verdict.
    feed(core, Dead(NodeId("b"), 0, NodeId("c")), now_ms=now_ms)
    assert core.incarnation == 1 and core.counters()["refutations_repeated"] == 2


def test_unconfirmed_suspicion_is_checked_with_a_buddy_probe() -> None:
    """A suspicion still running at the minimum timeout (not confirmed, probably
    false) makes the node probe the suspect itself, the suspicion ahead of the
    ping, so that the suspect's ack carries its refutation: a node that missed
    every gossiped copy of the refutation still learns it before the timer ends."""
    others = (*(f"m{i}" for i in range(20)), "b")
    core = make_core("a", others)
    b = NodeId("b")
    min_ms = CONFIG.suspicion_min_ms(len(others) + 1)
    assert feed(core, Suspect(b, 0, NodeId("m1"))) == [EventKind.SUSPECT]
    probe = [p for p in core.tick(min_ms).packets if p.address == "b:7946"]
    assert len(probe) == 1
    messages = open_frame(probe[0].data)
    assert messages[0] == Suspect(b, 0, NodeId("a"))
    assert isinstance(messages[1], Ping) and messages[1].target_id == b
    suspected = make_core("b", ("a", "m1"))
    answer = suspected.receive_packet(probe[0].data, min_ms + 1)
    assert suspected.incarnation == 1
    reply = open_frame(answer.packets[0].data)
    assert isinstance(reply[0], Ack) and alive("b", 1) in reply
    assert feed(core, *reply, now_ms=min_ms + 2) == [EventKind.ALIVE]


def test_suspect_acked_through_a_relay_is_checked_again() -> None:
    others = (*(f"m{i}" for i in range(20)), "b")
    core = make_core("a", others)
    b = NodeId("b")
    min_ms = CONFIG.suspicion_min_ms(len(others) + 1)
    feed(core, Suspect(b, 0, NodeId("m1")))
    probe = next(p for p in core.tick(min_ms).packets if p.address == "b:7946")
    ping = next(m for m in open_frame(probe.data) if isinstance(m, Ping))
    requests = core.tick(min_ms + CONFIG.probe_timeout_ms).packets
    assert any(isinstance(open_frame(p.data)[0], PingRequest) for p in requests)
    # A relayed ack: b is up, but the refutation did not come with it.
    feed(core, Ack(ping.sequence, b), now_ms=min_ms + 600)
    next_probe = core.tick(min_ms + CONFIG.probe_interval_ms).packets
    assert ping_targets(next_probe) == [b]
    # Without Lifeguard the suspicion simply runs out at the minimum.
    plain = make_core("a", others, config=MembershipConfig(lifeguard_enabled=False))
    feed(plain, Suspect(b, 0, NodeId("m1")))
    assert EventKind.DEAD in [event.kind for event in plain.tick(min_ms).events]


def test_alive_attribute_change_is_an_update() -> None:
    core = make_core("a", ("b",))
    assert feed(core, alive("b", 1, weight=3.0, zone="z9")) == [EventKind.UPDATED]
    member = core.member(NodeId("b"))
    assert member is not None and (member.weight, member.zone) == (3.0, "z9")
    assert feed(core, alive("b", 2, weight=3.0, zone="z9")) == []  # nothing changed


# ------------------------------------------------------------ dissemination


def test_each_update_is_sent_exactly_the_retransmit_limit() -> None:
    others = tuple(f"m{i}" for i in range(20))
    core = make_core("a", others)
    news = alive("new", 0)
    feed(core, news)
    limit = CONFIG.retransmit_limit(len(others) + 2)
    sent = 0
    now_ms = 0
    for _ in range(200):
        now_ms += 50
        output = core.tick(now_ms)
        for packet in output.packets:
            sent += sum(1 for m in open_frame(packet.data) if m == news)
        # answer nothing: acks do not matter for dissemination
    assert sent == limit


def test_packets_never_exceed_the_mtu() -> None:
    config = MembershipConfig(mtu_bytes=1100)
    others = tuple(f"member-{i:03d}" for i in range(300))
    core = make_core("a", others, config=config)
    metadata = tuple((f"key{i}", "v" * 20) for i in range(8))
    for index in range(300):
        feed(core, alive(f"member-{index:03d}", 1, metadata=metadata))
    sizes: list[int] = []
    counts: list[int] = []
    now_ms = 0
    for _ in range(100):
        now_ms += 100
        for packet in core.tick(now_ms).packets:
            sizes.append(len(packet.data))
            counts.append(len(open_frame(packet.data)))
    assert sizes and max(sizes) <= 1100
    assert max(counts) >= 3  # packets are actually filled with several updates


def test_nothing_is_gossiped_when_nothing_is_new() -> None:
    core = make_core("a", ("b", "c"))
    now_ms = 0
    for _ in range(100):  # drain the initial self announcement
        now_ms += 200
        core.tick(now_ms)
    output = core.tick(now_ms + 200)
    assert all(isinstance(open_frame(p.data)[0], Ping) for p in output.packets)


# ---------------------------------------------------------- join and leave


def test_join_through_a_seed_exchanges_full_state() -> None:
    cluster = ManualCluster(CONFIG, ["a", "b", "c"], known=False, seeds=["a:7946"])
    cluster.advance(3000)
    for observer in "abc":
        for subject in "abc":
            assert cluster.state(observer, subject) is MemberState.ALIVE, (observer, subject)
    assert all(core.joined for core in cluster.cores.values())
    assert cluster.kinds("b", "a") == [EventKind.JOINED]


def test_join_retries_until_the_seed_answers() -> None:
    cluster = ManualCluster(CONFIG, ["a", "b"], known=False, seeds=["a:7946"])
    cluster.allow = lambda source, destination: False
    cluster.advance(5000)
    assert not cluster.cores["b"].joined
    cluster.allow = lambda source, destination: True
    cluster.advance(5000 + CONFIG.join_retry_interval_ms + 100)
    assert cluster.cores["b"].joined
    assert cluster.state("a", "b") is MemberState.ALIVE


def test_graceful_leave_is_seen_as_left_and_reaped_later() -> None:
    cluster = ManualCluster(CONFIG, ["a", "b", "c"])
    cluster.advance(1000)
    b = cluster.cores["b"]
    cluster.absorb("b", b.leave(cluster.now_ms))
    assert not b.is_leave_complete()
    cluster.deliver_all()
    cluster.advance(cluster.now_ms + 3000)
    assert b.is_leave_complete()
    for observer in "ac":
        assert cluster.state(observer, "b") is MemberState.LEFT
        assert cluster.kinds(observer, "b") == [EventKind.LEFT]
    del cluster.cores["b"]
    cluster.advance(cluster.now_ms + CONFIG.reap_after_ms + 1000, step_ms=100)
    assert cluster.state("a", "b") is None
    assert cluster.cores["a"].counters()["members_reaped"] == 1


def test_a_leave_heard_after_a_death_at_its_incarnation_is_a_leave() -> None:
    """b gossips its leave, answers until it was sent, and stops; a's suspicion of it
    can run out before the gossip reaches a. b's own word, arriving later at the
    same incarnation, turns dead into left; nobody else's can, nor can b's of an
    older life."""
    core = make_core("a", ("b", "c"))
    b, c = NodeId("b"), NodeId("c")
    assert feed(core, Dead(b, 2, c)) == [EventKind.DEAD]
    assert feed(core, Dead(b, 1, b)) == []  # an older incarnation's leave
    assert feed(core, Dead(b, 2, c)) == []
    assert core.member(b).state is MemberState.DEAD  # type: ignore[union-attr]
    assert feed(core, Dead(b, 2, b)) == [EventKind.LEFT]
    assert core.member(b).state is MemberState.LEFT  # type: ignore[union-attr]
    assert feed(core, Dead(b, 2, b)) == []  # once


def test_restarted_node_rejoins_with_a_higher_incarnation() -> None:
    cluster = ManualCluster(CONFIG, ["a", "b", "c"])
    cluster.allow = lambda source, destination: "b" not in (source, destination)
    cluster.advance(20_000, step_ms=50)
    assert cluster.state("a", "b") is MemberState.DEAD
    dead_incarnation = cluster.cores["a"].member(NodeId("b")).incarnation  # type: ignore[union-attr]
    cluster.allow = lambda source, destination: True
    cluster.cores["b"] = MembershipCore(
        CONFIG, local_member("b"), KEY, random.Random(9), cluster.now_ms, seeds=["a:7946"]
    )
    cluster.advance(cluster.now_ms + 5000, step_ms=50)
    for observer in "ac":
        assert cluster.state(observer, "b") is MemberState.ALIVE
        assert cluster.kinds(observer, "b")[-1] is EventKind.JOINED
    assert cluster.cores["b"].incarnation > dead_incarnation


def test_weight_zone_and_metadata_updates_are_gossiped() -> None:
    cluster = ManualCluster(CONFIG, ["a", "b", "c"])
    cluster.advance(1000)
    output = cluster.cores["b"].update_local(
        cluster.now_ms, weight=2.5, zone="rack-7", metadata=(("offset", "42"),)
    )
    cluster.absorb("b", output)
    assert [e.kind for e in output.events] == [EventKind.UPDATED]
    cluster.advance(cluster.now_ms + 2000)
    for observer in "ac":
        member = cluster.cores[observer].member(NodeId("b"))
        assert member is not None
        assert (member.weight, member.zone, member.metadata_dict()) == (
            2.5,
            "rack-7",
            {"offset": "42"},
        )
        assert member.incarnation == 1
        assert EventKind.UPDATED in cluster.kinds(observer, "b")
    with pytest.raises(ConfigError):
        cluster.cores["b"].update_local(cluster.now_ms, weight=float("nan"))


def test_push_pull_request_gets_a_full_state_reply() -> None:
    core = make_core("a", ("b", "c"))
    request = PushPull(NodeId("d"), "d:7946", True, False, ())
    output = core.receive_stream(seal([request]), 0)
    (reply_frame,) = output.streams
    assert reply_frame.address == "d:7946"
    (reply,) = open_frame(reply_frame.data)
    assert isinstance(reply, PushPull) and reply.is_reply
    assert sorted(r.alive.node_id for r in reply.members) == ["a", "b", "c"]


def test_members_max_bounds_the_table() -> None:
    core = make_core("a", (), config=MembershipConfig(members_max=5))
    for index in range(10):
        feed(core, alive(f"m{index}", 0))
    assert len(core.view()) == 5
    assert core.counters()["members_dropped"] == 6


# -------------------------------------------------------------- bad packets


def test_bad_packets_are_dropped_and_counted() -> None:
    core = make_core("a", ("b",))
    good = seal([Ping(1, NodeId("a"), NodeId("b"), "b:7946")])
    core.receive_packet(b"\x00garbage", 0)
    core.receive_packet(good[:10], 0)  # truncated below the tag
    core.receive_packet(good[:-1], 0)  # truncated body: the tag no longer matches
    core.receive_packet(seal([Ping(1, NodeId("a"), NodeId("b"), "b:7946")], key=b"other"), 0)
    core.receive_packet(good + b"\x00" * 2000, 0)  # oversized
    corrupted = bytearray(good)
    corrupted[20] ^= 0x40
    core.receive_packet(bytes(corrupted), 0)
    counters = core.counters()
    assert counters["dropped_truncated"] == 2
    assert counters["dropped_authentication"] == 3
    assert counters["dropped_oversized"] == 1
    assert "frames_received" not in counters
    assert core.receive_packet(good, 0).packets  # a good one still works


def test_authentic_but_malformed_bodies_are_dropped() -> None:
    codec = Codec(KEY, metadata_bytes_max=512)
    core = make_core("a", ("b",))
    bodies = [
        [1, -1, "a", "b", "b:7946"],  # negative sequence
        [1, 1, "a", "b"],  # missing field
        [99, 1],  # unknown kind
        [5, "b", 1, "b:1", "", float("inf"), "z", {}],  # infinite weight
        [5, "b", 1, "b:1", "", 1.0, "z", {"k": 1}],  # non-string metadata
        [6, "", 0, "c"],  # empty node id
        [7, "x" * 65, 0, "c"],  # node id too long
        "not an array",
    ]
    import msgpack

    for body in bodies:
        frame = codec.seal([msgpack.packb(body)])
        core.receive_packet(frame, 0)
    assert core.counters()["dropped_malformed"] == len(bodies)
    core.receive_packet(codec.seal([b"\x93\x01"]), 0)  # truncated msgpack
    assert core.counters()["dropped_malformed"] == len(bodies) + 1


# ------------------------------------------------- probing order, health, anti-entropy


def ping_targets(output_packets: object) -> list[str]:
    targets = []
    for packet in output_packets:  # type: ignore[attr-defined]
        # A probe of a suspect carries the suspicion ahead of the ping (buddy system).
        ping = next((m for m in open_frame(packet.data) if isinstance(m, Ping)), None)
        if ping is not None:
            targets.append(ping.target_id)
    return targets


def tick_with_acks(core: MembershipCore, now_ms: int) -> tuple[list[str], Output]:
    """Tick, and have every pinged member answer at once; the ping targets."""
    output = core.tick(now_ms)
    targets = []
    for packet in output.packets:
        # A probe of a suspect carries the suspicion ahead of the ping (buddy system).
        ping = next((m for m in open_frame(packet.data) if isinstance(m, Ping)), None)
        if ping is not None:
            targets.append(ping.target_id)
            core.receive_packet(seal([Ack(ping.sequence, ping.target_id)]), now_ms)
    return targets, output


def test_probing_is_round_robin_over_a_reshuffled_order() -> None:
    others = tuple("bcdefgh")
    core = make_core("a", others)
    targets: list[str] = []
    now_ms = 0
    while len(targets) < 4 * len(others):
        now_ms += 100
        targets.extend(tick_with_acks(core, now_ms)[0])
    rounds = [targets[i : i + len(others)] for i in range(0, len(targets), len(others))]
    for probe_round in rounds:
        assert sorted(probe_round) == sorted(others)  # everyone exactly once per round
    assert len({tuple(probe_round) for probe_round in rounds}) > 1  # order reshuffled


def test_local_health_stretches_probing_when_acks_and_nacks_go_missing() -> None:
    core = make_core("a", ("b", "c", "d", "e"))
    ping_times_ms: list[int] = []
    now_ms = 0
    while now_ms < 60_000:  # nothing ever answers: this node looks like the slow one
        now_ms += 50
        if ping_targets(core.tick(now_ms).packets):
            ping_times_ms.append(now_ms)
    assert core.health_score == CONFIG.awareness_max_multiplier - 1
    gaps_ms = [later - earlier for earlier, later in itertools.pairwise(ping_times_ms)]
    assert gaps_ms[0] <= CONFIG.probe_interval_ms + 50
    assert gaps_ms[-1] >= CONFIG.awareness_max_multiplier * CONFIG.probe_interval_ms
    # Successful probes bring the score back down, one per ack.
    cluster = ManualCluster(CONFIG, ["a", "b", "c"])
    cluster.cores["a"]._awareness.apply_delta(3)
    cluster.advance(30_000)
    assert cluster.cores["a"].health_score == 0


def test_without_lifeguard_health_never_stretches_probing() -> None:
    config = MembershipConfig(lifeguard_enabled=False)
    core = make_core("a", ("b", "c", "d"), config=config)
    for now_ms in range(50, 30_000, 50):
        core.tick(now_ms)
    assert core.health_score == 0


def test_periodic_push_pull_repairs_what_gossip_missed() -> None:
    a = make_core("a", ("b", "d"))
    b = make_core("b", ("a",))
    streams: list[Datagram] = []
    now_ms = 0
    while not streams:
        now_ms += 100
        streams = list(tick_with_acks(a, now_ms)[1].streams)
        assert now_ms <= CONFIG.push_pull_interval_ms + 100
    assert now_ms >= CONFIG.push_pull_interval_ms
    (request,) = open_frame(streams[0].data)
    assert isinstance(request, PushPull) and not request.is_join and not request.is_reply
    assert streams[0].address in ("b:7946", "d:7946")  # a random alive member
    output = b.receive_stream(streams[0].data, now_ms)
    assert [(e.kind, e.member.node_id) for e in output.events] == [(EventKind.JOINED, "d")]
    (reply,) = output.streams
    assert reply.address == "a:7946"
    assert isinstance(open_frame(reply.data)[0], PushPull)

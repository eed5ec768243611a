"""The asyncio shell on real loopback sockets, in one process (``local()`` timing)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest

from laminar.address import parse_address
from laminar.membership import config as presets
from laminar.membership import shell
from laminar.membership.core import LocalMember
from laminar.membership.member import EventKind, MemberEvent, MemberState, NodeId
from laminar.membership.shell import MembershipNode

KEY = b"shell-test-key"
HOSTS = ("127.0.0.2", "127.0.0.3")
DEADLINE_S = 10.0


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until it holds; fail after the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def state_of(node: MembershipNode, subject: str) -> MemberState | None:
    member = node.core.member(NodeId(subject))
    return None if member is None else member.state


async def scenario() -> None:
    events: list[MemberEvent] = []
    a = MembershipNode(
        presets.local(),
        LocalMember(NodeId("a"), "127.0.0.1:0", "127.0.0.1:9001", 1.0, "z1"),
        KEY,
        on_event=events.append,
    )
    await a.start()
    b = MembershipNode(
        presets.local(),
        LocalMember(NodeId("b"), "127.0.0.1:0", "127.0.0.1:9002", 1.0, "z2"),
        KEY,
        seeds=[a.local.gossip_address],
    )
    await b.start()
    try:
        await wait_until(lambda: state_of(a, "b") is MemberState.ALIVE, "a sees b")
        await wait_until(lambda: state_of(b, "a") is MemberState.ALIVE, "b sees a")
        assert b.core.joined

        # Garbage over UDP and TCP is dropped and counted; the node carries on.
        address = parse_address(a.local.gossip_address)
        host, port = address.host, address.port
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.sendto(b"\x00" * 40, (host, port))
            udp.sendto(b"x", (host, port))
        _, writer = await asyncio.open_connection(host, port)
        writer.write((1 << 31).to_bytes(4, "big"))  # a length beyond stream_bytes_max
        await writer.drain()
        writer.close()
        await wait_until(
            lambda: (
                a.counters().get("dropped_authentication", 0) >= 1
                and a.counters().get("dropped_truncated", 0) >= 1
                and a.counters().get("stream_oversized", 0) >= 1
            ),
            "garbage counted",
        )

        # A weight and zone change is gossiped with a higher incarnation.
        b.update_local(weight=3.0, zone="z9")
        await wait_until(
            lambda: (
                (member := a.core.member(NodeId("b"))) is not None
                and member.weight == 3.0
                and member.zone == "z9"
            ),
            "update seen",
        )
        assert any(e.kind is EventKind.UPDATED and e.member.node_id == "b" for e in events)

        # A graceful stop is a leave, not a death.
        await b.stop()
        await wait_until(lambda: state_of(a, "b") is MemberState.LEFT, "b left")
        assert not any(e.kind is EventKind.DEAD for e in events)
    finally:
        await b.stop(leave=False)
        await a.stop(leave=False)


def test_two_shells_join_update_survive_garbage_and_leave() -> None:
    asyncio.run(scenario())


def test_gossip_leaves_from_the_node_address(monkeypatch: pytest.MonkeyPatch) -> None:
    # Loopback holds all of 127/8 on Linux: with nodes on 127.0.0.2 and 127.0.0.3,
    # each receiver must see the sender's own address on UDP and on TCP push-pull.
    seen: dict[tuple[str, str], set[str]] = {("udp", h): set() for h in HOSTS}
    seen.update({("tcp", h): set() for h in HOSTS})

    def host_of(node: MembershipNode) -> str:
        return parse_address(node.local.gossip_address).host

    original_datagram = shell._DatagramEndpoint.datagram_received
    original_connection = MembershipNode._on_connection

    def datagram_received(
        endpoint: shell._DatagramEndpoint, data: bytes, addr: tuple[str | object, ...]
    ) -> None:
        seen["udp", host_of(endpoint._node)].add(str(addr[0]))
        original_datagram(endpoint, data, addr)

    async def on_connection(
        node: MembershipNode, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        seen["tcp", host_of(node)].add(writer.get_extra_info("peername")[0])
        await original_connection(node, reader, writer)

    monkeypatch.setattr(shell._DatagramEndpoint, "datagram_received", datagram_received)
    monkeypatch.setattr(MembershipNode, "_on_connection", on_connection)

    async def pair() -> None:
        a = MembershipNode(
            presets.local(),
            LocalMember(NodeId("a"), f"{HOSTS[0]}:0", "127.0.0.1:9001", 1.0, "z1"),
            KEY,
        )
        await a.start()
        b = MembershipNode(
            presets.local(),
            LocalMember(NodeId("b"), f"{HOSTS[1]}:0", "127.0.0.1:9002", 1.0, "z1"),
            KEY,
            seeds=[a.local.gossip_address],
        )
        await b.start()
        try:
            # b's join push-pull reaches a, a's reply reaches b; then both probe.
            await wait_until(lambda: all(seen.values()), "traffic both ways on UDP and TCP")
        finally:
            await b.stop(leave=False)
            await a.stop(leave=False)

    asyncio.run(pair())
    assert seen == {
        ("udp", HOSTS[0]): {HOSTS[1]},
        ("udp", HOSTS[1]): {HOSTS[0]},
        ("tcp", HOSTS[0]): {HOSTS[1]},
        ("tcp", HOSTS[1]): {HOSTS[0]},
    }


async def moving_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    """``b`` gossips the name ``b.test``; it stops and comes back with a new
    incarnation on another address under the same name. ``a`` resolves the name
    again (the cache lasts RESOLVE_TTL_S) and finds it."""
    monkeypatch.setattr(shell, "RESOLVE_TTL_S", 0.2)
    loop = asyncio.get_running_loop()
    names = {"b.test": "127.0.0.4"}
    lookups: list[str] = []
    real_getaddrinfo = loop.getaddrinfo

    async def getaddrinfo(host: object, port: object, **kwargs: object) -> list[object]:
        if isinstance(host, str) and host in names:
            lookups.append(names[host])
            host = names[host]
        return await real_getaddrinfo(host, port, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.4", 0))
        port = probe.getsockname()[1]

    def b_at(host: str, incarnation: int) -> MembershipNode:
        return MembershipNode(
            presets.local(),
            LocalMember(NodeId("b"), f"b.test:{port}", "b.test:9002", 1.0, ""),
            KEY,
            bind_address=f"{host}:{port}",
            seeds=[a.local.gossip_address],
            incarnation=incarnation,
        )

    a = MembershipNode(
        presets.local(), LocalMember(NodeId("a"), "127.0.0.1:0", "127.0.0.1:9001", 1.0, ""), KEY
    )
    await a.start()
    b = b_at("127.0.0.4", 1)
    await b.start()
    try:
        assert b.local.gossip_address == f"b.test:{port}"  # advertised, not bound
        await wait_until(lambda: state_of(a, "b") is MemberState.ALIVE, "a sees b")
        # a probes b over UDP, through the name resolved to b's first address.
        await wait_until(lambda: a.counters().get("probes", 0) >= 3, "a to probe b")
        assert lookups and set(lookups) == {"127.0.0.4"}
        assert not a.counters().get("probes_failed")
        await b.stop(leave=False)
        names["b.test"] = "127.0.0.5"
        b = b_at("127.0.0.5", 1_000)
        await b.start()
        await wait_until(
            lambda: (
                (member := a.core.member(NodeId("b"))) is not None
                and member.incarnation >= 1_000
                and member.state is MemberState.ALIVE
            ),
            "a to see b's new incarnation",
        )
        await wait_until(lambda: "127.0.0.5" in lookups, "a to resolve b.test again")
        # a's probes of b (its only member) now reach b at its new address.
        probes, failed = a.counters().get("probes", 0), a.counters().get("probes_failed", 0)
        await wait_until(lambda: a.counters().get("probes", 0) >= probes + 5, "a to probe b")
        assert a.counters().get("probes_failed", 0) <= failed + 1  # one was under way
        assert state_of(a, "b") is MemberState.ALIVE
    finally:
        await b.stop(leave=False)
        await a.stop(leave=False)


def test_a_member_back_under_its_name_at_a_new_address_is_found_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asyncio.run(moving_scenario(monkeypatch))

"""The peer transport over real TCP connections on loopback.

Each test is a coroutine run by ``asyncio.run`` (no pytest-asyncio). Waits are on
conditions with deadlines, never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from laminar.replica.coalesce import PeerBundle
from laminar.replica.messages import AppendRequest, Heartbeat
from laminar.replica.types import NodeId
from laminar.server.transport import (
    PROTOCOL_VERSION,
    LinkState,
    PeerTransport,
    TransportConfig,
    compatible_versions,
    decode_hello,
    encode_hello,
)
from laminar.server.wire import WireLimits, encode_bundle
from laminar.testing.processes import free_port

DEADLINE_S = 10.0
CONFIG = TransportConfig(
    connect_timeout_ms=300,
    backoff_initial_ms=10,
    backoff_max_ms=100,
    keepalive_time_ms=1_000,
    keepalive_timeout_ms=1_000,
)
CLUSTER = "cluster-1"


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def wrapper() -> None:
        async def bounded() -> None:
            async with asyncio.timeout(DEADLINE_S * 3):
                await test()

        asyncio.run(bounded())
        uvloop.run(bounded())  # the loop nodes run on

    return wrapper


def bundle(number: int) -> PeerBundle:
    return PeerBundle(((("events", 0), Heartbeat(1, NodeId("a"), number)),), ())


def number_of(received: PeerBundle) -> int:
    (_, message) = received.heartbeats[0]
    assert isinstance(message, Heartbeat)
    return message.commit_offset


class Node:
    """A transport listening on its own port; records what it receives."""

    def __init__(self, node_id: str, cluster_id: str = CLUSTER, **options: Any) -> None:
        self.received: list[tuple[str, PeerBundle]] = []
        self._waiters: list[tuple[Callable[[], bool], asyncio.Event]] = []
        self.transport = PeerTransport(
            node_id, cluster_id, self._on_bundle, config=options.pop("config", CONFIG), **options
        )
        self.port = 0

    def _on_bundle(self, source: str, received: PeerBundle) -> None:
        self.received.append((source, received))
        for predicate, event in self._waiters:
            if predicate():
                event.set()

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait, with a deadline, until ``predicate`` holds after some delivery."""
        if predicate():
            return
        event = asyncio.Event()
        self._waiters.append((predicate, event))
        try:
            await asyncio.wait_for(event.wait(), DEADLINE_S)
        finally:
            self._waiters.remove((predicate, event))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def numbers(self) -> list[int]:
        return [number_of(received) for _, received in self.received]

    async def start(self) -> None:
        await self.transport.listen(f"127.0.0.1:{self.port}")
        port = self.transport.listening_port
        assert port
        self.port = port

    async def stop(self) -> None:
        await self.transport.stop_listening()

    async def close(self) -> None:
        await self.transport.close()


async def eventually(predicate: Callable[[], bool], what: str) -> None:
    """Poll a condition on state that has no event of its own, with a deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def send_until_received(sender: Node, receiver: Node, number: int) -> None:
    """Resend (as consensus would) until one copy arrives."""

    async def keep_sending() -> None:
        while True:
            sender.transport.send("b", receiver.address, bundle(number))
            await asyncio.sleep(0.01)

    task = asyncio.create_task(keep_sending())
    try:
        await receiver.until(lambda: number in receiver.numbers())
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


# ---------------------------------------------------------------- tests


@run
async def test_bundles_arrive_in_order() -> None:
    a, b = Node("a"), Node("b")
    await b.start()
    try:
        for number in range(300):
            a.transport.send("b", b.address, bundle(number))
        await b.until(lambda: len(b.received) == 300)
        assert b.numbers() == list(range(300))
        assert {source for source, _ in b.received} == {"a"}
        assert b.received[7][1] == bundle(7)
        assert a.transport.counters.sent == 300
        assert a.transport.counters.dropped_full == 0
        assert b.transport.counters.received == 300
        assert a.transport.link_state("b") is LinkState.CONNECTED
    finally:
        await a.close()
        await b.close()


@run
async def test_large_appends_arrive_intact() -> None:
    a, b = Node("a"), Node("b")
    await b.start()
    batches = [bytes([number]) * 100_000 for number in range(20)]
    try:
        for number, batch in enumerate(batches):
            append = AppendRequest(1, NodeId("a"), number, 1, batch, number + 1, 0)
            a.transport.send("b", b.address, PeerBundle((), ((("t", 3), append),)))
        await b.until(lambda: len(b.received) == 20)
        got = [received.messages[0][1] for _, received in b.received]
        assert [message.batches for message in got if isinstance(message, AppendRequest)] == (
            batches
        )
    finally:
        await a.close()
        await b.close()


@run
async def test_restarted_peer_gets_later_bundles() -> None:
    a, b = Node("a"), Node("b")
    await b.start()
    try:
        await send_until_received(a, b, 1)
        await b.stop()
        await eventually(
            lambda: a.transport.link_state("b") is not LinkState.CONNECTED, "stream to end"
        )
        # While b is down, bundles are dropped, or queued while a connects.
        for number in range(100, 110):
            a.transport.send("b", b.address, bundle(number))
        await b.start()  # same port
        await send_until_received(a, b, 2)
        for number in range(3, 50):
            a.transport.send("b", b.address, bundle(number))
        await b.until(lambda: 49 in b.numbers())
        after = [number for number in b.numbers() if 3 <= number < 50]
        assert after == list(range(3, 50))
    finally:
        await a.close()
        await b.close()


@run
async def test_unreachable_peer_drops_and_counts() -> None:
    a = Node("a")
    address = f"127.0.0.1:{free_port()}"
    try:
        a.transport.send("b", address, bundle(0))
        await eventually(lambda: a.transport.link_state("b") is LinkState.BACKOFF, "backoff")
        counters = a.transport.counters
        assert counters.dropped_unreachable >= 1
        assert counters.sent == 0
    finally:
        await a.close()


@run
async def test_address_change_reconnects_to_new_address() -> None:
    a, b = Node("a"), Node("b")
    await b.start()
    try:
        a.transport.send("b", f"127.0.0.1:{free_port()}", bundle(0))
        await eventually(lambda: a.transport.link_state("b") is LinkState.BACKOFF, "backoff")
        a.transport.send("b", b.address, bundle(1))
        await b.until(lambda: 1 in b.numbers())
        assert b.numbers() == [1]
    finally:
        await a.close()
        await b.close()


@run
async def test_full_queue_drops_and_counts() -> None:
    a, b = Node("a", config=TransportConfig(queue_max=8)), Node("b")
    await b.start()
    try:
        # Nothing runs between these sends: the link task has not started yet.
        for number in range(50):
            a.transport.send("b", b.address, bundle(number))
        assert a.transport.counters.dropped_full == 42
        await b.until(lambda: len(b.received) == 8)
        assert b.numbers() == list(range(8))
    finally:
        await a.close()
        await b.close()


@run
async def test_queue_bytes_are_bounded_too() -> None:
    # Frames queue while the link connects up to send_buffer_bytes_max bytes; one
    # frame always fits into an empty queue, however large.
    frame_bytes = 4 + len(encode_bundle(bundle(0)))
    for buffer_bytes, expected in ((5 * frame_bytes, 5), (frame_bytes // 2, 1)):
        a = Node("a", config=TransportConfig(send_buffer_bytes_max=buffer_bytes))
        b = Node("b")
        await b.start()
        try:
            for number in range(50):  # nothing runs between these sends
                a.transport.send("b", b.address, bundle(number))
            assert a.transport.counters.dropped_full == 50 - expected
            await b.until(lambda: len(b.received) == expected)  # noqa: B023 (awaited here)
            assert b.numbers() == list(range(expected))
        finally:
            await a.close()
            await b.close()


@run
async def test_wrong_cluster_is_rejected() -> None:
    a, b = Node("a", cluster_id="other-cluster"), Node("b")
    await b.start()
    try:
        a.transport.send("b", b.address, bundle(0))
        await eventually(lambda: b.transport.counters.rejected_cluster >= 1, "rejection")
        await eventually(lambda: a.transport.link_state("b") is LinkState.BACKOFF, "stream end")
        assert b.received == []
        assert b.transport.counters.received == 0
    finally:
        await a.close()
        await b.close()


async def raw_connection(node: Node) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", node.port)


def framed(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


@run
async def test_wrong_cluster_is_told_why_and_closed() -> None:
    b = Node("b")
    await b.start()
    try:
        reader, writer = await raw_connection(b)
        writer.write(encode_hello("other", "x") + framed(encode_bundle(bundle(0))))
        answer = await asyncio.wait_for(reader.read(), DEADLINE_S)  # until closed
        assert answer[0] == 1
        assert b"cluster id mismatch" in answer
        writer.close()
        assert b.received == []
        assert b.transport.counters.rejected_cluster == 1
    finally:
        await b.close()


@run
async def test_bad_hellos_are_rejected() -> None:
    b = Node("b")
    await b.start()
    try:
        for hello in (
            b"GET / HTTP/1.1\r\n\r\n",
            b"LMNP\x09" + bytes(20),  # version 9 with an empty cluster id
            b"LMNP\x01\x00",  # empty cluster id
            b"LMNP\x01\x03ab\xff\x01x",  # not UTF-8
        ):
            reader, writer = await raw_connection(b)
            writer.write(hello)
            answer = await asyncio.wait_for(reader.read(), DEADLINE_S)
            writer.close()
            assert answer[:1] == b"\x01", hello
        assert b.received == []
        assert b.transport.counters.rejected_malformed == 4
    finally:
        await b.close()


def test_adjacent_protocol_versions_interoperate() -> None:
    assert [compatible_versions(5, peer) for peer in (3, 4, 5, 6, 7)] == [
        False,
        True,
        True,
        True,
        False,
    ]


@run
async def test_a_peer_of_an_adjacent_version_is_accepted_and_one_too_old_refused() -> None:
    refused: list[tuple[str, int]] = []
    b = Node("b", protocol_version=3, on_incompatible=lambda *args: refused.append(args))
    await b.start()
    # A real link from a node one version older: its bundles arrive.
    a = Node("a", protocol_version=2)
    try:
        a.transport.send("b", b.address, bundle(7))
        await b.until(lambda: b.numbers() == [7])
        # One two versions older is refused, told why, and its frames never arrive.
        reader, writer = await raw_connection(b)
        writer.write(encode_hello(CLUSTER, "old", 1) + framed(encode_bundle(bundle(8))))
        answer = await asyncio.wait_for(reader.read(), DEADLINE_S)
        writer.close()
        assert answer[:1] == b"\x01"
        assert b"protocol version 1 is too old for this node's 3" in answer
        assert b.numbers() == [7]
        assert b.transport.counters.rejected_version == 1
        assert refused == [("old", 1)]
    finally:
        await a.close()
        await b.close()


def test_hello_round_trip() -> None:
    hello = encode_hello("c1", "node-a")
    assert decode_hello(hello + b"rest") == ("c1", "node-a", PROTOCOL_VERSION, len(hello))
    for cut in range(len(hello)):
        assert decode_hello(hello[:cut]) is None


@run
async def test_malformed_frames_do_not_kill_the_connection() -> None:
    b = Node("b")
    await b.start()
    try:
        reader, writer = await raw_connection(b)
        good = encode_bundle(bundle(1))
        writer.write(encode_hello(CLUSTER, "x"))
        for data in (b"garbage", good[:-1], b"\x00", good, encode_bundle(bundle(2))):
            writer.write(framed(data))
        await b.until(lambda: len(b.received) == 2)
        assert b.numbers() == [1, 2]
        assert b.transport.counters.rejected_malformed == 3
        assert b.transport.counters.received == 2
        # A frame length beyond the limit cannot be skipped: the connection closes.
        writer.write((2**32 - 1).to_bytes(4, "big"))
        assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
        writer.close()
        assert b.transport.counters.rejected_malformed == 4
    finally:
        await b.close()


@run
async def test_frames_split_across_reads_are_reassembled() -> None:
    b = Node("b")
    await b.start()
    try:
        _, writer = await raw_connection(b)
        stream = encode_hello(CLUSTER, "x") + b"".join(
            framed(encode_bundle(bundle(number))) for number in range(20)
        )
        for index in range(0, len(stream), 7):
            writer.write(stream[index : index + 7])
            await writer.drain()
        await b.until(lambda: len(b.received) == 20)
        assert b.numbers() == list(range(20))
        writer.close()
    finally:
        await b.close()


@run
async def test_failing_handler_does_not_kill_the_stream() -> None:
    calls: list[PeerBundle] = []
    done = asyncio.Event()

    def on_bundle(source: str, received: PeerBundle) -> None:
        calls.append(received)
        if len(calls) == 3:
            done.set()
        raise RuntimeError("handler bug")

    a, b = Node("a"), Node("b")
    b.transport = PeerTransport("b", CLUSTER, on_bundle, config=CONFIG)
    await b.start()
    try:
        for number in range(3):
            a.transport.send("b", b.address, bundle(number))
        await asyncio.wait_for(done.wait(), DEADLINE_S)
        assert [number_of(received) for received in calls] == [0, 1, 2]
        assert b.transport.counters.handler_errors == 3
    finally:
        await a.close()
        await b.close()


@run
async def test_on_delivered_follows_each_read_of_frames() -> None:
    # The receiver acts once per read on all the bundles it carried (the node runs
    # one flush round for them), and a failing on_delivered is counted, not fatal.
    events: list[object] = []
    done = asyncio.Event()

    def on_bundle(source: str, received: PeerBundle) -> None:
        events.append(number_of(received))

    def on_delivered() -> None:
        events.append("delivered")
        if len([e for e in events if e != "delivered"]) == 10:
            done.set()
        raise RuntimeError("handler bug")

    b = Node("b")
    b.transport = PeerTransport("b", CLUSTER, on_bundle, on_delivered=on_delivered, config=CONFIG)
    await b.start()
    try:
        _, writer = await raw_connection(b)
        writer.write(encode_hello(CLUSTER, "x"))
        writer.write(b"".join(framed(encode_bundle(bundle(n))) for n in range(5)))
        await writer.drain()
        writer.write(b"".join(framed(encode_bundle(bundle(n))) for n in range(5, 10)))
        await writer.drain()
        await asyncio.wait_for(done.wait(), DEADLINE_S)
        numbers = [e for e in events if e != "delivered"]
        assert numbers == list(range(10))
        assert events[0] != "delivered" and events[-1] == "delivered"
        assert all(  # never twice in a row: only after a read that delivered something
            not (x == y == "delivered") for x, y in itertools.pairwise(events)
        )
        assert b.transport.counters.handler_errors == events.count("delivered")
        writer.close()
    finally:
        await b.close()


@run
async def test_oversized_bundles_are_split_or_dropped() -> None:
    limits = WireLimits(bundle_bytes_max=10_000, batch_bytes_max=10_000)
    config = TransportConfig(limits=limits)
    a, b = Node("a", config=config), Node("b", config=config)
    await b.start()
    try:
        appends = tuple(
            (("t", number), AppendRequest(1, NodeId("a"), 0, -1, b"x" * 4000, 1, 0))
            for number in range(5)
        )
        beats = bundle(7).heartbeats
        a.transport.send("b", b.address, PeerBundle(beats, appends))
        big = AppendRequest(1, NodeId("a"), 0, -1, b"x" * 20_000, 1, 0)
        a.transport.send("b", b.address, PeerBundle((), ((("t", 9), big),)))
        assert a.transport.counters.dropped_oversized == 1
        await b.until(lambda: sum(len(received) for _, received in b.received) == 6)
        items = [item for _, received in b.received for item in received.items()]
        assert items == PeerBundle(beats, appends).items()
        assert len(b.received) > 1
    finally:
        await a.close()
        await b.close()


@run
async def test_forget_and_close_leave_no_tasks() -> None:
    a, b = Node("a"), Node("b")
    await b.start()
    try:
        await send_until_received(a, b, 1)
        a.transport.send("c", f"127.0.0.1:{free_port()}", bundle(0))
        a.transport.forget("b")
        assert a.transport.link_state("b") is None
        a.transport.send("b", b.address, bundle(5))
        await b.until(lambda: 5 in b.numbers())
    finally:
        await a.close()
        await b.close()
    assert a.transport.link_state("b") is None
    a.transport.send("b", b.address, bundle(6))  # after close: dropped, no new task
    # The transport's own tasks are gone.
    current = asyncio.current_task()
    pending = [
        task
        for task in asyncio.all_tasks()
        if task is not current and task.get_name().startswith("laminar-peer-link")
    ]
    assert pending == []


def test_config_is_checked() -> None:
    from laminar.errors import ConfigError

    for bad in (
        {"queue_max": 0},
        {"send_buffer_bytes_max": 0},
        {"inbound_connections_max": 0},
        {"connect_timeout_ms": 0},
        {"backoff_initial_ms": 0},
        {"backoff_initial_ms": 10, "backoff_max_ms": 5},
        {"keepalive_time_ms": 0},
        {"keepalive_timeout_ms": 999},
        {"close_timeout_ms": -1},
    ):
        with pytest.raises(ConfigError):
            TransportConfig(**bad)
    assert TransportConfig.local().backoff_max_ms < TransportConfig().backoff_max_ms


@run
async def test_a_peer_that_does_not_read_fills_the_buffer_then_drops() -> None:
    # A peer that accepts but never reads: the socket buffers fill, then our own
    # buffer up to send_buffer_bytes_max, then frames are dropped and counted.
    class Stalled(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.ReadTransport)
            transport.pause_reading()

    server = await asyncio.get_running_loop().create_server(Stalled, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = TransportConfig(send_buffer_bytes_max=4 * 1024 * 1024)
    a = Node("a", config=config)
    big = PeerBundle(
        (), ((("t", 0), AppendRequest(1, NodeId("a"), 0, -1, b"x" * 1_000_000, 1, 0)),)
    )
    try:
        a.transport.send("b", f"127.0.0.1:{port}", big)
        await eventually(lambda: a.transport.link_state("b") is LinkState.CONNECTED, "connect")
        for _ in range(200):  # 200 MB: more than any socket buffer
            a.transport.send("b", f"127.0.0.1:{port}", big)
            await asyncio.sleep(0)
        counters = a.transport.counters
        assert counters.dropped_full > 0
        assert counters.sent + counters.dropped_full == 201
    finally:
        await a.close()
        server.close()


@run
async def test_connections_beyond_the_limit_are_refused() -> None:
    b = Node("b", config=TransportConfig(inbound_connections_max=1))
    await b.start()
    try:
        _, first = await raw_connection(b)
        first.write(encode_hello(CLUSTER, "x") + framed(encode_bundle(bundle(1))))
        await b.until(lambda: b.numbers() == [1])
        reader, second = await raw_connection(b)
        assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""  # closed at once
        second.close()
        assert b.transport.counters.refused_connections == 1
        first.close()
    finally:
        await b.close()


@run
async def test_outgoing_connections_leave_from_the_local_host() -> None:
    # Loopback holds all of 127/8 on Linux: the receiver tells nodes apart by the
    # source address only if each node binds its connections to its own address.
    sources: dict[str, str] = {}  # node id in the hello: the connection's source host

    class Peer(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.host: str = transport.get_extra_info("peername")[0]
            self.received = b""

        def data_received(self, data: bytes) -> None:
            self.received += data
            hello = decode_hello(self.received)
            if hello is not None:
                sources[hello[1]] = self.host

    server = await asyncio.get_running_loop().create_server(Peer, "127.0.0.3", 0)
    address = f"127.0.0.3:{server.sockets[0].getsockname()[1]}"
    a = Node("a", local_host="127.0.0.2")
    c = Node("c", local_host="0.0.0.0")  # a wildcard names no address: binds nothing
    try:
        a.transport.send("b", address, bundle(0))
        c.transport.send("b", address, bundle(0))
        await eventually(lambda: len(sources) == 2, "both hellos")
        assert sources == {"a": "127.0.0.2", "c": "127.0.0.1"}
    finally:
        await a.close()
        await c.close()
        server.close()

"""The asyncio shell around :class:`MembershipCore`: UDP gossip, TCP push-pull.

The shell makes no protocol decision. It feeds datagrams and stream messages to
the core with the loop's monotonic clock, carries out the core's :class:`Output`
(send datagrams, open a TCP connection per push-pull message, deliver events), and
arms one timer for the core's next deadline.

Stream framing: one message per connection, a 4-byte big-endian length then the
frame; a length above ``stream_bytes_max`` closes the connection. A push-pull
reply travels on a new connection to the requester's gossip address, like the
request did.

Addresses: the node listens on ``bind_address`` (default: its gossip address)
and gossips ``local.gossip_address``, the address others should use (they differ
behind NAT, in a container, or when listening on a wildcard). Everything leaves
from the host of the listen address, so that peers and firewalls can tell nodes
apart (on one machine every node would otherwise appear as ``127.0.0.1``).
Datagrams are sent from the UDP socket bound to it; outgoing TCP connections are
bound to its host (port 0). A wildcard host (``0.0.0.0``, ``::``) names no single
address: then the system picks the source.

Encryption: with a :class:`~laminar.membership.crypto.Keyring`, every frame the
core emits is sealed on its way out (datagram or stream message) and every frame
received is opened before the core sees it (:mod:`laminar.membership.crypto`; the
shell passes the wall clock the replay rule needs). The core builds frames
``SEAL_OVERHEAD_BYTES`` below the MTU, so a sealed datagram still fits. Change keys
or switches at run time with :meth:`MembershipNode.set_keyring`.

Host names (a member's or seed's gossip address may be one) are resolved when
used, off the event loop: each TCP connection resolves afresh, and a datagram
destination is resolved again :data:`~laminar.address.RESOLVE_TTL_S` after the last
time, so a member that came back under the same name with a new address is found.

Use from other asyncio code (the full node embeds it)::

    node = MembershipNode(lan(), LocalMember(...), key, seeds=[...], on_event=cb)
    await node.start()
    ...  node.view(), node.update_local(weight=2.0), async for event in node.events()
    await node.stop()          # graceful leave first, then close sockets
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import cast

from laminar.address import RESOLVE_TTL_S, Address, parse_address
from laminar.errors import ConfigError
from laminar.logfields import fields
from laminar.membership.config import MembershipConfig
from laminar.membership.core import LocalMember, MembershipCore, Output
from laminar.membership.crypto import SEAL_OVERHEAD_BYTES, Keyring, OpenDrop
from laminar.membership.keyring import KeyringState
from laminar.membership.member import EventKind, Member, MemberEvent, Metadata

_LOG = logging.getLogger(__name__)
_LENGTH_BYTES = 4
_ADDRESS_CACHE_MAX = 4096
_SocketAddress = tuple[str, int] | tuple[str, int, int, int]


class _DatagramEndpoint(asyncio.DatagramProtocol):
    def __init__(self, node: MembershipNode) -> None:
        self._node = node

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        self._node._on_datagram(data)

    def error_received(self, exc: Exception) -> None:
        # ICMP "port unreachable" from a dead peer and the like: expected, counted.
        self._node.shell_counters["udp_errors"] = self._node.shell_counters.get("udp_errors", 0) + 1


class MembershipNode:
    """A membership-only node on real sockets (one UDP endpoint + one TCP server)."""

    def __init__(
        self,
        config: MembershipConfig,
        local: LocalMember,
        cluster_key: bytes,
        *,
        bind_address: str | None = None,
        seeds: Sequence[str] = (),
        incarnation: int = 0,
        rng: random.Random | None = None,
        on_event: Callable[[MemberEvent], None] | None = None,
        event_queue_max: int = 10_000,
        stream_timeout_s: float = 5.0,
        streams_in_flight_max: int = 64,
        keyring: Keyring | None = None,
        wall_clock_ms: Callable[[], int] | None = None,
    ) -> None:
        parse_address(local.gossip_address, what="gossip address", port_zero=True)
        self._bind = parse_address(
            bind_address or local.gossip_address, what="gossip listen address", port_zero=True
        )
        for seed in seeds:
            parse_address(seed, what="seed")
        self._config = config
        self._local = local
        self._cluster_key = cluster_key
        self._seeds = tuple(seeds)
        self._incarnation = incarnation
        self._rng = rng or random.Random()
        self._on_event = on_event
        self._events: asyncio.Queue[MemberEvent] = asyncio.Queue(maxsize=event_queue_max)
        self._stream_timeout_s = stream_timeout_s
        self._streams_in_flight_max = streams_in_flight_max
        self._keyring = keyring
        self._wall_clock_ms = wall_clock_ms or _wall_clock_ms
        self._core: MembershipCore | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._server: asyncio.Server | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline_ms: int | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._addresses: dict[str, Address] = {}
        self._resolved: dict[str, tuple[_SocketAddress, float]] = {}
        self._resolving: dict[str, asyncio.Future[_SocketAddress | None]] = {}
        self._family = socket.AF_INET
        self._source_address: tuple[str, int] | None = None
        self._leave_done = asyncio.Event()
        self._stopped = False
        self.shell_counters: dict[str, int] = {}

    # --------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind UDP and TCP on the listen address and start joining the seeds.

        Port 0 picks a free UDP port and binds TCP to the same number (and an
        advertised port 0 becomes that number)."""
        loop = asyncio.get_running_loop()
        host = self._bind.host
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _DatagramEndpoint(self), local_addr=(host, self._bind.port)
        )
        self._transport = transport
        sock = transport.get_extra_info("socket")
        self._family = sock.family if sock is not None else socket.AF_INET
        port = transport.get_extra_info("sockname")[1]
        try:
            self._server = await asyncio.start_server(self._on_connection, host, port)
        except OSError:
            transport.close()
            raise
        advertised = parse_address(self._local.gossip_address, port_zero=True)
        if advertised.port == 0:
            advertised = Address(advertised.host, port)
        local = replace(self._local, gossip_address=str(advertised))
        self._source_address = None if self._bind.is_wildcard else (host, 0)
        self._local = local
        self._core = MembershipCore(
            self._config,
            local,
            self._cluster_key,
            self._rng,
            self._now_ms(),
            seeds=self._seeds,
            incarnation=self._incarnation,
            frame_bytes_reserved=SEAL_OVERHEAD_BYTES if self._keyring is not None else 0,
        )
        _LOG.info(
            "membership started node=%s address=%s",
            local.node_id,
            local.gossip_address,
            extra=fields(node_id=local.node_id),
        )
        self._apply(self._core.tick(self._now_ms()))

    async def leave(self) -> None:
        """Gossip that this node leaves; return once the cluster was told (or after
        ``leave_propagate_ms``). The node keeps answering until :meth:`stop`."""
        core = self._require_core()
        self._apply(core.leave(self._now_ms()))
        if core.is_leave_complete():
            return
        timeout_s = self._config.leave_propagate_ms / 1000
        try:
            await asyncio.wait_for(self._leave_done.wait(), timeout_s)
        except TimeoutError:
            _LOG.info(
                "leave not confirmed in time node=%s",
                self._local.node_id,
                extra=fields(node_id=self._local.node_id),
            )

    async def stop(self, *, leave: bool = True) -> None:
        """Leave gracefully (unless ``leave=False``), then close everything."""
        if self._stopped:
            return
        if leave and self._core is not None:
            await self.leave()
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        if self._transport is not None:
            self._transport.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        _LOG.info(
            "membership stopped node=%s",
            self._local.node_id,
            extra=fields(node_id=self._local.node_id),
        )

    # ----------------------------------------------------------------- queries

    @property
    def local(self) -> LocalMember:
        """This node's attributes, its advertised gossip address among them (an
        advertised port 0 becomes the bound port once started)."""
        return self._local

    @property
    def core(self) -> MembershipCore:
        return self._require_core()

    def view(self) -> tuple[Member, ...]:
        return self._require_core().view()

    def counters(self) -> dict[str, int]:
        keyring = {} if self._keyring is None else self._keyring.counters()
        return {**self._require_core().counters(), **keyring, **self.shell_counters}

    def set_keyring(self, state: KeyringState) -> None:
        """Use changed gossip keys or verify switches from the next frame on (only
        on a node started with a keyring, possibly an empty one)."""
        if self._keyring is None:
            raise RuntimeError("membership node started without a keyring")
        self._keyring.set_state(state)

    async def events(self) -> AsyncIterator[MemberEvent]:
        """Membership events as they happen (one consumer; bounded buffer)."""
        while True:
            yield await self._events.get()

    def update_local(
        self,
        *,
        weight: float | None = None,
        zone: str | None = None,
        metadata: Metadata | None = None,
        grpc_address: str | None = None,
    ) -> None:
        """Change this node's weight, zone, metadata or gRPC address (gossiped)."""
        core = self._require_core()
        self._apply(
            core.update_local(
                self._now_ms(),
                weight=weight,
                zone=zone,
                metadata=metadata,
                grpc_address=grpc_address,
            )
        )

    # --------------------------------------------------------------- internals

    def _require_core(self) -> MembershipCore:
        if self._core is None:
            raise RuntimeError("membership node not started")
        return self._core

    def _now_ms(self) -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    def _on_datagram(self, data: bytes) -> None:
        if self._core is None or self._stopped:
            return
        frame = self._open(data)
        if frame is not None:
            self._apply(self._core.receive_packet(frame, self._now_ms()))

    def _open(self, data: bytes) -> bytes | None:
        """The frame in a received datagram or stream message; None: dropped (the
        keyring counted why)."""
        if self._keyring is None:
            return data
        opened = self._keyring.open(data, self._wall_clock_ms())
        return None if isinstance(opened, OpenDrop) else opened

    def _seal(self, frame: bytes) -> bytes:
        if self._keyring is None:
            return frame
        return self._keyring.seal(frame, self._wall_clock_ms())

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_deadline_ms = None
        if self._core is None or self._stopped:
            return
        self._apply(self._core.tick(self._now_ms()))

    def _apply(self, output: Output) -> None:
        if self._stopped:
            return
        transport = self._transport
        if transport is not None:
            for packet in output.packets:
                self._send_packet(transport, packet.address, self._seal(packet.data))
        for stream in output.streams:
            self._send_stream(stream.address, self._seal(stream.data))
        for event in output.events:
            self._deliver_event(event)
        self._arm_timer(output.next_deadline_ms)
        core = self._core
        if core is not None and core.is_leave_complete():
            self._leave_done.set()

    def _arm_timer(self, deadline_ms: int) -> None:
        if self._timer is not None:
            if self._timer_deadline_ms is not None and self._timer_deadline_ms <= deadline_ms:
                return  # an earlier tick is already armed; it will re-arm
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_deadline_ms = deadline_ms
        self._timer = loop.call_at(deadline_ms / 1000, self._on_timer)

    def _deliver_event(self, event: MemberEvent) -> None:
        member = event.member
        level = logging.WARNING if event.kind is EventKind.DEAD else logging.INFO
        _LOG.log(
            level,
            "member %s node=%s member=%s incarnation=%d",
            event.kind.value,
            self._local.node_id,
            member.node_id,
            member.incarnation,
            extra=fields(node_id=self._local.node_id, peer=member.node_id),
        )
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception:
                _LOG.exception("membership event callback failed")
        try:
            self._events.put_nowait(event)
        except asyncio.QueueFull:
            self._count("events_dropped")

    def _parse(self, address: str) -> Address | None:
        parsed = self._addresses.get(address)
        if parsed is None:
            try:
                parsed = parse_address(address, port_zero=True)
            except ConfigError:
                self._count("bad_addresses")
                return None
            if len(self._addresses) >= _ADDRESS_CACHE_MAX:
                self._addresses.clear()
            self._addresses[address] = parsed
        return parsed

    def _send_packet(self, transport: asyncio.DatagramTransport, address: str, data: bytes) -> None:
        """Send a datagram; a host name is resolved first (off the loop, cached
        for ``RESOLVE_TTL_S``), an IPv4 literal mapped when the socket is IPv6."""
        destination = self._parse(address)
        if destination is None:
            return
        if not destination.is_name:
            host = destination.host
            if self._family == socket.AF_INET6 and not destination.is_ipv6:
                host = "::ffff:" + host
            elif self._family == socket.AF_INET and destination.is_ipv6:
                self._count("bad_addresses")  # an IPv4 socket cannot reach it
                return
            transport.sendto(data, (host, destination.port))
            return
        cached = self._resolved.get(address)
        if cached is not None and asyncio.get_running_loop().time() < cached[1]:
            transport.sendto(data, cached[0])
            return
        if len(self._tasks) >= self._streams_in_flight_max:
            self._count("packets_dropped")
            return
        task = asyncio.get_running_loop().create_task(
            self._resolve_and_send(transport, address, destination, data)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resolve_and_send(
        self, transport: asyncio.DatagramTransport, address: str, name: Address, data: bytes
    ) -> None:
        pending = self._resolving.get(address)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._resolving[address] = pending
            try:
                pending.set_result(await self._lookup(address, name))
            finally:
                del self._resolving[address]
                if not pending.done():  # cancelled: the packets waiting on it are dropped
                    pending.set_result(None)
        destination = await asyncio.shield(pending)
        if destination is not None and not self._stopped:
            transport.sendto(data, destination)

    async def _lookup(self, address: str, name: Address) -> _SocketAddress | None:
        loop = asyncio.get_running_loop()
        flags = socket.AI_V4MAPPED if self._family == socket.AF_INET6 else 0
        try:
            async with asyncio.timeout(self._stream_timeout_s):
                infos = await loop.getaddrinfo(
                    name.host, name.port, family=self._family, type=socket.SOCK_DGRAM, flags=flags
                )
        except (OSError, TimeoutError):
            self._count("resolve_failures")
            return None
        if not infos:
            self._count("resolve_failures")
            return None
        destination = cast(_SocketAddress, infos[0][4])  # AF_INET or AF_INET6 only
        if len(self._resolved) >= _ADDRESS_CACHE_MAX:
            self._resolved.clear()
        self._resolved[address] = (destination, loop.time() + RESOLVE_TTL_S)
        return destination

    def _count(self, name: str) -> None:
        self.shell_counters[name] = self.shell_counters.get(name, 0) + 1

    def _send_stream(self, address: str, data: bytes) -> None:
        destination = self._parse(address)
        if destination is None:
            return
        if len(self._tasks) >= self._streams_in_flight_max:
            self._count("streams_dropped")
            return
        task = asyncio.get_running_loop().create_task(self._write_stream(destination, data))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write_stream(self, destination: Address, data: bytes) -> None:
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(self._stream_timeout_s):
                # A host name is resolved by each connection, so a moved member is found.
                _, writer = await asyncio.open_connection(
                    destination.host, destination.port, local_addr=self._source_address
                )
                writer.write(len(data).to_bytes(_LENGTH_BYTES, "big") + data)
                await writer.drain()
        except (OSError, TimeoutError):
            self._count("stream_send_failures")
        finally:
            if writer is not None:
                writer.close()

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            async with asyncio.timeout(self._stream_timeout_s):
                header = await reader.readexactly(_LENGTH_BYTES)
                length = int.from_bytes(header, "big")
                if length > self._config.stream_bytes_max:
                    self._count("stream_oversized")
                    return
                data = await reader.readexactly(length)
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            self._count("stream_receive_failures")
            return
        finally:
            writer.close()
        if self._core is not None and not self._stopped:
            frame = self._open(data)
            if frame is not None:
                self._apply(self._core.receive_stream(frame, self._now_ms()))


def _wall_clock_ms() -> int:
    """The wall clock (ms since the epoch) that stamps sealed frames: the replay
    rule compares the clocks of sender and receiver, so it must be the real time."""
    return time.time_ns() // 1_000_000

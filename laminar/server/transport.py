"""Peer transport: replication bundles between nodes over framed TCP streams.

Why not gRPC. Replication is the broker's hottest path: every acknowledged write
costs one round trip leader → follower → leader. A gRPC streaming message through
``grpc.aio`` costs a few hundred microseconds of Python and C-core work at each end
(measured on the project's 2-core machine: ping-pong round trip 340–430 µs over two
client streams, 50 µs over plain asyncio TCP with uvloop), and that CPU is shared
with everything else a node does. The public API stays gRPC; the peer protocol is
this small framed stream (``docs/design.md``, "Peer transport").

Wire protocol
-------------

The sender of a link opens one TCP connection to the peer's *peer address* and
writes a hello, then frames, and never reads anything but a rejection:

- hello: ``b"LMNP"``, protocol version (u8, :data:`PROTOCOL_VERSION`), cluster id
  length (u8) and UTF-8 bytes, source node id length (u8) and UTF-8 bytes;
- frame: length (u32, big endian, 1 ..= ``WireLimits.bundle_bytes_max``) and one
  encoded bundle (:mod:`laminar.server.wire`).

The receiver checks the hello: another cluster's id (``rejected_cluster``), an
incompatible protocol version (``rejected_version``: see below) or a malformed
hello (``rejected_malformed``) gets a rejection (``0x01``, reason length
u8, UTF-8 reason) and the connection is closed. A frame length out of range closes
the connection (the stream cannot be resynchronised); a frame whose bundle does not
decode is counted and skipped, the stream lives on.

TLS. With ``tls`` (the node's ``[tls]`` files, :class:`~laminar.security.tls.TlsReloader`)
the same framing runs inside mutual TLS: the listener requires a client certificate
and both ends verify the other's against the CA bundle (no host name check). The
identity is the node id in the certificate's URI SAN (``laminar:node/<id>``): the
sender checks that the listener's certificate names the peer it meant to reach,
and the receiver that the client certificate names the node the hello announces;
either mismatch closes the connection, is counted (``rejected_identity``) and
logged (one WARNING line naming the address and both ids, at most every
:data:`IDENTITY_WARNING_INTERVAL_S` per peer). A handshake that fails on connect (an
unknown CA, an expired certificate) is counted as ``tls_failures`` and logged at
the same rate by the sender (the listener's asyncio drops its failed handshakes
silently). Each new connection uses the files' current version: the sender takes the
reloader's client context, and the listener swaps in the current server context
during the handshake (its ``sni_callback``), so rotated certificates and CA
bundles apply to new connections without a restart; open connections keep theirs.

Protocol versions. Every node speaks one protocol version (the hello's, also
gossiped in its member metadata), and **adjacent versions interoperate**: a node of
version ``v`` accepts peers of ``v - 1``, ``v`` and ``v + 1``
(:func:`compatible_versions`), so a rolling upgrade moves a cluster one version at
a time, with both versions running side by side. A change to the peer or gossip
wire format that a node of the previous version cannot read must come with a new
version whose nodes still read and write the previous one; a version that stops
doing so is two steps newer, and its nodes refuse the old ones (one WARNING line
naming the peer and both versions, and an entry in ``laminar cluster status``).
Nodes from before this rule (issue 30) accept version 1 only, so the first bump to
2 needs every node on a release with this rule first.

Versions: 1, the first; 2 (issue 34), appends may carry *gaps* between batches (a
log that keyed compaction trimmed; the bytes are unchanged, but a node of version 1
refuses a batch that does not start at its log end, and its replica is fenced).
So keyed compaction must not run while a node of version 1 may hold a replica of
the topic: a cluster upgraded to 2 everywhere before any topic's
``cleanup_policy`` includes ``compact`` (see ``docs/operations.md``).

Sending. For every destination peer the transport keeps one *link*. A link is in
one of three states:

- ``connecting``: a task connects (up to ``connect_timeout_ms``); frames queue (up
  to ``queue_max`` frames and ``send_buffer_bytes_max`` bytes; more are dropped as
  ``dropped_full``) and are written once the connection is open;
- ``connected``: :meth:`PeerTransport.send` writes frames straight to the socket
  (no task hop); if more than ``send_buffer_bytes_max`` is already waiting in the
  socket's buffer (the peer or the network is slower than we produce), new frames
  are dropped (``dropped_full``);
- ``backoff``: the peer is unreachable or the connection ended; everything sent
  until the next attempt is dropped (``dropped_unreachable``), then the link
  reconnects after a capped exponential backoff with jitter.

Outgoing connections leave from ``local_host`` when it is given (the host of the
node's own peer listen address), so that peers and firewalls see the node's address
rather than whatever source the routing table picks (``127.0.0.1`` on loopback); a
wildcard listen host leaves the choice to the system. A peer address may be a host
name: each connection attempt resolves it again, so a peer that came back under
the same name with a new IP address is reached after the next reconnect.

:meth:`PeerTransport.send` never blocks and never fails for network reasons.
Consensus tolerates loss (a lost append is retried, a lost heartbeat is superseded
by the next), so dropping is always preferable to buffering without bound or
stalling the event loop. A bundle whose encoding exceeds ``bundle_bytes_max`` is
split into several frames (messages before heartbeats, order kept); a single
message that is still too large is dropped (``dropped_oversized``). When a peer's
address changes, the old link is closed and a new one opens to the new address.
TCP keepalive and ``TCP_USER_TIMEOUT`` notice a dead peer within about
``keepalive_time_ms + keepalive_timeout_ms`` even when nothing is written.

Stopping. :meth:`PeerTransport.forget` (a member left or was reaped) and
:meth:`PeerTransport.close` mark a link closed and cancel its task; the task
checks the mark after every connection attempt and ends when it is set. A cancel
alone is not enough: on Python 3.11 ``asyncio.wait_for`` hands back the connect's
outcome (a connection, or a refused connection's error) instead of
``CancelledError`` when the cancel lands as the connect completes. (The link
connects under ``asyncio.timeout``, which does not do that, but relies on the
mark.) :meth:`PeerTransport.close` waits at most ``close_timeout_ms`` for the
link tasks and the listener, then logs what is left and returns, so that a node
always finishes shutting down whatever its peers do.

Receiving. :meth:`PeerTransport.listen` accepts connections (at most
``inbound_connections_max`` at once); every valid bundle is handed to
``on_bundle(source, bundle)``, synchronously, on the event loop; after the bundles
of one read from a connection, ``on_delivered()`` is called, so that the receiver
can act on them together at once (the node runs their flush round then).

All methods must be called from the event loop's thread; the transport makes no
protocol decision and keeps no state but links, connections and counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import socket
import ssl
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final, cast

from laminar.address import WILDCARD_HOSTS, parse_address
from laminar.errors import ConfigError, InvalidInputError
from laminar.logfields import fields
from laminar.replica.coalesce import PeerBundle
from laminar.security.tls import TlsReloader, node_ids_of_peercert
from laminar.server.wire import NODE_ID_BYTES_MAX, WireLimits, decode_bundle, encode_bundle

_LOG = logging.getLogger(__name__)

MAGIC: Final = b"LMNP"
PROTOCOL_VERSION: Final = 2
"""The peer protocol version this code speaks (see "Protocol versions" above)."""
GAPPED_LOGS_PROTOCOL: Final = 2
"""The first version whose nodes take appends with gaps (keyed compaction): the
metadata leader refuses a compacted topic while a member speaks an older one."""
_LENGTH: Final = struct.Struct(">I")
_REJECT: Final = 0x01
_REJECT_BYTES_MAX: Final = 1 + 1 + 255  # code, reason length, reason
HELLO_BYTES_MAX: Final = len(MAGIC) + 1 + 2 * (1 + 255)
"""The longest hello; more bytes without a complete hello is a malformed hello."""
IDENTITY_WARNING_INTERVAL_S: Final = 10.0
"""At most one WARNING line per peer (claimed id) and reason in this long."""
_WARNED_MAX: Final = 1024

OnBundle = Callable[[str, PeerBundle], None]


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """Tunables of the peer transport.

    ``queue_max``: frames waiting per destination while its link connects; beyond
    it new frames are dropped.
    ``send_buffer_bytes_max``: bytes a connected link may hold unsent in its
    socket buffer, and bytes its queue may hold while it connects, before new
    frames are dropped (one frame is always accepted into an empty buffer or queue,
    so a bundle up to ``bundle_bytes_max`` always fits).
    ``connect_timeout_ms``: how long a connection attempt may take before the peer
    counts as unreachable and the link backs off.
    ``backoff_initial_ms`` / ``backoff_max_ms``: reconnect delay after the n-th
    consecutive failure is ``min(max, initial * 2**n)``, scaled by a random factor
    in [0.5, 1) so that peers do not reconnect in lockstep. A connection that lived
    at least ``backoff_max_ms`` resets the count.
    ``keepalive_time_ms`` / ``keepalive_timeout_ms``: TCP keepalive probes start
    after ``keepalive_time_ms`` of silence, and a connection whose probes or data
    go unanswered for ``keepalive_timeout_ms`` is closed.
    ``inbound_connections_max``: accepted connections open at once; more are
    refused (closed at once).
    ``close_timeout_ms``: how long :meth:`PeerTransport.close` waits for link
    tasks and the listener to end before it logs and returns anyway (shutdown
    must finish whatever the peers do).
    ``limits``: wire limits (the largest frame is ``limits.bundle_bytes_max``).
    """

    queue_max: int = 1024
    send_buffer_bytes_max: int = 64 * 1024 * 1024
    connect_timeout_ms: int = 2000
    backoff_initial_ms: int = 50
    backoff_max_ms: int = 2000
    keepalive_time_ms: int = 10_000
    keepalive_timeout_ms: int = 5_000
    inbound_connections_max: int = 1024
    close_timeout_ms: int = 2000
    limits: WireLimits = field(default_factory=WireLimits)

    def __post_init__(self) -> None:
        if self.queue_max < 1 or self.send_buffer_bytes_max < 1:
            raise ConfigError("queue_max and send_buffer_bytes_max must be positive")
        if self.connect_timeout_ms <= 0:
            raise ConfigError("connect_timeout_ms must be positive")
        if not 0 < self.backoff_initial_ms <= self.backoff_max_ms:
            raise ConfigError("need 0 < backoff_initial_ms <= backoff_max_ms")
        if self.keepalive_time_ms < 1000 or self.keepalive_timeout_ms < 1000:
            raise ConfigError("keepalive_time_ms and keepalive_timeout_ms must be >= 1000")
        if self.inbound_connections_max < 1:
            raise ConfigError("inbound_connections_max must be positive")
        if self.close_timeout_ms < 0:
            raise ConfigError("close_timeout_ms must not be negative")

    @classmethod
    def local(cls) -> TransportConfig:
        """Nodes on one machine: fail and reconnect fast."""
        return cls(
            connect_timeout_ms=500,
            backoff_initial_ms=20,
            backoff_max_ms=500,
            keepalive_time_ms=2_000,
            keepalive_timeout_ms=1_000,
        )


@dataclass(slots=True)
class TransportCounters:
    """Frames (encoded bundles) by fate, since the transport started; for metrics.

    Sending: ``sent`` (written to a connection; delivery is not acknowledged),
    ``dropped_full``, ``dropped_unreachable``, ``dropped_oversized``. Receiving:
    ``received`` (handed to ``on_bundle``), ``rejected_malformed`` (a bundle that
    does not decode, a bad hello or frame length), ``rejected_cluster`` (a hello
    from another cluster), ``rejected_version`` (a hello of an incompatible
    protocol version), ``handler_errors`` (``on_bundle`` raised),
    ``refused_connections`` (over ``inbound_connections_max``). With TLS:
    ``rejected_identity`` (a certificate not naming the node the connection is
    for, either direction), ``tls_failures`` (handshakes that failed on connect).
    """

    sent: int = 0
    dropped_full: int = 0
    dropped_unreachable: int = 0
    dropped_oversized: int = 0
    received: int = 0
    rejected_malformed: int = 0
    rejected_cluster: int = 0
    rejected_version: int = 0
    handler_errors: int = 0
    refused_connections: int = 0
    rejected_identity: int = 0
    tls_failures: int = 0


class FrameOutcome(enum.Enum):
    ACCEPTED = "accepted"
    MALFORMED = "malformed"
    WRONG_CLUSTER = "wrong_cluster"
    INCOMPATIBLE_VERSION = "incompatible_version"


class LinkState(enum.Enum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKOFF = "backoff"


def compatible_versions(own: int, peer: int) -> bool:
    """Whether nodes of protocol versions ``own`` and ``peer`` interoperate: adjacent
    versions do (module docstring, "Protocol versions")."""
    return abs(own - peer) <= 1


def incompatibility(own: int, peer: int) -> str:
    """The reason a peer of version ``peer`` is refused, for logs and status."""
    age = "too old" if peer < own else "too new"
    return (
        f"protocol version {peer} is {age} for this node's {own} (adjacent versions interoperate)"
    )


@dataclass(frozen=True, slots=True)
class IncompatiblePeer:
    """A peer a node refuses for its protocol version (``laminar cluster status``):
    seen in gossip or in a hello, ``since_ms`` on the node's clock."""

    node_id: str
    address: str
    protocol_version: int
    reason: str
    since_ms: int


def encode_hello(cluster_id: str, source: str, version: int = PROTOCOL_VERSION) -> bytes:
    """The first bytes a sender writes on a new connection."""
    cluster = cluster_id.encode()
    node = source.encode()
    if not 0 < len(cluster) <= 255 or not 0 < len(node) <= NODE_ID_BYTES_MAX:
        raise InvalidInputError("cluster id and node id must be 1..255 bytes")
    return MAGIC + bytes((version, len(cluster))) + cluster + bytes((len(node),)) + node


def decode_hello(data: bytes | bytearray) -> tuple[str, str, int, int] | None:
    """``(cluster_id, source, protocol version, length)`` of a complete hello at the
    start of ``data``, or None if more bytes are needed; raises InvalidInputError if
    it is malformed (whether its version is compatible is the receiver's call)."""
    if data[: len(MAGIC)] != MAGIC[: len(data)]:
        raise InvalidInputError("not a Laminar peer connection (bad magic)")
    position = len(MAGIC)
    if len(data) <= position + 1:
        return None
    version = data[position]
    position += 1
    fields = []
    for what in ("cluster id", "node id"):
        if len(data) <= position:
            return None
        size = data[position]
        if size == 0:
            raise InvalidInputError(f"empty {what} in hello")
        if len(data) < position + 1 + size:
            return None
        try:
            fields.append(bytes(data[position + 1 : position + 1 + size]).decode())
        except UnicodeDecodeError:
            raise InvalidInputError(f"{what} in hello is not UTF-8") from None
        position += 1 + size
    return fields[0], fields[1], version, position


def _host_port(address: str, *, what: str) -> tuple[str, int]:
    """``host:port`` (IPv6 in brackets, or a host name, resolved by each connection)."""
    parsed = parse_address(address, what=what, port_zero=True)
    return parsed.host, parsed.port


def _source_address(local_host: str | None) -> tuple[str, int] | None:
    """``local_addr`` for outgoing connections from ``local_host``, or None to let
    the system pick (no host, or a wildcard, which names no single address)."""
    if not local_host:
        return None
    host = local_host.strip("[]")
    return None if host in WILDCARD_HOSTS else (host, 0)


def _set_socket_options(transport: asyncio.BaseTransport, config: TransportConfig) -> None:
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        idle_s = max(1, config.keepalive_time_ms // 1000)
        interval_s = max(1, config.keepalive_timeout_ms // 3000)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        sock.setsockopt(
            socket.IPPROTO_TCP,
            socket.TCP_USER_TIMEOUT,
            config.keepalive_time_ms + config.keepalive_timeout_ms,
        )


class _Link:
    """One destination peer: its connection or pending frames, its task, its state.

    ``closed`` is set once the link is retired (forgotten, readdressed or the
    transport closed); its task ends after its current connection attempt at the
    latest, whether the cancel that comes with it arrives or not.
    """

    __slots__ = (
        "address",
        "closed",
        "peer_id",
        "pending",
        "pending_bytes",
        "state",
        "task",
        "writer",
    )

    def __init__(self, peer_id: str, address: str) -> None:
        self.peer_id = peer_id
        self.address = address
        self.closed = False
        self.pending: deque[bytes] = deque()
        self.pending_bytes = 0
        self.state = LinkState.CONNECTING
        self.task: asyncio.Task[None] | None = None
        self.writer: asyncio.Transport | None = None


class _SenderProtocol(asyncio.Protocol):
    """The sending end of a link: reads only a possible rejection."""

    def __init__(self, transport: PeerTransport, link: _Link, closed: asyncio.Future[None]) -> None:
        self._owner = transport
        self._link = link
        self._closed = closed
        self._received = bytearray()

    def data_received(self, data: bytes) -> None:
        if len(self._received) < _REJECT_BYTES_MAX:
            self._received += data[: _REJECT_BYTES_MAX - len(self._received)]

    def connection_lost(self, exc: Exception | None) -> None:
        received = self._received
        if received[:1] == bytes((_REJECT,)):
            reason = bytes(received[2 : 2 + received[1]] if len(received) > 1 else b"")
            _LOG.warning(
                "peer rejected our connection node=%s peer=%s: %s",
                self._owner.node_id,
                self._link.peer_id,
                reason.decode(errors="replace"),
                extra=fields(node_id=self._owner.node_id, peer=self._link.peer_id),
            )
        if not self._closed.done():
            self._closed.set_result(None)


class _ReceiverProtocol(asyncio.Protocol):
    """The receiving end of a connection: a hello, then frames."""

    def __init__(self, owner: PeerTransport) -> None:
        self._owner = owner
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._source: str | None = None
        self._frame_max = owner.config.limits.bundle_bytes_max
        self._warned = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's do not subclass it
        self._transport = transport
        owner = self._owner
        if len(owner._inbound) >= owner.config.inbound_connections_max:
            owner._counters.refused_connections += 1
            transport.abort()
            return
        owner._inbound.add(self)
        _set_socket_options(transport, owner.config)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._inbound.discard(self)
        self._buffer = bytearray()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def data_received(self, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            return  # rejected or refused: ignore what is still arriving
        buffer = self._buffer
        buffer += data
        if self._source is None and not self._read_hello():
            return
        source = self._source
        assert source is not None
        view = memoryview(buffer)
        try:
            position = self._read_frames(source, view, len(buffer))
        finally:
            view.release()
        if position:
            del buffer[:position]
            self._owner.delivered()

    def _read_frames(self, source: str, view: memoryview, size: int) -> int:
        """Deliver the complete frames in ``view``; returns the bytes consumed."""
        owner = self._owner
        position = 0
        while size - position >= 4:
            (length,) = _LENGTH.unpack_from(view, position)
            if not 0 < length <= self._frame_max:
                owner._counters.rejected_malformed += 1
                _LOG.warning(
                    "peer sent a frame of %d bytes (limit %d); closing node=%s source=%.80r",
                    length,
                    self._frame_max,
                    owner.node_id,
                    source,
                    extra=fields(node_id=owner.node_id),
                )
                self.close()
                return 0
            end = position + 4 + length
            if end > size:
                break
            outcome = owner.deliver(source, bytes(view[position + 4 : end]))
            position = end
            if outcome is FrameOutcome.MALFORMED and not self._warned:
                self._warned = True
                _LOG.warning(
                    "peer sent a malformed frame node=%s source=%.80r (counted; later ones "
                    "on this connection are only counted)",
                    owner.node_id,
                    source,
                    extra=fields(node_id=owner.node_id),
                )
            if self._transport is None or self._transport.is_closing():
                return 0
        return position

    def _read_hello(self) -> bool:
        owner = self._owner
        try:
            hello = decode_hello(self._buffer)
            if hello is None and len(self._buffer) >= HELLO_BYTES_MAX:
                raise InvalidInputError("hello too long")
        except InvalidInputError as error:
            owner._counters.rejected_malformed += 1
            _LOG.warning(
                "malformed peer hello node=%s: %s",
                owner.node_id,
                error,
                extra=fields(node_id=owner.node_id),
            )
            self._reject(str(error))
            return False
        if hello is None:
            return False
        cluster_id, source, version, length = hello
        outcome = owner.check_hello(cluster_id, source, version)
        if outcome is FrameOutcome.WRONG_CLUSTER:
            self._reject(
                f"cluster id mismatch: this node belongs to cluster {owner.cluster_id!r}, "
                f"the connection to {cluster_id!r:.80}"
            )
            return False
        if outcome is FrameOutcome.INCOMPATIBLE_VERSION:
            self._reject(incompatibility(owner.protocol_version, version))
            return False
        if outcome is not FrameOutcome.ACCEPTED:
            self._reject(f"bad source node id {source!r:.80}")
            return False
        if owner.tls is not None and self._transport is not None:
            named = node_ids_of_peercert(self._transport.get_extra_info("peercert"))
            if source not in named:
                address = self._transport.get_extra_info("peername")
                owner.identity_mismatch(source, named, f"from {_format_peer(address)}")
                self._reject(f"the certificate names node(s) {named!r:.80}, not {source!r:.80}")
                return False
        self._source = source
        del self._buffer[:length]
        return True

    def _reject(self, reason: str) -> None:
        data = reason.encode()[:255]
        if self._transport is not None:
            self._transport.write(bytes((_REJECT, len(data))) + data)
            self._transport.close()
        self._buffer = bytearray()


class PeerTransport:
    """Sends bundles to peers and receives theirs; see the module docstring.

    ``on_bundle(source_node_id, bundle)`` is called on the event loop for every
    valid bundle received; it must not block. ``on_delivered()``, when given, is
    called after the bundles of one read from a connection were handed over (a read
    may carry several frames), so that the receiver can act on them together at
    once. ``rng`` draws the backoff jitter. ``local_host``, when given, is the
    source address of outgoing connections (the host of this node's peer address;
    a wildcard such as ``0.0.0.0`` means no particular source).
    ``protocol_version`` is the version this node speaks (a test hook may set an
    older one); ``on_incompatible(source, version)`` is told of every connection
    refused for an incompatible version. ``tls``: mutual TLS on both ends (module
    docstring, "TLS").
    """

    def __init__(
        self,
        node_id: str,
        cluster_id: str,
        on_bundle: OnBundle,
        *,
        on_delivered: Callable[[], None] | None = None,
        config: TransportConfig | None = None,
        rng: random.Random | None = None,
        local_host: str | None = None,
        protocol_version: int = PROTOCOL_VERSION,
        on_incompatible: Callable[[str, int], None] | None = None,
        tls: TlsReloader | None = None,
    ) -> None:
        self.node_id = node_id
        self.tls = tls
        self._warned_at_s: dict[tuple[str, str], float] = {}
        self.cluster_id = cluster_id
        self.protocol_version = protocol_version
        self._on_incompatible = on_incompatible
        self.config = config if config is not None else TransportConfig()
        self._on_bundle = on_bundle
        self._on_delivered = on_delivered
        self._rng = rng if rng is not None else random.Random()
        self._source_address = _source_address(local_host)
        self._hello = encode_hello(cluster_id, node_id, protocol_version)
        self._links: dict[str, _Link] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._counters = TransportCounters()
        self._server: asyncio.Server | None = None
        self._inbound: set[_ReceiverProtocol] = set()
        self._closed = False

    @property
    def counters(self) -> TransportCounters:
        """A snapshot of the counters."""
        return replace(self._counters)

    def link_state(self, peer_id: str) -> LinkState | None:
        """The state of the link to ``peer_id``, or None if there is none."""
        link = self._links.get(peer_id)
        return None if link is None else link.state

    def link_states(self) -> dict[str, LinkState]:
        """Each peer's link and its state (for metrics)."""
        return {peer: link.state for peer, link in self._links.items()}

    @property
    def listening_port(self) -> int | None:
        """The port :meth:`listen` bound (useful with port 0), or None."""
        if self._server is None or not self._server.sockets:
            return None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    # ------------------------------------------------------------------ lifecycle

    async def listen(self, address: str) -> None:
        """Accept peers' connections on ``address`` (``host:port``)."""
        host, port = _host_port(address, what="peer listen address")
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _ReceiverProtocol(self),
            host,
            port,
            reuse_address=True,
            ssl=self._listener_context(),
            ssl_handshake_timeout=None if self.tls is None else self._handshake_timeout_s(),
        )

    def _handshake_timeout_s(self) -> float:
        return max(1.0, self.config.connect_timeout_ms / 1000)

    def _listener_context(self) -> ssl.SSLContext | None:
        """The listener's context: during each handshake its ``sni_callback`` swaps
        in the server context of the files' current version."""
        if self.tls is None:
            return None
        tls = self.tls
        listener = tls.current().server_context
        if listener is None:
            raise ConfigError("the peer transport's TLS needs a certificate and key")
        # A context of its own: the reloader's contexts are shared with connections.
        first = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        first.minimum_version = ssl.TLSVersion.TLSv1_2
        first.verify_mode = ssl.CERT_REQUIRED
        first.load_cert_chain(tls.files.cert_file, tls.files.key_file)
        first.load_verify_locations(cafile=tls.files.ca_file)

        def choose(connection: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
            current = tls.current().server_context
            if current is not None:
                connection.context = current

        first.sni_callback = choose
        return first

    def identity_mismatch(self, claimed: str, named: list[str], where: str) -> None:
        """A certificate that does not name the node ``claimed``: count, and log one
        line per peer at most every :data:`IDENTITY_WARNING_INTERVAL_S`."""
        self._counters.rejected_identity += 1
        if self._may_warn(("identity", claimed)):
            _LOG.warning(
                "refused peer connection %s node=%s: it is for node %.80r but the "
                "certificate names %.120r",
                where,
                self.node_id,
                claimed,
                named,
                extra=fields(node_id=self.node_id),
            )

    def _may_warn(self, key: tuple[str, str]) -> bool:
        now_s = asyncio.get_running_loop().time()
        last_s = self._warned_at_s.get(key)
        if last_s is not None and now_s - last_s < IDENTITY_WARNING_INTERVAL_S:
            return False
        if len(self._warned_at_s) >= _WARNED_MAX:
            self._warned_at_s.clear()
        self._warned_at_s[key] = now_s
        return True

    async def stop_listening(self, *, timeout_ms: int | None = None) -> None:
        """Close the listener and every accepted connection (a node stopping);
        wait for the listener at most ``timeout_ms`` (default ``close_timeout_ms``)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for connection in list(self._inbound):
            connection.close()
        self._inbound.clear()
        if server is None:
            return
        if timeout_ms is None:
            timeout_ms = self.config.close_timeout_ms
        with contextlib.suppress(Exception):
            async with asyncio.timeout(timeout_ms / 1000):
                await server.wait_closed()

    async def close(self, *, timeout_ms: int | None = None) -> None:
        """Close every link and the listener; wait until their tasks are gone, but at
        most ``timeout_ms`` (default ``close_timeout_ms``): after that, log the links
        still running and return anyway. Bundles sent afterwards are dropped."""
        if timeout_ms is None:
            timeout_ms = self.config.close_timeout_ms
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        self._closed = True
        for link in list(self._links.values()):
            self._retire(link)
        await self.stop_listening(timeout_ms=timeout_ms)
        closing = set(self._closing)
        if not closing:
            return
        _, running = await asyncio.wait(closing, timeout=max(0.0, deadline - loop.time()))
        if running:
            _LOG.warning(
                "peer links did not stop in time node=%s links=%d timeout_ms=%d",
                self.node_id,
                len(running),
                timeout_ms,
                extra=fields(node_id=self.node_id),
            )

    # ------------------------------------------------------------------ sending

    def send(self, peer_id: str, address: str, bundle: PeerBundle) -> None:
        """Send ``bundle`` to ``peer_id`` at ``address`` (``host:port``); never blocks.

        Opens the link on first use and reopens it when ``address`` changed. The
        bundle is dropped (and counted) when the link's buffer is full, the peer is
        unreachable, or the transport is closed. Raises
        :class:`~laminar.errors.InvalidInputError` only for a bundle that cannot be
        encoded (a caller bug).
        """
        frames = self._encode(bundle)
        counters = self._counters
        if self._closed:
            counters.dropped_unreachable += len(frames)
            return
        link = self._links.get(peer_id)
        if link is None or link.address != address:
            if link is not None:
                _LOG.info(
                    "peer address changed node=%s peer=%s old=%s new=%s",
                    self.node_id,
                    peer_id,
                    link.address,
                    address,
                    extra=fields(node_id=self.node_id, peer=peer_id),
                )
                self._retire(link)
            link = self._open(peer_id, address)
        state = link.state
        if state is LinkState.CONNECTED and link.writer is not None and link.writer.is_closing():
            state = LinkState.BACKOFF  # lost; the link task has not noticed yet
        if state is LinkState.CONNECTED:
            writer = link.writer
            assert writer is not None
            limit = self.config.send_buffer_bytes_max
            for frame in frames:
                buffered = writer.get_write_buffer_size()
                if buffered and buffered + len(frame) > limit:
                    counters.dropped_full += 1
                    continue
                writer.write(frame)
                counters.sent += 1
        elif state is LinkState.CONNECTING:
            queue_max = self.config.queue_max
            bytes_max = self.config.send_buffer_bytes_max
            for frame in frames:
                pending = link.pending
                if len(pending) >= queue_max or (
                    pending and link.pending_bytes + len(frame) > bytes_max
                ):
                    counters.dropped_full += 1
                else:
                    pending.append(frame)
                    link.pending_bytes += len(frame)
        else:
            counters.dropped_unreachable += len(frames)

    def forget(self, peer_id: str) -> None:
        """Close the link to ``peer_id`` (it left the cluster); queued frames are dropped."""
        link = self._links.pop(peer_id, None)
        if link is not None:
            self._retire(link)

    def _encode(self, bundle: PeerBundle) -> list[bytes]:
        """One length-prefixed frame, or several if the bundle is too large for one."""
        limits = self.config.limits
        if len(bundle) <= limits.messages_max:
            data = encode_bundle(bundle)
            if len(data) <= limits.bundle_bytes_max:
                return [_LENGTH.pack(len(data)) + data]
        if len(bundle) <= 1:
            self._counters.dropped_oversized += 1
            _LOG.warning(
                "dropped oversized message node=%s limit_bytes=%d",
                self.node_id,
                limits.bundle_bytes_max,
                extra=fields(node_id=self.node_id),
            )
            return []
        return [frame for part in _split(bundle) for frame in self._encode(part)]

    def _open(self, peer_id: str, address: str) -> _Link:
        link = _Link(peer_id, address)
        link.task = asyncio.get_running_loop().create_task(
            self._run(link), name=f"laminar-peer-link-{peer_id}"
        )
        self._links[peer_id] = link
        return link

    def _retire(self, link: _Link) -> None:
        if self._links.get(link.peer_id) is link:
            del self._links[link.peer_id]
        link.closed = True
        self._disconnect(link)
        task = link.task
        if task is not None and not task.done():
            task.cancel()
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _disconnect(self, link: _Link) -> None:
        link.state = LinkState.BACKOFF
        self._counters.dropped_unreachable += len(link.pending)
        link.pending.clear()
        link.pending_bytes = 0
        writer, link.writer = link.writer, None
        if writer is not None:
            writer.abort()

    async def _run(self, link: _Link) -> None:
        """The life of a link: connect, send, back off, again, until it is closed.

        A connection attempt can swallow the cancel that comes with closing (see
        "Stopping" in the module docstring), so ``link.closed`` is checked after it;
        a cancel always ends the backoff sleep."""
        loop = asyncio.get_running_loop()
        failures = 0
        try:
            while True:
                link.state = LinkState.CONNECTING
                started = loop.time()
                try:
                    await self._connection(link)
                except Exception:
                    # A bug or an unexpected error must not leave the link dead.
                    _LOG.exception(
                        "peer link failed node=%s peer=%s",
                        self.node_id,
                        link.peer_id,
                        extra=fields(node_id=self.node_id, peer=link.peer_id),
                    )
                if link.closed:
                    break
                self._disconnect(link)
                lived_ms = (loop.time() - started) * 1000
                failures = 0 if lived_ms >= self.config.backoff_max_ms else failures + 1
                await asyncio.sleep(self._backoff_ms(failures) / 1000)
        finally:
            self._disconnect(link)

    async def _connection(self, link: _Link) -> None:
        """One connection: returns when the peer is unreachable or it ended."""
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()
        try:
            host, port = _host_port(link.address, what="peer address")
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel.
            tls_context = None if self.tls is None else self.tls.current().client_context
            async with asyncio.timeout(self.config.connect_timeout_ms / 1000):
                writer, _ = await loop.create_connection(
                    lambda: _SenderProtocol(self, link, closed),
                    host,
                    port,
                    local_addr=self._source_address,
                    ssl=tls_context,
                    ssl_handshake_timeout=None
                    if tls_context is None
                    else self._handshake_timeout_s(),
                )
        except ssl.SSLError as error:
            self._counters.tls_failures += 1
            if self._may_warn(("tls", link.peer_id)):
                _LOG.warning(
                    "TLS handshake with peer failed node=%s peer=%s address=%s: %s",
                    self.node_id,
                    link.peer_id,
                    link.address,
                    error,
                    extra=fields(node_id=self.node_id, peer=link.peer_id),
                )
            return
        except (OSError, TimeoutError, ValueError) as error:  # ValueError: a bad address
            _LOG.debug(
                "peer unreachable node=%s peer=%s: %s",
                self.node_id,
                link.peer_id,
                error,
                extra=fields(node_id=self.node_id, peer=link.peer_id),
            )
            return
        if link.closed:  # retired while connecting: _disconnect missed this connection
            writer.abort()
            return
        if self.tls is not None:
            named = node_ids_of_peercert(writer.get_extra_info("peercert"))
            if link.peer_id not in named:
                self.identity_mismatch(link.peer_id, named, f"to {link.address}")
                writer.abort()
                return
        _set_socket_options(writer, self.config)
        writer.write(self._hello)
        pending = link.pending
        link.pending_bytes = 0
        while pending:
            writer.write(pending.popleft())
            self._counters.sent += 1
        link.writer = writer
        link.state = LinkState.CONNECTED
        _LOG.info(
            "peer link open node=%s peer=%s address=%s",
            self.node_id,
            link.peer_id,
            link.address,
            extra=fields(node_id=self.node_id, peer=link.peer_id),
        )
        try:
            await closed
        finally:
            link.writer = None
            writer.abort()
        _LOG.info(
            "peer link closed node=%s peer=%s",
            self.node_id,
            link.peer_id,
            extra=fields(node_id=self.node_id, peer=link.peer_id),
        )

    def _backoff_ms(self, failures: int) -> float:
        ceiling = self.config.backoff_max_ms
        delay = min(ceiling, self.config.backoff_initial_ms * (1 << min(failures, 30)))
        return delay * (0.5 + self._rng.random() / 2)

    # ---------------------------------------------------------------- receiving

    def check_hello(
        self, cluster_id: str, source: str, version: int = PROTOCOL_VERSION
    ) -> FrameOutcome:
        """Whether a connection announcing ``cluster_id``, ``source`` and protocol
        ``version`` is accepted."""
        if cluster_id != self.cluster_id:
            self._counters.rejected_cluster += 1
            _LOG.warning(
                "rejected peer from another cluster node=%s source=%.80r cluster=%.80r",
                self.node_id,
                source,
                cluster_id,
                extra=fields(node_id=self.node_id),
            )
            return FrameOutcome.WRONG_CLUSTER
        if not source or len(source.encode()) > NODE_ID_BYTES_MAX:
            self._counters.rejected_malformed += 1
            return FrameOutcome.MALFORMED
        if not compatible_versions(self.protocol_version, version):
            self._counters.rejected_version += 1
            _LOG.warning(
                "refused peer node=%s source=%.80r: %s",
                self.node_id,
                source,
                incompatibility(self.protocol_version, version),
                extra=fields(node_id=self.node_id),
            )
            if self._on_incompatible is not None:
                try:
                    self._on_incompatible(source, version)
                except Exception:
                    self._counters.handler_errors += 1
                    _LOG.exception(
                        "on_incompatible failed node=%s",
                        self.node_id,
                        extra=fields(node_id=self.node_id),
                    )
            return FrameOutcome.INCOMPATIBLE_VERSION
        return FrameOutcome.ACCEPTED

    def delivered(self) -> None:
        """The frames of one read were delivered: tell ``on_delivered``; never raises."""
        if self._on_delivered is None:
            return
        try:
            self._on_delivered()
        except Exception:
            self._counters.handler_errors += 1
            _LOG.exception(
                "on_delivered failed node=%s", self.node_id, extra=fields(node_id=self.node_id)
            )

    def deliver(self, source: str, data: bytes) -> FrameOutcome:
        """Decode and deliver one received frame from an accepted ``source``; never raises."""
        try:
            bundle = decode_bundle(data, limits=self.config.limits)
        except InvalidInputError as error:
            self._counters.rejected_malformed += 1
            _LOG.debug(
                "malformed frame node=%s source=%.80r: %s",
                self.node_id,
                source,
                error,
                extra=fields(node_id=self.node_id),
            )
            return FrameOutcome.MALFORMED
        self._counters.received += 1
        try:
            self._on_bundle(source, bundle)
        except Exception:
            self._counters.handler_errors += 1
            _LOG.exception(
                "on_bundle failed node=%s source=%s",
                self.node_id,
                source,
                extra=fields(node_id=self.node_id, peer=source),
            )
        return FrameOutcome.ACCEPTED


def _format_peer(address: object) -> str:
    """``host:port`` of a socket's peer name (``ipv6`` in brackets)."""
    if isinstance(address, tuple) and len(address) >= 2:
        host = str(address[0])
        return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"
    return str(address)


def _split(bundle: PeerBundle) -> list[PeerBundle]:
    """Two smaller bundles whose items, in order, are ``bundle.items()``."""
    if bundle.messages and bundle.heartbeats:
        return [PeerBundle((), bundle.messages), PeerBundle(bundle.heartbeats, ())]
    if bundle.messages:
        half = len(bundle.messages) // 2
        return [PeerBundle((), bundle.messages[:half]), PeerBundle((), bundle.messages[half:])]
    half = len(bundle.heartbeats) // 2
    return [PeerBundle(bundle.heartbeats[:half], ()), PeerBundle(bundle.heartbeats[half:], ())]

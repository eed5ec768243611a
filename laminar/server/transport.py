"""Peer transport: replication bundles between nodes over gRPC (``Peer.Replicate``).

Theory of operation
-------------------

Sending. For every destination peer the transport keeps one *link*: a bounded
queue of encoded bundles and one task that owns a gRPC channel and, while the peer
is reachable, one long-lived client-streaming ``Replicate`` call fed from the
queue. :meth:`PeerTransport.send` never blocks and never fails for network
reasons: it encodes the bundle (:mod:`laminar.server.wire`) and enqueues it, or
drops it and counts why. Consensus tolerates loss (a lost append is retried, a
lost heartbeat is superseded by the next), so dropping is always preferable to
buffering without bound or stalling the caller's event loop. A link is in one of
three states:

- ``connecting``: waiting up to ``connect_timeout_ms`` for the channel; bundles
  queue (up to ``queue_max``) and are written once the stream is open;
- ``connected``: bundles are written to the stream in order; a full queue (the
  peer or the network is slower than we produce) drops new bundles
  (``dropped_full``);
- ``backoff``: the peer is unreachable or the stream ended; whatever was queued and
  everything sent until the next attempt is dropped (``dropped_unreachable``), then
  the link reconnects after a capped exponential backoff with jitter.

A bundle whose encoding exceeds ``WireLimits.bundle_bytes_max`` is split into
several frames (messages before heartbeats, order kept); a single message that is
still too large is dropped (``dropped_oversized``). When a peer's address changes,
the old link is closed and a new one opens to the new address.

Receiving. :class:`PeerServicer` implements the ``Peer`` service. Every
``PeerFrame`` of a ``Replicate`` stream goes to :meth:`PeerTransport.receive_frame`:
a frame from another cluster aborts the stream with ``FAILED_PRECONDITION``; a
malformed frame is counted and skipped (the stream lives on); a valid bundle is
handed to ``on_bundle(source, bundle)``, synchronously, on the event loop.

All methods must be called from the event loop's thread; the transport makes no
protocol decision and keeps no state but links and counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final

import grpc

from laminar.errors import ConfigError, InvalidInputError
from laminar.replica.coalesce import PeerBundle
from laminar.server.wire import NODE_ID_BYTES_MAX, WireLimits, decode_bundle, encode_bundle
from laminar.v1 import laminar_pb2, laminar_pb2_grpc

_LOG = logging.getLogger(__name__)

FRAME_OVERHEAD_BYTES_MAX: Final = 4096
"""Room for a ``PeerFrame``'s cluster id, source and protobuf tags around a bundle."""

OnBundle = Callable[[str, PeerBundle], None]
FetchMetadata = Callable[[laminar_pb2.FetchRequest, Any], Awaitable[laminar_pb2.FetchResponse]]
"""``(request, grpc.aio.ServicerContext) -> FetchResponse`` for ``Peer.FetchMetadata``."""


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """Tunables of the peer transport.

    ``queue_max``: bundles waiting per destination peer; beyond it new bundles are
    dropped. 1024 covers ~0.3 s of appends at 3,000 bundles/s per peer.
    ``connect_timeout_ms``: how long a link waits for a channel to become ready
    before it declares the peer unreachable and backs off.
    ``backoff_initial_ms`` / ``backoff_max_ms``: reconnect delay after the n-th
    consecutive failure is ``min(max, initial * 2**n)``, scaled by a random factor
    in [0.5, 1) so that peers do not reconnect in lockstep. A stream that lived at
    least ``backoff_max_ms`` resets the count.
    ``keepalive_time_ms`` / ``keepalive_timeout_ms``: HTTP/2 pings on idle
    connections, so a dead peer is noticed (and its stream ended) within about
    their sum even when nothing is being written.
    ``limits``: wire limits; also sets the gRPC message size limits.
    """

    queue_max: int = 1024
    connect_timeout_ms: int = 2000
    backoff_initial_ms: int = 50
    backoff_max_ms: int = 2000
    keepalive_time_ms: int = 10_000
    keepalive_timeout_ms: int = 5_000
    limits: WireLimits = field(default_factory=WireLimits)

    def __post_init__(self) -> None:
        if self.queue_max < 1:
            raise ConfigError("queue_max must be positive")
        if self.connect_timeout_ms <= 0:
            raise ConfigError("connect_timeout_ms must be positive")
        if not 0 < self.backoff_initial_ms <= self.backoff_max_ms:
            raise ConfigError("need 0 < backoff_initial_ms <= backoff_max_ms")
        if self.keepalive_time_ms <= 0 or self.keepalive_timeout_ms <= 0:
            raise ConfigError("keepalive_time_ms and keepalive_timeout_ms must be positive")

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

    @property
    def message_bytes_max(self) -> int:
        """The gRPC message size limit on peer channels and servers."""
        return self.limits.bundle_bytes_max + FRAME_OVERHEAD_BYTES_MAX


@dataclass(slots=True)
class TransportCounters:
    """Frames (encoded bundles) by fate, since the transport started; for metrics.

    Sending: ``sent`` (written to a stream; delivery is not acknowledged),
    ``dropped_full``, ``dropped_unreachable``, ``dropped_oversized``. Receiving:
    ``received`` (handed to ``on_bundle``), ``rejected_malformed``,
    ``rejected_cluster``, ``handler_errors`` (``on_bundle`` raised).
    """

    sent: int = 0
    dropped_full: int = 0
    dropped_unreachable: int = 0
    dropped_oversized: int = 0
    received: int = 0
    rejected_malformed: int = 0
    rejected_cluster: int = 0
    handler_errors: int = 0


class FrameOutcome(enum.Enum):
    ACCEPTED = "accepted"
    MALFORMED = "malformed"
    WRONG_CLUSTER = "wrong_cluster"


class LinkState(enum.Enum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKOFF = "backoff"


def channel_options(config: TransportConfig) -> list[tuple[str, int]]:
    """gRPC options for a channel to a peer."""
    return [
        ("grpc.max_send_message_length", config.message_bytes_max),
        ("grpc.max_receive_message_length", config.message_bytes_max),
        ("grpc.keepalive_time_ms", config.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", config.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.initial_reconnect_backoff_ms", config.backoff_initial_ms),
        ("grpc.min_reconnect_backoff_ms", config.backoff_initial_ms),
        ("grpc.max_reconnect_backoff_ms", config.backoff_max_ms),
        # The transport decides about retries itself (it drops and reconnects).
        ("grpc.enable_retries", 0),
    ]


def server_options(config: TransportConfig) -> list[tuple[str, int]]:
    """gRPC options a server hosting :class:`PeerServicer` needs.

    They accept the peers' keepalive pings (a server would otherwise answer them
    with ``too_many_pings`` and drop the connection) and frames up to the wire
    limit. The composition root merges them with the public API's own options
    (taking the larger message size).
    """
    return [
        ("grpc.max_send_message_length", config.message_bytes_max),
        ("grpc.max_receive_message_length", config.message_bytes_max),
        ("grpc.keepalive_time_ms", config.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", config.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", config.keepalive_time_ms // 2),
        ("grpc.http2.max_ping_strikes", 0),
    ]


class _Link:
    """One destination peer: its queue, its connection task, its state."""

    __slots__ = ("address", "peer_id", "queue", "state", "task")

    def __init__(self, peer_id: str, address: str, queue_max: int) -> None:
        self.peer_id = peer_id
        self.address = address
        # None wakes the writer when the stream ends while it waits for a frame.
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(queue_max)
        self.state = LinkState.CONNECTING
        self.task: asyncio.Task[None] | None = None


class PeerTransport:
    """Sends bundles to peers and receives theirs; see the module docstring.

    ``on_bundle(source_node_id, bundle)`` is called on the event loop for every
    valid bundle received; it must not block. ``rng`` draws the backoff jitter.
    """

    def __init__(
        self,
        node_id: str,
        cluster_id: str,
        on_bundle: OnBundle,
        *,
        config: TransportConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.config = config if config is not None else TransportConfig()
        self._on_bundle = on_bundle
        self._rng = rng if rng is not None else random.Random()
        self._links: dict[str, _Link] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._counters = TransportCounters()
        self._channel_options = channel_options(self.config)
        self._closed = False

    @property
    def counters(self) -> TransportCounters:
        """A snapshot of the counters."""
        return replace(self._counters)

    def link_state(self, peer_id: str) -> LinkState | None:
        """The state of the link to ``peer_id``, or None if there is none."""
        link = self._links.get(peer_id)
        return None if link is None else link.state

    # ------------------------------------------------------------------ sending

    def send(self, peer_id: str, address: str, bundle: PeerBundle) -> None:
        """Queue ``bundle`` for ``peer_id`` at ``address`` (``host:port``); never blocks.

        Opens the link on first use and reopens it when ``address`` changed. The
        bundle is dropped (and counted) when the queue is full, the peer is
        unreachable, or the transport is closed. Raises
        :class:`~laminar.errors.InvalidInputError` only for a bundle that cannot be
        encoded (a caller bug).
        """
        frames = self._encode(bundle)
        if self._closed:
            self._counters.dropped_unreachable += len(frames)
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
                )
                self._retire(link)
            link = self._open(peer_id, address)
        if link.state is LinkState.BACKOFF:
            self._counters.dropped_unreachable += len(frames)
            return
        for frame in frames:
            try:
                link.queue.put_nowait(frame)
            except asyncio.QueueFull:
                self._counters.dropped_full += 1

    def forget(self, peer_id: str) -> None:
        """Close the link to ``peer_id`` (it left the cluster); queued bundles are dropped."""
        link = self._links.pop(peer_id, None)
        if link is not None:
            self._retire(link)

    async def close(self) -> None:
        """Close every link and wait until their tasks and channels are gone."""
        self._closed = True
        for link in list(self._links.values()):
            self._retire(link)
        self._links.clear()
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    def _encode(self, bundle: PeerBundle) -> list[bytes]:
        """One frame, or several if the bundle is too large for one."""
        limits = self.config.limits
        if len(bundle) <= limits.messages_max:
            data = encode_bundle(bundle)
            if len(data) <= limits.bundle_bytes_max:
                return [data]
        if len(bundle) <= 1:
            self._counters.dropped_oversized += 1
            _LOG.warning(
                "dropped oversized message node=%s limit_bytes=%d",
                self.node_id,
                limits.bundle_bytes_max,
            )
            return []
        return [frame for part in _split(bundle) for frame in self._encode(part)]

    def _open(self, peer_id: str, address: str) -> _Link:
        link = _Link(peer_id, address, self.config.queue_max)
        link.task = asyncio.get_running_loop().create_task(
            self._run(link), name=f"laminar-peer-link-{peer_id}"
        )
        self._links[peer_id] = link
        return link

    def _retire(self, link: _Link) -> None:
        if self._links.get(link.peer_id) is link:
            del self._links[link.peer_id]
        link.state = LinkState.BACKOFF
        task = link.task
        if task is not None and not task.done():
            task.cancel()
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _run(self, link: _Link) -> None:
        """The life of a link: connect, stream, back off, again, until cancelled."""
        loop = asyncio.get_running_loop()
        channel = grpc.aio.insecure_channel(link.address, options=self._channel_options)
        stub = laminar_pb2_grpc.PeerStub(channel)  # type: ignore[no-untyped-call]
        failures = 0
        try:
            while True:
                link.state = LinkState.CONNECTING
                started = loop.time()
                try:
                    await self._stream(link, channel, stub)
                except Exception:
                    # A bug or an unexpected gRPC error must not leave the link dead.
                    _LOG.exception("peer stream failed node=%s peer=%s", self.node_id, link.peer_id)
                link.state = LinkState.BACKOFF
                self._drop_queued(link)
                lived_ms = (loop.time() - started) * 1000
                failures = 0 if lived_ms >= self.config.backoff_max_ms else failures + 1
                await asyncio.sleep(self._backoff_ms(failures) / 1000)
        finally:
            link.state = LinkState.BACKOFF
            self._drop_queued(link)
            await channel.close(grace=None)

    async def _stream(self, link: _Link, channel: Any, stub: Any) -> None:
        """One ``Replicate`` call: returns when the peer is unreachable or it ended."""
        timeout_s = self.config.connect_timeout_ms / 1000
        try:
            await asyncio.wait_for(channel.channel_ready(), timeout_s)
        except TimeoutError:
            _LOG.debug("peer unreachable node=%s peer=%s", self.node_id, link.peer_id)
            return
        call = stub.Replicate()
        call.add_done_callback(lambda _call: _wake(link))
        link.state = LinkState.CONNECTED
        _LOG.info(
            "peer stream open node=%s peer=%s address=%s", self.node_id, link.peer_id, link.address
        )
        try:
            while not call.done():
                data = await link.queue.get()
                if data is None:
                    continue
                frame = laminar_pb2.PeerFrame(
                    cluster_id=self.cluster_id, source=self.node_id, bundle=data
                )
                await call.write(frame)
                self._counters.sent += 1
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError):
            self._counters.dropped_unreachable += 1  # the frame being written
        finally:
            call.cancel()
        await self._log_end(link, call)

    async def _log_end(self, link: _Link, call: Any) -> None:
        code = await call.code()
        details = await call.details()
        level = logging.WARNING if code == grpc.StatusCode.FAILED_PRECONDITION else logging.INFO
        _LOG.log(
            level,
            "peer stream closed node=%s peer=%s code=%s details=%s",
            self.node_id,
            link.peer_id,
            getattr(code, "name", code),
            details,
        )

    def _drop_queued(self, link: _Link) -> None:
        while not link.queue.empty():
            if link.queue.get_nowait() is not None:
                self._counters.dropped_unreachable += 1

    def _backoff_ms(self, failures: int) -> float:
        ceiling = self.config.backoff_max_ms
        delay = min(ceiling, self.config.backoff_initial_ms * (1 << min(failures, 30)))
        return delay * (0.5 + self._rng.random() / 2)

    # ---------------------------------------------------------------- receiving

    def receive_frame(self, cluster_id: str, source: str, data: bytes) -> FrameOutcome:
        """Check, decode and deliver one received frame; never raises."""
        if cluster_id != self.cluster_id:
            self._counters.rejected_cluster += 1
            return FrameOutcome.WRONG_CLUSTER
        try:
            if not source or len(source.encode()) > NODE_ID_BYTES_MAX:
                raise InvalidInputError(f"bad source node id {source!r:.80}")
            bundle = decode_bundle(data, limits=self.config.limits)
        except InvalidInputError as error:
            self._counters.rejected_malformed += 1
            _LOG.debug("malformed frame node=%s source=%.80r: %s", self.node_id, source, error)
            return FrameOutcome.MALFORMED
        self._counters.received += 1
        try:
            self._on_bundle(source, bundle)
        except Exception:
            self._counters.handler_errors += 1
            _LOG.exception("on_bundle failed node=%s source=%s", self.node_id, source)
        return FrameOutcome.ACCEPTED


def _wake(link: _Link) -> None:
    with contextlib.suppress(asyncio.QueueFull):
        link.queue.put_nowait(None)


def _split(bundle: PeerBundle) -> list[PeerBundle]:
    """Two smaller bundles whose items, in order, are ``bundle.items()``."""
    if bundle.messages and bundle.heartbeats:
        return [PeerBundle((), bundle.messages), PeerBundle(bundle.heartbeats, ())]
    if bundle.messages:
        half = len(bundle.messages) // 2
        return [PeerBundle((), bundle.messages[:half]), PeerBundle((), bundle.messages[half:])]
    half = len(bundle.heartbeats) // 2
    return [PeerBundle(bundle.heartbeats[:half], ()), PeerBundle(bundle.heartbeats[half:], ())]


class PeerServicer(laminar_pb2_grpc.PeerServicer):
    """The ``Peer`` gRPC service over a :class:`PeerTransport`.

    ``Replicate`` feeds every frame to :meth:`PeerTransport.receive_frame`.
    ``FetchMetadata`` calls ``fetch_metadata`` if given, else answers
    ``UNIMPLEMENTED``; a subclass may override it instead.
    """

    def __init__(
        self, transport: PeerTransport, *, fetch_metadata: FetchMetadata | None = None
    ) -> None:
        self._transport = transport
        self._fetch_metadata = fetch_metadata

    async def Replicate(  # noqa: N802  (gRPC method name)
        self, request_iterator: AsyncIterator[laminar_pb2.PeerFrame], context: Any
    ) -> laminar_pb2.PeerAck:
        transport = self._transport
        warned = False
        async for frame in request_iterator:
            outcome = transport.receive_frame(frame.cluster_id, frame.source, frame.bundle)
            if outcome is FrameOutcome.WRONG_CLUSTER:
                _LOG.warning(
                    "rejected peer from another cluster node=%s source=%.80r cluster=%.80r",
                    transport.node_id,
                    frame.source,
                    frame.cluster_id,
                )
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"cluster id mismatch: this node belongs to cluster {transport.cluster_id!r}, "
                    f"the frame to {frame.cluster_id!r:.80}",
                )
            elif outcome is FrameOutcome.MALFORMED and not warned:
                warned = True
                _LOG.warning(
                    "peer sent a malformed frame node=%s source=%.80r (counted; later ones "
                    "on this stream are only counted)",
                    transport.node_id,
                    frame.source,
                )
        return laminar_pb2.PeerAck()

    async def FetchMetadata(  # noqa: N802  (gRPC method name)
        self, request: laminar_pb2.FetchRequest, context: Any
    ) -> laminar_pb2.FetchResponse:
        if self._fetch_metadata is None:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "metadata catch-up is not served by this node"
            )
            raise AssertionError("context.abort returns only by raising")
        return await self._fetch_metadata(request, context)

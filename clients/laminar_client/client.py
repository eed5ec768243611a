"""The synchronous client: routing, retries and the public API calls.

Layers, bottom up:

- :class:`~laminar_client.transport.Transport` — channels and one typed call;
- :class:`~laminar_client.metadata_cache.MetadataCache` — the current
  :class:`ClusterMetadata`, merged from the answers of several nodes (a partition's
  own replicas first) when stale or after an error, leader hints learned from
  ``NOT_LEADER`` errors, and which nodes to skip because they did not answer lately;
- :class:`Client` — produce to the leader, fetch from any replica, admin calls;
  each attempt bounded by its own timeout within the call's deadline.

How a write finds a new leader after the old one died: the attempt to the old
leader fails at once (connection refused) or after ``attempt_timeout_s`` (no
answer); the old leader is then skipped, and a metadata refresh asks the
partition's other replicas, each within ``metadata_timeout_s``. While they still
name the old leader, or none, the client tries the live replicas in turn (one that
has become leader accepts; the others redirect or say they know none), backing
off between rounds (25 ms doubling to 1 s). So a write succeeds within about one
backoff of the election, whatever the bootstrap order and whichever nodes answer.

Later API objects (a batching producer, consumer groups) sit beside
:class:`Client` on the same transport and cache.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Literal, TypeVar

from google.protobuf.message import Message

from laminar.address import parse_address_list
from laminar.errors import (
    ConfigError,
    InvalidInputError,
    LaminarError,
    LeaderMovedError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RequestTimeoutError,
    RetriableError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.groups.coordinator import HeartbeatAnswer, HeartbeatRequest
from laminar.grpc_errors import error_from_detail
from laminar.records import Record, next_offset
from laminar.security.acl import Acl, AclFilter
from laminar.security.acl_wire import acl_of, binding_of, filter_message
from laminar.topic_settings import ALTERABLE_SETTINGS
from laminar.v1 import laminar_pb2 as pb
from laminar_client import group_wire
from laminar_client.metadata import (
    AddedPartitions,
    AlteredTopic,
    ClusterDescription,
    ClusterMetadata,
    DamagedReplica,
    FencedReplica,
    GossipKeyring,
    IncompatiblePeer,
    MemberInfo,
    NodeDisk,
    PartitionHealth,
    TopicMetadata,
)
from laminar_client.metadata_cache import (
    DEFAULT_METADATA_ANSWERS_MAX,
    DEFAULT_METADATA_TIMEOUT_S,
    LEADER_CHECK_INTERVAL_S,
    Deadline,
    MetadataCache,
    cluster_unreachable,
    leader_moved_error,
)
from laminar_client.retry import RetryPolicy
from laminar_client.tls import TlsOptions
from laminar_client.transport import (
    NoAnswerError,
    PendingCall,
    Transport,
    UnaryTransport,
    token_metadata,
)
from laminar_client.types import AcksMode, FetchResult, PartitionOffsets, Watermarks, records_from

__all__ = [
    "ACKS",
    "DEFAULT_ATTEMPT_TIMEOUT_S",
    "DEFAULT_CONNECT_GRACE_S",
    "DEFAULT_FETCH_BYTES_MAX",
    "DEFAULT_LEADER_CHECK_S",
    "DEFAULT_METADATA_ANSWERS_MAX",
    "DEFAULT_METADATA_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "LEADER_CHECK_INTERVAL_S",
    "LIST_OFFSETS_PARTITIONS_MAX",
    "UNKNOWN_TOPIC_WAIT_S",
    "AcksMode",
    "Client",
    "FetchResult",
    "KeyringAction",
    "MetadataCache",
    "PartitionOffsets",
    "Watermarks",
    "cluster_unreachable",
    "leader_moved_error",
]

KeyringAction = Literal["list", "install", "use", "remove", "set-verify"]
_KEYRING_ACTIONS: dict[str, pb.KeyringAction] = {
    "list": pb.KEYRING_LIST,
    "install": pb.KEYRING_INSTALL,
    "use": pb.KEYRING_USE,
    "remove": pb.KEYRING_REMOVE,
    "set-verify": pb.KEYRING_SET_VERIFY,
}
ACKS: dict[str, pb.Acks] = {"all": pb.ACKS_ALL, "leader": pb.ACKS_LEADER, "none": pb.ACKS_NONE}

DEFAULT_TIMEOUT_S = 30.0
"""Deadline of a whole call, retries included (Kafka's ``delivery.timeout.ms``)."""
DEFAULT_ATTEMPT_TIMEOUT_S = 3.0
"""Deadline of one attempt (one RPC) of a produce or read (Kafka's ``request.timeout.ms``).

An acks=all produce takes milliseconds; the server is asked to give up 0.5 s before
this, so an answer normally arrives, and a leader that hangs costs only this long."""
DEFAULT_CONNECT_GRACE_S = 1.0
"""How long every bootstrap address may refuse a new client before its calls give up
(:class:`ClusterUnreachableError`): long enough for a node that is starting to
open its port, short enough that a command run with no cluster fails at once."""
DEFAULT_LEADER_CHECK_S = 0.5
"""A write its leader has not answered within this long makes the client ask the
partition's other replicas whether a new leader took over (then, every
:data:`LEADER_CHECK_INTERVAL_S`): a leader that is paused or cut off answers
nothing, and waiting out the attempt (3 s) kept its partitions from writes that
long after the others had elected a new one (a dead leader's refused connection
is noticed at once)."""
DEFAULT_FETCH_BYTES_MAX = 4 * 1024 * 1024
_FETCH_WAIT_S_MAX = 30.0
"""Longest long-poll a fetch may ask for (the proto's ``max_wait_ms`` is a uint32 of
ms; nodes cap it at their ``fetch_wait_ms_max``, 30 s by default)."""
UNKNOWN_TOPIC_WAIT_S = 2.0
"""How long a call retries ``UNKNOWN_TOPIC_OR_PARTITION``: a topic reaches every node
within a metadata round trip of its creation, so an unknown topic after this long
does not exist."""
# Room for the answer to travel back after the server's own timeout.
_RESPONSE_MARGIN_S = 0.5
LIST_OFFSETS_PARTITIONS_MAX = 10_000
"""Most partitions one :meth:`Client.list_offsets` call names: the server's limit per
request (``laminar.server.service.LIST_OFFSETS_PARTITIONS_MAX``, every partition of
the largest topic)."""
_T = TypeVar("_T")
_M = TypeVar("_M", bound=Message)


def _bootstrap_list(bootstrap: str | Sequence[str]) -> list[str]:
    """The bootstrap addresses, checked: IPv4, ``[IPv6]`` or a host name (gRPC
    resolves a name on each connection, and again after one fails)."""
    try:
        return parse_address_list(bootstrap, what="bootstrap")
    except ConfigError as error:
        raise InvalidInputError(str(error)) from None


class _OffsetsCall:
    """One :meth:`Client.list_offsets` call: the answers so far and, per partition,
    the replicas tried in this round, its attempts and its last error."""

    __slots__ = ("answers", "attempts", "errors", "partitions", "tried")

    def __init__(self, partitions: list[int]) -> None:
        self.partitions = partitions
        self.answers: dict[int, PartitionOffsets] = {}
        self.tried: dict[int, set[str]] = {partition: set() for partition in partitions}
        self.attempts = dict.fromkeys(partitions, 0)
        self.errors: dict[int, LaminarError] = {}

    def pending(self) -> list[int]:
        return [partition for partition in self.partitions if partition not in self.answers]

    def failed(self, partitions: Sequence[int], address: str | None, error: LaminarError) -> None:
        for partition in partitions:
            if address is not None:
                self.tried[partition].add(address)
            self.errors[partition] = error

    def unknown(self) -> UnknownTopicOrPartitionError | None:
        """The first unknown-topic-or-partition error among the partitions left."""
        for partition in self.pending():
            error = self.errors.get(partition)
            if isinstance(error, UnknownTopicOrPartitionError):
                return error
        return None

    def error(self) -> LaminarError:
        """The last error of the first partition still without an answer."""
        for partition in self.pending():
            error = self.errors.get(partition)
            if error is not None:
                return error
        return RequestTimeoutError("list offsets: the deadline passed before an answer")


class Client:
    """A synchronous Laminar client.

    ``bootstrap`` is one ``host:port`` gRPC address, a comma-separated list, or a
    list; any node will do, in any order. Timeouts, in seconds:

    - ``timeout_s``: the default deadline of a whole call, retries included;
    - ``attempt_timeout_s``: the deadline of one attempt (one RPC) within it, so a
      node that hangs costs one attempt, not the call; a produce asks the server to
      give up 0.5 s sooner, a long-poll fetch adds its ``max_wait_s``. Topic
      creation and deletion are not idempotent and get the whole deadline;
    - ``metadata_timeout_s``: the deadline of one ``Metadata`` RPC;
    - ``connect_grace_s``: a call gives up with :class:`ClusterUnreachableError`
      once every bootstrap address has refused the connection (or not resolved)
      for this long and no node has ever answered the client: nothing listens
      there, so waiting out ``timeout_s`` would not help. Once a node has answered,
      a refused connection is taken for a node restarting and retried until the
      call's deadline, as is every other error that can pass (an election, a node
      that does not answer in time);
    - ``leader_check_s``: a write that its leader has not answered within this long
      makes the client ask the partition's other replicas whether a new leader took
      over, and then every 0.25 s; if one did, the attempt is abandoned
      (:class:`LeaderMovedError`, its outcome unknown as after a timeout) and the
      write goes to the new leader. None: wait out ``attempt_timeout_s``.

    ``tls``: the cluster serves TLS (:class:`~laminar_client.tls.TlsOptions`: its
    CA file, a client certificate if the nodes require one); producers and
    consumers built on this client use it too. A connection that fails at the TLS
    handshake raises :class:`TlsHandshakeError` as fast as a refused one.

    ``retry`` bounds the retries and says how long a node that did not answer is
    skipped; ``metadata_max_age_s`` is how long a metadata snapshot is trusted when
    nothing failed; ``metadata_answers_max`` bounds how many nodes one metadata
    refresh asks (see :class:`MetadataCache`). ``rng`` drives jitter and replica
    choice (pass a seeded one for reproducible tests); ``clock`` and ``sleep`` can be
    replaced together by a manual clock.

    ``token``: a bearer token (``laminar token create``), sent in the metadata of
    every call (``authorization: Bearer <token>``), also by the producers and
    consumers built on this client. The node maps it to the principal its ACLs
    name; a wrong one is refused with :class:`~laminar.errors.AuthenticationError`.
    Without it the client calls as ``User:ANONYMOUS`` (or as its TLS certificate).

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        attempt_timeout_s: float = DEFAULT_ATTEMPT_TIMEOUT_S,
        metadata_timeout_s: float = DEFAULT_METADATA_TIMEOUT_S,
        connect_grace_s: float = DEFAULT_CONNECT_GRACE_S,
        leader_check_s: float | None = DEFAULT_LEADER_CHECK_S,
        retry: RetryPolicy | None = None,
        metadata_max_age_s: float = 60.0,
        metadata_answers_max: int = DEFAULT_METADATA_ANSWERS_MAX,
        rng: random.Random | None = None,
        transport: UnaryTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        token: str | None = None,
        tls: TlsOptions | None = None,
    ) -> None:
        if timeout_s <= 0 or attempt_timeout_s <= 0 or metadata_timeout_s <= 0:
            raise InvalidInputError(
                "timeout_s, attempt_timeout_s and metadata_timeout_s must be > 0"
            )
        if connect_grace_s < 0:
            raise InvalidInputError(f"connect_grace_s must be >= 0, got {connect_grace_s}")
        if leader_check_s is not None and leader_check_s <= 0:
            raise InvalidInputError(f"leader_check_s must be > 0 or None, got {leader_check_s}")
        self.leader_check_s = leader_check_s
        self._metadata_timeout_s = metadata_timeout_s
        self.timeout_s = timeout_s
        self.connect_grace_s = connect_grace_s
        self.attempt_timeout_s = attempt_timeout_s
        self.retry = retry if retry is not None else RetryPolicy()
        self._rng = rng if rng is not None else random.Random()
        self._sleep = sleep
        self._clock = clock
        self.call_metadata = token_metadata(token)
        """Sent with every call, the producers' and consumers' on this client too."""
        self.tls = tls
        """The client's TLS options (its producers' and consumers' channels use them)."""
        self.transport: UnaryTransport = (
            transport
            if transport is not None
            else Transport(call_metadata=self.call_metadata, tls=tls)
        )
        self.cache = MetadataCache(
            self.transport,
            _bootstrap_list(bootstrap),
            max_age_s=metadata_max_age_s,
            retry=self.retry,
            metadata_timeout_s=metadata_timeout_s,
            answers_max=metadata_answers_max,
            clock=clock,
        )
        self._read_cursor: dict[tuple[str, int], int] = {}
        self._cursor_lock = threading.Lock()

    @classmethod
    def shared_or_new(
        cls,
        bootstrap: str | Sequence[str] | Client,
        attempt_timeout_s: float,
        *,
        tls: TlsOptions | None = None,
        token: str | None = None,
    ) -> tuple[Client, bool]:
        """``bootstrap`` itself if it is a client (shared: the caller must not close
        it; ``tls`` and ``token`` are its own then, and refused here), else a new one
        with ``tls`` and ``token`` that the caller owns; and whether the caller owns it."""
        if isinstance(bootstrap, Client):
            if tls is not None or token is not None:
                raise InvalidInputError(
                    "tls and token belong to the Client given as bootstrap: pass them to it"
                )
            return bootstrap, False
        return cls(bootstrap, attempt_timeout_s=attempt_timeout_s, tls=tls, token=token), True

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close every channel."""
        self.transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ produce

    def produce(
        self,
        topic: str,
        partition: int,
        batches: bytes | Sequence[bytes],
        *,
        acks: AcksMode = "all",
        timeout_s: float | None = None,
    ) -> list[int]:
        """Append encoded batches to a partition through its leader; their base offsets.

        Follows ``NOT_LEADER`` hints at once, tries the live replicas in turn when the
        leader is unknown or does not answer, and retries other retriable errors with
        backoff until the deadline (see :meth:`_with_retries`). A retry after a
        timeout can write a batch twice unless it carries a producer id and sequence
        (see :class:`~laminar_client.idempotent.IdempotentProducer`).
        """
        payload = [bytes(batches)] if isinstance(batches, bytes | bytearray) else list(batches)
        if not payload:
            raise InvalidInputError("produce needs at least one batch")
        acks_value = ACKS.get(acks)
        if acks_value is None:
            raise InvalidInputError(f"acks must be one of {sorted(ACKS)}, got {acks!r}")

        def attempt(address: str, remaining_s: float) -> list[int]:
            attempt_s = min(remaining_s, self.attempt_timeout_s)
            # The server gives up first, so that its answer (not our deadline) ends the attempt.
            server_timeout_s = max(attempt_s - _RESPONSE_MARGIN_S, attempt_s / 2)
            request = pb.ProduceRequest(
                topic=topic,
                partition=partition,
                batches=payload,
                acks=acks_value,
                timeout_ms=max(1, int(server_timeout_s * 1000)),
            )
            response = self._watched_call(
                address, "Produce", request, pb.ProduceResponse, attempt_s, [(topic, partition)]
            )
            return list(response.base_offsets)

        return self._with_retries(
            attempt, self._deadline(timeout_s), topic=topic, partition=partition
        )

    def _watched_call(
        self,
        address: str,
        method: str,
        request: Message,
        response_type: type[_M],
        attempt_s: float,
        keys: Sequence[tuple[str, int]],
    ) -> _M:
        """A write to the leader of ``keys`` at ``address``; while it has not been
        answered after ``leader_check_s``, abandoned (:class:`LeaderMovedError`) as
        soon as the other replicas name a new leader."""
        start = getattr(self.transport, "start", None)
        if self.leader_check_s is None or start is None or attempt_s <= self.leader_check_s:
            return self.transport.call(address, method, request, response_type, timeout_s=attempt_s)
        pending: PendingCall[_M] = start(
            address, method, request, response_type, timeout_s=attempt_s
        )
        ends_at = self._clock() + attempt_s
        wait_s = self.leader_check_s
        while True:
            response = pending.result(wait_s)
            if response is not None:
                return response
            remaining_s = ends_at - self._clock()
            if remaining_s <= 0:
                wait_s = 1.0  # gRPC's own deadline ends the call
                continue
            moved = self.cache.leader_moved(
                keys, address, min(remaining_s, self._metadata_timeout_s)
            )
            if moved is not None:
                pending.cancel()
                raise leader_moved_error(address, method, moved, keys)
            wait_s = LEADER_CHECK_INTERVAL_S

    # ------------------------------------------------------------------ fetch

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = DEFAULT_FETCH_BYTES_MAX,
        max_wait_s: float = 0.0,
        replica: str | None = None,
        timeout_s: float | None = None,
    ) -> FetchResult:
        """Read batches from ``offset`` on one replica.

        Without ``replica`` the live replicas take turns (round-robin from a random
        start), and one that does not answer is skipped for a while. ``replica`` (a
        node id, or a ``host:port`` address) pins the read to that node.
        ``max_wait_s`` makes the server wait for data at ``offset`` (long-poll, at
        most the node's ``fetch_wait_ms_max``, 30 s by default); an attempt may then
        take ``attempt_timeout_s`` plus that wait.
        """
        if offset < 0 or max_bytes < 0 or not 0 <= max_wait_s <= _FETCH_WAIT_S_MAX:
            raise InvalidInputError(
                f"offset and max_bytes must be >= 0, max_wait_s in [0, {_FETCH_WAIT_S_MAX}]"
            )
        max_wait_ms = int(max_wait_s * 1000)
        deadline = self._deadline(timeout_s)
        attempt_bound_s = self.attempt_timeout_s + max_wait_s

        def attempt(address: str, remaining_s: float) -> FetchResult:
            request = pb.FetchRequest(
                topic=topic,
                partition=partition,
                offset=offset,
                max_bytes=max_bytes,
                max_wait_ms=max_wait_ms,
            )
            timeout = min(remaining_s, attempt_bound_s)
            try:
                response = self.transport.call(
                    address, "Fetch", request, pb.FetchResponse, timeout_s=timeout
                )
            except OffsetOutOfRangeError as error:
                if error.offset < 0:
                    error.offset = offset  # the wire does not carry the requested offset
                raise
            return FetchResult(
                batches=response.batches,
                high_watermark=response.high_watermark,
                log_start_offset=response.log_start_offset,
                served_by=response.served_by,
            )

        if replica is not None:
            pinned = self._replica_address(replica, deadline)
            return self._with_retries(attempt, deadline, address=pinned)
        return self._with_retries(
            attempt, deadline, topic=topic, partition=partition, spread_reads=True
        )

    def watermarks(
        self, topic: str, partition: int, *, timeout_s: float | None = None
    ) -> Watermarks:
        """The partition's log start offset and high watermark, from one replica
        (:meth:`list_offsets`)."""
        offsets = self.list_offsets(topic, [partition], timeout_s=timeout_s)[partition]
        return Watermarks(offsets.log_start_offset, offsets.high_watermark)

    def list_offsets(
        self,
        topic: str,
        partitions: Sequence[int],
        *,
        timestamp_ms: int | None = None,
        timeout_s: float | None = None,
        leader: bool = False,
    ) -> dict[int, PartitionOffsets]:
        """Per partition (in the order given, a repeat answered once): its log start
        offset, high watermark and, with ``timestamp_ms``, the first offset below the
        high watermark whose record timestamp is at least ``timestamp_ms``.

        Routed like reads: each partition goes to one of its live replicas (they take
        turns, as for :meth:`fetch`), and partitions sent to the same node share one
        ``ListOffsets`` request. A replica answers from its own high watermark, which
        may trail the leader's by a heartbeat; ``leader=True`` asks each partition's
        leader first (what Kafka's ListOffsets answers: a record acknowledged before
        the call is below the high watermark it returns), its followers only when the
        leader does not answer. A partition that a node could not
        answer for a retriable reason (no replica there, or one out of service), or
        whose node did not answer, goes to its next replica at once; once every
        replica of every partition left was tried, the call backs off and starts a
        new round on fresh metadata. Gives up, raising that partition's last error,
        when the deadline passes, when a partition has had ``retry.attempts_max``
        attempts, on a non-retriable error, or on an unknown topic or partition that
        stays unknown for ``UNKNOWN_TOPIC_WAIT_S``.
        """
        wanted = list(dict.fromkeys(partitions))
        if not 1 <= len(wanted) <= LIST_OFFSETS_PARTITIONS_MAX:
            raise InvalidInputError(
                f"list_offsets needs 1 to {LIST_OFFSETS_PARTITIONS_MAX} partitions, "
                f"got {len(wanted)}"
            )
        if min(wanted) < 0:
            raise InvalidInputError(f"partitions must be >= 0, got {min(wanted)}")
        deadline = self._deadline(timeout_s)
        call = _OffsetsCall(wanted)
        backoffs = 0
        unknown_since: float | None = None
        while pending := call.pending():
            if deadline.remaining_s() <= 0:
                raise call.error()
            plan = self._offsets_plan(topic, pending, call, deadline, leader)
            for address, group in plan.items():
                if deadline.remaining_s() <= 0:
                    break  # an attempt with no time left would blame a healthy node
                self._ask_offsets(address, topic, group, timestamp_ms, call, deadline)
            for partition in call.pending():
                if call.attempts[partition] >= self.retry.attempts_max:
                    raise call.errors[partition]
            if plan:
                continue  # partitions that failed go to their next replica at once
            unknown = call.unknown()
            if unknown is not None:  # a new topic may not have reached every node yet
                unknown_since = self._clock() if unknown_since is None else unknown_since
                if self._clock() - unknown_since >= UNKNOWN_TOPIC_WAIT_S:
                    raise unknown
            refusing_s = self._check_refused(call.error())
            grace_left_s = None if refusing_s is None else self.connect_grace_s - refusing_s
            self._backoff(backoffs, deadline, call.error(), grace_left_s)
            backoffs += 1
            for partition in pending:
                call.tried[partition].clear()
        return {partition: call.answers[partition] for partition in wanted}

    def _offsets_plan(
        self,
        topic: str,
        pending: list[int],
        call: _OffsetsCall,
        deadline: Deadline,
        leader: bool,
    ) -> dict[str, list[int]]:
        """Per node, the pending partitions to ask it for: each partition's next
        replica not tried in this round (none left: it waits for the next round)."""
        plan: dict[str, list[int]] = {}
        try:  # one refresh (when stale) for all: the lookups below then read the cache
            self.cache.get(deadline.remaining_s(), focus=(topic, pending[0]))
        except RetriableError as error:
            call.failed(pending, None, error)
            return plan
        no_replica = False
        for partition in pending:
            try:
                if leader:
                    addresses = self.cache.write_targets(topic, partition, deadline.remaining_s())
                else:
                    addresses = self._read_addresses(topic, partition, deadline.remaining_s())
            except (RetriableError, UnknownTopicOrPartitionError) as error:
                call.failed([partition], None, error)
                no_replica = True
                continue
            untried = [a for a in addresses if a not in call.tried[partition]]
            if untried:
                plan.setdefault(untried[0], []).append(partition)
        if no_replica:  # the next round asks for new metadata
            self.cache.invalidate()
        return plan

    def _ask_offsets(
        self,
        address: str,
        topic: str,
        partitions: list[int],
        timestamp_ms: int | None,
        call: _OffsetsCall,
        deadline: Deadline,
    ) -> None:
        """One ``ListOffsets`` request to ``address``; its answers and errors go to ``call``."""
        request = pb.ListOffsetsRequest(topic=topic, partitions=partitions)
        if timestamp_ms is not None:
            request.timestamp_ms = timestamp_ms
        for partition in partitions:
            call.attempts[partition] += 1
        try:
            response = self.transport.call(
                address,
                "ListOffsets",
                request,
                pb.ListOffsetsResponse,
                timeout_s=max(0.0, min(deadline.remaining_s(), self.attempt_timeout_s)),
            )
        except NoAnswerError as error:
            self.cache.node_failed(address, error)
            call.failed(partitions, address, error)
            return
        except (RetriableError, UnknownTopicOrPartitionError) as error:
            self.cache.node_answered(address)
            self.cache.invalidate()
            call.failed(partitions, address, error)
            return
        self.cache.node_answered(address)
        entries = {entry.partition: entry for entry in response.partitions}
        for partition in partitions:
            entry = entries.get(partition)
            if entry is not None and not entry.HasField("error"):
                found = (
                    entry.offset_for_timestamp if entry.HasField("offset_for_timestamp") else None
                )
                call.answers[partition] = PartitionOffsets(
                    entry.log_start_offset, entry.high_watermark, found
                )
                continue
            failure = (
                error_from_detail(entry.error)
                if entry is not None
                else UnavailableError(f"{address} did not answer for {topic}/{partition}")
            )
            if not isinstance(failure, RetriableError | UnknownTopicOrPartitionError):
                raise failure
            self.cache.invalidate()
            call.failed([partition], address, failure)

    def records(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int | None = None,
        *,
        follow: bool = False,
        max_bytes: int = DEFAULT_FETCH_BYTES_MAX,
        max_wait_s: float = 1.0,
        replica: str | None = None,
    ) -> Iterator[Record]:
        """Yield records from offset ``start`` up to ``end`` (exclusive).

        Without ``follow`` it stops at ``end`` or at the high watermark, whichever is
        first; with ``follow`` it long-polls for new records until ``end`` (forever
        when ``end`` is None). Control batches are skipped.
        """
        offset = start
        while end is None or offset < end:
            result = self.fetch(
                topic,
                partition,
                offset,
                max_bytes=max_bytes,
                max_wait_s=max_wait_s if follow else 0.0,
                replica=replica,
            )
            before = offset
            for record in records_from(result.batches, offset):
                if end is not None and record.offset >= end:
                    return
                yield record
                offset = record.offset + 1
            if result.batches:
                offset = max(offset, next_offset(result.batches))
            if not follow and (offset == before or offset >= result.high_watermark):
                return

    # ------------------------------------------------------------------ admin

    def metadata(self, *, refresh: bool = False, timeout_s: float | None = None) -> ClusterMetadata:
        """The cached metadata snapshot (refreshed when stale, or when asked)."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        return self.cache.refresh(timeout) if refresh else self.cache.get(timeout)

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        *,
        retention_bytes: int | None = None,
        retention_s: float | None = None,
        settings: Mapping[str, int | float | str] | None = None,
        timeout_s: float | None = None,
    ) -> TopicMetadata:
        """Create a topic; :class:`~laminar.grpc_errors.TopicExistsError` if it exists.

        A setting left None takes the cluster's default, and the topic's
        :meth:`~TopicMetadata.source` says so: ``partitions`` the nodes'
        ``[service] default_partitions`` (1), ``replication_factor`` their
        ``default_replication_factor`` (3) capped at the live nodes with weight > 0,
        retention unlimited, ``cleanup_policy`` delete. ``retention_bytes`` (-1:
        unlimited) and ``retention_s`` (kept as whole milliseconds, at least 1)
        bound each partition's log by size and age. ``settings`` gives any other
        setting by name, as :meth:`alter_topic` takes them (``cleanup_policy``,
        ``delete_retention_ms``, ...). Not idempotent, so one attempt may take the
        whole deadline: a creation that was merely slow is not retried into
        ``TopicExistsError``.
        """
        if retention_s is not None and not 0 < retention_s < float("inf"):
            raise InvalidInputError(f"retention_s must be > 0 (None: unlimited), got {retention_s}")
        # A field left unset: the cluster's default.
        config = _settings_message(settings)
        given = {"replication_factor": replication_factor, "retention_bytes": retention_bytes}
        for field_name, value in [*given.items(), ("retention_ms", retention_s)]:
            if value is not None and config.HasField(field_name):
                raise InvalidInputError(f"{field_name} given twice (also in settings)")
        if partitions is not None:
            config.partitions = _uint32(partitions, "partitions")
        if replication_factor is not None:
            config.replication_factor = _uint32(replication_factor, "replication_factor")
        if retention_bytes is not None:
            config.retention_bytes = retention_bytes
        if retention_s is not None:
            config.retention_ms = max(1, round(retention_s * 1000))
        request = pb.CreateTopicRequest(name=name, config=config)
        response = self._admin(
            "CreateTopic", request, pb.CreateTopicResponse, timeout_s, whole_deadline=True
        )
        self.cache.invalidate()
        return TopicMetadata.from_proto(response.topic)

    def alter_topic(
        self,
        name: str,
        *,
        set: Mapping[str, int | float | str] | pb.TopicConfig | None = None,
        reset: Sequence[str] = (),
        validate_only: bool = False,
        timeout_s: float | None = None,
    ) -> AlteredTopic:
        """Change a topic's settings on every node, without a restart.

        ``set`` maps :data:`~laminar.topic_settings.ALTERABLE_SETTINGS` names to
        their new values (or is a ``TopicConfig`` message whose set fields are the
        changes); ``reset`` names settings that go back to the cluster's default.
        Retention (-1: unlimited) applies at the nodes' next retention check; a new
        ``replication_factor`` moves replicas one at a time. The node checks every
        value and refuses the whole request naming the field
        (:class:`~laminar.errors.InvalidTopicError` /
        :class:`~laminar.errors.InvalidInputError`); ``validate_only`` only checks,
        and answers what the topic would be. The answer comes from the metadata
        leader (other nodes redirect) once the change is applied there; other nodes
        apply it within a metadata round trip. ``partitions`` is refused here:
        :meth:`create_partitions` raises it.
        """
        config = _settings_message(set)
        for field_name in reset:
            if field_name not in ALTERABLE_SETTINGS:
                raise InvalidInputError(
                    f"cannot reset {field_name!r}: resettable settings are "
                    f"{', '.join(ALTERABLE_SETTINGS)}"
                )
            if config.HasField(field_name):
                raise InvalidInputError(f"{field_name} is both set and reset")
        if not config.ListFields() and not reset:
            raise InvalidInputError(f"nothing to change on topic {name!r}: set or reset a setting")
        request = pb.AlterTopicRequest(
            name=name, set=config, reset=list(dict.fromkeys(reset)), validate_only=validate_only
        )
        response = self._admin(
            "AlterTopic", request, pb.AlterTopicResponse, timeout_s, whole_deadline=True
        )
        if not validate_only:
            self.cache.invalidate()
        return AlteredTopic(
            topic=TopicMetadata.from_proto(response.topic),
            previous=TopicMetadata.from_proto(response.previous),
        )

    def create_partitions(
        self,
        name: str,
        to: int,
        *,
        validate_only: bool = False,
        timeout_s: float | None = None,
    ) -> AddedPartitions:
        """Raise the topic's partition count to ``to`` (more than it has, at most
        10,000); the new partitions are placed and founded like a new topic's.

        Keyed records map by ``hash mod partitions``, so from then on a share of
        the keys (:func:`~laminar_client.partitioner.moved_key_fraction`) go to
        another partition, as in Kafka: per-key order holds within each partition,
        not across the change. Producers see the new count within
        ``metadata_max_age_s`` (or at their first error), group members one
        heartbeat after their coordinator applies it (``docs/client.md``).
        ``validate_only`` only checks. ``to`` not above the current count:
        :class:`~laminar.errors.InvalidInputError`. One attempt may take the whole
        deadline (a retry after a slow success would be refused as not more).
        """
        request = pb.CreatePartitionsRequest(
            name=name, to=_uint32(to, "to"), validate_only=validate_only
        )
        response = self._admin(
            "CreatePartitions",
            request,
            pb.CreatePartitionsResponse,
            timeout_s,
            whole_deadline=True,
        )
        if not validate_only:
            self.cache.invalidate()
        return AddedPartitions(
            topic=TopicMetadata.from_proto(response.topic), previous=response.previous
        )

    def delete_topic(self, name: str, *, timeout_s: float | None = None) -> None:
        """Delete a topic and, on every replica, its data (one attempt: the whole deadline)."""
        request = pb.DeleteTopicRequest(name=name)
        self._admin("DeleteTopic", request, pb.DeleteTopicResponse, timeout_s, whole_deadline=True)
        self.cache.invalidate()

    def list_topics(self, *, timeout_s: float | None = None) -> list[TopicMetadata]:
        """Every topic with its settings and partitions, sorted by name."""
        response = self._admin(
            "ListTopics", pb.ListTopicsRequest(), pb.ListTopicsResponse, timeout_s
        )
        return sorted((TopicMetadata.from_proto(t) for t in response.topics), key=_name)

    def describe_cluster(self, *, timeout_s: float | None = None) -> ClusterDescription:
        """Members and the replication health of every partition.

        Each node reports the partitions it leads, so this asks every alive member
        (each within ``attempt_timeout_s``, even one skipped for not answering
        lately: this is an operator's view, complete rather than fast) and merges the
        answers; a partition of a known topic that nobody reports as leader is listed
        without a leader, under-replicated.
        """
        response = self._admin(
            "DescribeCluster",
            pb.DescribeClusterRequest(),
            pb.DescribeClusterResponse,
            timeout_s,
        )
        first = ClusterDescription.from_proto(response)
        deadline = self._deadline(timeout_s)
        found: dict[tuple[str, int], PartitionHealth] = {}
        fenced: list[FencedReplica] = []
        damaged: list[DamagedReplica] = []
        disks: list[NodeDisk] = []
        incompatible: list[IncompatiblePeer] = []
        for member in first.members:
            if member.state != "alive" or not member.grpc_address:
                continue
            if member.node_id == first.node_id:
                answer = first
            else:
                try:
                    answer = ClusterDescription.from_proto(
                        self.transport.call(
                            member.grpc_address,
                            "DescribeCluster",
                            pb.DescribeClusterRequest(),
                            pb.DescribeClusterResponse,
                            timeout_s=min(deadline.remaining_s(), self.attempt_timeout_s),
                        )
                    )
                except NoAnswerError:
                    self.cache.node_failed(member.grpc_address)
                    continue  # its partitions show up as leaderless
                except LaminarError:
                    continue
            fenced.extend(answer.fenced)
            damaged.extend(answer.damaged)
            disks.extend(answer.disks)
            incompatible.extend(answer.incompatible_peers)
            for health in answer.partitions:
                found.setdefault((health.topic, health.partition), health)
        with contextlib.suppress(LaminarError):
            snapshot = self.metadata(refresh=True, timeout_s=deadline.remaining_s())
            for topic in snapshot.topics.values():
                for partition in topic.partitions:
                    key = (topic.name, partition.partition)
                    if key not in found:
                        found[key] = PartitionHealth(
                            topic.name, partition.partition, None, partition.replicas, (), True
                        )
        partitions = tuple(
            found[key]
            for key in sorted(found)
            if not key[0].startswith("__")  # internal partitions are not the operator's
            or found[key].under_replicated
        )
        return replace(
            first,
            partitions=partitions,
            fenced=tuple(fenced),
            damaged=tuple(damaged),
            disks=tuple(disks),
            incompatible_peers=tuple(incompatible),
        )

    def set_maintenance(
        self, node_id: str, enter: bool, *, timeout_s: float | None = None
    ) -> tuple[str, ...]:
        """Put node ``node_id`` in maintenance (``enter``) or take it out; returns the
        nodes in maintenance once the change applied. Idempotent. In maintenance a
        node hands its leaderships to in-sync replicas and leads nothing, and while
        it is down its replicas stay for up to the nodes' ``maintenance_grace_ms``
        (instead of ``replica_move_grace_ms``); it catches up when it returns. The
        state is in the cluster metadata: it holds while the node is down, and only
        ``enter=False`` clears it."""
        request = pb.SetMaintenanceRequest(node_id=node_id, enter=enter)
        response = self._admin("SetMaintenance", request, pb.SetMaintenanceResponse, timeout_s)
        self.cache.invalidate()
        return tuple(response.maintenance)

    # ------------------------------------------------------------------ ACLs

    def create_acls(self, acls: Sequence[Acl], *, timeout_s: float | None = None) -> None:
        """Create ``acls`` (through the metadata leader; idempotent). Needs alter on
        the cluster when the cluster checks ACLs."""
        for acl in acls:
            acl.validate()
        request = pb.CreateAclsRequest(acls=[binding_of(acl) for acl in acls])
        self._admin("CreateAcls", request, pb.CreateAclsResponse, timeout_s)

    def list_acls(
        self, acl_filter: AclFilter | None = None, *, timeout_s: float | None = None
    ) -> list[Acl]:
        """The ACLs matching ``acl_filter`` (all without one), sorted."""
        request = pb.ListAclsRequest(filter=filter_message(acl_filter or AclFilter()))
        response = self._admin("ListAcls", request, pb.ListAclsResponse, timeout_s)
        return [acl_of(binding) for binding in response.acls]

    def delete_acls(
        self, filters: Sequence[AclFilter], *, timeout_s: float | None = None
    ) -> list[Acl]:
        """Delete every ACL matching any of ``filters``; the ACLs deleted."""
        for acl_filter in filters:
            acl_filter.validate()
        request = pb.DeleteAclsRequest(filters=[filter_message(f) for f in filters])
        response = self._admin("DeleteAcls", request, pb.DeleteAclsResponse, timeout_s)
        return [acl_of(binding) for binding in response.deleted]

    def recover_partition(
        self, topic: str, partition: int, *, timeout_s: float | None = None
    ) -> list[str]:
        """Accept data loss for a partition whose replicas are too damaged to elect a
        leader: every alive node whose replica of it heals from damaged storage lets
        it vote again with what it holds (acknowledged records the new leader lacks
        are lost). The nodes that did; refused when the partition has a leader (its
        damaged replicas then heal by themselves)."""
        snapshot = self.metadata(refresh=True, timeout_s=timeout_s)
        found = snapshot.find_partition(topic, partition)
        if found is None:
            raise UnknownTopicOrPartitionError(f"no partition {topic}/{partition}")
        if found.leader is not None:
            raise InvalidInputError(
                f"{topic}/{partition} has a leader ({found.leader}): its damaged replicas "
                "heal from it by themselves; nothing to recover"
            )
        deadline = self._deadline(timeout_s)
        request = pb.RecoverPartitionRequest(
            topic=topic, partition=partition, accept_data_loss=True
        )
        recovered = []
        for member in snapshot.members.values():
            if not member.live or not member.grpc_address:
                continue
            answer = self.transport.call(
                member.grpc_address,
                "RecoverPartition",
                request,
                pb.RecoverPartitionResponse,
                timeout_s=min(deadline.remaining_s(), self.attempt_timeout_s),
            )
            if answer.recovered:
                recovered.append(member.node_id)
        return recovered

    def update_node(
        self,
        address: str,
        *,
        weight: float | None = None,
        zone: str | None = None,
        timeout_s: float | None = None,
    ) -> MemberInfo:
        """Change the gossiped weight and/or zone of the node at ``address`` (weight 0 drains)."""
        if weight is None and zone is None:
            raise InvalidInputError("update_node needs a weight or a zone")
        request = pb.UpdateNodeRequest()
        if weight is not None:
            request.weight = weight
        if zone is not None:
            request.zone = zone

        def attempt(target: str, remaining_s: float) -> MemberInfo:
            response = self.transport.call(
                target,
                "UpdateNode",
                request,
                pb.UpdateNodeResponse,
                timeout_s=min(remaining_s, self.attempt_timeout_s),
            )
            self.cache.invalidate()
            return MemberInfo.from_proto(response.member)

        return self._with_retries(attempt, self._deadline(timeout_s), address=address)

    def gossip_keyring(
        self,
        address: str,
        action: KeyringAction = "list",
        *,
        key: bytes = b"",
        encrypt_verify_incoming: bool | None = None,
        encrypt_verify_outgoing: bool | None = None,
        timeout_s: float | None = None,
    ) -> GossipKeyring:
        """List or change the gossip keyring of the node at ``address``: ``install``,
        ``use`` (make primary) or ``remove`` ``key``, or ``set-verify`` either switch.
        Every change is idempotent, so it is retried like a read."""
        request = pb.GossipKeyringRequest(action=_KEYRING_ACTIONS[action], key=key)
        if encrypt_verify_incoming is not None:
            request.encrypt_verify_incoming = encrypt_verify_incoming
        if encrypt_verify_outgoing is not None:
            request.encrypt_verify_outgoing = encrypt_verify_outgoing

        def attempt(target: str, remaining_s: float) -> GossipKeyring:
            response = self.transport.call(
                target,
                "GossipKeyring",
                request,
                pb.GossipKeyringResponse,
                timeout_s=min(remaining_s, self.attempt_timeout_s),
            )
            return GossipKeyring.from_proto(response)

        return self._with_retries(attempt, self._deadline(timeout_s), address=address)

    # ------------------------------------------------------------------ groups

    def group_heartbeat(
        self, request: HeartbeatRequest, *, timeout_s: float | None = None
    ) -> HeartbeatAnswer:
        """One heartbeat to the group's coordinator; :class:`FencedMemberError` when
        the member is unknown at that epoch (drop everything, rejoin with epoch 0).
        Used by :class:`~laminar_client.groups.GroupSession`; call it directly only
        to drive :class:`laminar.groups.member.GroupMember` yourself."""
        response = self._group_call(
            request.group_id,
            "GroupHeartbeat",
            group_wire.heartbeat_to_proto(request),
            pb.GroupHeartbeatResponse,
            timeout_s,
        )
        return group_wire.answer_from_proto(request.group_id, response)

    def commit_offsets(
        self,
        group: str,
        member_id: str,
        member_epoch: int,
        offsets: Sequence[tuple[str, int, int, int, str]],
        *,
        timeout_s: float | None = None,
    ) -> dict[tuple[str, int], LaminarError | None]:
        """Commit (topic, partition, next offset, assignment epoch, metadata) of one
        member; per partition None (applied) or its typed error (FENCED: stale
        member or ownership; INVALID_INPUT: behind the committed offset). Retrying
        is safe: a repeated commit applies as a duplicate."""
        group_wire.check_partition_count(len(offsets), "a commit")
        request = pb.CommitOffsetsRequest(
            group=group,
            member_id=member_id,
            member_epoch=member_epoch,
            offsets=[
                pb.OffsetCommit(
                    topic=topic,
                    partition=partition,
                    next_offset=next_offset,
                    assignment_epoch=assignment_epoch,
                    metadata=metadata,
                )
                for topic, partition, next_offset, assignment_epoch, metadata in offsets
            ],
        )
        response = self._group_call(
            group, "CommitOffsets", request, pb.CommitOffsetsResponse, timeout_s
        )
        return group_wire.commit_results(response)

    def fetch_offsets(
        self,
        group: str,
        partitions: Sequence[tuple[str, int]] = (),
        *,
        timeout_s: float | None = None,
    ) -> list[group_wire.CommittedOffset]:
        """The committed positions of ``partitions`` (default: every committed one)."""
        if partitions:
            group_wire.check_partition_count(len(partitions), "an offset fetch")
        request = pb.FetchOffsetsRequest(
            group=group,
            partitions=[pb.TopicPartitionRef(topic=t, partition=p) for t, p in partitions],
        )
        response = self._group_call(
            group, "FetchOffsets", request, pb.FetchOffsetsResponse, timeout_s
        )
        return [
            group_wire.CommittedOffset(
                o.topic,
                o.partition,
                o.next_offset if o.HasField("next_offset") else None,
                o.metadata,
            )
            for o in response.offsets
        ]

    def leave_group(
        self, group: str, member_id: str, member_epoch: int = 0, *, timeout_s: float | None = None
    ) -> None:
        """Leave at once (its partitions move without waiting for the session)."""
        request = pb.LeaveGroupRequest(group=group, member_id=member_id, member_epoch=member_epoch)
        self._group_call(group, "LeaveGroup", request, pb.LeaveGroupResponse, timeout_s)

    def describe_group(
        self, group: str, *, timeout_s: float | None = None
    ) -> group_wire.GroupDescription:
        """Members, owners, targets and commits, from the group's coordinator."""
        request = pb.DescribeGroupRequest(group=group)
        response = self._group_call(
            group, "DescribeGroup", request, pb.DescribeGroupResponse, timeout_s
        )
        return group_wire.GroupDescription.from_proto(response)

    def reset_offsets(
        self,
        group: str,
        offsets: Mapping[tuple[str, int], int],
        *,
        timeout_s: float | None = None,
    ) -> None:
        """Set committed positions (any direction) of a group without members;
        :class:`GroupNotEmptyError` while it has some."""
        group_wire.check_partition_count(len(offsets), "a reset")
        request = pb.ResetOffsetsRequest(
            group=group,
            offsets=[
                pb.CommittedOffset(topic=t, partition=p, next_offset=o)
                for (t, p), o in sorted(offsets.items())
            ],
        )
        self._group_call(group, "ResetOffsets", request, pb.ResetOffsetsResponse, timeout_s)

    def delete_group(self, group: str, *, timeout_s: float | None = None) -> None:
        """Delete a group and its commits; :class:`GroupNotEmptyError` while it has
        members. Deleting a group that does not exist succeeds."""
        request = pb.DeleteGroupRequest(group=group)
        self._group_call(group, "DeleteGroup", request, pb.DeleteGroupResponse, timeout_s)

    def list_groups(self, *, timeout_s: float | None = None) -> list[group_wire.GroupSummary]:
        """Every group, sorted by name. Each node lists the groups it coordinates,
        so this asks every alive member (each within ``attempt_timeout_s``); a node
        that does not answer leaves its groups out."""
        deadline = self._deadline(timeout_s)
        snapshot = self.metadata(refresh=True, timeout_s=deadline.remaining_s())
        found: dict[str, group_wire.GroupSummary] = {}
        for _, member in sorted(snapshot.members.items()):
            if member.state != "alive" or not member.grpc_address:
                continue
            try:
                response = self.transport.call(
                    member.grpc_address,
                    "ListGroups",
                    pb.ListGroupsRequest(),
                    pb.ListGroupsResponse,
                    timeout_s=min(deadline.remaining_s(), self.attempt_timeout_s),
                )
            except NoAnswerError:
                self.cache.node_failed(member.grpc_address)
                continue
            except LaminarError:
                continue
            for item in response.groups:
                found.setdefault(
                    item.group,
                    group_wire.GroupSummary(
                        item.group, item.state, item.member_count, item.coordinator
                    ),
                )
        return [found[name] for name in sorted(found)]

    def _group_call(
        self,
        group: str,
        method: str,
        request: Message,
        response_type: type[_M],
        timeout_s: float | None,
    ) -> _M:
        """A call to ``group``'s coordinator, routed like a write of its partition."""
        if not group or len(group.encode()) > 255:
            raise InvalidInputError("a group name is 1 to 255 bytes")
        topic, partition = group_wire.group_partition(group)

        def attempt(address: str, remaining_s: float) -> _M:
            bound_s = min(remaining_s, self.attempt_timeout_s)
            return self.transport.call(address, method, request, response_type, timeout_s=bound_s)

        return self._with_retries(
            attempt, self._deadline(timeout_s), topic=topic, partition=partition
        )

    # ------------------------------------------------------------------ routing

    def _deadline(self, timeout_s: float | None) -> Deadline:
        return Deadline(self.timeout_s if timeout_s is None else timeout_s, self._clock)

    def _admin(
        self,
        method: str,
        request: Message,
        response_type: type[_M],
        timeout_s: float | None,
        *,
        whole_deadline: bool = False,
    ) -> _M:
        def attempt(address: str, remaining_s: float) -> _M:
            bound_s = remaining_s if whole_deadline else min(remaining_s, self.attempt_timeout_s)
            return self.transport.call(address, method, request, response_type, timeout_s=bound_s)

        return self._with_retries(attempt, self._deadline(timeout_s))

    def _replica_address(self, replica: str, deadline: Deadline) -> str:
        snapshot = self.cache.get(deadline.remaining_s())
        address = snapshot.address_of(replica)
        if address is not None:
            return address
        if ":" in replica:
            return replica
        raise UnknownTopicOrPartitionError(f"unknown node {replica!r}")

    def _read_addresses(self, topic: str, partition: int, timeout_s: float) -> list[str]:
        """The partition's usable replica addresses, rotated so that reads take turns."""
        addresses = self.cache.read_targets(topic, partition, timeout_s)
        with self._cursor_lock:
            key = (topic, partition)
            cursor = self._read_cursor.get(key)
            if cursor is None:
                cursor = self._rng.randrange(len(addresses))
            self._read_cursor[key] = cursor + 1
        start = cursor % len(addresses)
        return addresses[start:] + addresses[:start]

    def _round(
        self, topic: str | None, partition: int, spread_reads: bool, deadline: Deadline
    ) -> list[str]:
        """The candidates of one round of attempts (never empty; raises instead)."""
        if topic is None:
            return [self.cache.any_address()]
        if spread_reads:
            return self._read_addresses(topic, partition, deadline.remaining_s())
        return self.cache.write_targets(topic, partition, deadline.remaining_s())

    def _with_retries(
        self,
        attempt: Callable[[str, float], _T],
        deadline: Deadline,
        *,
        topic: str | None = None,
        partition: int = 0,
        address: str | None = None,
        spread_reads: bool = False,
    ) -> _T:
        """Run ``attempt(address, remaining_s)`` until it succeeds or must give up.

        The target is ``address`` when pinned. Otherwise attempts go in *rounds*: a
        round's candidates are, for writes, the partition's leader, or its live
        replicas in turn when the leader is unknown or skipped
        (:meth:`MetadataCache.write_targets`); for reads the replicas in turn; for
        admin calls any node. Within a round:

        - ``NOT_LEADER`` with a hint is followed at once (at most
          ``redirects_max`` times), unless the hint points at a node that failed
          in this round, is skipped, or is known dead;
        - a node that did not answer is skipped for a while
          (:mod:`laminar_client.health`);
        - after any retriable error the next candidate is tried at once.

        When a round of one candidate ends because it did not answer or is not the
        leader, the next round starts at once (it walks the replicas instead, or
        follows fresh metadata); any other round ends with a backoff (with jitter).
        A new round reads metadata again when an error made it stale. Every attempt
        counts towards ``attempts_max``; the deadline bounds everything.
        """
        policy = self.retry
        attempts = redirects = backoffs = 0
        redirect: str | None = None
        candidates: list[str] = []
        round_size = 0
        failed_this_round: set[str] = set()
        rebuilt_at_once = False
        unknown_since: float | None = None
        last_error: LaminarError | None = None
        while True:
            if last_error is not None and deadline.remaining_s() <= 0:
                raise last_error
            attempts += 1
            target: str | None = None
            move_on = False
            try:
                if redirect is not None:
                    target, redirect = redirect, None
                elif address is not None:
                    target = address
                else:
                    if not candidates:
                        candidates = self._round(topic, partition, spread_reads, deadline)
                        round_size = len(candidates)
                    target = candidates.pop(0)
                result = attempt(target, deadline.remaining_s())
            except NotLeaderError as error:
                assert target is not None
                self.cache.node_answered(target)
                failed_this_round.add(target)
                hint = error.leader_address
                if (
                    hint
                    and address is None
                    and redirects < policy.redirects_max
                    and attempts < policy.attempts_max
                    and hint not in failed_this_round
                    and self.cache.hint_usable(error.leader_id, hint)
                ):
                    redirects += 1
                    redirect = hint
                    if topic is not None and not spread_reads:
                        self.cache.hint_leader(topic, partition, hint)
                    continue
                self.cache.drop_hints_to(target)
                self.cache.invalidate()
                last_error = error
                move_on = True
            except UnknownTopicOrPartitionError as error:
                # A topic created a moment ago may not have reached every node yet:
                # retry (with backoff) for up to UNKNOWN_TOPIC_WAIT_S, as Kafka's
                # clients wait for a topic's metadata, then give up.
                now = self._clock()
                if unknown_since is None:
                    unknown_since = now
                if topic is None or now - unknown_since >= UNKNOWN_TOPIC_WAIT_S:
                    raise
                if target is not None:
                    self.cache.node_answered(target)
                self.cache.invalidate()
                last_error = error
            except NoAnswerError as error:
                assert target is not None
                if not isinstance(error, LeaderMovedError):
                    # An abandoned attempt says nothing against the node (it may be
                    # a replica holding the write through an election): not skipped.
                    self.cache.node_failed(target, error)
                failed_this_round.add(target)
                last_error = error
                move_on = True
            except RetriableError as error:
                if target is not None:  # else the metadata lookup failed
                    self.cache.node_answered(target)
                    self.cache.drop_hints_to(target)
                    failed_this_round.add(target)
                self.cache.invalidate()
                last_error = error
            else:
                self.cache.node_answered(target)
                return result
            refusing_s = self._check_refused(last_error)
            if attempts >= policy.attempts_max:
                raise last_error
            if candidates:
                continue  # the round goes on with the next candidate
            if move_on and round_size == 1 and address is None and not rebuilt_at_once:
                rebuilt_at_once = True  # the one candidate is out: the next round differs
                continue
            # While every address refuses, look again as soon as the grace is over.
            grace_left_s = None if refusing_s is None else self.connect_grace_s - refusing_s
            self._backoff(backoffs, deadline, last_error, grace_left_s)
            backoffs += 1
            rebuilt_at_once = False
            failed_this_round.clear()

    def _check_refused(self, error: LaminarError) -> float | None:
        """Raise :class:`ClusterUnreachableError` (from ``error``) once every bootstrap
        address has refused this client for ``connect_grace_s`` and none ever
        answered; else how long they have all refused (None: they have not)."""
        refused = self.cache.refused_everywhere()
        if refused is None:
            return None
        refusing_s, reasons = refused
        if refusing_s < self.connect_grace_s:
            return refusing_s
        raise cluster_unreachable(reasons) from error

    def _backoff(
        self,
        backoffs: int,
        deadline: Deadline,
        error: LaminarError,
        delay_max_s: float | None = None,
    ) -> None:
        """Wait before the next round (at most ``delay_max_s``), or raise ``error`` if
        the deadline would pass."""
        delay_s = self.retry.backoff_ms(backoffs, self._rng) / 1000
        if delay_max_s is not None:
            delay_s = max(0.0, min(delay_s, delay_max_s))
        if deadline.remaining_s() <= delay_s:
            raise error
        self._sleep(delay_s)


def _uint32(value: int, name: str) -> int:
    """``value`` for a ``uint32`` field; :class:`InvalidInputError` outside it (the
    node judges the range that matters)."""
    if not 0 <= value < 1 << 32:
        raise InvalidInputError(f"{name} must be a positive integer, got {value}")
    return value


_INT_SETTINGS = frozenset(ALTERABLE_SETTINGS) - {"cleanup_policy", "min_cleanable_dirty_ratio"}


def _settings_message(
    settings: Mapping[str, int | float | str] | pb.TopicConfig | None,
) -> pb.TopicConfig:
    """The ``TopicConfig`` of an :meth:`Client.alter_topic` request: only the fields
    to change set. Names and types are checked here; the node judges the values."""
    if isinstance(settings, pb.TopicConfig):
        if settings.HasField("partitions"):
            raise InvalidInputError(_PARTITIONS_NOT_ALTERABLE)
        config = pb.TopicConfig()
        config.CopyFrom(settings)
        return config
    config = pb.TopicConfig()
    for name, value in (settings or {}).items():
        if name == "partitions":
            raise InvalidInputError(_PARTITIONS_NOT_ALTERABLE)
        if name not in ALTERABLE_SETTINGS:
            raise InvalidInputError(
                f"unknown topic setting {name!r}: alterable settings are "
                f"{', '.join(ALTERABLE_SETTINGS)}"
            )
        if name == "cleanup_policy":
            if not isinstance(value, str):
                raise InvalidInputError(f"cleanup_policy must be a string, got {value!r}")
            config.cleanup_policy = value
        elif name == "min_cleanable_dirty_ratio":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidInputError(f"{name} must be a number, got {value!r}")
            config.min_cleanable_dirty_ratio = float(value)
        else:
            assert name in _INT_SETTINGS
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidInputError(f"{name} must be an integer, got {value!r}")
            if name == "replication_factor":
                config.replication_factor = _uint32(value, name)
            elif not -(1 << 63) <= value < 1 << 63:
                raise InvalidInputError(f"{name} out of range: {value}")
            else:
                setattr(config, name, value)
    return config


_PARTITIONS_NOT_ALTERABLE = (
    "partitions cannot be altered: create_partitions raises the count (it never shrinks)"
)


def _name(topic: TopicMetadata) -> str:
    return topic.name

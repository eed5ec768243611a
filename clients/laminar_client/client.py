"""The synchronous client: routing, retries and the public API calls.

Layers, bottom up:

- :class:`~laminar_client.transport.Transport` — channels and one typed call;
- :class:`MetadataCache` — the current :class:`ClusterMetadata`, refreshed from
  any reachable node when stale or after an error, plus leader hints learned from
  ``NOT_LEADER`` errors;
- :class:`Client` — produce to the leader, fetch from any replica, admin calls.

Later API objects (a batching producer, consumer groups) sit beside
:class:`Client` on the same transport and cache.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

from google.protobuf.message import Message

from laminar.errors import (
    InvalidInputError,
    LaminarError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RetriableError,
    UnavailableError,
    UnknownTopicOrPartitionError,
)
from laminar.records import Record, decode_records, iter_batches, next_offset
from laminar.v1 import laminar_pb2 as pb
from laminar_client.metadata import (
    ClusterDescription,
    ClusterMetadata,
    MemberInfo,
    PartitionHealth,
    TopicConfig,
    TopicMetadata,
)
from laminar_client.retry import RetryPolicy
from laminar_client.transport import Transport

AcksMode = Literal["all", "leader", "none"]
ACKS: dict[str, pb.Acks] = {"all": pb.ACKS_ALL, "leader": pb.ACKS_LEADER, "none": pb.ACKS_NONE}

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_FETCH_BYTES_MAX = 4 * 1024 * 1024
_METADATA_RPC_TIMEOUT_S = 5.0
# Room for the answer to travel back after the server's own timeout or long-poll.
_RESPONSE_MARGIN_S = 0.5

_T = TypeVar("_T")
_M = TypeVar("_M", bound=Message)


def _bootstrap_list(bootstrap: str | Sequence[str]) -> list[str]:
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = [item.strip() for item in items if item.strip()]
    if not addresses:
        raise InvalidInputError("bootstrap needs at least one host:port address")
    return addresses


@dataclass(frozen=True, slots=True)
class FetchResult:
    """One fetch: whole batches (possibly starting before the requested offset)."""

    batches: bytes
    high_watermark: int
    log_start_offset: int
    served_by: str

    def records(self, offset_min: int = 0) -> list[Record]:
        """The data records at or after ``offset_min`` (control batches skipped)."""
        return list(_records_from(self.batches, offset_min))


@dataclass(frozen=True, slots=True)
class Watermarks:
    """A partition's readable range: ``[log_start_offset, high_watermark)``."""

    log_start_offset: int
    high_watermark: int


def _records_from(batches: bytes, offset_min: int) -> Iterator[Record]:
    view = memoryview(batches)
    for position, header in iter_batches(view):
        if header.next_offset <= offset_min or header.is_control:
            continue
        for record in decode_records(view[position : position + header.length], verify=False):
            if record.offset >= offset_min:
                yield record


class _Deadline:
    """A point in monotonic time after which a call gives up."""

    __slots__ = ("_at_s", "_clock")

    def __init__(self, timeout_s: float, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._at_s = clock() + timeout_s

    def remaining_s(self) -> float:
        return self._at_s - self._clock()


_FAILED_ADDRESS_S = 5.0
"""A node that failed a call is skipped by :meth:`MetadataCache.any_address` this long."""


class MetadataCache:
    """The client's view of the cluster, refreshed from any reachable node.

    A snapshot older than ``max_age_s`` is refreshed on next use; errors call
    :meth:`invalidate`. Leader hints from ``NOT_LEADER`` errors override the
    snapshot's leader for a partition until they fail. Thread-safe.
    """

    def __init__(
        self,
        transport: Transport,
        bootstrap: Sequence[str],
        *,
        max_age_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._transport = transport
        self._bootstrap = list(bootstrap)
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._snapshot: ClusterMetadata | None = None
        self._fetched_at_s = 0.0
        self._stale = True
        self._last_good_address: str | None = None
        self._leader_hints: dict[tuple[str, int], str] = {}
        self._failed_at_s: dict[str, float] = {}

    def get(self, timeout_s: float) -> ClusterMetadata:
        """The current snapshot, refreshed first if missing, stale or invalidated."""
        with self._lock:
            snapshot = self._snapshot
            fresh = not self._stale and self._clock() - self._fetched_at_s < self._max_age_s
        if snapshot is not None and fresh:
            return snapshot
        return self.refresh(timeout_s)

    def refresh(self, timeout_s: float) -> ClusterMetadata:
        """Ask the nodes in turn (last good first) until one answers ``Metadata``."""
        deadline = _Deadline(timeout_s, self._clock)
        errors: list[str] = []
        for address in self._candidates():
            remaining_s = deadline.remaining_s()
            if remaining_s <= 0:
                break
            try:
                response = self._transport.call(
                    address,
                    "Metadata",
                    pb.MetadataRequest(),
                    pb.MetadataResponse,
                    timeout_s=min(remaining_s, _METADATA_RPC_TIMEOUT_S),
                )
            except LaminarError as error:
                errors.append(str(error))
                continue
            snapshot = ClusterMetadata.from_proto(response)
            with self._lock:
                self._snapshot = snapshot
                self._fetched_at_s = self._clock()
                self._stale = False
                self._last_good_address = address
            return snapshot
        detail = "; ".join(errors[-3:]) or "deadline passed"
        raise UnavailableError(f"no node answered a metadata request ({detail})")

    def invalidate(self) -> None:
        """Refresh on next use."""
        with self._lock:
            self._stale = True

    def any_address(self) -> str:
        """A node to send a call that any node can answer.

        The last node that answered; else the known nodes in turn, skipping those
        that failed recently (all of them failed: the one that failed longest ago).
        """
        with self._lock:
            if self._last_good_address is not None:
                return self._last_good_address
            failed = dict(self._failed_at_s)
        candidates = self._candidates()
        now = self._clock()
        healthy = [a for a in candidates if now - failed.get(a, -1e9) > _FAILED_ADDRESS_S]
        if healthy:
            return healthy[0]
        return min(candidates, key=lambda a: failed.get(a, -1e9))

    def forget_address(self, address: str) -> None:
        """``address`` failed: prefer another node and drop hints that point at it."""
        with self._lock:
            self._failed_at_s[address] = self._clock()
            if self._last_good_address == address:
                self._last_good_address = None
            self._leader_hints = {
                key: hint for key, hint in self._leader_hints.items() if hint != address
            }
            self._stale = True

    def hint_leader(self, topic: str, partition: int, address: str) -> None:
        with self._lock:
            self._leader_hints[(topic, partition)] = address

    def leader_address(self, topic: str, partition: int, timeout_s: float) -> str:
        """Where to send a write: the hinted leader, the known leader, or placement's first."""
        with self._lock:
            hint = self._leader_hints.get((topic, partition))
        if hint is not None:
            return hint
        snapshot = self.get(timeout_s)
        leader = snapshot.preferred_leader(topic, partition)
        address = snapshot.address_of(leader) if leader is not None else None
        if address is None:
            raise UnavailableError(f"no known leader address for {topic}/{partition}")
        return address

    def _candidates(self) -> list[str]:
        with self._lock:
            first = [self._last_good_address] if self._last_good_address else []
            members = self._snapshot.grpc_addresses() if self._snapshot is not None else []
        ordered = [*first, *members, *self._bootstrap]
        return list(dict.fromkeys(ordered))


class Client:
    """A synchronous Laminar client.

    ``bootstrap`` is one ``host:port`` gRPC address, a comma-separated list, or a
    list; any node will do. ``timeout_s`` is the default deadline of a whole call,
    retries included. ``retry`` bounds the retries; ``metadata_max_age_s`` is how
    long a metadata snapshot is trusted when nothing failed. ``rng`` drives jitter
    and replica choice (pass a seeded one for reproducible tests).

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        metadata_max_age_s: float = 60.0,
        rng: random.Random | None = None,
        transport: Transport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if timeout_s <= 0:
            raise InvalidInputError("timeout_s must be > 0")
        self.timeout_s = timeout_s
        self.retry = retry if retry is not None else RetryPolicy()
        self._rng = rng if rng is not None else random.Random()
        self._sleep = sleep
        self._clock = clock
        self.transport = transport if transport is not None else Transport()
        self.cache = MetadataCache(
            self.transport,
            _bootstrap_list(bootstrap),
            max_age_s=metadata_max_age_s,
            clock=clock,
        )
        self._read_cursor: dict[tuple[str, int], int] = {}
        self._cursor_lock = threading.Lock()

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

        Follows ``NOT_LEADER`` hints at once and retries other retriable errors with
        backoff until the deadline. A retry after a timeout can write a batch twice
        unless it carries a producer id and sequence (see
        :class:`~laminar_client.producer.IdempotentProducer`).
        """
        payload = [bytes(batches)] if isinstance(batches, bytes | bytearray) else list(batches)
        if not payload:
            raise InvalidInputError("produce needs at least one batch")
        acks_value = ACKS.get(acks)
        if acks_value is None:
            raise InvalidInputError(f"acks must be one of {sorted(ACKS)}, got {acks!r}")

        def attempt(address: str, remaining_s: float) -> list[int]:
            server_timeout_s = max(remaining_s - _RESPONSE_MARGIN_S, remaining_s / 2)
            request = pb.ProduceRequest(
                topic=topic,
                partition=partition,
                batches=payload,
                acks=acks_value,
                timeout_ms=max(1, int(server_timeout_s * 1000)),
            )
            response = self.transport.call(
                address, "Produce", request, pb.ProduceResponse, timeout_s=remaining_s
            )
            return list(response.base_offsets)

        return self._with_retries(
            attempt, self._deadline(timeout_s), topic=topic, partition=partition
        )

    # ------------------------------------------------------------------ fetch

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = DEFAULT_FETCH_BYTES_MAX,
        max_wait_ms: int = 0,
        replica: str | None = None,
        timeout_s: float | None = None,
    ) -> FetchResult:
        """Read batches from ``offset`` on one replica.

        Without ``replica`` the replicas take turns (round-robin from a random
        start), and a failing one is skipped. ``replica`` (a node id, or a
        ``host:port`` address) pins the read to that node. ``max_wait_ms`` makes the
        server wait for data at ``offset`` (long-poll).
        """
        if offset < 0 or max_bytes < 0 or max_wait_ms < 0:
            raise InvalidInputError("offset, max_bytes and max_wait_ms must be >= 0")
        deadline = self._deadline(timeout_s)
        rpc_timeout_extra_s = max_wait_ms / 1000 + _RESPONSE_MARGIN_S

        def attempt(address: str, remaining_s: float) -> FetchResult:
            request = pb.FetchRequest(
                topic=topic,
                partition=partition,
                offset=offset,
                max_bytes=max_bytes,
                max_wait_ms=max_wait_ms,
            )
            timeout = min(remaining_s, self.timeout_s + rpc_timeout_extra_s)
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
        """The partition's log start offset and high watermark, from one replica."""
        try:
            result = self.fetch(topic, partition, 0, max_bytes=1, timeout_s=timeout_s)
        except OffsetOutOfRangeError as error:
            result = self.fetch(
                topic, partition, error.start_offset, max_bytes=1, timeout_s=timeout_s
            )
        return Watermarks(result.log_start_offset, result.high_watermark)

    def records(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int | None = None,
        *,
        follow: bool = False,
        max_bytes: int = DEFAULT_FETCH_BYTES_MAX,
        max_wait_ms: int = 1_000,
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
                max_wait_ms=max_wait_ms if follow else 0,
                replica=replica,
            )
            before = offset
            for record in _records_from(result.batches, offset):
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
        partitions: int,
        replication_factor: int,
        *,
        retention_bytes: int = -1,
        retention_ms: int = -1,
        timeout_s: float | None = None,
    ) -> TopicMetadata:
        """Create a topic; :class:`~laminar.grpc_errors.TopicExistsError` if it exists."""
        config = TopicConfig(partitions, replication_factor, retention_bytes, retention_ms)
        request = pb.CreateTopicRequest(name=name, config=config.to_proto())
        response = self._admin("CreateTopic", request, pb.CreateTopicResponse, timeout_s)
        self.cache.invalidate()
        return TopicMetadata.from_proto(response.topic)

    def delete_topic(self, name: str, *, timeout_s: float | None = None) -> None:
        """Delete a topic and, on every replica, its data."""
        request = pb.DeleteTopicRequest(name=name)
        self._admin("DeleteTopic", request, pb.DeleteTopicResponse, timeout_s)
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
        and merges the answers; a partition of a known topic that nobody reports as
        leader is listed without a leader, under-replicated.
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
                            timeout_s=min(deadline.remaining_s(), 5.0),
                        )
                    )
                except LaminarError:
                    continue  # unreachable: its partitions show up as leaderless
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
        return replace(first, partitions=partitions)

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
                target, "UpdateNode", request, pb.UpdateNodeResponse, timeout_s=remaining_s
            )
            self.cache.invalidate()
            return MemberInfo.from_proto(response.member)

        return self._with_retries(attempt, self._deadline(timeout_s), address=address)

    # ------------------------------------------------------------------ routing

    def _deadline(self, timeout_s: float | None) -> _Deadline:
        return _Deadline(self.timeout_s if timeout_s is None else timeout_s, self._clock)

    def _admin(
        self,
        method: str,
        request: Message,
        response_type: type[_M],
        timeout_s: float | None,
    ) -> _M:
        def attempt(address: str, remaining_s: float) -> _M:
            return self.transport.call(
                address, method, request, response_type, timeout_s=remaining_s
            )

        return self._with_retries(attempt, self._deadline(timeout_s))

    def _replica_address(self, replica: str, deadline: _Deadline) -> str:
        snapshot = self.cache.get(deadline.remaining_s())
        address = snapshot.address_of(replica)
        if address is not None:
            return address
        if ":" in replica:
            return replica
        raise UnknownTopicOrPartitionError(f"unknown node {replica!r}")

    def _read_addresses(self, topic: str, partition: int, timeout_s: float) -> list[str]:
        """The partition's replica addresses, rotated so that reads take turns."""
        snapshot = self.cache.get(timeout_s)
        addresses = [
            address
            for node_id in snapshot.replicas_of(topic, partition)
            if (address := snapshot.address_of(node_id)) is not None
        ]
        if not addresses:
            raise UnavailableError(f"no reachable replica known for {topic}/{partition}")
        with self._cursor_lock:
            key = (topic, partition)
            cursor = self._read_cursor.get(key)
            if cursor is None:
                cursor = self._rng.randrange(len(addresses))
            self._read_cursor[key] = cursor + 1
        start = cursor % len(addresses)
        return addresses[start:] + addresses[:start]

    def _with_retries(
        self,
        attempt: Callable[[str, float], _T],
        deadline: _Deadline,
        *,
        topic: str | None = None,
        partition: int = 0,
        address: str | None = None,
        spread_reads: bool = False,
    ) -> _T:
        """Run ``attempt(address, remaining_s)`` until it succeeds or must give up.

        The target is ``address`` when pinned; else the partition's leader (writes)
        or its replicas in turn (``spread_reads``); else any node (admin calls).
        """
        policy = self.retry
        redirect: str | None = None
        redirects = 0
        retries = 0
        refreshed_for_unknown = False
        read_queue: list[str] = []
        last_error: LaminarError | None = None
        while True:
            if last_error is not None and deadline.remaining_s() <= 0:
                raise last_error
            target = address or redirect
            redirect = None
            try:
                if target is None:
                    if spread_reads and topic is not None:
                        if not read_queue:
                            read_queue = self._read_addresses(
                                topic, partition, deadline.remaining_s()
                            )
                        target = read_queue.pop(0)
                    elif topic is not None:
                        target = self.cache.leader_address(topic, partition, deadline.remaining_s())
                    else:
                        target = self.cache.any_address()
                return attempt(target, deadline.remaining_s())
            except NotLeaderError as error:
                hint = error.leader_address
                if hint and hint != target and redirects < policy.redirects_max and not address:
                    redirects += 1
                    redirect = hint
                    if topic is not None and not spread_reads:
                        self.cache.hint_leader(topic, partition, hint)
                    continue
                last_error = error
                if target is not None:
                    self.cache.forget_address(target)
            except UnknownTopicOrPartitionError as error:
                # A topic created a moment ago may not have reached every node yet.
                if refreshed_for_unknown or topic is None:
                    raise
                refreshed_for_unknown = True
                self.cache.invalidate()
                last_error = error
            except RetriableError as error:
                last_error = error
                if target is not None:
                    self.cache.forget_address(target)
            if spread_reads and read_queue:
                continue  # try the next replica at once
            self._backoff(retries, deadline, last_error)
            retries += 1

    def _backoff(self, retries: int, deadline: _Deadline, error: LaminarError) -> None:
        """Wait before the next attempt, or raise ``error`` if no attempt is left."""
        if retries + 1 >= self.retry.attempts_max:
            raise error
        delay_s = self.retry.backoff_ms(retries, self._rng) / 1000
        if deadline.remaining_s() <= delay_s:
            raise error
        self._sleep(delay_s)


def _name(topic: TopicMetadata) -> str:
    return topic.name

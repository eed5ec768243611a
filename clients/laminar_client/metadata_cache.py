"""The client's view of the cluster (:class:`MetadataCache`): the current
:class:`~laminar_client.metadata.ClusterMetadata`, merged from the answers of
several nodes (a partition's own replicas first) when stale or after an error,
leader hints learned from ``NOT_LEADER`` errors, and which nodes to skip because
they did not answer lately. Below :class:`~laminar_client.client.Client` and the
producer, which share one per client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from laminar.errors import (
    AuthenticationError,
    ClusterUnreachableError,
    InvalidInputError,
    LaminarError,
    LeaderMovedError,
    UnavailableError,
)
from laminar.v1 import laminar_pb2 as pb
from laminar_client.health import NodeHealth
from laminar_client.metadata import (
    ClusterMetadata,
    answers_settled,
    merge_answers,
    no_older_than,
)
from laminar_client.retry import RetryPolicy
from laminar_client.transport import (
    NoAnswerError,
    NodeRefusedError,
    TlsHandshakeError,
    UnaryTransport,
)

DEFAULT_METADATA_TIMEOUT_S = 1.0
"""Deadline of one ``Metadata`` RPC: a node that cannot answer this in a second is
not the one to learn the cluster from."""
LEADER_CHECK_INTERVAL_S = 0.25
DEFAULT_METADATA_ANSWERS_MAX = 4
"""Most nodes whose ``Metadata`` answers one refresh merges: the three replicas of a
partition (replication factor 3) and one node, answering first, that hosts none."""
_LEADER_HINTS_MAX = 65_536
"""Most remembered ``NOT_LEADER`` hints; beyond it they are all dropped (metadata remains)."""

_TLS_REASON = "TLS handshake failed: "


class Deadline:
    """A point in monotonic time after which a call gives up."""

    __slots__ = ("_at_s", "_clock")

    def __init__(self, timeout_s: float, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._at_s = clock() + timeout_s

    def remaining_s(self) -> float:
        return self._at_s - self._clock()


def leader_moved_error(
    address: str, method: str, moved: str, keys: Sequence[tuple[str, int]]
) -> LeaderMovedError:
    """The error for an attempt abandoned because ``moved`` leads now."""
    topic, partition = keys[0]
    return LeaderMovedError(
        f"{address}: no answer to {method} while {moved} leads {topic}/{partition} "
        "now: abandoned (it may have been written)"
    )


def cluster_unreachable(reasons: dict[str, str]) -> ClusterUnreachableError | TlsHandshakeError:
    """The error for bootstrap addresses that all refused (address -> reason): a
    :class:`TlsHandshakeError` if any failed at the TLS handshake (its cause says
    what to fix), else a :class:`ClusterUnreachableError`."""
    listed = ", ".join(f"{address} ({reason})" for address, reason in reasons.items())
    handshakes = [reason for reason in reasons.values() if reason.startswith(_TLS_REASON)]
    if handshakes:
        cause = handshakes[0][len(_TLS_REASON) :]
        if len(set(reasons.values())) == 1:  # one reason: said once
            listed = f"{', '.join(reasons)}: {cause}"
        return TlsHandshakeError(
            f"TLS handshake failed with every bootstrap address: {listed}", cause=cause
        )
    return ClusterUnreachableError(
        f"no Laminar node answered at {listed}: is the cluster running there?",
        addresses=tuple(reasons),
    )


class MetadataCache:
    """The client's view of the cluster, merged from the answers of several nodes.

    **When.** A snapshot older than ``max_age_s`` is refreshed on next use; errors
    call :meth:`invalidate`. Concurrent refreshes are one: a caller that waited for
    another's refresh uses its result.

    **From whom.** A refresh asks nodes one at a time, each bounded by
    ``metadata_timeout_s``, skipping nodes that recently gave no answer (unless no
    node answered yet), until :func:`~laminar_client.metadata.answers_settled` or
    ``answers_max`` answers. With a *focus* partition (the one a call is about) it
    asks that partition's live replicas first, followers before the leader they
    name, because only a node that hosts a partition knows its leader, and a
    deposed leader may still name itself; then the last node that answered, the
    members and the bootstrap list. The answers are merged by
    :func:`~laminar_client.metadata.merge_answers`.

    **Never backwards.** A refresh whose answers have applied less of the catalogue
    (a lower ``metadata_offset``) than the snapshot held keeps the held topics
    (:func:`~laminar_client.metadata.no_older_than`): a partition count never
    shrinks in this client's view, nor does a setting go back.

    **Leader hints** from ``NOT_LEADER`` errors override the snapshot's leader for a
    partition until the hinted node fails or a refresh names a live leader.

    **Node health** (:class:`~laminar_client.health.NodeHealth`) is kept here, under
    the same lock: callers report each node's answer or failure. Thread-safe.
    """

    def __init__(
        self,
        transport: UnaryTransport,
        bootstrap: Sequence[str],
        *,
        max_age_s: float,
        retry: RetryPolicy | None = None,
        metadata_timeout_s: float = DEFAULT_METADATA_TIMEOUT_S,
        answers_max: int = DEFAULT_METADATA_ANSWERS_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if metadata_timeout_s <= 0 or answers_max < 1:
            raise InvalidInputError("need metadata_timeout_s > 0 and answers_max >= 1")
        self._transport = transport
        self._bootstrap = list(bootstrap)
        self._max_age_s = max_age_s
        self._metadata_timeout_s = metadata_timeout_s
        self._answers_max = answers_max
        self._clock = clock
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._refreshes_started = 0  # refreshes begun (a count, under _lock)
        self._latest_refresh_started = 0  # the number of the last one that completed
        self._snapshot: ClusterMetadata | None = None
        self._generation = 0
        self._fetched_at_s = 0.0
        self._stale = True
        self._last_good_address: str | None = None
        self._leader_hints: dict[tuple[str, int], str] = {}
        self._health = NodeHealth(retry if retry is not None else RetryPolicy())
        self._ever_answered = False
        # Addresses whose connections were refused (or names did not resolve) in a
        # row: when the streak began, and in what words (see refused_everywhere).
        self._refused: dict[str, tuple[float, str]] = {}

    # ------------------------------------------------------------------ snapshots

    @property
    def generation(self) -> int:
        """How many refreshes have completed (a caller notices new metadata by it)."""
        return self._generation

    def held(self) -> ClusterMetadata | None:
        """The snapshot held now, however old (None before the first refresh)."""
        with self._lock:
            return self._snapshot

    def fresh(self) -> bool:
        """Whether a snapshot is held that :meth:`get` would return without a refresh."""
        with self._lock:
            return (
                self._snapshot is not None
                and not self._stale
                and self._clock() - self._fetched_at_s < self._max_age_s
            )

    def refreshed_within(self, age_s: float) -> bool:
        """Whether a refresh completed in the last ``age_s`` seconds (stale since or
        not): a caller that can live with that answer need not ask again."""
        with self._lock:
            return self._snapshot is not None and self._clock() - self._fetched_at_s < age_s

    def get(self, timeout_s: float, focus: tuple[str, int] | None = None) -> ClusterMetadata:
        """The current snapshot, refreshed first (about ``focus``) if missing or stale."""
        with self._lock:
            snapshot = self._snapshot
            fresh = not self._stale and self._clock() - self._fetched_at_s < self._max_age_s
        if snapshot is not None and fresh:
            return snapshot
        return self.refresh(timeout_s, focus)

    def refresh(
        self,
        timeout_s: float,
        focus: tuple[str, int] | None = None,
        *,
        avoid: str | None = None,
    ) -> ClusterMetadata:
        """Ask nodes for ``Metadata`` (see the class docstring) and keep the merged
        answer; never ``avoid`` (a node known not to answer now)."""
        deadline = Deadline(timeout_s, self._clock)
        with self._lock:
            generation = self._generation
            asked = self._refreshes_started
        if not self._refresh_lock.acquire(timeout=max(0.0, deadline.remaining_s())):
            raise UnavailableError("timed out waiting for another metadata refresh")
        try:
            with self._lock:
                snapshot = self._snapshot
                if snapshot is not None and (
                    self._latest_refresh_started > asked
                    or (self._generation != generation and not self._stale)
                ):
                    # Another caller refreshed while this one waited: its answer is as
                    # new as the one this call asked for, even if an error marked it
                    # stale since (during a failover hundreds of callers would
                    # otherwise refresh one after another).
                    return snapshot
                self._refreshes_started += 1
                started = self._refreshes_started
            snapshot = self._refresh(deadline, focus, avoid)
            with self._lock:
                self._latest_refresh_started = started
            return snapshot
        finally:
            self._refresh_lock.release()

    def invalidate(self) -> None:
        """Refresh on next use."""
        with self._lock:
            self._stale = True

    # ------------------------------------------------------------------ node health

    def node_answered(self, address: str) -> None:
        """``address`` answered (a result or its own error): it is reachable."""
        with self._lock:
            self._health.answered(address)
            self._last_good_address = address
            self._ever_answered = True
            self._refused.pop(address, None)

    def node_failed(self, address: str, error: BaseException | None = None) -> None:
        """``address`` did not answer (``error``, when known, says how): skip it for a
        while and drop hints that point at it."""
        with self._lock:
            now = self._clock()
            if isinstance(error, TlsHandshakeError):
                reason = _TLS_REASON + error.cause
                since = self._refused.get(address, (now, reason))[0]
                self._refused[address] = (since, reason)
            elif isinstance(error, NodeRefusedError):
                reason = "name not resolved" if "resolv" in str(error) else "connection refused"
                since = self._refused.get(address, (now, reason))[0]
                self._refused[address] = (since, reason)
            else:
                self._refused.pop(address, None)
            self._health.failed(address, now)
            if self._last_good_address == address:
                self._last_good_address = None
            self._drop_hints_to(address)
            self._stale = True

    def refused_everywhere(self) -> tuple[float, dict[str, str]] | None:
        """While no node has ever answered this client and every bootstrap address
        refused its last connection (or did not resolve): how long since the first
        of those refusals, and each address's reason; else None."""
        with self._lock:
            if self._ever_answered:
                return None
            refused = {a: self._refused.get(a) for a in dict.fromkeys(self._bootstrap)}
            if not refused or any(streak is None for streak in refused.values()):
                return None
            first = min(streak[0] for streak in refused.values() if streak is not None)
            reasons = {a: streak[1] for a, streak in refused.items() if streak is not None}
            return self._clock() - first, reasons

    def leader_moved(
        self, keys: Sequence[tuple[str, int]], address: str, timeout_s: float
    ) -> str | None:
        """Ask the replicas again (about the first of ``keys``) whether a live node
        other than the one at ``address`` leads any of ``keys`` now: its address, or
        None (the same leader, an election under way, or no answer in time). At most
        one refresh per :data:`LEADER_CHECK_INTERVAL_S`: during a failover thousands
        of writes wait at once, and each refreshing in turn (full metadata, merged)
        took the CPU the elections needed (a 1,000-partition failover: 7.4 s, not
        under 5)."""
        held = self.held()
        if held is not None and self.refreshed_within(LEADER_CHECK_INTERVAL_S):
            snapshot = held  # one refresh serves every write waiting meanwhile
        else:
            try:  # not from the silent node itself: its answer would wait out the timeout
                snapshot = self.refresh(timeout_s, keys[0], avoid=address)
            except LaminarError:
                return None
        for topic, partition in keys:
            if snapshot.find_partition(topic, partition) is None:
                continue
            leader = snapshot.live_leader(topic, partition)
            moved = snapshot.address_of(leader) if leader is not None else None
            if moved is not None and moved != address:
                return moved
        return None

    def skipped(self, address: str) -> bool:
        """Whether ``address`` failed recently and is avoided while others are left."""
        with self._lock:
            return self._health.skipped(address, self._clock())

    def usable(self, addresses: Sequence[str]) -> list[str]:
        """``addresses`` not skipped, in order; if all are, the one whose skip ends first."""
        with self._lock:
            return self._health.usable(addresses, self._clock())

    # ------------------------------------------------------------------ routing

    def hint_leader(self, topic: str, partition: int, address: str) -> None:
        """Send writes for the partition to ``address`` (a ``NOT_LEADER`` hint)."""
        with self._lock:
            if len(self._leader_hints) >= _LEADER_HINTS_MAX:
                self._leader_hints.clear()
            self._leader_hints[(topic, partition)] = address

    def drop_hints_to(self, address: str) -> None:
        """Forget the hints that point at ``address`` (it failed as a leader)."""
        with self._lock:
            self._drop_hints_to(address)

    def hint_usable(self, leader_id: str | None, address: str) -> bool:
        """Whether a ``NOT_LEADER`` hint is worth following: not skipped, not known dead."""
        with self._lock:
            if self._health.skipped(address, self._clock()):
                return False
            snapshot = self._snapshot
        return snapshot is None or not leader_id or snapshot.is_live(leader_id)

    def write_targets(
        self, topic: str, partition: int, timeout_s: float, *, refresh: bool = True
    ) -> list[str]:
        """Where to send a write, in order.

        The hinted or known live leader when it is not skipped; else the live
        replicas in placement order (one that is not the leader redirects with a
        hint, or says it knows none), skipped ones only when nothing else is left.
        ``refresh=False`` uses the snapshot held, however old (the asyncio producer
        refreshes in a thread first, so that its loop never blocks here).
        """
        snapshot = self._held(timeout_s, (topic, partition), refresh)
        with self._lock:
            now = self._clock()
            key = (topic, partition)
            hint = self._leader_hints.get(key)
            if hint is not None and not self._health.skipped(hint, now):
                return [hint]
            internal = topic.startswith("__") and snapshot.find_partition(*key) is None
            if not internal:
                leader = snapshot.live_leader(topic, partition)
                address = snapshot.address_of(leader) if leader is not None else None
                if address is not None and not self._health.skipped(address, now):
                    return [address]
                replicas = _addresses(snapshot, snapshot.live_replicas(topic, partition))
                targets = self._health.usable(replicas, now)
        if internal:
            # Internal partitions (``__groups``) are not in the metadata: any node
            # answers NOT_LEADER with the leader's address, which becomes the hint.
            return [self.any_address()]
        if not targets:
            raise UnavailableError(f"no live replica known for {topic}/{partition}")
        return targets

    def read_targets(
        self, topic: str, partition: int, timeout_s: float, *, refresh: bool = True
    ) -> list[str]:
        """The partition's live replicas in placement order, skipped ones left out
        (``refresh``: as for :meth:`write_targets`)."""
        snapshot = self._held(timeout_s, (topic, partition), refresh)
        targets = self.usable(_addresses(snapshot, snapshot.live_replicas(topic, partition)))
        if not targets:
            raise UnavailableError(f"no reachable replica known for {topic}/{partition}")
        return targets

    def any_address(self) -> str:
        """A node to send a call that any node can answer.

        The last node that answered unless it is skipped; else the known nodes in
        turn, skipping those that failed recently (all of them failed: the one whose
        skip ends first).
        """
        with self._lock:
            snapshot = self._snapshot
            last_good = self._last_good_address
            members = snapshot.grpc_addresses() if snapshot is not None else []
            ordered = [*([last_good] if last_good else []), *members, *self._bootstrap]
            return self._health.usable(ordered, self._clock())[0]

    def _held(self, timeout_s: float, focus: tuple[str, int], refresh: bool) -> ClusterMetadata:
        if refresh:
            return self.get(timeout_s, focus=focus)
        with self._lock:
            snapshot = self._snapshot
        if snapshot is None:
            raise UnavailableError("no metadata yet")
        return snapshot

    # ------------------------------------------------------------------ refresh

    def _refresh(
        self, deadline: Deadline, focus: tuple[str, int] | None, avoid: str | None = None
    ) -> ClusterMetadata:
        answers: list[ClusterMetadata] = []
        asked: set[str] = {avoid} if avoid is not None else set()
        errors: list[str] = []
        while len(answers) < self._answers_max and not answers_settled(answers, focus):
            address = self._next_source(answers, asked, focus)
            remaining_s = deadline.remaining_s()
            if address is None or remaining_s <= 0:
                break
            asked.add(address)
            try:
                response = self._transport.call(
                    address,
                    "Metadata",
                    pb.MetadataRequest(),
                    pb.MetadataResponse,
                    timeout_s=min(remaining_s, self._metadata_timeout_s),
                )
            except NoAnswerError as error:
                self.node_failed(address, error)
                errors.append(str(error))
                continue
            except AuthenticationError:
                raise  # the credentials: every node would refuse them alike
            except LaminarError as error:
                self.node_answered(address)
                errors.append(str(error))
                continue
            self.node_answered(address)
            answer = ClusterMetadata.from_proto(response)
            if answers and answer.cluster_id != answers[0].cluster_id:
                errors.append(f"{address}: belongs to cluster {answer.cluster_id!r}")
                continue
            answers.append(answer)
        if not answers:
            refused = self.refused_everywhere()
            if refused is not None:  # nothing listens at any address: say so plainly
                raise cluster_unreachable(refused[1])
            detail = "; ".join(errors[-3:]) or "deadline passed"
            raise UnavailableError(f"no node answered a metadata request ({detail})")
        with self._lock:
            snapshot = no_older_than(self._snapshot, merge_answers(answers))
            self._forgive_returned(self._snapshot, snapshot)
            self._snapshot = snapshot
            self._generation += 1
            self._fetched_at_s = self._clock()
            self._stale = False
            # A hint gives way to a newer snapshot that names a live leader.
            self._leader_hints = {
                key: hint
                for key, hint in self._leader_hints.items()
                if snapshot.find_partition(*key) is None or snapshot.live_leader(*key) is None
            }
        return snapshot

    def _next_source(
        self,
        answers: Sequence[ClusterMetadata],
        asked: set[str],
        focus: tuple[str, int] | None,
    ) -> str | None:
        """The next node to ask for metadata, or None when more answers would not help."""
        with self._lock:
            now = self._clock()
            known = merge_answers(answers) if answers else self._snapshot

            def fresh(addresses: Sequence[str]) -> list[str]:
                return [
                    a
                    for a in dict.fromkeys(addresses)
                    if a not in asked and not self._health.skipped(a, now)
                ]

            if focus is not None and known is not None and known.find_partition(*focus):
                hosts = fresh(_focus_sources(known, focus))
                if hosts:
                    return hosts[0]
                if answers:
                    return None  # the partition's replicas were all asked or are skipped
            last_good = [self._last_good_address] if self._last_good_address else []
            members = known.grpc_addresses() if known is not None else []
            general = [*last_good, *members, *self._bootstrap]
            others = fresh(general)
            if others:
                return others[0]
            if answers:
                return None
            # Nothing answered yet and every node is skipped: try them anyway.
            skipped = [a for a in self._health.by_skip_end(general, now) if a not in asked]
            return skipped[0] if skipped else None

    def _forgive_returned(self, before: ClusterMetadata | None, after: ClusterMetadata) -> None:
        """Stop skipping members that gossip shows back: live with a higher incarnation
        (a node refutes its suspicion or death so), as they may lead again at once.

        A state alone that turns live is not enough: answers from different nodes
        can disagree about a member while its death spreads."""
        if before is None:
            return
        for node_id, member in after.members.items():
            old = before.members.get(node_id)
            if old is None or not member.live or not member.grpc_address:
                continue
            if member.incarnation > old.incarnation:
                self._health.answered(member.grpc_address)

    def _drop_hints_to(self, address: str) -> None:
        self._leader_hints = {
            key: hint for key, hint in self._leader_hints.items() if hint != address
        }


def _addresses(snapshot: ClusterMetadata, node_ids: Sequence[str]) -> list[str]:
    return [address for node_id in node_ids if (address := snapshot.address_of(node_id))]


def _focus_sources(snapshot: ClusterMetadata, focus: tuple[str, int]) -> list[str]:
    """The partition's replicas to ask for metadata, in order.

    Live followers first, then the leader they name (a deposed leader may still
    name itself), then replicas called dead: one that answers is up after all,
    and asking costs at most ``metadata_timeout_s`` before it is skipped.
    """
    info = snapshot.partition(*focus)
    everyone = dict.fromkeys((*snapshot.replicas_of(*focus), *info.voters))
    live = [node for node in everyone if snapshot.is_live(node)]
    ordered = [node for node in live if node != info.leader]
    ordered += [node for node in live if node == info.leader]
    ordered += [node for node in everyone if not snapshot.is_live(node)]
    return _addresses(snapshot, ordered)

"""Consumer groups on a node: the shell around :mod:`laminar.groups`.

Theory of operation
===================

Group state lives in the internal topic ``__groups`` (:data:`GROUPS_PARTITIONS`
partitions, replicated like any topic with up to :data:`GROUPS_REPLICATION_MAX`
replicas); group ``g`` lives in partition ``key_partition(g.encode(), 8)``. The
node that leads ``__cluster/0`` creates the topic (see :mod:`laminar.server.node`).

On **every replica** of a ``__groups`` partition, a :class:`GroupPartition` applies
the committed entries in log order to a :class:`~laminar.groups.state.GroupState`
(control batches skipped), woken by the host's commit callback, the way the
metadata follower applies ``__cluster/0``. Applying is where entries are
validated, so every replica reaches the same verdicts and a new leader already
holds the complete state when it takes over.

On the **leader**, a :class:`~laminar.groups.coordinator.Coordinator` per partition
decides what to append. The gRPC handlers call :class:`GroupHost`, which (1) waits
until this node leads the partition, has committed an entry of its own term and
applied everything up to its high watermark (so a new leader's state includes
every entry of earlier terms), (2) asks the coordinator for entries, appends them
through the normal produce path (acks=all), waits until they are applied here and
reads their outcomes, repeating as the coordinator's contract says, and (3)
answers from the applied state. A leader whose term changed builds a new
coordinator from the applied state: heartbeats live only in memory, so every
member gets a fresh session. :meth:`GroupHost.tick` (the node's periodic task)
expires members, fences owners that do not release, and hands out free
partitions.

Heartbeats of one partition are serialised by a lock (the coordinator's view of
who heard when is not shared between concurrent rounds); commits need no
coordinator and are appended without it: the log orders them against every other
entry, and applying decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial

from laminar.errors import (
    InvalidInputError,
    LaminarError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RequestTimeoutError,
)
from laminar.groups.coordinator import (
    PREPARE_ROUNDS_MAX,
    Coordinator,
    HeartbeatAnswer,
    HeartbeatRequest,
)
from laminar.groups.entries import (
    Commit,
    Delete,
    GroupEntry,
    Join,
    Reset,
    encode_entry,
    encode_snapshot_chunk,
)
from laminar.groups.replay import GroupReplay, snapshot_due
from laminar.groups.state import ApplyResult, Group, GroupState, Outcome, SnapshotBuilder
from laminar.ids import TopicPartition
from laminar.logfields import fields
from laminar.partitioning import key_partition
from laminar.records import decode_records, encode_batch, iter_batches
from laminar.replica.core import ReplicaCore
from laminar.replica.types import Acks
from laminar.server.host import Replica, ReplicaHost
from laminar.snapshots import split_snapshot

_LOG = logging.getLogger(__name__)

GROUPS_TOPIC = "__groups"
"""The internal topic holding every consumer group's log."""

GROUPS_PARTITIONS = 8
"""Partitions of ``__groups``: fixed for the cluster's life, since a group's
partition is a function of it (changing it would move every group)."""

GROUPS_REPLICATION_MAX = 3
"""Replicas of each ``__groups`` partition (fewer while the cluster has fewer nodes:
placement gives what the members allow and adds replicas as nodes join)."""

TICK_INTERVAL_MS = 100
"""How often the node runs every coordinator's tick: expiry happens at most this
late after a session ends (sessions are at least 100 ms)."""

READ_BYTES_MAX = 1 << 20
"""The most of a ``__groups`` log read for applying at once."""

READS_PER_PASS_MAX = 16
"""Reads applied per pass of the event loop; a replica far behind (a new one
catching up) continues in the next pass instead of blocking the loop."""

RESULTS_KEPT_MAX = 100_000
"""Outcomes of applied entries kept by offset for the calls that appended them, at
most (oldest dropped first). Outcomes are kept only while a call of this node waits
for its own, and a call takes (forgets) them as it reads them, so this bound is
reached only by many concurrent calls."""

SNAPSHOT_GROUPS_PER_STEP = 200
"""Groups a snapshot captures per pass of the event loop (about 3 ms for groups of
a few partitions; 100,000 groups take ~1.5 s of such steps), so a large state is
captured without stalling the node."""

APPEND_BATCH_BYTES_MAX = 1 << 20
"""Entries appended together are split into batches of at most this many bytes."""

_WAIT_POLL_S = 0.05
"""How often a wait re-checks what no event announces (a lost leadership)."""


_GROUP_KEYS = tuple((GROUPS_TOPIC, index) for index in range(GROUPS_PARTITIONS))
"""Every ``__groups`` partition: the loops look these up rather than scanning (and
sorting) every replica of the node, which costs ~1% CPU at 3,000 replicas."""


def group_partition(group_id: str) -> TopicPartition:
    """The ``__groups`` partition that holds ``group_id``."""
    return (GROUPS_TOPIC, key_partition(group_id.encode(), GROUPS_PARTITIONS))


def group_status(group: Group | None) -> str:
    """``dead`` (no such group), ``empty`` (no members), ``stable`` (every partition
    owned by its target member) or ``reconciling`` (partitions moving)."""
    if group is None:
        return "dead"
    if not group.members:
        return "empty"
    target = group.target()
    for tp, key in target.items():
        owner = group.owners.get(tp)
        if owner is None or group.members[owner.member_id].key != key:
            return "reconciling"
    return "stable"


class GroupPartition:
    """One local replica of a ``__groups`` partition and the state applied from it.

    ``advance_start(offset)`` asks the replica's core to delete its log below
    ``offset`` (called once a snapshot as of ``offset`` is applied here); ``wake()``
    asks for :meth:`catch_up` to run soon (a restore on a thread finished).
    """

    def __init__(
        self,
        key: TopicPartition,
        replica: Replica,
        advance_start: Callable[[int], None],
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.key = key
        self.replica = replica
        self._advance_start = advance_start
        self._wake = wake
        self.replay = self._new_replay()
        self._restoring: asyncio.Task[None] | None = None
        self.coordinator: Coordinator | None = None
        self.coordinator_term = -1
        self.lock = asyncio.Lock()
        self.snapshot_task: asyncio.Task[None] | None = None
        self._appending = 0
        """Appends of this node waiting for their outcomes: only then are outcomes kept."""
        self._results: OrderedDict[int, ApplyResult | None] = OrderedDict()
        self._applied = asyncio.Event()

    @property
    def core(self) -> ReplicaCore:
        return self.replica.core

    @property
    def state(self) -> GroupState:
        return self.replay.state

    @property
    def applied_offset(self) -> int:
        """The state is as of this offset (-1 while rebuilding from a snapshot)."""
        return self.replay.applied_offset

    def catch_up(self) -> bool:
        """Apply committed entries; True when more remain (call again next pass)."""
        core = self.core
        if self.replay.read_offset < core.start_offset:
            # The log start passed what was applied (the leader sent its start): the
            # entries in between are gone, rebuild from the snapshot after the start.
            _LOG.info(
                "%s/%d: log starts at %d past the applied %d: rebuilding group state",
                *self.key,
                core.start_offset,
                self.replay.read_offset,
                extra=fields(self.key),
            )
            self.replay = self._new_replay()
            self.coordinator = None
            self._results.clear()
        start = self.replay.read_offset
        for _ in range(READS_PER_PASS_MAX):
            if self.replay.pending_restore is not None:
                return False  # the restore's end wakes us
            if self.replay.read_offset >= core.high_watermark:
                break
            data = core.read(self.replay.read_offset, READ_BYTES_MAX)
            if not data:
                break
            self._apply_read(data)
        if self.replay.read_offset != start:
            self._applied.set()
            self._applied = asyncio.Event()
        return self.replay.read_offset < core.high_watermark

    def _new_replay(self) -> GroupReplay:
        return GroupReplay(self.replica.core.start_offset, restore_inline=False)

    async def _restore(self, replay: GroupReplay) -> None:
        """Decode the snapshot seeking found, on a thread (100,000 groups take
        seconds), then continue applying from its ``as_of_offset``."""
        complete = replay.pending_restore
        assert complete is not None and complete.payload is not None
        try:
            state: GroupState | None = await asyncio.to_thread(
                GroupState.restore_payload, complete.payload
            )
        except InvalidInputError as error:
            _LOG.error(
                "%s/%d: snapshot does not restore: %s", *self.key, error, extra=fields(self.key)
            )
            state = None
        if replay is not self.replay:
            return  # rebuilt again meanwhile
        for problem in replay.finish_restore(state):
            _LOG.error("%s/%d: %s", *self.key, problem, extra=fields(self.key))
        if replay.restored_from is complete:
            _LOG.info(
                "%s/%d: restored group state from the snapshot as of %d (%d bytes, "
                "log start %d), replaying from there",
                *self.key,
                complete.as_of_offset,
                complete.snapshot_bytes,
                replay.start_offset,
                extra=fields(self.key),
            )
        self._wake()

    def _apply_read(self, data: bytes) -> None:
        replay = self.replay
        for position, header in iter_batches(data, verify=False):
            if header.next_offset <= replay.read_offset:
                continue
            records: list[tuple[int, bytes]] = []
            if not header.is_control:
                batch = data[position : position + header.length]
                records = [
                    (record.offset, record.value or b"")
                    for record in decode_records(batch, verify=False)
                ]
            out = replay.apply_batch(header.base_offset, header.next_offset, records)
            for error in out.errors:
                _LOG.error("%s/%d: %s", *self.key, error, extra=fields(self.key))
            if self._appending:
                for offset, result in out.results:
                    self._results[offset] = result
                while len(self._results) > RESULTS_KEPT_MAX:
                    self._results.popitem(last=False)
            for snapshot in out.snapshots:
                self._advance_start(snapshot.as_of_offset)
            if out.restart:
                if replay.pending_restore is not None:
                    self._restoring = asyncio.get_running_loop().create_task(
                        self._restore(replay), name=f"restore {self.key[0]}/{self.key[1]}"
                    )
                return  # the rest of this read is before the new read offset

    def take_result(self, offset: int) -> ApplyResult | None:
        """The outcome of the entry at ``offset``, forgotten once taken (None: not an
        entry, or not kept)."""
        return self._results.pop(offset, None)

    @contextlib.contextmanager
    def appending(self) -> Iterator[None]:
        """Keep outcomes while the caller's append waits for them."""
        self._appending += 1
        try:
            yield
        finally:
            self._appending -= 1
            if not self._appending:
                self._results.clear()  # of appends that gave up waiting

    async def wait_applied(self, offset: int, deadline: float) -> None:
        """Wait until entries below ``offset`` are applied; RequestTimeoutError."""
        loop = asyncio.get_running_loop()
        while self.applied_offset < offset:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise RequestTimeoutError(
                    f"{self.key[0]}/{self.key[1]}: committed but not applied in time"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._applied.wait(), min(remaining, _WAIT_POLL_S))


class GroupHost:
    """Every ``__groups`` replica of this node, and a coordinator on each it leads.

    ``catalogue()`` maps each user topic to its partition count (the node's
    metadata view); ``address_of(node_id)`` is a node's gRPC address for
    ``NOT_LEADER`` hints.
    """

    def __init__(
        self,
        host: ReplicaHost,
        catalogue: Callable[[], Mapping[str, int]],
        address_of: Callable[[str | None], str | None],
    ) -> None:
        self._host = host
        self._catalogue = catalogue
        self._address_of = address_of
        self._partitions: dict[TopicPartition, GroupPartition] = {}
        self._pending: set[TopicPartition] = set()

    # ------------------------------------------------------------------ applying

    def committed(self, key: TopicPartition) -> None:
        """The host committed more of ``key``: apply it soon (not inside the host's
        round, which is still handing out its results)."""
        if key not in self._pending:
            self._pending.add(key)
            asyncio.get_running_loop().call_soon(self._catch_up, key)

    def _catch_up(self, key: TopicPartition) -> None:
        self._pending.discard(key)
        part = self.partition(key)
        if part is None:
            return
        try:
            more = part.catch_up()
        except OffsetOutOfRangeError as error:
            # The start moved between the check and the read: next pass rebuilds.
            _LOG.info("%s/%d: log start moved while applying: %s", *key, error, extra=fields(key))
            more = True
        if more:
            self.committed(key)

    def partition(self, key: TopicPartition) -> GroupPartition | None:
        """The state of the local replica of ``key``; rebuilt from offset 0 when the
        replica was replaced (deleted and reopened), dropped when it is gone.
        (Rebuilt from the log start: offset 0, or the first snapshot after it.)"""
        replica = self._host.get(key)
        part = self._partitions.get(key)
        if replica is None:
            self._partitions.pop(key, None)
            return None
        if part is None or part.replica is not replica:
            part = self._partitions[key] = GroupPartition(
                key, replica, partial(self._host.advance_start, key), partial(self.committed, key)
            )
        return part

    # ------------------------------------------------------------------ leadership

    def _not_leader(self, part: GroupPartition) -> NotLeaderError:
        leader = part.core.leader
        name = None if leader is None else str(leader)
        return NotLeaderError(name, self._address_of(name))

    async def _ready(self, key: TopicPartition, deadline: float) -> GroupPartition:
        """The partition, once this node leads it with a complete applied state."""
        loop = asyncio.get_running_loop()
        while True:
            part = self.partition(key)
            if part is None:
                raise NotLeaderError(None, None)
            core = part.core
            if core.leader is not None and str(core.leader) != str(core.node_id):
                raise self._not_leader(part)
            if core.term_committed:
                part.catch_up()
                if part.applied_offset >= core.high_watermark:
                    return part
            if loop.time() >= deadline:
                if core.leader is None:
                    raise NotLeaderError(None, None)
                raise RequestTimeoutError(f"{key[0]}/{key[1]}: leader not ready in time")
            await part.wait_applied(part.applied_offset + 1, min(deadline, loop.time() + 0.05))

    def _coordinator(self, part: GroupPartition) -> Coordinator:
        term = part.core.term
        if part.coordinator is None or part.coordinator_term != term:
            _LOG.info(
                "%s/%d: coordinating (term %d)", *part.key, term, extra=fields(part.key, term=term)
            )
            part.coordinator = Coordinator(part.state, self._host.now_ms())
            part.coordinator_term = term
        return part.coordinator

    def _user_catalogue(self) -> dict[str, int]:
        return {
            name: count for name, count in self._catalogue().items() if not name.startswith("__")
        }

    # ------------------------------------------------------------------ writing

    async def _append(
        self, part: GroupPartition, entries: Sequence[GroupEntry], deadline: float
    ) -> list[ApplyResult | None]:
        """Append ``entries`` (acks=all), wait until applied here, return outcomes."""
        results: list[ApplyResult | None] = []
        with part.appending():
            for values in _chunks([encode_entry(entry) for entry in entries]):
                base = await self._produce(part, values, deadline)
                end = base + len(values)
                await part.wait_applied(end, deadline)
                results.extend(part.take_result(offset) for offset in range(base, end))
        return results

    async def _produce(self, part: GroupPartition, values: list[bytes], deadline: float) -> int:
        """Append ``values`` as one batch (acks=all) by ``deadline``; its base offset."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise RequestTimeoutError(f"{part.key[0]}/{part.key[1]}: not committed in time")
        produced = await self._host.produce(part.key, encode_batch(values), Acks.ALL, remaining)
        return produced.base_offset

    # ------------------------------------------------------------------ snapshots

    def _maybe_snapshot(self, part: GroupPartition, timeout_s: float) -> None:
        """Start writing a snapshot of a led partition when one is due (see
        :func:`~laminar.groups.replay.snapshot_due`); one at a time per partition."""
        if part.snapshot_task is not None and not part.snapshot_task.done():
            return
        replay = part.replay
        if replay.seeking or not snapshot_due(
            replay.bytes_since_snapshot,
            replay.last_snapshot_bytes,
            self._host.config.snapshot_bytes_floor,
        ):
            return
        part.snapshot_task = asyncio.get_running_loop().create_task(
            self._write_snapshot(part, timeout_s), name=f"snapshot {part.key[0]}/{part.key[1]}"
        )

    async def _write_snapshot(self, part: GroupPartition, timeout_s: float) -> None:
        """Capture the state as of now (a few groups per loop pass, while entries keep
        applying) and append it in chunks; abandoned (a torn snapshot, ignored by
        readers) if the leadership or the state changes meanwhile."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        core, state, term = part.core, part.state, part.core.term
        as_of = part.applied_offset
        builder = state.begin_snapshot()
        try:
            while not builder.step(SNAPSHOT_GROUPS_PER_STEP):
                await asyncio.sleep(0)
                if part.state is not state or core.term != term:
                    return
        finally:
            state.end_snapshot(builder)
        # Every group is encoded (immutable bytes): joining and chunking them runs
        # on a thread, ~0.3 s for 100,000 groups.
        payload, values = await asyncio.to_thread(
            _snapshot_values, builder, as_of, uuid.uuid4().hex
        )
        end = as_of
        deadline = loop.time() + timeout_s
        try:
            for run in _chunks(values):
                if core.term != term or part.state is not state:
                    return
                end = await self._produce(part, run, deadline) + len(run)
            await part.wait_applied(end, deadline)
        except LaminarError as error:
            _LOG.info(
                "%s/%d: snapshot as of %d abandoned: %s",
                *part.key,
                as_of,
                error,
                extra=fields(part.key),
            )
            return
        _LOG.info(
            "%s/%d: snapshot as of %d written: %d bytes in %d chunks, %.3f s",
            *part.key,
            as_of,
            len(payload),
            len(values),
            loop.time() - started,
            extra=fields(part.key),
        )

    # ------------------------------------------------------------------ calls

    async def heartbeat(self, request: HeartbeatRequest, timeout_s: float) -> HeartbeatAnswer:
        """One heartbeat, as the coordinator's contract says (validates the request)."""
        request.join_entry()  # invalid fields: refused before any waiting
        deadline = asyncio.get_running_loop().time() + timeout_s
        part = await self._ready(group_partition(request.group_id), deadline)
        async with part.lock:
            coordinator = self._coordinator(part)
            for _ in range(PREPARE_ROUNDS_MAX):
                entries = coordinator.prepare(request, self._host.now_ms(), self._user_catalogue())
                if not entries:
                    break
                results = await self._append(part, entries, deadline)
                _raise_refused_join(entries, results)
            return coordinator.answer(request)

    async def commit(self, commits: Sequence[Commit], timeout_s: float) -> list[ApplyResult | None]:
        """Append commits of one group; their outcomes in order (validated when applied)."""
        if not commits:
            return []
        deadline = asyncio.get_running_loop().time() + timeout_s
        part = await self._ready(group_partition(commits[0].group_id), deadline)
        return await self._append(part, commits, deadline)

    async def admin(self, entry: Reset | Delete, timeout_s: float) -> ApplyResult | None:
        """Append one reset or delete; its outcome."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        part = await self._ready(group_partition(entry.group_id), deadline)
        return (await self._append(part, [entry], deadline))[0]

    async def group(self, group_id: str, timeout_s: float) -> Group | None:
        """The group as its leader applied it (None: no such group)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        part = await self._ready(group_partition(group_id), deadline)
        return part.state.group(group_id)

    def host_of(self, group_id: str, member_id: str) -> str:
        """Where ``member_id`` last heartbeated from, as this node's coordinator saw it."""
        part = self._partitions.get(group_partition(group_id))
        if part is None or part.coordinator is None:
            return ""
        return part.coordinator.host_of(group_id, member_id)

    def led_groups(self) -> Iterator[Group]:
        """Every group of the partitions this node leads with a complete state."""
        for key in _GROUP_KEYS:
            part = self.partition(key)
            if part is None or not part.core.term_committed:
                continue
            part.catch_up()
            yield from part.state.groups.values()

    async def tick(self, timeout_s: float) -> None:
        """Run every led partition's coordinator tick and append what it decides, and
        start a snapshot where one is due.

        A partition whose lock is held (a heartbeat in progress) is skipped this
        time; errors (a lost leadership, a timeout) wait for the next tick.
        """
        for key in _GROUP_KEYS:
            part = self.partition(key)
            if part is None or not part.core.term_committed:
                continue
            part.catch_up()
            self._maybe_snapshot(part, timeout_s)
            if part.lock.locked() or part.applied_offset < part.core.high_watermark:
                continue
            deadline = asyncio.get_running_loop().time() + timeout_s
            async with part.lock:
                coordinator = self._coordinator(part)
                entries = coordinator.tick(self._host.now_ms(), self._user_catalogue())
                if not entries:
                    continue
                try:
                    await self._append(part, entries, deadline)
                except LaminarError as error:
                    _LOG.debug("%s/%d: tick append failed: %s", *key, error, extra=fields(key))


def _raise_refused_join(
    entries: Sequence[GroupEntry], results: Sequence[ApplyResult | None]
) -> None:
    """A join the group refused for good (another subscription, too many members)
    is the caller's error, not a fence to retry for ever."""
    for entry, result in zip(entries, results, strict=False):
        if not isinstance(entry, Join) or result is None:
            continue
        if result.outcome is Outcome.SUBSCRIPTION_MISMATCH:
            raise InvalidInputError(
                f"group {entry.group_id} reads another subscription ({result.detail}); this "
                f"member asked for {entry.subscription}: one group has one subscription"
            )
        if result.outcome is Outcome.GROUP_FULL:
            raise InvalidInputError(f"group {entry.group_id} is full: {result.detail}")


def _snapshot_values(
    builder: SnapshotBuilder, as_of: int, snapshot_id: str
) -> tuple[bytes, list[bytes]]:
    """(A thread.) The captured state's payload and its chunks' record values."""
    payload = builder.payload()
    chunks = split_snapshot(
        payload, snapshot_id=snapshot_id, as_of_offset=as_of, applied_count=builder.applied_count
    )
    return payload, [encode_snapshot_chunk(chunk) for chunk in chunks]


def _chunks(values: list[bytes]) -> Iterator[list[bytes]]:
    """``values`` in runs of at most :data:`APPEND_BATCH_BYTES_MAX` bytes (one
    entry per run at least)."""
    run: list[bytes] = []
    size = 0
    for value in values:
        if run and size + len(value) > APPEND_BATCH_BYTES_MAX:
            yield run
            run, size = [], 0
        run.append(value)
        size += len(value)
    if run:
        yield run

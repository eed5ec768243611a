"""The consumer: :class:`Consumer` (sync) and :class:`AsyncConsumer`.

How records arrive
------------------
Each assigned, unpaused partition has one fetch loop in the consumer's asyncio
core: it long-polls one replica (``fetch_wait_s``), puts the whole batches it gets
into the consumer's inbox, and asks for the next ones at once, so the next fetch
is in flight while the application works through the current one (*pipelining*).
The inbox holds at most about ``prefetch_bytes_max``; a fetch loop waits while it
is full. The application's thread takes whole fetch answers from the inbox and
decodes them there, column by column (:mod:`laminar.records`): one
:class:`ConsumerRecord` per record when iterating, or no object per record with
:meth:`Consumer.batches` and :meth:`ConsumerBatch.to_arrow`.

Reads go to any replica (every replica serves up to its high watermark). Each
partition sticks to one replica, chosen at random among the live ones, preferring
those in ``client_zone`` when it is given (as Kafka's rack-aware fetching,
KIP-392); a replica that does not answer is skipped for a while (the client's
node health), one that answers with an error or is behind the position (its log
ends before it) is left for another for a second.

A batch that fails its checksum when the application's thread decodes it (bit rot
on the replica's disk that its own reads did not catch, or damage in transit), or a
batch header that fails its checksum in the fetch loop, is not handed out: the good
batches before it are, what was fetched after it is dropped, the partition reads
again from that batch from another replica, and the replica that served it is
logged (a WARNING naming it, the partition and the offset), counted
(``counters["corrupt_batches"]``) and told (the ``ReportCorruption`` call: the node
checks its stored copy and takes its replica out of service when it is damaged).
Only when every live replica served that batch corrupt does the application get
the :class:`~laminar.errors.ChecksumMismatchError`, with its position at the batch
(the partition then waits for a ``seek``).

Positions
---------
``position(tp)`` is the offset of the next record the application will get (the
last one handed out + 1). ``seek`` moves it; what was prefetched for the partition
is dropped. A partition assigned without an offset starts at ``auto_offset_reset``
(``"earliest"``: its log start; ``"latest"``: its high watermark). A position
outside the log — below its start (retention removed the records) or past the end
of every live replica — is handled the same way, or with ``"error"`` raises
:class:`~laminar.errors.OffsetOutOfRangeError` from the iteration (the partition
then waits for a ``seek``). A topic or partition that does not exist raises
:class:`~laminar.errors.UnknownTopicOrPartitionError` the same way, after a
couple of seconds (a topic created a moment ago may still be spreading).

With ``group=``, both consumers are members of a consumer group
(:mod:`laminar_client.groups`): the group session assigns partitions and commits
positions through the same :meth:`Consumer.assign` and :meth:`Consumer.position`.

Where it lives
--------------
This module holds the facades and what they share (positions, pausing, groups, the
steps both drive); the fetch engine (inbox, chunks, the asyncio core) is in
:mod:`laminar_client._fetcher`, and the records, batches and their decoding in
:mod:`laminar_client._decoding`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, assert_never

from typing_extensions import TypeVar

from laminar.errors import ClientClosedError, InvalidInputError, RecordDeserializationError
from laminar.groups.entries import Subscription
from laminar_client._aio import LoopThread
from laminar_client._decoding import ConsumerBatch, ConsumerRecord, RecordDecoder
from laminar_client._fetcher import Chunk, CorruptChunkError, FetchCore, Inbox
from laminar_client._steps import HandOut, Steps, drive, drive_async, iterate, iterate_async
from laminar_client.client import DEFAULT_FETCH_BYTES_MAX, Client
from laminar_client.groups import GroupOptions, GroupSession, Hook
from laminar_client.metrics import ConsumerMetrics
from laminar_client.metrics_registry import Registrations, register_metrics
from laminar_client.retry import RetryPolicy
from laminar_client.serializers import Deserializer
from laminar_client.tls import TlsOptions
from laminar_client.types import OffsetReset, PartitionOffsets, TopicPartition

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = [
    "AsyncConsumer",
    "Consumer",
    "ConsumerBatch",
    "ConsumerRecord",
    "OffsetReset",
    "TopicPartition",
]

_K = TypeVar("_K", default=bytes)  # without deserializers, keys and values are bytes
_V = TypeVar("_V", default=bytes)
_T = TypeVar("_T")


def _remaining(iterator: Iterator[Any]) -> int:
    """How many items a list iterator has left."""
    return int(iterator.__length_hint__())  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- effects
#
# What Consumer and AsyncConsumer do is written once, as steps (_Reader's ``_*_steps``
# generators, laminar_client._steps): a step yields an effect wherever the facades
# act differently, and each facade carries the effects out its own way.


@dataclass(frozen=True, slots=True)
class _OnCore:
    """Call ``function(*args)`` on the core (Consumer: on its loop thread, waiting)."""

    function: Callable[..., object]
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _Blocking:
    """A blocking (network) call: AsyncConsumer runs it in a worker thread."""

    function: Callable[..., Any]
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _InGroup:
    """A group session driver (``poll``, ``close``; AsyncConsumer: the ``_async``
    one), given the facade's own assign; or ``commit`` without one."""

    sync: Callable[..., None]
    asynchronous: Callable[..., Awaitable[None]]
    with_assign: bool = True


@dataclass(frozen=True, slots=True)
class _TakeChunk:
    """Wait up to ``timeout_s`` for the next usable chunk of the inbox."""

    timeout_s: float | None


@dataclass(frozen=True, slots=True)
class _CloseCore:
    """Stop the core (Consumer: and its loop thread)."""


_Effect = _OnCore | _Blocking | _InGroup | _TakeChunk | _CloseCore
_Item = tuple[TopicPartition, list["ConsumerRecord[Any, Any]"], int]


class _ConsumerBase(Generic[_K, _V]):
    """What both facades share: positions, decoding, settings."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] | Client,
        *,
        key_deserializer: Deserializer[_K] | None = None,
        value_deserializer: Deserializer[_V] | None = None,
        auto_offset_reset: OffsetReset = "earliest",
        fetch_bytes_max: int = DEFAULT_FETCH_BYTES_MAX,
        fetch_wait_s: float = 0.5,
        prefetch_bytes_max: int = 64 * 1024 * 1024,
        client_zone: str | None = None,
        attempt_timeout_s: float = 3.0,
        retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
        tls: TlsOptions | None = None,
        token: str | None = None,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "error"):
            raise InvalidInputError("auto_offset_reset must be 'earliest', 'latest' or 'error'")
        if not 1024 <= fetch_bytes_max <= 64 * 1024 * 1024:
            raise InvalidInputError("fetch_bytes_max must be in [1024, 64 MiB]")
        if prefetch_bytes_max < fetch_bytes_max:
            raise InvalidInputError("prefetch_bytes_max must be >= fetch_bytes_max")
        if not 0 <= fetch_wait_s <= 30:
            raise InvalidInputError("fetch_wait_s must be in [0, 30]")
        self._client, self._owns_client = Client.shared_or_new(
            bootstrap, attempt_timeout_s, tls=tls, token=token
        )
        self._decoder: RecordDecoder[_K, _V] = RecordDecoder(key_deserializer, value_deserializer)
        self._inbox = Inbox()
        self._core = FetchCore(
            self._client,
            self._inbox,
            fetch_bytes_max=fetch_bytes_max,
            fetch_wait_s=fetch_wait_s,
            prefetch_bytes_max=prefetch_bytes_max,
            auto_offset_reset=auto_offset_reset,
            client_zone=client_zone,
            attempt_timeout_s=attempt_timeout_s,
            retry=retry or self._client.retry,
            rng=rng if rng is not None else random.Random(),
        )
        self._positions: dict[TopicPartition, int] = {}
        self._poison: dict[TopicPartition, RecordDeserializationError] = {}
        """Partitions whose next record fails to deserialize: raised at the next read."""
        self._paused: set[TopicPartition] = set()
        self._epochs: dict[TopicPartition, int] = {}
        self._prefetch_bytes_max = prefetch_bytes_max
        self._records_consumed = 0  # handed out: counted per chunk, or batch
        self._records_consumed_reported = 0  # what metrics() last said (never less)
        self._bytes_consumed = 0  # of the fetch answers the application took
        self._registrations = Registrations()
        self._closed = False
        self._prepare()
        self._start_core()

    def _prepare(self) -> None:
        """Set up the application-side state (see :class:`_Reader`)."""

    def _start_core(self) -> None:
        """Start the core where the facade runs it (called last by ``__init__``)."""
        raise NotImplementedError

    @property
    def client(self) -> Client:
        """The :class:`~laminar_client.Client` this consumer routes with."""
        return self._client

    @property
    def counters(self) -> dict[str, int]:
        """Fetches, failed fetches, replica switches, corrupt batches (served by a
        replica, read again from another) and bytes fetched so far; :meth:`metrics`
        has more."""
        return dict(self._core.counters)

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions assigned (in a group: what the hooks announced)."""
        self._check_open()
        return frozenset(self._epochs)

    def paused(self) -> frozenset[TopicPartition]:
        """The assigned partitions that are paused."""
        return frozenset(self._paused)

    # -- positions and epochs (the application's thread)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")

    def _normalize(
        self, partitions: Iterable[tuple[str, int]] | Mapping[Any, Any]
    ) -> dict[TopicPartition, int | None]:
        if isinstance(partitions, Mapping):
            items = [(TopicPartition(*tp), offset) for tp, offset in partitions.items()]
        else:
            items = [(TopicPartition(*tp), None) for tp in partitions]
        result: dict[TopicPartition, int | None] = {}
        for tp, offset in items:
            if (
                not isinstance(tp.topic, str)
                or not isinstance(tp.partition, int)
                or tp.partition < 0
            ):
                raise InvalidInputError(f"not a (topic, partition): {tp!r}")
            if offset is not None and (not isinstance(offset, int) or offset < 0):
                raise InvalidInputError(f"offset must be an int >= 0, got {offset!r}")
            result[tp] = offset
        return result

    def _after_assign(self, offsets: Mapping[TopicPartition, int | None]) -> None:
        self._poison = {
            tp: e for tp, e in self._poison.items() if tp in offsets and offsets[tp] is None
        }
        for tp in list(self._epochs):
            if tp not in offsets:
                del self._epochs[tp]
                self._positions.pop(tp, None)
                self._paused.discard(tp)
        for tp, offset in offsets.items():
            self._epochs[tp] = self._core.partitions[tp].epoch
            if offset is not None:
                self._positions[tp] = offset
            elif tp not in self._positions:
                self._positions[tp] = -1

    def _after_seek(self, tp: TopicPartition, offset: int | None) -> None:
        self._poison.pop(tp, None)
        self._epochs[tp] = self._core.partitions[tp].epoch
        self._positions[tp] = -1 if offset is None else offset

    def _usable(self, chunk: Chunk) -> bool:
        """Whether a chunk taken from the inbox still counts (not seeked past)."""
        return self._epochs.get(chunk.tp) == chunk.epoch

    def _lead_error(self, chunk: Chunk) -> None:
        if chunk.error is not None:
            raise chunk.error


def _subscription(topics: Sequence[str], pattern: str | None) -> Subscription:
    if isinstance(topics, str):
        topics = [topics]
    return Subscription(tuple(topics), pattern)


class _Reader(_ConsumerBase[_K, _V]):
    """The application-side logic both facades share: what to hand out next."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] | Client,
        *,
        group: str | None = None,
        topics: Sequence[str] = (),
        pattern: str | None = None,
        instance_id: str | None = None,
        weight: float = 1.0,
        session_timeout_s: float = 45.0,
        rebalance_timeout_s: float = 60.0,
        auto_commit: bool = True,
        on_assigned: Hook | None = None,
        on_revoked: Hook | None = None,
        on_lost: Hook | None = None,
        key_deserializer: Deserializer[_K] | None = None,
        value_deserializer: Deserializer[_V] | None = None,
        auto_offset_reset: OffsetReset = "earliest",
        fetch_bytes_max: int = DEFAULT_FETCH_BYTES_MAX,
        fetch_wait_s: float = 0.5,
        prefetch_bytes_max: int = 64 * 1024 * 1024,
        client_zone: str | None = None,
        attempt_timeout_s: float = 3.0,
        retry: RetryPolicy | None = None,
        rng: random.Random | None = None,
        tls: TlsOptions | None = None,
        token: str | None = None,
    ) -> None:
        """The reading options are :class:`_ConsumerBase`'s. With ``group``, the
        consumer can be a member of that consumer group (see
        :mod:`laminar_client.groups`): given ``topics`` (or ``pattern``), or after
        :meth:`subscribe`, it reads the partitions of those topics that the group
        confirms it owns, from their committed offsets (else ``auto_offset_reset``).
        ``instance_id`` makes it a static member (a restart within the session keeps
        its partitions); ``weight`` is its relative share; ``auto_commit`` commits
        the positions handed out after each chunk, before a revocation and at
        ``close``. Hooks (for :class:`AsyncConsumer` they may be coroutine
        functions) announce every change of what it reads, each change exactly
        once: ``on_assigned`` once partitions are read; ``on_revoked`` before they
        are given up, while they are still owned (a final ``commit`` fits there);
        ``on_lost`` after they were taken away without a chance to commit (the
        member was fenced or its lease lapsed; default: ``on_revoked``).
        ``assign`` is refused while subscribed; ``seek`` moves the position of an
        owned partition (the next commit commits it)."""
        self._group: GroupSession | None = None
        self._group_options: GroupOptions | None = None
        if group is None:
            if topics or pattern is not None:
                raise InvalidInputError("topics and pattern need a group")
            if on_assigned or on_revoked or on_lost:
                raise InvalidInputError("on_assigned, on_revoked and on_lost need a group")
        else:
            self._group_options = GroupOptions(
                group=group,
                instance_id=instance_id,
                weight=weight,
                session_timeout_s=session_timeout_s,
                rebalance_timeout_s=rebalance_timeout_s,
                auto_commit=auto_commit,
                on_assigned=on_assigned,
                on_revoked=on_revoked,
                on_lost=on_lost,
            )
        subscription = None
        if topics or pattern is not None:
            subscription = _subscription(topics, pattern)
        super().__init__(
            bootstrap,
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
            auto_offset_reset=auto_offset_reset,
            fetch_bytes_max=fetch_bytes_max,
            fetch_wait_s=fetch_wait_s,
            prefetch_bytes_max=prefetch_bytes_max,
            client_zone=client_zone,
            attempt_timeout_s=attempt_timeout_s,
            retry=retry,
            rng=rng,
            tls=tls,
            token=token,
        )
        if subscription is None:
            return
        try:
            self._join(subscription)
        except BaseException:
            self._abandon()
            raise

    def _join(self, subscription: Subscription) -> None:
        assert self._group_options is not None
        self._group = GroupSession(self, self._group_options, subscription)

    def _subscribing(
        self, topics: str | Sequence[str], pattern: str | None
    ) -> tuple[Subscription, bool]:
        """The subscription asked for, and whether it is the one in force (raises
        when this consumer cannot subscribe)."""
        self._check_open()
        if self._group_options is None:
            raise InvalidInputError(
                "subscribe needs a consumer created with group= "
                "(without a group, a consumer reads the partitions given to assign())"
            )
        if self._group is None and self._epochs:
            raise InvalidInputError(
                "this consumer reads partitions given to assign(); call unsubscribe() first "
                "(assign and subscribe are exclusive, as in Kafka)"
            )
        subscription = _subscription([topics] if isinstance(topics, str) else topics, pattern)
        current = self._group is not None and self._group.member.subscription == subscription
        return subscription, current

    def _member(self, what: str) -> GroupSession:
        """The group session, for ``what`` (raises when the consumer is not subscribed)."""
        self._check_open()
        if self._group is None:
            raise InvalidInputError(
                f"{what} needs a group member: a consumer created with group= and topics "
                "or pattern, or subscribe()"
            )
        return self._group

    def _group_id(self, what: str) -> str:
        self._check_open()
        if self._group_options is None:
            raise InvalidInputError(f"{what} needs a consumer created with group=")
        return self._group_options.group

    def _abandon(self) -> None:
        """Release what ``__init__`` acquired when it fails half-way."""
        raise NotImplementedError

    @property
    def group_session(self) -> GroupSession | None:
        """The group membership (None without ``group``)."""
        return self._group

    def _prepare(self) -> None:
        self._closing = False  # close() is revoking the group's partitions
        self._open_chunk: Chunk | None = None
        """The chunk a ``batches()`` iteration is handing out (None: none, or done)."""
        # Records taken from the inbox and not handed out yet (a paused partition's,
        # or the rest of a chunk whose iteration stopped early), served first.
        self._stash: dict[TopicPartition, tuple[list[ConsumerRecord[_K, _V]], int]] = {}
        self._interrupts = 0  # bumped by pause, seek and assign: batches() looks again
        # The chunk records() is handing out: partition, records, the list's own
        # iterator (its length hint says how many are handed out) and next offset.
        self._cursor: (
            tuple[TopicPartition, list[ConsumerRecord[_K, _V]], Iterator[Any], int] | None
        ) = None

    def _lag_of(self, key: TopicPartition) -> int | None:
        state = self._core.partitions.get(key)
        position = self.position(key)
        if state is None or state.high_watermark < 0 or position < 0:
            return None
        return max(0, int(state.high_watermark) - position)

    def metrics(self) -> ConsumerMetrics:
        """What this consumer fetched and handed out (see
        :class:`~laminar_client.metrics.ConsumerMetrics`, field by field). Cheap:
        it copies counters kept per fetch and per chunk, and works out the lag of
        each assigned partition; callable from any thread."""
        core = self._core
        counters = dict(core.counters)
        # The count of the chunk records() is handing out is added when it is done
        # with (after the cursor is let go); until then the cursor says how far it
        # got. Read from another thread, the two may miss that chunk's count for a
        # moment, never count it twice: the highest reported stands.
        consumed = self._records_consumed
        cursor = self._cursor
        if cursor is not None:
            consumed += len(cursor[1]) - _remaining(cursor[2])
        consumed = max(consumed, self._records_consumed_reported)
        self._records_consumed_reported = consumed
        return ConsumerMetrics(
            fetches=counters["fetches"],
            fetch_latency=core.fetch_latency.snapshot(),
            fetch_errors=dict(core.fetch_errors),
            bytes_fetched=counters["bytes_fetched"],
            records_consumed=consumed,
            bytes_consumed=self._bytes_consumed,
            lag_records=self._lags(),
            prefetched_bytes=max(0, core.buffered),
            prefetch_bytes_max=self._prefetch_bytes_max,
            replica_switches=counters["replica_switches"],
            corrupt_batches=counters["corrupt_batches"],
        )

    def register_metrics(self, registry: CollectorRegistry, *, client_id: str) -> None:
        """Export :meth:`metrics` to the ``prometheus_client`` ``registry`` (read at
        each scrape, as ``laminar_client_consumer_*`` families labelled
        ``client_id``, the lag also ``topic`` and ``partition``; ``docs/client.md``,
        "Metrics"), until the consumer closes. ``client_id`` tells this consumer's
        series from others in the registry (a name the application chooses: letters,
        digits, ``._:@/-``). Needs ``prometheus_client`` (``pip install
        'laminar[metrics]'``)."""
        register_metrics(self, self._registrations, registry, client_id)

    def _lags(self) -> dict[TopicPartition, int]:
        """The lag of each assigned partition a fetch reported a high watermark for."""
        lags: dict[TopicPartition, int] = {}
        for tp in list(self._epochs):  # (another thread may assign meanwhile)
            try:
                lag = self._lag_of(tp)
            except InvalidInputError:  # unassigned meanwhile
                continue
            if lag is not None:
                lags[tp] = lag
        return lags

    def position(self, tp: tuple[str, int]) -> int:
        """The offset of the next record the application gets from ``tp`` (-1 while
        a partition assigned without an offset is still resolving its start)."""
        key = TopicPartition(*tp)
        if key not in self._epochs:
            raise InvalidInputError(f"{key.topic}/{key.partition} is not assigned")
        cursor = self._cursor
        if cursor is not None and cursor[0] == key:
            records = cursor[1]
            done = len(records) - _remaining(cursor[2])
            if done > 0:
                return int(records[done - 1].offset) + 1
        position = self._positions.get(key, -1)
        if position < 0:
            state = self._core.partitions.get(key)
            if state is not None and state.resolved is not None:
                return state.resolved
        return position

    def _stashed(self) -> tuple[TopicPartition, list[ConsumerRecord[_K, _V]], int] | None:
        for tp, (records, next_offset) in self._stash.items():
            if tp not in self._paused:
                del self._stash[tp]
                return tp, records, next_offset
        return None

    def _decode_chunk(
        self, chunk: Chunk
    ) -> tuple[TopicPartition, list[ConsumerRecord[_K, _V]], int] | None:
        """A chunk taken from the inbox as records; None if it holds none for the
        application (seeked past, or only control batches)."""
        if not self._usable(chunk):
            return None
        if chunk.error is not None:
            raise chunk.error
        try:
            records = self._decoder.chunk_records(chunk)
        except RecordDeserializationError as error:
            return self._poisoned(chunk, error)
        except CorruptChunkError as corrupt:
            return self._corrupted(chunk, corrupt)
        if not records:
            self._positions[chunk.tp] = chunk.next_offset
            return None
        return chunk.tp, records, chunk.next_offset

    def _poisoned(
        self, chunk: Chunk, error: RecordDeserializationError
    ) -> tuple[TopicPartition, list[ConsumerRecord[_K, _V]], int] | None:
        """A record of ``chunk`` failed to deserialize: hand out the records before
        it, then raise ``error`` (and again at every read) until the application
        seeks past it. Reading resumes at the failed record."""
        tp = chunk.tp
        good = self._decoder.chunk_records(chunk, error.offset)
        self._seek_core_to(tp, error.offset)
        if not good:
            raise error
        self._poison[tp] = error
        return tp, good, error.offset

    def _corrupted(
        self, chunk: Chunk, corrupt: CorruptChunkError
    ) -> tuple[TopicPartition, list[ConsumerRecord[_K, _V]], int] | None:
        """A batch of ``chunk`` failed verification: hand out the records of the
        good batches before it, while the core reads the partition again from the
        failed batch, from another replica (see :meth:`FetchCore.corrupt`)."""
        try:
            good = self._decoder.chunk_records(chunk, corrupt.offset)
        except RecordDeserializationError as error:
            return self._poisoned(chunk, error)  # the failed batch is read again after
        self._read_elsewhere(chunk, corrupt)
        if not good:
            return None
        return chunk.tp, good, corrupt.offset

    def _read_elsewhere(self, chunk: Chunk, corrupt: CorruptChunkError) -> None:
        """What was handed out of ``chunk`` ends before its failed batch: the core
        reads the partition again from there (the position), from another replica."""
        self._corrupt_in_core(chunk, corrupt)
        self._after_seek(chunk.tp, corrupt.offset)

    def _corrupt_in_core(self, chunk: Chunk, corrupt: CorruptChunkError) -> None:
        """Run :meth:`FetchCore.corrupt` for ``chunk``."""
        self._core_call(
            self._core.corrupt, chunk.tp, chunk.epoch, chunk.source, corrupt.offset, corrupt.error
        )

    def _raise_poison(self) -> None:
        for tp in list(self._poison):
            if tp not in self._paused:
                raise self._poison.pop(tp)

    def _seek_core_to(self, tp: TopicPartition, offset: int) -> None:
        """Make the core fetch ``tp`` from ``offset`` again."""
        self._core_call(self._core.seek, tp, offset)
        self._after_seek(tp, offset)

    def _cut(self, tp: TopicPartition | None, *, keep: bool) -> None:
        """Stop handing out the current chunk of ``tp`` (None: whatever partition it
        is): the application paused (``keep``: the rest waits for ``resume``),
        seeked or unassigned it (the rest is dropped), or left the iteration
        (``keep``: the next one starts with the rest). Truncating the list ends its
        iterator, so ``records()`` pays nothing per record for this."""
        cursor = self._cursor
        if cursor is None or (tp is not None and cursor[0] != tp):
            return
        self._cursor = None  # before the count: see metrics()
        key, records, iterator, next_offset = cursor
        done = len(records) - _remaining(iterator)
        self._records_consumed += done
        rest = records[done:]
        del records[done:]
        if not keep:
            return
        if rest:
            self._stash[key] = (rest, next_offset)
            self._positions[key] = int(rest[0].offset)
        else:
            self._positions[key] = next_offset

    def _pause_point(self, tp: TopicPartition) -> int | None:
        """Stop handing out ``tp``: its position, where it reads again on resume
        (what was fetched ahead is dropped, not kept)."""
        self._cut(tp, keep=True)
        self._stash.pop(tp, None)
        position = self._positions.get(tp, -1)
        return position if position >= 0 else None

    def _after_pause(self, tp: TopicPartition) -> None:
        self._paused.add(tp)
        self._epochs[tp] = self._core.partitions[tp].epoch

    def _cut_for(self, offsets: Mapping[TopicPartition, int | None]) -> None:
        """Before a new assignment: stop the current chunk if its partition goes
        away or is given a new offset."""
        cursor = self._cursor
        if cursor is not None and offsets.get(cursor[0], 0) is not None:
            self._cut(cursor[0], keep=False)

    def _hand_out(
        self, item: tuple[TopicPartition, list[ConsumerRecord[_K, _V]], int]
    ) -> Iterator[ConsumerRecord[_K, _V]]:
        """Hand out one chunk's records (the caller ``yield from`` s it)."""
        tp, records, next_offset = item
        iterator = iter(records)
        cursor = (tp, records, iterator, next_offset)
        self._cursor = cursor
        group = self._group
        try:
            if group is None:
                yield from iterator
            else:
                # The lease is checked before each record: a member resumed after a
                # stop past its session hands out nothing more (~40 ns a record).
                monotonic = time.monotonic
                for record in iterator:
                    if monotonic() >= group.lease_until_s and group.lapse_if_due():
                        break  # the next poll drops the partitions and calls on_lost
                    yield record
        finally:
            if self._cursor is cursor:
                if _remaining(iterator):
                    self._cut(tp, keep=True)  # left early: the rest comes next time
                else:
                    self._cursor = None  # before the count: see metrics()
                    self._records_consumed += len(records)
                    self._positions[tp] = next_offset

    def _take_locked(self) -> Chunk | None:
        return self._inbox.take_locked(self._paused.__contains__)

    def _check_assign(self) -> None:
        self._check_open()
        if self._group is not None:
            raise InvalidInputError(
                f"this consumer is a member of group {self._group.group}: the group assigns "
                "its partitions (call unsubscribe() before assign(), as in Kafka)"
            )

    def _batches_of(self, chunk: Chunk, max_records: int) -> Iterator[ConsumerBatch[_K, _V]]:
        """Hand out one chunk as batches (``batches()`` iterates this). Left early, the
        rest is read again from the position: when this generator is closed, or when
        the next iteration starts (:meth:`_settle_abandoned`), whichever is first."""
        tp = chunk.tp
        corrupt: CorruptChunkError | None = None
        try:
            batches = self._decoder.chunk_batches(chunk, max_records)
        except CorruptChunkError as error:  # hand out the good batches before it
            corrupt = error
            batches = self._decoder.chunk_batches(chunk, max_records, error.offset)
        marker = self._interrupts
        self._open_chunk = chunk
        try:
            for batch in batches:
                if self._stop_handing_out(chunk, marker):
                    break
                self._positions[tp] = batch.next_offset
                self._records_consumed += len(batch)
                yield batch
            else:
                self._open_chunk = None
                if corrupt is None:
                    self._positions[tp] = chunk.next_offset
                else:
                    self._read_elsewhere(chunk, corrupt)
        finally:
            if self._open_chunk is chunk:
                self._open_chunk = None
                if self._usable(chunk):
                    self._refetch(tp)

    def _settle_abandoned(self, *, batches: bool) -> None:
        """Before an iteration takes anything. An earlier ``records()`` /
        ``batches()`` iteration left in the middle of a chunk and not closed yet (an
        async generator is closed only when the event loop gets round to it, a kept
        generator never): do now what its closing would. For ``batches()``, records
        a ``records()`` iteration left for the next one are read again from their
        position (a batch is cut from the stored bytes, not from records). So no
        record is skipped, whichever way the application iterates."""
        if self._cursor is not None:
            self._cut(None, keep=True)
        chunk, self._open_chunk = self._open_chunk, None
        if chunk is not None and self._usable(chunk):
            self._refetch(chunk.tp)
        if batches:
            stashed, self._stash = list(self._stash), {}
            for tp in stashed:
                self._refetch(tp)

    def _refetch(self, tp: TopicPartition) -> None:
        """Read ``tp`` again from its position."""
        if not self._closed and tp in self._epochs:
            position = self._positions.get(tp, -1)
            offset = position if position >= 0 else None
            self._core_call(self._core.seek, tp, offset)
            self._after_seek(tp, offset)

    def _stop_handing_out(self, chunk: Chunk, marker: int) -> bool:
        """Whether ``batches()`` must stop handing out ``chunk``: its partition was
        paused, seeked or unassigned, or the member's lease lapsed."""
        if self._interrupts != marker and not self._usable(chunk):
            return True
        group = self._group
        return (
            group is not None and time.monotonic() >= group.lease_until_s and group.lapse_if_due()
        )

    def _targets(self, partitions: Sequence[tuple[str, int]]) -> list[TopicPartition]:
        targets = [TopicPartition(*tp) for tp in partitions] or list(self._epochs)
        for tp in targets:
            if tp not in self._epochs:
                raise InvalidInputError(f"{tp.topic}/{tp.partition} is not assigned")
        return targets

    def _seek_args(self, tp: tuple[str, int], offset: int) -> tuple[TopicPartition, int]:
        key = TopicPartition(*tp)
        if key not in self._epochs:
            raise InvalidInputError(f"{key.topic}/{key.partition} is not assigned")
        if not isinstance(offset, int) or offset < 0:
            raise InvalidInputError(f"offset must be an int >= 0, got {offset!r}")
        return key, offset

    def _list(
        self, partitions: Sequence[tuple[str, int]], timestamp_ms: int | None
    ) -> dict[TopicPartition, Any]:
        """ListOffsets of assigned ``partitions`` (default: every assigned one)."""
        return self._list_offsets(self._targets(partitions), timestamp_ms)

    def _offsets_of(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, Any]:
        """ListOffsets of any ``partitions`` (assigned or not), from their leaders."""
        return self._list_offsets(list(self._normalize(partitions)), None, leader=True)

    def _committed_of(
        self, group: str, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, int | None]:
        wanted = list(self._normalize(partitions))
        if not wanted:
            return {}
        found = {
            (o.topic, o.partition): o.next_offset for o in self._client.fetch_offsets(group, wanted)
        }
        return {tp: found.get(tp) for tp in wanted}

    def _list_offsets(
        self,
        partitions: Sequence[TopicPartition],
        timestamp_ms: int | None,
        *,
        leader: bool = False,
    ) -> dict[TopicPartition, Any]:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        result: dict[TopicPartition, Any] = {}
        for topic, numbers in by_topic.items():
            offsets = self._client.list_offsets(
                topic, numbers, timestamp_ms=timestamp_ms, leader=leader
            )
            for number, found in offsets.items():
                result[TopicPartition(topic, number)] = found
        return result

    def _lag_with(self, listed: Mapping[TopicPartition, Any]) -> dict[TopicPartition, int]:
        """Lag per assigned partition; ``listed`` answers the partitions no fetch
        reported a high watermark for yet (see :meth:`_missing_high_watermarks`)."""
        result: dict[TopicPartition, int] = {}
        for tp in self._epochs:
            lag = self._lag_of(tp)
            if lag is None and tp in listed:
                position = self.position(tp)
                offsets = listed[tp]
                start = offsets.log_start_offset if position < 0 else position
                lag = max(0, offsets.high_watermark - start)
            if lag is not None:
                result[tp] = lag
        return result

    def _missing_high_watermarks(self) -> tuple[TopicPartition, ...]:
        return tuple(tp for tp in self._epochs if self._lag_of(tp) is None)

    # -- the steps both facades drive (laminar_client._steps; effects: see _Effect)

    def _subscribe_steps(
        self, topics: str | Sequence[str], pattern: str | None
    ) -> Steps[_Effect, None]:
        subscription, current = self._subscribing(topics, pattern)
        if current:
            return
        if self._group is not None:
            yield from self._unsubscribe_steps()
        self._join(subscription)

    def _unsubscribe_steps(self) -> Steps[_Effect, None]:
        self._check_open()
        group = self._group
        if group is None:
            yield from self._assign_steps({})
            return
        try:
            # The hooks may still commit: _group is set.
            yield _InGroup(group.close, group.close_async)
        finally:
            self._group = None
            yield from self._assign_steps({})

    def _commit_steps(
        self, offsets: Mapping[tuple[str, int], int] | None, metadata: str
    ) -> Steps[_Effect, None]:
        member = self._member("commit")
        yield _InGroup(
            partial(member.commit, offsets, metadata, changed_only=False),
            partial(member.commit_async, offsets, metadata, changed_only=False),
            with_assign=False,
        )

    def _committed_steps(
        self, partitions: Iterable[tuple[str, int]]
    ) -> Steps[_Effect, dict[TopicPartition, int | None]]:
        group = self._group_id("committed")
        committed: dict[TopicPartition, int | None] = yield _Blocking(
            self._committed_of, (group, list(partitions))
        )
        return committed

    def _committed_lag_steps(self) -> Steps[_Effect, dict[TopicPartition, int]]:
        committed = self._member("committed_lag").committed()
        wanted = [tp for tp in committed if tp in self._epochs]
        listed: dict[TopicPartition, PartitionOffsets] = yield _Blocking(self._list, (wanted, None))
        return {
            tp: max(0, offsets.high_watermark - committed[tp]) for tp, offsets in listed.items()
        }

    def _assign_steps(
        self, partitions: Iterable[tuple[str, int]] | Mapping[Any, Any]
    ) -> Steps[_Effect, None]:
        self._check_open()
        offsets = self._normalize(partitions)
        self._cut_for(offsets)
        yield _OnCore(self._core.assign, (offsets,))
        self._after_assign(offsets)
        self._stash = {tp: v for tp, v in self._stash.items() if tp in offsets}
        self._interrupts += 1

    def _seek_steps(self, tp: tuple[str, int], offset: int) -> Steps[_Effect, None]:
        self._check_open()
        key, offset = self._seek_args(tp, offset)
        self._cut(key, keep=False)
        yield _OnCore(self._core.seek, (key, offset))
        self._after_seek(key, offset)
        self._stash.pop(key, None)
        self._interrupts += 1

    def _seek_to_steps(
        self,
        partitions: Sequence[tuple[str, int]],
        timestamp_ms: int | None,
        target: Callable[[PartitionOffsets], int],
    ) -> Steps[_Effect, None]:
        """Seek each of ``partitions`` (default: every assigned one) to the ``target``
        of its listed offsets."""
        listed: dict[TopicPartition, PartitionOffsets] = yield _Blocking(
            self._list, (partitions, timestamp_ms)
        )
        for tp, offsets in listed.items():
            yield from self._seek_steps(tp, target(offsets))

    def _pause_steps(self, partitions: Sequence[tuple[str, int]]) -> Steps[_Effect, None]:
        for tp in self._targets(partitions):
            offset = self._pause_point(tp)
            yield _OnCore(self._core.pause, (tp, offset))
            self._after_pause(tp)
        self._interrupts += 1

    def _resume_steps(self, partitions: Sequence[tuple[str, int]]) -> Steps[_Effect, None]:
        for tp in self._targets(partitions):
            self._paused.discard(tp)
            yield _OnCore(self._core.resume, (tp,))

    def _lag_steps(self) -> Steps[_Effect, dict[TopicPartition, int]]:
        self._check_open()
        if self._group is not None:
            return (yield from self._committed_lag_steps())
        missing = self._missing_high_watermarks()
        listed: dict[TopicPartition, PartitionOffsets] = {}
        if missing:
            listed = yield _Blocking(self._list, (missing, None))
        return self._lag_with(listed)

    def _offsets_steps(
        self, partitions: Iterable[tuple[str, int]], field: Callable[[PartitionOffsets], int]
    ) -> Steps[_Effect, dict[TopicPartition, int]]:
        """``field`` of the offsets of any ``partitions``, from their leaders."""
        self._check_open()
        listed: dict[TopicPartition, PartitionOffsets] = yield _Blocking(
            self._offsets_of, (list(partitions),)
        )
        return {tp: field(offsets) for tp, offsets in listed.items()}

    def _records_steps(self, timeout_s: float | None) -> Steps[_Effect | HandOut, None]:
        """``records()``: each chunk's records handed out (:meth:`_hand_out`)."""
        self._settle_abandoned(batches=False)
        deadline_s = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            group = self._group
            if group is None:
                item = yield from self._next_steps(timeout_s)
            else:
                # The lease, auto-commit, then rebalance.
                yield _InGroup(group.poll, group.poll_async)
                item = yield from self._next_steps(group.slice_s(deadline_s))
                if item is None and (deadline_s is None or time.monotonic() < deadline_s):
                    continue
            if item is None:
                return
            yield HandOut(self._hand_out(item))
            if timeout_s is not None:  # the timeout is of idleness: it starts again
                deadline_s = time.monotonic() + timeout_s

    def _next_steps(self, timeout_s: float | None) -> Steps[_Effect, _Item | None]:
        """The next records to hand out: stashed ones, else a chunk's."""
        while True:
            self._raise_poison()
            stashed = self._stashed()
            if stashed is not None:
                return stashed
            chunk: Chunk | None = yield _TakeChunk(timeout_s)
            if chunk is None:
                return None
            item = self._decode_chunk(chunk)
            if item is not None:
                return item

    def _batches_steps(
        self, max_records: int, timeout_s: float | None
    ) -> Steps[_Effect | HandOut, None]:
        """``batches()``: each chunk handed out as batches (:meth:`_batches_of`)."""
        if max_records < 1:
            raise InvalidInputError("max_records must be >= 1")
        self._settle_abandoned(batches=True)
        deadline_s = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            group = self._group
            chunk: Chunk | None
            if group is None:
                chunk = yield _TakeChunk(timeout_s)
            else:
                yield _InGroup(group.poll, group.poll_async)
                chunk = yield _TakeChunk(group.slice_s(deadline_s))
                if chunk is None and (deadline_s is None or time.monotonic() < deadline_s):
                    continue
            if chunk is None:
                return
            if timeout_s is not None:  # the timeout is of idleness: it starts again
                deadline_s = time.monotonic() + timeout_s
            yield HandOut(self._batches_of(chunk, max_records))

    def _close_steps(self) -> Steps[_Effect, None]:
        if self._closed:
            return
        group = getattr(self, "_group", None)
        try:
            if group is not None and not self._closing:
                self._closing = True
                # The hooks may still commit: _group is set.
                yield _InGroup(group.close, group.close_async)
        finally:
            self._group = None
            yield from self._close_reader_steps()

    def _close_reader_steps(self) -> Steps[_Effect, None]:
        self._closed = True
        self._registrations.close()
        try:
            yield _CloseCore()
        finally:
            self._inbox.wake_all()
            if self._owns_client:
                yield _Blocking(self._client.close, ())

    # -- what the facades do differently, outside the steps

    def _core_call(self, function: Callable[..., object], *args: Any) -> None:
        """Call ``function(*args)`` on the core, and wait for it (the facade's loop)."""
        raise NotImplementedError

    def _core_soon(self, function: Callable[..., object], *args: Any) -> None:
        """Have the core call ``function(*args)`` soon (the facade's loop)."""
        raise NotImplementedError

    def _taken(self, chunk: Chunk) -> Chunk | None:
        """A chunk just taken from the inbox: its bytes go back to the core; the chunk
        if it still counts (its error raised), else None."""
        self._core_soon(self._core.release, chunk.nbytes)
        if not self._usable(chunk):
            return None
        if chunk.error is not None:
            raise chunk.error
        self._bytes_consumed += chunk.nbytes
        return chunk


# ----------------------------------------------------------------------------- facades


class Consumer(_Reader[_K, _V]):
    """A synchronous consumer of assigned partitions.

    ``bootstrap``: one ``host:port``, a comma-separated list, a list, or a
    :class:`~laminar_client.Client` to share. ``key_deserializer`` /
    ``value_deserializer``: see :mod:`laminar_client.serializers` (default: bytes).
    ``fetch_bytes_max``: bytes asked per fetch; ``prefetch_bytes_max``: bytes held
    ahead of the application; ``fetch_wait_s``: long-poll wait when caught up;
    ``client_zone``: prefer replicas in this zone; ``auto_offset_reset``: where a
    partition without a position starts. Not thread-safe: use it from one thread
    (except :meth:`close`, which another thread may call to end a blocked read).
    Use it as a context manager, or call :meth:`close`.

    ``for record in consumer`` waits for records for ever; :meth:`records` and
    :meth:`batches` take a ``timeout_s`` after which an idle iteration ends.
    Blocking waits can be interrupted with Ctrl-C.
    """

    def _start_core(self) -> None:
        self._thread = LoopThread("laminar-consumer")

    def _abandon(self) -> None:
        self.close()

    # -- the group (Kafka's names: subscribe, unsubscribe, commit, committed)

    def subscribe(self, topics: str | Sequence[str] = (), *, pattern: str | None = None) -> None:
        """Join the consumer's group (``group=``) reading ``topics`` (a name or a list),
        or every topic whose whole name matches ``pattern`` (a Python regex; topics
        created later are picked up). Subscribing anew with another subscription
        leaves the group first (:meth:`unsubscribe`), as Kafka's ``subscribe`` does.
        Refused while partitions given to :meth:`assign` are read."""
        self._run(self._subscribe_steps(topics, pattern))

    def unsubscribe(self) -> None:
        """Leave the group: what is read is revoked as at :meth:`close` (auto-commit,
        ``on_revoked``), then nothing is read. Without a subscription, it drops the
        partitions given to :meth:`assign`."""
        self._run(self._unsubscribe_steps())

    def commit(
        self, offsets: Mapping[tuple[str, int], int] | None = None, metadata: str = ""
    ) -> None:
        """Commit ``offsets`` (the next offset to read per partition; default: the
        position of every owned partition) with ``metadata``. Raises
        :class:`~laminar.errors.FencedMemberError` when the member lost a partition
        or its lease lapsed (the next read then calls ``on_lost`` and the member
        rejoins)."""
        self._run(self._commit_steps(offsets, metadata))

    def committed(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int | None]:
        """The group's committed position (the next offset to read) of each of
        ``partitions``, as its coordinator holds it (None: nothing committed)."""
        return self._run(self._committed_steps(partitions))

    def committed_lag(self) -> dict[TopicPartition, int]:
        """Per owned partition with a commit: high watermark - committed offset."""
        return self._run(self._committed_lag_steps())

    # -- assignment and positions

    def assign(self, partitions: Iterable[tuple[str, int]] | Mapping[tuple[str, int], int]) -> None:
        """Read these partitions (and stop reading the others): an iterable of
        ``(topic, partition)``, or a mapping to the offset to start at. Refused
        while the consumer is subscribed to a group (the group assigns then)."""
        self._check_assign()
        self._assign_now(partitions)

    def _assign_now(self, partitions: Iterable[tuple[str, int]] | Mapping[Any, Any]) -> None:
        self._run(self._assign_steps(partitions))

    def seek(self, tp: tuple[str, int], offset: int) -> None:
        """Make ``offset`` the next record read from ``tp``."""
        self._run(self._seek_steps(tp, offset))

    def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """Seek to the log start of ``partitions`` (default: every assigned one)."""
        self._run(self._seek_to_steps(partitions, None, _log_start))

    def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """Seek to the high watermark (the next record written) of ``partitions``."""
        self._run(self._seek_to_steps(partitions, None, _high_watermark))

    def seek_to_time(self, timestamp_ms: int, *partitions: tuple[str, int]) -> None:
        """Seek to the first record with a timestamp >= ``timestamp_ms`` (the end
        when there is none) in ``partitions`` (default: every assigned one)."""
        self._run(self._seek_to_steps(partitions, timestamp_ms, _found_or_end))

    def pause(self, *partitions: tuple[str, int]) -> None:
        """Stop fetching and handing out records of ``partitions`` (default: all)."""
        self._run(self._pause_steps(partitions))

    def resume(self, *partitions: tuple[str, int]) -> None:
        """Undo :meth:`pause` for ``partitions`` (default: all)."""
        self._run(self._resume_steps(partitions))

    def lag(self) -> dict[TopicPartition, int]:
        """Per assigned partition: high watermark - position (records not yet read).
        The high watermark is the latest a fetch saw; partitions not fetched yet
        ask :meth:`~laminar_client.Client.list_offsets`. In a group: high
        watermark - committed offset (:meth:`committed_lag`)."""
        return self._run(self._lag_steps())

    def beginning_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        """Each partition's log start offset (the first offset still stored)."""
        return self._run(self._offsets_steps(partitions, _log_start))

    def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        """Each partition's high watermark (the offset the next record gets)."""
        return self._run(self._offsets_steps(partitions, _high_watermark))

    # -- reading

    def __iter__(self) -> Iterator[ConsumerRecord[_K, _V]]:
        return self.records()

    def records(self, timeout_s: float | None = None) -> Iterator[ConsumerRecord[_K, _V]]:
        """Yield records as they arrive; end after ``timeout_s`` without any (None:
        never)."""
        return iterate(self._records_steps(timeout_s), self._perform)

    def batches(
        self, max_records: int = 10_000, timeout_s: float | None = None
    ) -> Iterator[ConsumerBatch[_K, _V]]:
        """Yield :class:`ConsumerBatch` es of one partition and at most
        ``max_records`` records each; end after ``timeout_s`` without any."""
        return iterate(self._batches_steps(max_records, timeout_s), self._perform)

    def close(self) -> None:
        """Stop fetching and close the connections (in a group: what is read is
        revoked, with auto-commit and ``on_revoked``, then the member leaves).
        Idempotent."""
        self._run(self._close_steps())

    def __enter__(self) -> Consumer[_K, _V]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the effects, carried out in the caller's thread

    def _run(self, steps: Steps[_Effect, _T]) -> _T:
        return drive(steps, self._perform)

    def _perform(self, effect: _Effect) -> Any:
        match effect:
            case _OnCore(function, args):
                return self._core_call(function, *args)
            case _Blocking(function, args):
                return function(*args)
            case _InGroup(sync, _, with_assign):
                return sync(self._assign_now) if with_assign else sync()
            case _TakeChunk(timeout_s):
                return self._next_chunk(timeout_s)
            case _CloseCore():
                try:
                    self._thread.run(self._core.close(), timeout_s=10)
                finally:
                    self._thread.close()
                return None
            case _:
                assert_never(effect)

    def _core_call(self, function: Callable[..., object], *args: Any) -> None:
        async def call() -> None:
            function(*args)

        self._thread.run(call())

    def _core_soon(self, function: Callable[..., object], *args: Any) -> None:
        self._thread.call_soon(function, *args)

    def _next_chunk(self, timeout_s: float | None) -> Chunk | None:
        """The next usable chunk from the inbox (waiting up to ``timeout_s``)."""
        self._check_open()
        deadline_s = None if timeout_s is None else time.monotonic() + timeout_s
        inbox = self._inbox
        while True:
            with inbox.lock:
                chunk = self._take_locked()
                while chunk is None:
                    if self._closed:
                        raise ClientClosedError("the consumer is closed")
                    if deadline_s is None:
                        inbox.ready.wait()
                    else:
                        remaining_s = deadline_s - time.monotonic()
                        if remaining_s <= 0:
                            return None
                        inbox.ready.wait(remaining_s)
                    chunk = self._take_locked()
            taken = self._taken(chunk)
            if taken is not None:
                return taken


class AsyncConsumer(_Reader[_K, _V]):
    """The asyncio consumer: :class:`Consumer`'s surface as coroutines, on the
    running event loop (create it inside one). ``async for record in consumer``
    waits for records for ever; :meth:`records` and :meth:`batches` take a
    ``timeout_s``. Use ``async with``, or ``await close()``.
    """

    def _start_core(self) -> None:
        self._loop = asyncio.get_running_loop()  # created inside a running loop

    def _abandon(self) -> None:
        self._closed = True
        if self._owns_client:
            self._client.close()

    async def subscribe(
        self, topics: str | Sequence[str] = (), *, pattern: str | None = None
    ) -> None:
        """See :meth:`Consumer.subscribe`."""
        await self._run(self._subscribe_steps(topics, pattern))

    async def unsubscribe(self) -> None:
        """See :meth:`Consumer.unsubscribe`."""
        await self._run(self._unsubscribe_steps())

    async def commit(
        self, offsets: Mapping[tuple[str, int], int] | None = None, metadata: str = ""
    ) -> None:
        """See :meth:`Consumer.commit` (the call runs in a worker thread)."""
        await self._run(self._commit_steps(offsets, metadata))

    async def committed(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, int | None]:
        """See :meth:`Consumer.committed`."""
        return await self._run(self._committed_steps(partitions))

    async def committed_lag(self) -> dict[TopicPartition, int]:
        """See :meth:`Consumer.committed_lag`."""
        return await self._run(self._committed_lag_steps())

    async def assign(
        self, partitions: Iterable[tuple[str, int]] | Mapping[tuple[str, int], int]
    ) -> None:
        """See :meth:`Consumer.assign`."""
        self._check_assign()
        await self._assign_now(partitions)

    async def _assign_now(self, partitions: Iterable[tuple[str, int]] | Mapping[Any, Any]) -> None:
        await self._run(self._assign_steps(partitions))

    async def seek(self, tp: tuple[str, int], offset: int) -> None:
        """See :meth:`Consumer.seek`."""
        await self._run(self._seek_steps(tp, offset))

    async def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """See :meth:`Consumer.seek_to_beginning`."""
        await self._run(self._seek_to_steps(partitions, None, _log_start))

    async def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """See :meth:`Consumer.seek_to_end`."""
        await self._run(self._seek_to_steps(partitions, None, _high_watermark))

    async def seek_to_time(self, timestamp_ms: int, *partitions: tuple[str, int]) -> None:
        """See :meth:`Consumer.seek_to_time`."""
        await self._run(self._seek_to_steps(partitions, timestamp_ms, _found_or_end))

    async def pause(self, *partitions: tuple[str, int]) -> None:
        """See :meth:`Consumer.pause`."""
        await self._run(self._pause_steps(partitions))

    async def resume(self, *partitions: tuple[str, int]) -> None:
        """See :meth:`Consumer.resume`."""
        await self._run(self._resume_steps(partitions))

    async def lag(self) -> dict[TopicPartition, int]:
        """See :meth:`Consumer.lag`."""
        return await self._run(self._lag_steps())

    async def beginning_offsets(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, int]:
        """See :meth:`Consumer.beginning_offsets`."""
        return await self._run(self._offsets_steps(partitions, _log_start))

    async def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        """See :meth:`Consumer.end_offsets`."""
        return await self._run(self._offsets_steps(partitions, _high_watermark))

    def __aiter__(self) -> AsyncIterator[ConsumerRecord[_K, _V]]:
        return self.records()

    def records(self, timeout_s: float | None = None) -> AsyncIterator[ConsumerRecord[_K, _V]]:
        """See :meth:`Consumer.records`."""
        return iterate_async(self._records_steps(timeout_s), self._perform)

    def batches(
        self, max_records: int = 10_000, timeout_s: float | None = None
    ) -> AsyncIterator[ConsumerBatch[_K, _V]]:
        """See :meth:`Consumer.batches`."""
        return iterate_async(self._batches_steps(max_records, timeout_s), self._perform)

    async def close(self) -> None:
        """Stop fetching and close the connections (in a group: final commit,
        ``on_revoked``, leave). Idempotent."""
        await self._run(self._close_steps())

    async def __aenter__(self) -> AsyncConsumer[_K, _V]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- the effects, carried out on the running event loop

    async def _run(self, steps: Steps[_Effect, _T]) -> _T:
        return await drive_async(steps, self._perform)

    async def _perform(self, effect: _Effect) -> Any:
        match effect:
            case _OnCore(function, args):
                return function(*args)
            case _Blocking(function, args):
                return await asyncio.to_thread(function, *args)
            case _InGroup(_, asynchronous, with_assign):
                return await (asynchronous(self._assign_now) if with_assign else asynchronous())
            case _TakeChunk(timeout_s):
                return await self._next_chunk(timeout_s)
            case _CloseCore():
                await self._core.close()
                return None
            case _:
                assert_never(effect)

    def _core_call(self, function: Callable[..., object], *args: Any) -> None:
        function(*args)

    def _core_soon(self, function: Callable[..., object], *args: Any) -> None:
        function(*args)

    async def _next_chunk(self, timeout_s: float | None) -> Chunk | None:
        self._check_open()
        deadline_s = None if timeout_s is None else time.monotonic() + timeout_s
        inbox = self._inbox
        while True:
            with inbox.lock:
                chunk = self._take_locked()
                waiter: asyncio.Future[None] | None = None
                if chunk is None:
                    waiter = self._loop.create_future()
                    inbox.async_waiters = [w for w in inbox.async_waiters if not w.done()]
                    inbox.async_waiters.append(waiter)
            if waiter is not None:
                if self._closed:
                    raise ClientClosedError("the consumer is closed")
                remaining_s = None if deadline_s is None else deadline_s - time.monotonic()
                if remaining_s is not None and remaining_s <= 0:
                    return None
                try:
                    await asyncio.wait_for(waiter, remaining_s)
                except TimeoutError:
                    return None
                continue
            assert chunk is not None
            taken = self._taken(chunk)
            if taken is not None:
                return taken


def _log_start(offsets: PartitionOffsets) -> int:
    return offsets.log_start_offset


def _high_watermark(offsets: PartitionOffsets) -> int:
    return offsets.high_watermark


def _found_or_end(offsets: PartitionOffsets) -> int:
    found = offsets.offset_for_timestamp
    return offsets.high_watermark if found is None else found

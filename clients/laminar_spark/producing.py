"""One Spark write task's records into Laminar, written once however often Spark
retries the task (runs on an executor; no Spark).

Theory of operation
-------------------
Laminar's leaders deduplicate *idempotent* batches: a batch carries
``(producer_id, base_sequence)`` and covers ``record_count`` sequence numbers; per
partition, the leader (and every replica, which learn it through the log)
remembers each producer's last 5 batches. A batch it remembers is answered
DUPLICATE with its original offset (and, with acks=all, only once committed); a
batch that does not start where the producer's last one ended is refused
OUT_OF_ORDER_SEQUENCE with the sequence expected; a producer it does not know may
start at any sequence (``laminar/replica/producers.py``).

A task turns that into "each record once" for Spark's retries:

- **The producer id is derived, not drawn**: a hash of the write (the batch
  writer's id, or the streaming query's id and micro-batch id) and the Spark
  partition id (:func:`producer_id_for`). Every attempt of a task, and every replay
  of a micro-batch, writes as the same producer.
- **The batches are the same**: records go to partitions by key
  (:func:`~laminar_client.partitioner.key_partition`, as every Laminar writer), by
  the ``partition`` column, or — keyless — to a sticky partition chosen by a
  generator seeded with the producer id (:class:`Router`); each partition's records
  are cut into batches by record count and bytes only, never by time
  (:class:`BatchCutter`), and numbered from sequence 0. So, given the same input
  rows in the same order, an attempt sends exactly the batches an earlier attempt
  sent, with the same sequences.
- **Answers are read as facts about the log** (:class:`PartitionStream`): a
  DUPLICATE means written; OUT_OF_ORDER with ``expected >= end`` means the broker
  already holds this producer's records up to ``expected`` (an earlier attempt
  wrote them, further back than the 5-batch window): skip them; ``base < expected
  < end``: send the tail from ``expected``; ``expected < base``: records this task
  relied on are gone (their write was lost with a leader before it committed),
  so the task fails and Spark retries it.
- **One request in flight per partition**, so the broker sees each partition's
  batches in sequence order and a batch is sent only after every earlier one was
  acknowledged (committed, acks=all) or skipped. A request may carry several
  consecutive batches (the broker takes all or none). Partitions are sent in
  parallel by a few threads.
- **Skipped records are confirmed**: when a partition's last batches were skipped
  (an earlier attempt wrote them, perhaps without their commit being seen), the
  last of them is sent once more at the end: DUPLICATE waits for its commit.

What is *not* guaranteed: input that differs between attempts (a non-deterministic
source or UDF, rows in a different order — e.g. after a shuffle without a sort —
or a topic whose partition count changed between attempts) makes different
batches, so a retry may duplicate or skip records. A broker that forgot the
producer (more than ``producers_max``, 100,000, newer producers on the partition;
a replica rebuilt from a snapshot; retention that deleted every batch of it)
accepts a retry's batches as new.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from laminar_client.arrow import arrow_to_batch, binary_lengths, header_blobs, timestamps_ms
from laminar_client.client import UNKNOWN_TOPIC_WAIT_S, Client
from laminar_client.partitioner import StickyPartitioner, key_partition
from laminar_client.sequencing import PRODUCER_ID_MAX, SEQUENCE_LIMIT, Lineage, records_held

from laminar.errors import (
    InvalidInputError,
    OutOfOrderSequenceError,
    ProducerSequenceError,
    TopicNotAuthorizedError,
    UnknownTopicOrPartitionError,
)
from laminar.records import NO_PRODUCER, Compression, decode_batch, encode_batch
from laminar_spark.write_options import WriteOptions

__all__ = [
    "RECORD_OVERHEAD_BYTES",
    "BatchCutter",
    "ClusterTarget",
    "OutgoingBatch",
    "PartitionReport",
    "PartitionStream",
    "ProduceTarget",
    "Router",
    "SequenceGapError",
    "TaskProducer",
    "producer_id_for",
]

log = logging.getLogger("laminar_spark")

RECORD_OVERHEAD_BYTES = 16
"""Bytes a record counts beyond its key, value and headers (as the client's producer
counts it): its timestamp and two lengths in the payload."""
SEND_THREADS = 8
"""Partitions sent to at once by one task (each has at most one request in flight)."""
BUFFER_BYTES_MAX = 64 * 1024 * 1024
"""Encoded bytes a task holds that are not yet acknowledged; beyond it encoding
waits for the sends (a task's memory stays bounded, whatever its input)."""
REQUEST_BYTES_MAX = 16 * 1024 * 1024
"""Bytes of batches in one produce request (a node takes 64 MiB messages)."""
REQUEST_BATCHES_MAX = 256
"""Batches in one produce request (a node takes 10,000)."""
PRODUCE_TIMEOUT_S = 60.0
"""How long one produce call (its retries included) may take before the task fails
(Spark then retries the task, which is safe): long enough for a leader election."""


class SequenceGapError(ProducerSequenceError):
    """A partition's leader expects an earlier sequence than this task's next batch:
    records an earlier attempt (or this one) relied on were not committed. Failing
    the task makes Spark retry it, and the retry writes them."""


def producer_id_for(*parts: str | int) -> int:
    """A positive int64 producer id from ``parts`` (blake2b: stable across processes,
    machines and Python versions, unlike ``hash``)."""
    text = "\x1f".join(str(part) for part in parts).encode()
    digest = hashlib.blake2b(text, digest_size=8, person=b"laminar-spark").digest()
    return int.from_bytes(digest, "big") & PRODUCER_ID_MAX


# ----------------------------------------------------------------------------- routing


class Router:
    """Which partition each record of one task goes to, the same in every attempt.

    An explicit partition wins; else a keyed record goes to
    :func:`~laminar_client.partitioner.key_partition`; a keyless one to the topic's
    *sticky* partition, by the client's rule (:class:`StickyPartitioner`: one
    partition until ``switch_bytes`` went to it, then another at random), with the
    generator seeded by ``seed`` (the producer id) so that a retry chooses alike.
    """

    def __init__(self, switch_bytes: int, seed: int) -> None:
        self._switch_bytes = switch_bytes
        self._sticky = StickyPartitioner(switch_bytes, random.Random(seed))
        # topic -> (partitions, bytes sent to its sticky partition): the partitioner's
        # own count, mirrored so that whole runs of records are routed in one call.
        self._filled: dict[str, tuple[int, int]] = {}

    def route(
        self,
        topic: str,
        partitions: int,
        keys: Any | None,
        explicit: np.ndarray | None,
        sizes: np.ndarray,
    ) -> np.ndarray:
        """The partition (int64) of each record: ``keys`` a binary Arrow array or
        None, ``explicit`` the partition column (int64, -1 = null) or None,
        ``sizes`` each record's size (:data:`RECORD_OVERHEAD_BYTES` included)."""
        count = len(sizes)
        out = np.empty(count, dtype=np.int64)
        todo = np.ones(count, dtype=bool)
        if explicit is not None:
            given = explicit >= 0
            bad = given & (explicit >= partitions)
            if bad.any():
                raise UnknownTopicOrPartitionError(
                    f"a row's partition {int(explicit[bad][0])} is not in topic {topic!r} "
                    f"(partitions 0..{partitions - 1})"
                )
            out[given] = explicit[given]
            todo = ~given
        key_lengths = binary_lengths(keys) if keys is not None else np.full(count, -1)
        keyed = todo & (key_lengths >= 0)
        if keyed.any():
            assert keys is not None
            rows = np.flatnonzero(keyed)
            chosen = [key_partition(key, partitions) for key in keys.take(rows).to_pylist()]
            out[rows] = chosen
        keyless = todo & (key_lengths < 0)
        if keyless.any():
            out[keyless] = self._keyless(topic, partitions, sizes[keyless])
        return out

    def _keyless(self, topic: str, partitions: int, sizes: np.ndarray) -> np.ndarray:
        """Sticky partitions for consecutive keyless records: a run of records stays
        while the bytes counted before each are under ``switch_bytes`` (exactly
        :meth:`StickyPartitioner.partition` called once per record)."""
        count = len(sizes)
        out = np.empty(count, dtype=np.int64)
        cumulative = np.cumsum(sizes)
        known = self._filled.get(topic)
        filled = known[1] if known is not None and known[0] == partitions else None
        start = 0
        while start < count:
            if filled is None or filled >= self._switch_bytes:
                filled = 0  # the partitioner starts, or switches, at its next call
            before = int(cumulative[start - 1]) if start else 0
            room = self._switch_bytes - filled
            stop = start + 1 + int(np.searchsorted(cumulative[start : count - 1], room + before))
            run_bytes = int(cumulative[stop - 1]) - before
            out[start:stop] = self._sticky.partition(topic, partitions, run_bytes)
            filled += run_bytes
            start = stop
        self._filled[topic] = (partitions, filled if filled is not None else 0)
        return out


# ----------------------------------------------------------------------------- batching


class BatchCutter:
    """One partition's records into batches, cut by count and bytes alone.

    A record joins the open batch if it holds fewer than ``records_max`` records and
    the record fits in ``bytes_max``, or if the batch is empty (a record larger than
    ``bytes_max`` goes alone); otherwise the batch is sealed first. The cuts depend
    on the records only, not on how Spark chunked them, so a retry cuts alike.
    """

    def __init__(self, records_max: int, bytes_max: int) -> None:
        self.records_max = records_max
        self.bytes_max = bytes_max
        self._pieces: list[Any] = []
        self._count = 0
        self._bytes = 0

    @property
    def pending(self) -> int:
        """Records in the open batch."""
        return self._count

    def add(self, piece: Any, sizes: np.ndarray) -> list[Any]:
        """Add ``piece`` (a ``pyarrow.RecordBatch``, ``sizes`` per record); the batches
        sealed meanwhile, each a ``pyarrow.RecordBatch``."""
        sealed: list[Any] = []
        count = len(sizes)
        cumulative = np.cumsum(sizes)
        start = 0
        while start < count:
            before = int(cumulative[start - 1]) if start else 0
            fit = int(
                np.searchsorted(cumulative[start:], self.bytes_max - self._bytes + before, "right")
            )
            take = min(fit, self.records_max - self._count, count - start)
            if take <= 0:
                if self._count:
                    sealed.append(self.seal())
                    continue
                take = 1  # alone, however large
            self._pieces.append(piece.slice(start, take))
            self._count += take
            self._bytes += int(cumulative[start + take - 1]) - before
            start += take
            if start < count or self._count >= self.records_max:
                sealed.append(self.seal())  # the next record does not fit
        return sealed

    def seal(self) -> Any:
        """The open batch's records as one ``pyarrow.RecordBatch`` (at least one)."""
        assert self._count, "sealing an empty batch"
        pieces, self._pieces = self._pieces, []
        self._count = self._bytes = 0
        if len(pieces) == 1:
            return pieces[0]
        import pyarrow as pa

        return pa.Table.from_batches(pieces).combine_chunks().to_batches()[0]


# ----------------------------------------------------------------------------- sequencing


@dataclass(frozen=True, slots=True)
class OutgoingBatch:
    """An encoded batch and the sequences it covers."""

    base_sequence: int
    record_count: int
    data: bytes

    @property
    def end_sequence(self) -> int:
        return self.base_sequence + self.record_count


@dataclass(frozen=True, slots=True)
class PartitionReport:
    """What a task did to one partition: ``records`` it produced (acknowledged now,
    or found already written by an earlier attempt), and ``skipped``: those of them
    not sent again because the leader's out-of-order answer said an earlier attempt
    wrote them. A batch sent again and answered DUPLICATE counts in ``records`` only
    (the client does not tell), so ``skipped`` is a lower bound of what earlier
    attempts wrote, and how large depends on how the answers and the encoding
    interleave."""

    topic: str
    partition: int
    records: int
    skipped: int


class PartitionStream:
    """The batches of one partition, in sequence order, and what answers mean.

    Sans-IO: the sender asks :meth:`next_request`, sends it, and reports the answer
    with :meth:`acknowledged` or :meth:`out_of_order`. See the module docstring; the
    sequence numbers (:attr:`lineage`) and what an out-of-order answer says
    (:func:`~laminar_client.sequencing.records_held`) are
    :mod:`laminar_client.sequencing`'s, as for every Laminar writer.
    """

    def __init__(self, topic: str, partition: int, producer_id: int = NO_PRODUCER) -> None:
        self.topic = topic
        self.partition = partition
        self.lineage = Lineage(producer_id)
        """The task's producer id and the sequence of the next batch sealed (from 0;
        one task writes fewer than ``SEQUENCE_LIMIT`` records to one partition)."""
        self.queue: deque[OutgoingBatch] = deque()
        self.records = 0  # acknowledged or skipped
        self.skipped = 0
        self.unconfirmed: OutgoingBatch | None = None  # the last skipped, not yet confirmed
        self.confirmed_by_resend = 0

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def next_sequence(self) -> int:
        return self.lineage.next_sequence

    def add(self, batch: OutgoingBatch) -> None:
        assert batch.base_sequence == self.next_sequence, (batch, self.next_sequence)
        self.lineage.take(batch.record_count)
        self.queue.append(batch)

    def next_request(self, bytes_max: int, batches_max: int) -> list[OutgoingBatch]:
        """The oldest queued batches, as many as fit one request (at least one)."""
        request: list[OutgoingBatch] = []
        size = 0
        for batch in self.queue:
            if request and (size + len(batch.data) > bytes_max or len(request) >= batches_max):
                break
            request.append(batch)
            size += len(batch.data)
        return request

    def acknowledged(self, request: Sequence[OutgoingBatch]) -> int:
        """``request`` (the queue's head) was written or recognised: the bytes freed."""
        freed = 0
        for batch in request:
            assert self.queue[0] is batch, "answers come in request order"
            self.queue.popleft()
            self.records += batch.record_count
            freed += len(batch.data)
        self.unconfirmed = None  # committed after every earlier sequence
        return freed

    def out_of_order(
        self, request: Sequence[OutgoingBatch], expected: int, producer_id: int
    ) -> int:
        """The leader refused ``request``, expecting sequence ``expected``: drop what
        it already holds (cut a batch it holds part of); the bytes freed."""
        base = request[0].base_sequence
        if records_held(expected, base) is None:
            raise SequenceGapError(
                f"{self.name}: the leader expects sequence {expected} of producer "
                f"{producer_id}, but this task's next batch starts at {base}: records "
                "this task relied on were not committed; the task fails so that Spark "
                "retries it"
            )
        freed = 0
        while self.queue and self.queue[0].end_sequence <= expected:
            batch = self.queue.popleft()
            self.records += batch.record_count
            self.skipped += batch.record_count
            self.unconfirmed = batch
            freed += len(batch.data)
        if self.queue and self.queue[0].base_sequence < expected:
            head = self.queue[0]
            tail = tail_of(head, expected)
            held = expected - head.base_sequence
            self.records += held
            self.skipped += held
            self.queue[0] = tail
            freed += len(head.data) - len(tail.data)
        return freed


def tail_of(batch: OutgoingBatch, start_sequence: int) -> OutgoingBatch:
    """The records of ``batch`` from ``start_sequence`` on, as a batch of their own
    (same producer, ``base_sequence = start_sequence``); rare, so decoded and encoded
    again rather than kept as columns."""
    decoded = decode_batch(batch.data)
    cut = start_sequence - batch.base_sequence
    assert 0 < cut < batch.record_count, (cut, batch.record_count)
    header = decoded.header
    data = encode_batch(
        decoded.values[cut:],
        keys=decoded.keys[cut:],
        timestamps_ms=decoded.timestamps_ms[cut:],
        headers=decoded.headers[cut:],
        compression=Compression(header.compression),
        producer_id=header.producer_id,
        base_sequence=start_sequence,
    )
    return OutgoingBatch(start_sequence, batch.record_count - cut, data)


# ----------------------------------------------------------------------------- sending


class ProduceTarget(Protocol):
    """Where a task's batches go (the cluster, through a client; a fake in tests)."""

    def partition_count(self, topic: str) -> int:
        """The topic's partitions; ``UnknownTopicOrPartitionError`` when it has none."""
        ...

    def produce(self, topic: str, partition: int, batches: Sequence[bytes]) -> None:
        """Write ``batches`` (consecutive sequences) with acks=all, or raise
        (``OutOfOrderSequenceError`` with ``expected_sequence``)."""
        ...


class TaskProducer:
    """One task's writer: :meth:`write` each Arrow batch, then :meth:`finish`.

    ``counts`` gives partition counts known beforehand (the driver's, for a batch
    write's ``topic`` option); other topics are asked of ``target`` once. Records
    without a ``timestamp`` (or with a null one) get ``default_timestamp_ms``.
    """

    def __init__(
        self,
        target: ProduceTarget,
        options: WriteOptions,
        producer_id: int,
        default_timestamp_ms: int,
        *,
        counts: Mapping[str, int] | None = None,
        send_threads: int = SEND_THREADS,
        buffer_bytes_max: int = BUFFER_BYTES_MAX,
        request_bytes_max: int = REQUEST_BYTES_MAX,
        request_batches_max: int = REQUEST_BATCHES_MAX,
    ) -> None:
        self._target = target
        self._options = options
        self.producer_id = producer_id
        self._default_timestamp_ms = default_timestamp_ms
        self._counts = dict(counts or {})
        self._router = Router(options.batch_bytes_max, producer_id)
        self._cutters: dict[tuple[str, int], BatchCutter] = {}
        self._streams: dict[tuple[str, int], PartitionStream] = {}
        self._request_bytes_max = request_bytes_max
        self._request_batches_max = request_batches_max
        self._buffer_bytes_max = buffer_bytes_max
        self._buffered_bytes = 0
        self._sending: set[tuple[str, int]] = set()
        self._error: BaseException | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(send_threads, thread_name_prefix="laminar-write")

    # ------------------------------------------------------------------ input

    def write(self, batch: Any) -> None:
        """Route, cut, encode and send the records of one ``pyarrow.RecordBatch``
        with a ``value`` column and any of ``key``, ``headers``, ``topic``,
        ``partition``, ``timestamp`` (other columns are ignored)."""
        self._raise_failure()
        count = batch.num_rows
        if count == 0:
            return
        records, sizes, explicit = self._normalize(batch)
        for topic, rows in self._topics(batch, count):
            partitions = self._partition_count(topic)
            subset = records if rows is None else records.take(rows)
            subset_sizes = sizes if rows is None else sizes[rows]
            subset_explicit = None
            if explicit is not None:
                subset_explicit = explicit if rows is None else explicit[rows]
            names = subset.schema.names
            keys = subset.column(names.index("key")) if "key" in names else None
            chosen = self._router.route(topic, partitions, keys, subset_explicit, subset_sizes)
            order = np.argsort(chosen, kind="stable")  # each partition's rows in input order
            ordered = subset.take(order)
            ordered_sizes = subset_sizes[order]
            ordered_partitions = chosen[order]
            present, starts = np.unique(ordered_partitions, return_index=True)
            ends = [*starts[1:].tolist(), len(order)]
            for partition, start, end in zip(present.tolist(), starts.tolist(), ends, strict=True):
                self._add(
                    topic,
                    partition,
                    ordered.slice(start, end - start),
                    ordered_sizes[start:end],
                )

    def finish(self) -> list[PartitionReport]:
        """Seal and send what is left, wait for every answer, confirm skipped
        records; what each partition got."""
        for (topic, partition), cutter in sorted(self._cutters.items()):
            if cutter.pending:
                self._send(topic, partition, cutter.seal())
        with self._changed:
            while self._sending and self._error is None:
                self._changed.wait()
        self._raise_failure()
        for stream in self._streams.values():
            if stream.unconfirmed is not None:
                self._confirm(stream, stream.unconfirmed)
        return [
            PartitionReport(s.topic, s.partition, s.records, s.skipped)
            for _, s in sorted(self._streams.items())
        ]

    def close(self) -> None:
        """Stop sending (a failed task) and wait for the send threads."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> TaskProducer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _normalize(self, batch: Any) -> tuple[Any, np.ndarray, np.ndarray | None]:
        """The records as key/value/headers/timestamp columns (strings as their
        bytes, header lists as blobs), each record's size, and the explicit
        partitions (int64, -1 = null) if there is a ``partition`` column."""
        import pyarrow as pa

        names = batch.schema.names
        count = batch.num_rows
        columns: dict[str, Any] = {}
        if "value" not in names:
            raise InvalidInputError("the DataFrame needs a 'value' column (binary or string)")
        sizes = np.full(count, RECORD_OVERHEAD_BYTES, dtype=np.int64)
        if "key" in names:
            columns["key"] = _as_binary(batch.column(names.index("key")), "key")
            sizes += np.maximum(binary_lengths(columns["key"]), 0)
        columns["value"] = _as_binary(batch.column(names.index("value")), "value")
        sizes += np.maximum(binary_lengths(columns["value"]), 0)
        if "headers" in names:
            columns["headers"] = header_blobs(batch.column(names.index("headers")))
            sizes += binary_lengths(columns["headers"])
        if "timestamp" in names:
            stamps = timestamps_ms(
                batch.column(names.index("timestamp")), self._default_timestamp_ms
            )
        else:
            stamps = np.full(count, self._default_timestamp_ms, dtype=np.int64)
        columns["timestamp"] = pa.array(stamps, pa.int64())
        explicit = None
        if "partition" in names:
            explicit = _partitions(batch.column(names.index("partition")))
        records = pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))
        return records, sizes, explicit

    def _topics(self, batch: Any, count: int) -> Iterable[tuple[str, np.ndarray | None]]:
        """Each topic written to and its rows (None: every row)."""
        if self._options.topic is not None:
            return [(self._options.topic, None)]
        names = batch.schema.names
        if "topic" not in names:
            raise InvalidInputError("give the option 'topic' or a 'topic' column")
        column = batch.column(names.index("topic"))
        if column.null_count:
            raise InvalidInputError(
                "a row's 'topic' is null; give every row a topic, or the option 'topic'"
            )
        encoded = column.dictionary_encode()
        topics = [str(name) for name in encoded.dictionary.to_pylist()]
        if len(topics) == 1:
            return [(topics[0], None)]
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        return [(topic, np.flatnonzero(indices == i)) for i, topic in enumerate(topics)]

    def _partition_count(self, topic: str) -> int:
        count = self._counts.get(topic)
        if count is None:
            count = self._target.partition_count(topic)
            self._counts[topic] = count
        return count

    def _add(self, topic: str, partition: int, piece: Any, sizes: np.ndarray) -> None:
        cutter = self._cutters.get((topic, partition))
        if cutter is None:
            options = self._options
            cutter = BatchCutter(options.batch_records_max, options.batch_bytes_max)
            self._cutters[(topic, partition)] = cutter
        for sealed in cutter.add(piece, sizes):
            self._send(topic, partition, sealed)

    def _send(self, topic: str, partition: int, records: Any) -> None:
        """Encode a sealed batch with the partition's next sequences and queue it."""
        key = (topic, partition)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = PartitionStream(topic, partition, self.producer_id)
        count = records.num_rows
        base = stream.next_sequence
        if not stream.lineage.fits(count):
            raise InvalidInputError(
                f"{stream.name}: one task may write at most {SEQUENCE_LIMIT - 1} records to "
                "a partition; split the input into more partitions"
            )
        names = records.schema.names
        data = arrow_to_batch(
            records.column(names.index("value")),
            keys=records.column(names.index("key")) if "key" in names else None,
            timestamps_ms=records.column(names.index("timestamp")).to_numpy(),
            headers=records.column(names.index("headers")) if "headers" in names else None,
            compression=self._options.compression,
            producer_id=self.producer_id,
            base_sequence=base,
        )
        with self._changed:
            while (
                self._buffered_bytes
                and self._buffered_bytes + len(data) > self._buffer_bytes_max
                and self._error is None
            ):
                self._changed.wait()
            self._raise_failure_locked()
            stream.add(OutgoingBatch(base, count, data))
            self._buffered_bytes += len(data)
            if key not in self._sending:
                self._sending.add(key)
                self._pool.submit(self._drain, stream)

    def _drain(self, stream: PartitionStream) -> None:
        """Send ``stream``'s queue, one request at a time, until it is empty."""
        key = (stream.topic, stream.partition)
        try:
            while True:
                with self._changed:
                    if self._closed or self._error is not None or not stream.queue:
                        self._sending.discard(key)
                        self._changed.notify_all()
                        return
                    request = stream.next_request(
                        self._request_bytes_max, self._request_batches_max
                    )
                try:
                    self._target.produce(
                        stream.topic, stream.partition, [batch.data for batch in request]
                    )
                except OutOfOrderSequenceError as error:
                    with self._changed:
                        freed = stream.out_of_order(
                            request, error.expected_sequence, self.producer_id
                        )
                        self._buffered_bytes -= freed
                        self._changed.notify_all()
                    continue
                with self._changed:
                    self._buffered_bytes -= stream.acknowledged(request)
                    self._changed.notify_all()
        except BaseException as error:  # handed to the task's thread, which raises it
            with self._changed:
                if self._error is None:
                    self._error = error
                self._sending.discard(key)
                self._changed.notify_all()

    def _confirm(self, stream: PartitionStream, batch: OutgoingBatch) -> None:
        """Send the last skipped batch again: DUPLICATE (answered once committed)
        confirms every record up to it; a gap fails the task."""
        try:
            self._target.produce(stream.topic, stream.partition, [batch.data])
        except OutOfOrderSequenceError as error:
            held = records_held(error.expected_sequence, batch.base_sequence)
            if held is None:
                raise SequenceGapError(
                    f"{stream.name}: records an earlier attempt wrote were not committed "
                    f"(the leader expects sequence {error.expected_sequence}, this task "
                    f"skipped up to {batch.end_sequence}); the task fails so that Spark "
                    "retries it"
                ) from error
            if held > batch.record_count:
                log.warning(
                    "%s: producer %d holds records up to sequence %d, more than this task "
                    "produced (%d): the input differs between attempts, not deduplicated",
                    stream.name,
                    self.producer_id,
                    error.expected_sequence,
                    batch.end_sequence,
                )
        stream.unconfirmed = None
        stream.confirmed_by_resend += 1

    def _raise_failure(self) -> None:
        with self._lock:
            self._raise_failure_locked()

    def _raise_failure_locked(self) -> None:
        if self._error is not None:
            raise self._error


def _as_binary(array: Any, name: str) -> Any:
    """A binary view of a binary or string column (strings are their UTF-8 bytes)."""
    import pyarrow as pa

    kind = array.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_null(kind):
        return array
    if pa.types.is_string(kind):
        return array.cast(pa.binary())
    if pa.types.is_large_string(kind):
        return array.cast(pa.large_binary())
    raise InvalidInputError(f"column {name!r} must be binary or string, not {kind}")


def _partitions(array: Any) -> np.ndarray:
    """The ``partition`` column as int64, -1 for null; a negative partition is refused."""
    import pyarrow as pa

    if not pa.types.is_integer(array.type):
        raise InvalidInputError(f"column 'partition' must be an integer, not {array.type}")
    values = np.asarray(array.cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False))
    if array.null_count != int(np.count_nonzero(values < 0)):
        bad = int(values[values < 0].min())
        raise InvalidInputError(f"a row's partition is {bad}; partitions are >= 0 (or null)")
    return values


def report_totals(reports: Iterable[PartitionReport]) -> tuple[int, int, int]:
    """Records, skipped records and partitions over ``reports``."""
    records = skipped = partitions = 0
    for report in reports:
        records += report.records
        skipped += report.skipped
        partitions += 1
    return records, skipped, partitions


class ClusterTarget:
    """:class:`ProduceTarget` over a :class:`~laminar_client.client.Client`: produce
    calls go to each partition's leader with acks=all, retried (leader changes,
    ``UNAVAILABLE``, no answer) with the same bytes until ``timeout_s``."""

    def __init__(
        self,
        client: Client,
        *,
        timeout_s: float = PRODUCE_TIMEOUT_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._sleep = sleep
        self._clock = clock

    def partition_count(self, topic: str) -> int:
        """From metadata; a topic not in it is looked for again for
        ``UNKNOWN_TOPIC_WAIT_S`` (a topic created a moment ago is still spreading),
        then :class:`TopicNotAuthorizedError` if the cluster showed only what this
        caller may describe, else :class:`UnknownTopicOrPartitionError`."""
        deadline = self._clock() + UNKNOWN_TOPIC_WAIT_S
        refresh = False
        while True:
            metadata = self._client.metadata(refresh=refresh)
            found = metadata.topics.get(topic)
            if found is not None:
                return found.config.partitions
            if self._clock() >= deadline:
                if metadata.filtered:  # shown only what this caller may describe
                    raise TopicNotAuthorizedError(topic)
                raise UnknownTopicOrPartitionError(f"no topic {topic!r} to write to")
            refresh = True
            self._sleep(0.05)

    def produce(self, topic: str, partition: int, batches: Sequence[bytes]) -> None:
        self._client.produce(topic, partition, batches, acks="all", timeout_s=self._timeout_s)

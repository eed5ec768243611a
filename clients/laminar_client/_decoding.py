"""What the consumer hands out, and how it gets there: :class:`ConsumerRecord`,
:class:`ConsumerBatch` (records of one stored batch, as columns), and
:class:`RecordDecoder`, which turns a fetch answer into either on the application's
thread (checksums verified, keys and values deserialized). Re-exported by
:mod:`laminar_client.consumer` and :mod:`laminar_client`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from itertools import repeat
from typing import Any, Generic, NamedTuple

from typing_extensions import TypeVar

from laminar.errors import RecordDeserializationError
from laminar.records import ColumnView, Header, column_view, decode_batch
from laminar_client._fetcher import Chunk, verified
from laminar_client.serializers import Deserializer

__all__ = ["ConsumerBatch", "ConsumerRecord", "RecordDecoder"]

_K = TypeVar("_K", default=bytes)  # without deserializers, keys and values are bytes
_V = TypeVar("_V", default=bytes)


class ConsumerRecord(NamedTuple, Generic[_K, _V]):
    """One record as the consumer hands it out (key and value deserialized)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: _K | None
    value: _V | None
    headers: tuple[Header, ...]


_make_record = partial(tuple.__new__, ConsumerRecord)


class ConsumerBatch(Generic[_K, _V]):
    """Consecutive records of one partition, from one stored batch, as columns.

    ``len()`` records from ``first_offset`` to ``next_offset`` - 1; iterate for
    :class:`ConsumerRecord` objects, or call :meth:`to_arrow` for a
    ``pyarrow.RecordBatch`` built from the payload's columns (no object per record).
    """

    __slots__ = (
        "_batch",
        "_decoder",
        "_start",
        "_stop",
        "_view",
        "base_offset",
        "partition",
        "topic",
    )

    def __init__(
        self,
        decoder: RecordDecoder[_K, _V],
        topic: str,
        partition: int,
        batch: memoryview,
        base_offset: int,
        start: int,
        stop: int,
    ) -> None:
        self._decoder = decoder
        self.topic = topic
        self.partition = partition
        self._batch = batch
        self.base_offset = base_offset
        self._start = start
        self._stop = stop
        self._view: ColumnView | None = None

    def __len__(self) -> int:
        return self._stop - self._start

    @property
    def first_offset(self) -> int:
        """The offset of this batch's first record."""
        return self.base_offset + self._start

    @property
    def next_offset(self) -> int:
        """The offset after this batch's last record."""
        return self.base_offset + self._stop

    def to_arrow(self, *, headers: bool = False) -> Any:
        """The records as a ``pyarrow.RecordBatch`` (schema:
        :func:`laminar_client.arrow.arrow_schema`); keys and values stay bytes, not
        deserialized."""
        # Imported here: the Arrow module loads numpy (some 50 ms), which a client
        # that never asks for Arrow should not pay at import.
        from laminar_client.arrow import columns_to_arrow

        if self._view is None:
            self._view = column_view(self._batch, verify=False)
        return columns_to_arrow(
            self._view, self.topic, self.partition, self._start, self._stop, headers=headers
        )

    def records(self) -> list[ConsumerRecord[_K, _V]]:
        """The records as :class:`ConsumerRecord` objects (deserialized)."""
        return self._decoder.records_of(
            self.topic, self.partition, self._batch, self._start, self._stop
        )

    def __iter__(self) -> Iterator[ConsumerRecord[_K, _V]]:
        return iter(self.records())

    def __repr__(self) -> str:
        return (
            f"<ConsumerBatch {self.topic}/{self.partition} "
            f"[{self.first_offset}, {self.next_offset})>"
        )


class RecordDecoder(Generic[_K, _V]):
    """Fetch answers as records or batches, on the application's thread: a
    consumer's deserializers (None: keys and values stay bytes)."""

    __slots__ = ("key_deserializer", "value_deserializer")

    def __init__(
        self,
        key_deserializer: Deserializer[_K] | None,
        value_deserializer: Deserializer[_V] | None,
    ) -> None:
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer

    def records_of(
        self, topic: str, partition: int, batch: memoryview, start: int, stop: int | None
    ) -> list[ConsumerRecord[_K, _V]]:
        """Records ``[start, stop)`` of one stored batch (verified already)."""
        decoded = decode_batch(batch, verify=False)
        base = decoded.header.base_offset
        stop = len(decoded.values) if stop is None else stop
        whole = start == 0 and stop == len(decoded.values)
        values: Sequence[Any] = decoded.values if whole else decoded.values[start:stop]
        keys: Sequence[Any] = decoded.keys if whole else decoded.keys[start:stop]
        if self.value_deserializer is not None:
            values = _deserialize_all(
                self.value_deserializer, values, "value", topic, partition, base + start
            )
        if self.key_deserializer is not None:
            keys = _deserialize_all(
                self.key_deserializer, keys, "key", topic, partition, base + start
            )
        return list(
            map(
                _make_record,
                zip(
                    repeat(topic),
                    repeat(partition),
                    range(base + start, base + stop),
                    decoded.timestamps_ms if whole else decoded.timestamps_ms[start:stop],
                    keys,
                    values,
                    decoded.headers if whole else decoded.headers[start:stop],
                    strict=False,  # repeat() is endless; the ranges agree,
                ),
            )
        )

    def chunk_records(
        self, chunk: Chunk, stop_offset: int | None = None
    ) -> list[ConsumerRecord[_K, _V]]:
        """Every data record of a fetch answer at or after the offset asked for (and
        before ``stop_offset``), checksums verified
        (:class:`~laminar_client._fetcher.CorruptChunkError` if not)."""
        topic, partition = chunk.tp
        records: list[ConsumerRecord[_K, _V]] = []
        view = memoryview(chunk.data)
        for position, header in verified(chunk, stop_offset):
            if header.is_control or header.next_offset <= chunk.offset_min:
                continue
            if stop_offset is not None and header.base_offset >= stop_offset:
                break
            start = max(0, chunk.offset_min - header.base_offset)
            stop = None
            if stop_offset is not None and header.next_offset > stop_offset:
                stop = stop_offset - header.base_offset
            batch = view[position : position + header.length]
            records.extend(self.records_of(topic, partition, batch, start, stop))
        return records

    def chunk_batches(
        self, chunk: Chunk, max_records: int, stop_offset: int | None = None
    ) -> list[ConsumerBatch[_K, _V]]:
        """A fetch answer (its batches before ``stop_offset``, a batch start) as
        :class:`ConsumerBatch` slices of at most ``max_records`` (checksums verified:
        :class:`~laminar_client._fetcher.CorruptChunkError` if not)."""
        topic, partition = chunk.tp
        batches: list[ConsumerBatch[_K, _V]] = []
        view = memoryview(chunk.data)
        for position, header in verified(chunk, stop_offset):
            if header.is_control or header.next_offset <= chunk.offset_min:
                continue
            batch = view[position : position + header.length]
            start = max(0, chunk.offset_min - header.base_offset)
            count = header.record_count
            while start < count:
                stop = min(count, start + max_records)
                batches.append(
                    ConsumerBatch(self, topic, partition, batch, header.base_offset, start, stop)
                )
                start = stop
        return batches


def _deserialize_all(
    function: Deserializer[Any],
    items: Sequence[bytes | None],
    field: str,
    topic: str,
    partition: int,
    first_offset: int,
) -> list[Any]:
    """``items`` deserialized; a failure raises :class:`RecordDeserializationError`
    naming the record (found again item by item: failures are rare)."""
    try:
        return [None if item is None else function(item) for item in items]
    except Exception:
        for index, item in enumerate(items):
            try:
                if item is not None:
                    function(item)
            except Exception as error:
                raise RecordDeserializationError(
                    topic, partition, first_offset + index, field, error
                ) from error
        raise

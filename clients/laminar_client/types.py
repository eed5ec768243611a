"""The client's value types, a leaf module (it imports no other ``laminar_client``
module): partitions, offsets, fetch results, the acks setting, and what a producer
reports of a record. Each is re-exported where it was first defined
(``laminar_client``, ``.client``, ``.consumer``, ``.producer``), so that modules
above it share one definition without importing one another."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, NamedTuple

from laminar.records import Record, decode_records, iter_batches

__all__ = [
    "AcksMode",
    "Callback",
    "FetchResult",
    "OffsetReset",
    "PartitionOffsets",
    "RecordMetadata",
    "TopicPartition",
    "Watermarks",
]

AcksMode = Literal["all", "leader", "none"]
OffsetReset = Literal["earliest", "latest", "error"]


class TopicPartition(NamedTuple):
    """A partition: topic name and partition number (any ``(str, int)`` tuple works)."""

    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class FetchResult:
    """One fetch: whole batches (possibly starting before the requested offset)."""

    batches: bytes
    high_watermark: int
    log_start_offset: int
    served_by: str

    def records(self, offset_min: int = 0) -> list[Record]:
        """The data records at or after ``offset_min`` (control batches skipped)."""
        return list(records_from(self.batches, offset_min))


@dataclass(frozen=True, slots=True)
class Watermarks:
    """A partition's readable range: ``[log_start_offset, high_watermark)``."""

    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """A partition's offsets on the replica that answered: its readable range
    ``[log_start_offset, high_watermark)``, and the first offset in it whose record
    timestamp is at least the time asked (None when no committed record is, or when
    no time was asked)."""

    log_start_offset: int
    high_watermark: int
    offset_for_timestamp: int | None


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written (``offset`` -1 with ``acks="none"``,
    and in a failed record's callback)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


Callback = Callable[[RecordMetadata, BaseException | None], None]
"""``callback(metadata, None)`` on success, ``callback(metadata, error)`` on failure
(then ``metadata.offset`` is -1; topic, partition and timestamp say which record);
run on the producer's event loop (its own thread for :class:`Producer`) before
``flush`` returns: keep it short."""


def records_from(batches: bytes, offset_min: int) -> Iterator[Record]:
    view = memoryview(batches)
    for position, header in iter_batches(view):
        if header.next_offset <= offset_min or header.is_control:
            continue
        for record in decode_records(view[position : position + header.length], verify=False):
            if record.offset >= offset_min:
                yield record

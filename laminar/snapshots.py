"""Snapshots of a replicated state machine, written into its own log in chunks.

Theory of operation
===================

The internal logs ``__groups/*`` and ``__cluster/0`` hold state machines that every
replica applies in log order. To keep such a log bounded by the state it holds
rather than by its history, the leader now and then appends a *snapshot*: the
whole state **as of** an offset ``A`` (the leader's applied offset when it began),
appended at offsets ``X >= A`` (other records keep being appended meanwhile, so
``X > A`` is normal). The prefix below ``A`` can then be deleted: the state at any
offset after ``X`` is the snapshot's state with the records of ``[A, ...)`` applied
in order, snapshot chunks skipped.

A snapshot's bytes (the state machine's own encoding) are split into chunks of at
most :data:`CHUNK_BYTES_MAX`, one record each, so a snapshot respects the record
and batch limits whatever the state's size. Each chunk carries the snapshot's id,
``A``, its index and count, the total size and a CRC-32 of the whole, and
``applied_count`` (how many records the state machine had applied as of ``A``: a
cheap paired check on replicas that apply the log from the start). The chunks of
one snapshot are appended in order by one writer; other records may sit between
them. A snapshot whose chunks do not all follow in order (its writer lost the
leadership midway: *torn*) is ignored by :class:`SnapshotAssembler`.

The chunk codec here is shared; each log wraps the fields in its own versioned
record (``{"kind": "snapshot", ...}`` in ``__groups``, ``{"op": "snapshot", ...}``
in ``__cluster/0``), so a reader that predates snapshots skips them as unknown.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from laminar.errors import InvalidInputError

CHUNK_VERSION = 1
"""Version of the chunk fields; a reader refuses other versions (the snapshot is
then ignored, and the replica replays from an older snapshot or from offset 0)."""

CHUNK_BYTES_MAX = 256 * 1024
"""Payload bytes per chunk: well under a record's and a batch's limits (16 MiB),
and small enough that one chunk's encoding or apply is a short pause."""

SNAPSHOT_BYTES_MAX = 1 << 30
"""The largest snapshot accepted (1 GiB; 100,000 groups of 1,000 partitions' commits
each would be about that). Bounds what a reader assembles in memory."""

CHUNKS_MAX = SNAPSHOT_BYTES_MAX // CHUNK_BYTES_MAX
"""The most chunks one snapshot has."""

SNAPSHOT_ID_BYTES_MAX = 64
"""Longest snapshot id (a random hex string in practice)."""


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    """One record of a snapshot (see the module docstring)."""

    snapshot_id: str
    as_of_offset: int
    applied_count: int
    index: int
    count: int
    snapshot_bytes: int
    checksum: int
    payload: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.snapshot_id, str) or not 0 < len(self.snapshot_id) <= (
            SNAPSHOT_ID_BYTES_MAX
        ):
            raise InvalidInputError("snapshot id must be a string of 1-64 characters")
        for name, value, high in (
            ("as_of_offset", self.as_of_offset, (1 << 63) - 1),
            ("applied_count", self.applied_count, (1 << 63) - 1),
            ("snapshot_bytes", self.snapshot_bytes, SNAPSHOT_BYTES_MAX),
            ("checksum", self.checksum, (1 << 32) - 1),
        ):
            _check_int(name, value, 0, high)
        _check_int("count", self.count, 1, CHUNKS_MAX)
        _check_int("index", self.index, 0, self.count - 1)
        if not isinstance(self.payload, bytes) or len(self.payload) > CHUNK_BYTES_MAX:
            raise InvalidInputError(f"snapshot chunk payload must be bytes <= {CHUNK_BYTES_MAX}")

    def fields(self) -> dict[str, Any]:
        """The chunk as msgpack-able fields, for the log's own record wrapper."""
        return {
            "chunk_v": CHUNK_VERSION,
            "snapshot_id": self.snapshot_id,
            "as_of": self.as_of_offset,
            "applied_count": self.applied_count,
            "index": self.index,
            "count": self.count,
            "bytes": self.snapshot_bytes,
            "crc": self.checksum,
            "payload": self.payload,
        }

    @classmethod
    def from_fields(cls, body: Mapping[str, Any]) -> SnapshotChunk:
        """Parse :meth:`fields`; :class:`InvalidInputError` if malformed."""
        if body.get("chunk_v") != CHUNK_VERSION:
            raise InvalidInputError(f"unsupported snapshot chunk version {body.get('chunk_v')!r}")
        try:
            return cls(
                snapshot_id=body["snapshot_id"],
                as_of_offset=body["as_of"],
                applied_count=body["applied_count"],
                index=body["index"],
                count=body["count"],
                snapshot_bytes=body["bytes"],
                checksum=body["crc"],
                payload=body["payload"],
            )
        except KeyError as error:
            raise InvalidInputError(f"snapshot chunk lacks field {error}") from None


def _check_int(name: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInputError(f"{name} must be an int in [{low}, {high}], got {value!r:.40}")


def split_snapshot(
    payload: bytes,
    *,
    snapshot_id: str,
    as_of_offset: int,
    applied_count: int,
    chunk_bytes: int = CHUNK_BYTES_MAX,
) -> list[SnapshotChunk]:
    """``payload`` (a state machine's encoded state as of ``as_of_offset``) in chunks.

    :class:`InvalidInputError` if it exceeds :data:`SNAPSHOT_BYTES_MAX`.
    """
    if len(payload) > SNAPSHOT_BYTES_MAX:
        raise InvalidInputError(f"snapshot of {len(payload)} bytes > {SNAPSHOT_BYTES_MAX}")
    if not 0 < chunk_bytes <= CHUNK_BYTES_MAX:
        raise InvalidInputError(f"chunk_bytes must be in (0, {CHUNK_BYTES_MAX}]")
    checksum = zlib.crc32(payload)
    pieces = [payload[at : at + chunk_bytes] for at in range(0, len(payload), chunk_bytes)]
    pieces = pieces or [b""]
    return [
        SnapshotChunk(
            snapshot_id=snapshot_id,
            as_of_offset=as_of_offset,
            applied_count=applied_count,
            index=index,
            count=len(pieces),
            snapshot_bytes=len(payload),
            checksum=checksum,
            payload=piece,
        )
        for index, piece in enumerate(pieces)
    ]


@dataclass(frozen=True, slots=True)
class CompleteSnapshot:
    """A snapshot whose chunks all arrived in order and whose checksum matches.

    ``payload`` is None when the assembler was told not to keep it (a replica
    applying the log in order only needs to know a snapshot completed).
    """

    snapshot_id: str
    as_of_offset: int
    applied_count: int
    snapshot_bytes: int
    end_offset: int
    """The offset after the snapshot's last chunk."""
    payload: bytes | None


class SnapshotAssembler:
    """Collects chunks fed in log order; :meth:`add` returns each complete snapshot.

    Records that are not chunks are not fed (they do not interrupt a snapshot).
    A chunk that does not continue the snapshot being collected (another id, an
    index out of order, different totals) drops what was collected: a torn
    snapshot is never returned. With ``keep_payload`` False only a running CRC is
    kept, so following a log costs no memory per snapshot.
    """

    def __init__(self, *, keep_payload: bool) -> None:
        self._keep_payload = keep_payload
        self._first: SnapshotChunk | None = None
        self._next_index = 0
        self._crc = 0
        self._size = 0
        self._pieces: list[bytes] = []
        self.torn = 0
        """Snapshots dropped incomplete or with a bad checksum (for tests and logs)."""

    def add(self, chunk: SnapshotChunk, offset: int) -> CompleteSnapshot | None:
        first = self._first
        if first is not None and not self._continues(first, chunk):
            self.torn += 1
            first = self._first = None
        if first is None:
            if chunk.index != 0:
                return None  # the rest of a torn one, or of one whose start was not read
            first = self._first = chunk
            self._next_index, self._crc, self._size, self._pieces = 0, 0, 0, []
        self._crc = zlib.crc32(chunk.payload, self._crc)
        self._size += len(chunk.payload)
        if self._keep_payload:
            self._pieces.append(chunk.payload)
        self._next_index += 1
        if self._next_index < chunk.count:
            return None
        self._first = None
        pieces, self._pieces = self._pieces, []
        if self._crc != chunk.checksum or self._size != chunk.snapshot_bytes:
            self.torn += 1
            return None
        return CompleteSnapshot(
            snapshot_id=chunk.snapshot_id,
            as_of_offset=chunk.as_of_offset,
            applied_count=chunk.applied_count,
            snapshot_bytes=chunk.snapshot_bytes,
            end_offset=offset + 1,
            payload=b"".join(pieces) if self._keep_payload else None,
        )

    def _continues(self, first: SnapshotChunk, chunk: SnapshotChunk) -> bool:
        return (
            chunk.snapshot_id == first.snapshot_id
            and chunk.index == self._next_index
            and chunk.count == first.count
            and chunk.as_of_offset == first.as_of_offset
            and chunk.checksum == first.checksum
            and chunk.snapshot_bytes == first.snapshot_bytes
        )

"""Keyed compaction: the rule and the engine (pure: batches in, batches out).

Theory of operation
-------------------
A compaction command ``C`` (:class:`CompactCommand`, carried by a ``compact``
control batch, docs/format.md section 1.7) names ``end`` E and ``tombstones_end``
T <= E. Over the offsets below E, a record at offset o of a non-control batch
**survives** when

- its key is null (a compacted topic refuses such records on produce; ones
  already there are kept), or
- no record with the same key lies at an offset in (o, E), and, when its value is
  null (a tombstone), o >= T.

Records at or after E and control batches always survive. Survival of o depends
only on the records in [o, E), which every replica holding o has (committed logs
agree batch for batch), so it depends on neither a replica's log start, nor its
segment boundaries, nor its memory.

:func:`compact` writes, per input batch: the batch byte for byte when all its
records survive; nothing when none does; otherwise one batch per maximal run of
consecutive survivors, re-encoded canonically by
:func:`laminar.records.encode_runs` (uncompressed when the batch was; zstd at the
pinned parameters when it was zstd and ``C.codec`` is 1, else uncompressed). The
survivors of C are survivors of any earlier C0 (E0 <= E, T0 <= T), and a run
under C lies inside a run under C0, whose re-encoding is unique. Compacting raw
input by C therefore gives the same bytes as compacting the output of C0 by C, or
of C by C again: the rule is *confluent*, so a follower that received a range raw
or already compacted, or redoes a segment after a crash, ends with the same bytes
(for commands of one codec and, with codec 1, one libzstd version).

:func:`build_superseded` finds the superseded offsets of [start, end) in passes
over the range with a bounded key map: pass i of B keeps ``key -> newest offset``
only for the keys that fall in bucket i (a key of up to 16 bytes is its own entry,
a longer one goes by its 128-bit xxh3 hash), and marks the older offsets of those
keys in a bitmap (one bit per offset, in an mmap'd temporary file when larger
than ``BITMAP_MEMORY_BYTES_MAX``). B starts at 1; when a pass's map would pass
``memory_bytes_max``, B doubles and the passes start over. The result does not
depend on B: each key lives in one bucket, whose pass sees all its records. Two
long keys with one 128-bit hash would count as one key, on every replica alike.
The map's size is checked after each group of batches read together (at most an
eighth of the budget's keys, and at most ``GROUP_RECORDS`` records,
``ARROW_GROUP_RECORDS`` with pyarrow, or the caller's ``group_records_max``), so it
passes the budget by at most that much. With pyarrow installed the map is Arrow's
(:class:`_ArrowKeyMap`: the map's keys and a group's hashed together by one
native hash table), else a dict updated record by record; both hold the same
map keys, so they mark the same offsets.
"""

from __future__ import annotations

import logging
import mmap
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import IO, Any, Protocol, Self

import msgpack
import numpy as np
import xxhash

from laminar.errors import CorruptBatchError, InvalidInputError, ZstdVersionError
from laminar.records import (
    ColumnView,
    Compression,
    encode_runs,
    libzstd_version,
    stored_column_view,
    stored_header,
    stored_key_column,
)
from laminar.segment.storage import Buffer

_LOG = logging.getLogger(__name__)

COMPACT_KIND = b"compact"
"""The key of the control batch that carries a :class:`CompactCommand`."""

RULE = 1
"""The survival rule this module implements (the module docstring)."""

COMMAND_VALUE_BYTES_MAX = 1024
"""The largest ``compact`` control value :meth:`CompactCommand.from_value` reads."""

ZSTD_VERSION_CHARS_MAX = 64

KEY_ENTRY_BYTES = 192
"""What one key costs in a pass's map, counted against ``memory_bytes_max``: 132
bytes measured with tracemalloc (a dict entry, a 128-bit int hash and an int
offset) plus the transient of the dict's resize."""

BUCKETS_MAX = 1 << 16
"""The most buckets (passes over the range) :func:`build_superseded` tries before
it gives up: ``memory_bytes_max`` is then far too small for the range's keys."""

BITMAP_MEMORY_BYTES_MAX = 1 << 20
"""A superseded-offsets bitmap larger than this (8 Mi offsets) lives in an mmap'd
temporary file rather than in memory."""

GROUP_RECORDS = 8192
"""Records gathered from consecutive batches before a pass hashes their keys."""

ARROW_GROUP_RECORDS = 65536
"""The same with pyarrow installed (:class:`_ArrowKeyMap`): each group also hashes
the map's keys again, so larger groups do that less often."""

GATHER_BYTES = 4 << 20
"""The most bytes of batches a pass holds views of before copying their keys out
(into its group's arrays), while the reads' windows are still in the CPU's cache:
holding a whole group's (some 40 MiB of 1 KiB values at the 64 MiB budget's
43,690 records) read them back from memory, 0.018 s more per GiB in the bench."""

SHORT_KEY_BYTES = 16
"""Keys up to this size are their own entry in a pass's map; longer ones go by
their 128-bit xxh3 hash."""

_INT64_MAX = 2**63 - 1
_FIELDS = ("v", "end", "tombstones_end", "rule", "codec", "zstd", "time_ms")


@dataclass(frozen=True, slots=True)
class CompactCommand:
    """What a ``compact`` control batch tells every replica to do.

    ``end`` (E): a batch boundary; only offsets below it are compacted.
    ``tombstones_end`` (T <= E): tombstones (null values) below it are removed.
    ``rule``: the survival rule, 1 (the module docstring).
    ``codec``: 1 re-encodes a trimmed zstd batch as zstd at the pinned parameters; 0
    writes every trimmed run uncompressed.
    ``zstd``: the libzstd version the leader runs ("" when it names none); with codec
    1, a replica of another version must not compact (:class:`ZstdVersionError`).
    ``time_ms``: the leader's wall clock when it decided (the tombstone horizon).
    """

    end: int
    tombstones_end: int
    rule: int = RULE
    codec: int = 1
    zstd: str = ""
    time_ms: int = 0

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise InvalidInputError(f"compact command: {problem}")

    def _problem(self) -> str | None:
        for name in ("end", "tombstones_end", "rule", "codec", "time_ms"):
            value = getattr(self, name)
            if type(value) is not int:
                return f"{name} must be an integer, got {type(value).__name__}"
        if not 0 <= self.end <= _INT64_MAX:
            return f"end {self.end} is not an offset"
        if not 0 <= self.tombstones_end <= self.end:
            return f"tombstones_end {self.tombstones_end} is not in [0, end {self.end}]"
        if self.rule != RULE:
            return f"unknown rule {self.rule} (this node knows rule {RULE})"
        if self.codec not in (0, 1):
            return f"unknown codec {self.codec} (0 or 1)"
        if type(self.zstd) is not str or len(self.zstd) > ZSTD_VERSION_CHARS_MAX:
            return f"zstd must be a version string of at most {ZSTD_VERSION_CHARS_MAX} characters"
        if not -_INT64_MAX - 1 <= self.time_ms <= _INT64_MAX:
            return f"time_ms {self.time_ms} is not a 64-bit integer"
        return None

    def to_value(self) -> bytes:
        """The control batch's value: a msgpack map, its keys in a fixed order."""
        value: bytes = msgpack.packb(
            {
                "v": 1,
                "end": self.end,
                "tombstones_end": self.tombstones_end,
                "rule": self.rule,
                "codec": self.codec,
                "zstd": self.zstd,
                "time_ms": self.time_ms,
            },
            use_bin_type=True,
        )
        return value

    @classmethod
    def from_value(cls, value: bytes | memoryview) -> CompactCommand:
        """The command in a ``compact`` control batch's value; :class:`CorruptBatchError`
        naming the problem when it is not one this node can apply."""
        if len(value) > COMMAND_VALUE_BYTES_MAX:
            raise CorruptBatchError(
                f"compact command of {len(value)} bytes (at most {COMMAND_VALUE_BYTES_MAX})"
            )
        try:
            fields = msgpack.unpackb(value, raw=False, strict_map_key=True)
        except (ValueError, msgpack.UnpackException) as error:
            raise CorruptBatchError(f"compact command is not msgpack: {error}") from None
        if not isinstance(fields, dict):
            raise CorruptBatchError("compact command is not a msgpack map")
        if fields.get("v") != 1 or type(fields.get("v")) is not int:
            raise CorruptBatchError(f"compact command of unknown version {fields.get('v')!r}")
        if set(fields) != set(_FIELDS):
            missing = sorted(set(_FIELDS) - set(fields))
            unknown = sorted(map(str, set(fields) - set(_FIELDS)))
            raise CorruptBatchError(f"compact command fields: missing {missing}, unknown {unknown}")
        try:
            return cls(
                end=fields["end"],
                tombstones_end=fields["tombstones_end"],
                rule=fields["rule"],
                codec=fields["codec"],
                zstd=fields["zstd"],
                time_ms=fields["time_ms"],
            )
        except InvalidInputError as error:
            raise CorruptBatchError(str(error)) from None


class Superseded(Protocol):
    """The offsets whose record a newer record of the same key supersedes below E."""

    def __contains__(self, offset: int) -> bool: ...


# ----------------------------------------------------------------------------- compact


def compact(
    batches: Iterable[Buffer], cmd: CompactCommand, superseded: Superseded
) -> Iterator[Buffer]:
    """``batches`` (stamped, in offset order, their checksums verified: as
    ``read_segment`` yields them) compacted by ``cmd``: per batch, the batch byte for
    byte, nothing, or one canonical batch per run of survivors (the module
    docstring). Batches at or after ``cmd.end`` and control batches pass byte for
    byte. ``superseded`` comes from :func:`build_superseded` over a range that holds
    these batches' offsets below ``cmd.end``.

    Raises :class:`ZstdVersionError` when a trimmed zstd batch is to be re-encoded
    zstd (codec 1) and the command names another libzstd version than this node's.
    """
    if isinstance(superseded, SupersededOffsets) and superseded.end != cmd.end:
        raise InvalidInputError(
            f"superseded offsets were built up to {superseded.end}, the command's end is {cmd.end}"
        )
    for batch in batches:
        header = stored_header(batch)  # checked when stored
        if header.is_control or header.base_offset >= cmd.end:
            yield batch
            continue
        base, count = header.base_offset, header.record_count
        if isinstance(superseded, SupersededOffsets):
            superseded_count = superseded.count(base, count)
        else:
            superseded_count = sum(o in superseded for o in range(base, base + count))
        if superseded_count == count:
            continue  # only keyed records are ever superseded: every one goes
        if not superseded_count and cmd.tombstones_end <= base:
            yield batch  # nothing superseded, no tombstone removable
            continue
        view = stored_column_view(batch, header)  # checked when stored, verified when read
        survivors = _survivors(view, cmd, _superseded_mask(superseded, base, count))
        if survivors.all():
            yield batch
            continue
        compression = header.compression
        if compression is Compression.ZSTD:
            compression = _zstd_for(cmd)
        yield from encode_runs(view, _runs(survivors), compression=compression)


def _zstd_for(cmd: CompactCommand) -> Compression:
    if cmd.codec == 0:
        return Compression.NONE
    local = libzstd_version()
    if cmd.zstd != local:
        raise ZstdVersionError(cmd.zstd, local)
    return Compression.ZSTD


def _survivors(view: ColumnView, cmd: CompactCommand, superseded: Any) -> Any:
    """A bool array: which of the batch's records survive ``cmd``, given which are
    ``superseded`` (a bool array)."""
    header = view.header
    count = header.record_count
    base = header.base_offset
    if view.key_lengths is None:
        return np.ones(count, dtype=bool)  # every key null: all kept
    removable = np.frombuffer(view.key_lengths, "<i4") >= 0
    removable[max(cmd.end - base, 0) :] = False  # at or after E: untouched
    gone = removable & superseded
    if cmd.tombstones_end > base:
        tombstones = np.frombuffer(view.value_lengths, "<i4") < 0
        tombstones[max(cmd.tombstones_end - base, 0) :] = False
        gone |= removable & tombstones
    return ~gone


def _superseded_mask(superseded: Superseded, base: int, count: int) -> Any:
    if isinstance(superseded, SupersededOffsets):
        return superseded.mask(base, count)
    return np.fromiter((o in superseded for o in range(base, base + count)), bool, count)


def _runs(survivors: Any) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of each maximal run of True in a bool array."""
    # A run starts or stops where the array padded with False changes: 2 us a batch,
    # where np.diff's prepend/append cost 8 (once per batch with survivors).
    padded = np.zeros(len(survivors) + 2, dtype=bool)
    padded[1:-1] = survivors
    edges = np.flatnonzero(padded[1:] != padded[:-1]).tolist()
    yield from zip(edges[0::2], edges[1::2], strict=True)


# ----------------------------------------------------------------------------- superseded


@dataclass(slots=True)
class SupersededOffsets:
    """The superseded offsets of ``[start, end)`` as a bitmap (one bit per offset).

    ``passes``: how many passes over the range building it took. Holds an mmap'd
    temporary file when large: :meth:`close` it (or use it as a context manager)."""

    start: int
    end: int
    passes: int = 0
    _bits: Any = field(default=None, repr=False)
    _map: mmap.mmap | None = field(default=None, repr=False)
    _file: IO[bytes] | None = field(default=None, repr=False)

    @classmethod
    def zeroed(cls, start: int, end: int, temp_dir: str | None) -> SupersededOffsets:
        size = (end - start + 7) // 8
        offsets = cls(start, end)
        if size <= BITMAP_MEMORY_BYTES_MAX:
            offsets._bits = np.zeros(size, dtype=np.uint8)
            return offsets
        # Kept open until close(): the bitmap outlives this call.
        offsets._file = tempfile.TemporaryFile(prefix="laminar-compaction-", dir=temp_dir)  # noqa: SIM115
        offsets._file.truncate(size)
        offsets._map = mmap.mmap(offsets._file.fileno(), size)
        offsets._bits = np.frombuffer(offsets._map, dtype=np.uint8)
        return offsets

    def __contains__(self, offset: int) -> bool:
        if not self.start <= offset < self.end:
            return False
        position = offset - self.start
        return bool(self._bits[position >> 3] >> (position & 7) & 1)

    def count(self, base: int, count: int) -> int:
        """How many of the offsets ``[base, base + count)`` are superseded."""
        low, high = max(base, self.start) - self.start, min(base + count, self.end) - self.start
        if low >= high:
            return 0
        bits = int.from_bytes(self._bits[low >> 3 : (high + 7) >> 3].tobytes(), "little")
        return (bits >> (low & 7) & ((1 << (high - low)) - 1)).bit_count()

    def mask(self, base: int, count: int) -> Any:
        """A bool array: which of the offsets ``[base, base + count)`` are superseded."""
        result = np.zeros(count, dtype=bool)
        low, high = max(base, self.start), min(base + count, self.end)
        if low < high:
            result[low - base : high - base] = self._unpack(low - self.start, high - low)
        return result

    def _unpack(self, position: int, count: int) -> Any:
        first = position >> 3
        bits = np.unpackbits(self._bits[first : (position + count + 7) >> 3], bitorder="little")
        shift = position - 8 * first
        return bits[shift : shift + count].astype(bool)

    def _set(self, position: int, flags: Any) -> None:
        """Set the bits of ``flags`` (a bool array) from ``position`` on."""
        count = len(flags)
        first, stop = position >> 3, (position + count + 7) >> 3
        bits = np.unpackbits(self._bits[first:stop], bitorder="little")
        shift = position - 8 * first
        bits[shift : shift + count] |= flags
        self._bits[first:stop] = np.packbits(bits, bitorder="little")

    def _clear(self, positions: Any) -> None:
        clear = np.invert(np.left_shift(1, positions & 7).astype(np.uint8))
        np.bitwise_and.at(self._bits, positions >> 3, clear)

    def _reset(self) -> None:
        self._bits[:] = 0

    def close(self) -> None:
        """Free the bitmap (and its temporary file); ``in`` raises afterwards."""
        self._bits = None
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def build_superseded(
    read_batches: Callable[[], Iterable[Buffer]],
    start: int,
    end: int,
    memory_bytes_max: int,
    *,
    temp_dir: str | None = None,
    group_records_max: int | None = None,
) -> SupersededOffsets:
    """The offsets of ``[start, end)`` whose record a newer one of the same key
    supersedes below ``end``, with at most ``memory_bytes_max`` of keys in memory.

    ``read_batches()`` yields the stamped batches that hold ``[start, end)`` in
    offset order (batches or records outside it are skipped); it is called once per
    pass. ``temp_dir``: where a large bitmap's temporary file goes (default: the
    system's). ``group_records_max``: the most records whose keys one step hashes
    (default ``GROUP_RECORDS``, or ``ARROW_GROUP_RECORDS`` with pyarrow): a step
    holds the GIL for most of its time, so a job that shares its process with
    latency-bound work (a node's, paced) takes smaller ones. Raises
    :class:`InvalidInputError` for an empty memory budget, and when even
    ``BUCKETS_MAX`` passes would not fit the range's keys in it.
    """
    if not 0 <= start <= end:
        raise InvalidInputError(f"compaction range [{start}, {end}) is not a range of offsets")
    if memory_bytes_max < KEY_ENTRY_BYTES:
        raise InvalidInputError(
            f"compaction_memory_bytes_max {memory_bytes_max} holds no key "
            f"(one takes {KEY_ENTRY_BYTES} bytes)"
        )
    entries_max = memory_bytes_max // KEY_ENTRY_BYTES
    superseded = SupersededOffsets.zeroed(start, end, temp_dir)
    buckets = 1
    while True:
        for bucket in range(buckets):
            superseded.passes += 1
            reached = _mark_bucket(
                superseded, read_batches(), bucket, buckets, entries_max, group_records_max
            )
            if reached is not None:
                buckets = _more_buckets(buckets, end - start, memory_bytes_max)
                superseded._reset()
                break
        else:
            return superseded


def _more_buckets(buckets: int, total: int, memory_bytes_max: int) -> int:
    """The buckets to try after a pass of ``buckets`` overflowed: twice as many. (An
    estimate from how far the pass got overshoots: the distinct keys of a range do
    not grow with its offsets once every key has been seen, and 10,000 keys in a
    map of 2,730 went to 128 buckets where 4 or 8 suffice.) A pass overflows early,
    having read about the map's keys' worth of records, so the passes that overflow
    cost little beside the ones that complete."""
    grown = 2 * buckets
    if grown > BUCKETS_MAX:
        raise InvalidInputError(
            f"compaction_memory_bytes_max {memory_bytes_max} is too small for the keys of "
            f"{total} offsets: more than {BUCKETS_MAX} passes"
        )
    return grown


def _mark_bucket(
    superseded: SupersededOffsets,
    batches: Iterable[Buffer],
    bucket: int,
    buckets: int,
    entries_max: int,
    group_records_max: int | None,
) -> int | None:
    """One pass: mark the superseded offsets of the keys in ``bucket``. None when
    done; the offset where the map passed ``entries_max`` keys otherwise (checked
    after each group of batches)."""
    start, end = superseded.start, superseded.end
    arrow = _arrow()
    key_map: _KeyMap = _DictKeyMap() if arrow is None else _ArrowKeyMap(*arrow)
    if group_records_max is None:
        group_records_max = GROUP_RECORDS if arrow is None else ARROW_GROUP_RECORDS
    group_records = max(1, min(group_records_max, entries_max // 8))
    for offsets, lengths, blob in _key_groups(batches, start, end, group_records):
        keyed = lengths >= 0
        if offsets[0] < start or offsets[-1] >= end:
            keyed &= (offsets >= start) & (offsets < end)
        reached = key_map.mark(superseded, offsets, lengths, blob, keyed, bucket, buckets)
        if reached is not None and len(key_map) > entries_max:
            return reached
    if len(key_map):
        superseded._clear(key_map.newest_offsets() - start)
    return None


class _KeyMap(Protocol):
    """A pass's map: each key of its bucket -> the offset of its newest record so far."""

    def __len__(self) -> int: ...

    def mark(
        self,
        superseded: SupersededOffsets,
        offsets: Any,
        lengths: Any,
        blob: bytes,
        keyed: Any,
        bucket: int,
        buckets: int,
    ) -> int | None:
        """Mark superseded the records of a group (``keyed``: those of the range
        with a key) whose key is in ``bucket``, and note each one's offset as its
        key's newest (the group follows every record noted before): its own
        newest record is unmarked at the end of the pass. The offset after the last
        record noted (None when none was)."""
        ...

    def newest_offsets(self) -> Any:
        """The newest offset of every key in the map (an int64 array)."""
        ...


class _DictKeyMap:
    """The map as a dict, updated once per record: without pyarrow."""

    def __init__(self) -> None:
        self._newest: dict[bytes | int, int] = {}

    def __len__(self) -> int:
        return len(self._newest)

    def mark(
        self,
        superseded: SupersededOffsets,
        offsets: Any,
        lengths: Any,
        blob: bytes,
        keyed: Any,
        bucket: int,
        buckets: int,
    ) -> int | None:
        start = superseded.start
        keys = _map_keys(lengths, blob)
        first = int(offsets[0])
        if buckets == 1 and keyed.all() and int(offsets[-1]) - first + 1 == len(offsets):
            # The common case, a group without gaps or null keys: no index arrays.
            superseded._set(first - start, keyed)
            self._newest.update(zip(keys, range(first, first + len(keys)), strict=True))
            return first + len(keys)
        if keyed.all():
            chosen_keys, chosen_offsets = keys, offsets.tolist()
        else:
            indexes = np.flatnonzero(keyed).tolist()
            chosen_keys = [keys[i] for i in indexes]
            chosen_offsets = offsets[indexes].tolist()
        if buckets > 1:
            mine = [i for i, key in enumerate(chosen_keys) if _bucket(key, buckets) == bucket]
            chosen_keys = [chosen_keys[i] for i in mine]
            chosen_offsets = [chosen_offsets[i] for i in mine]
        if not chosen_offsets:
            return None
        _set_offsets(superseded, np.asarray(chosen_offsets, dtype=np.int64))
        self._newest.update(zip(chosen_keys, chosen_offsets, strict=True))
        return int(chosen_offsets[-1]) + 1

    def newest_offsets(self) -> Any:
        return np.fromiter(self._newest.values(), np.int64, len(self._newest))


class _ArrowKeyMap:
    """The map in Arrow arrays: its keys (distinct, a binary array) and their newest
    offsets (numpy, in the same order). Each group costs one ``dictionary_encode``
    (a native hash table, run without the GIL) over the map's keys followed by the
    group's: its dictionary is the map's keys in their order, then the group's new
    ones, and its indices give each record of the group its key's place, whose
    newest record is the last one there. No Python object per record, except for a
    long key's hash; the memory is a few tens of bytes per key (``KEY_ENTRY_BYTES``
    counts the dict's 192). (Two calls, the group's distinct keys first and then
    those merged into the map, took 1.37 ms a group of 43,690 records against 0.94,
    and 0.12 ms against 0.07 a paced job's group of 2,048.)

    A key's identity is its map key as the dict's (:func:`_map_key`): its bytes up to
    ``SHORT_KEY_BYTES``, else a byte 0 and its 128-bit xxh3 hash (17 bytes, so never
    a short key's): the same keys are one, so the marks are the dict's bit for bit.
    """

    def __init__(self, pa: Any, pc: Any) -> None:
        self._pa, self._pc = pa, pc
        self._keys = pa.array([], pa.large_binary())  # 64-bit offsets: any budget fits
        self._newest = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._newest)

    def mark(
        self,
        superseded: SupersededOffsets,
        offsets: Any,
        lengths: Any,
        blob: bytes,
        keyed: Any,
        bucket: int,
        buckets: int,
    ) -> int | None:
        pa = self._pa
        keys = self._identities(lengths, blob)
        if keyed.all():
            positions = np.arange(len(lengths), dtype=np.int64)
        else:
            positions = np.flatnonzero(keyed)
            if not len(positions):
                return None
            keys = keys.take(pa.array(positions))
        known = len(self._keys)
        encoded = self._pc.dictionary_encode(pa.concat_arrays([self._keys, keys]))
        dictionary = encoded.dictionary
        ids = encoded.indices.to_numpy()[known:]  # each record's key: < known, the map's
        if buckets > 1:
            mine = np.ones(len(dictionary), dtype=bool)  # the map's keys are the bucket's
            mine[known:] = np.fromiter(
                (_bucket(key, buckets) == bucket for key in dictionary[known:].to_pylist()),
                bool,
                len(dictionary) - known,
            )
            in_bucket = mine[ids]
            ids, positions = ids[in_bucket], positions[in_bucket]
            if not len(ids):
                return None
        chosen = offsets[positions]
        _set_offsets(superseded, chosen)
        newest_index = np.full(len(dictionary), -1, dtype=np.int64)
        np.maximum.at(newest_index, ids, np.arange(len(ids), dtype=np.int64))
        newest = np.empty(len(dictionary), dtype=np.int64)
        newest[:known] = self._newest
        present = np.flatnonzero(newest_index >= 0)
        newest[present] = chosen[newest_index[present]]
        added = present[present >= known]
        if len(added) < len(dictionary) - known:  # new keys of other buckets: not kept
            kept = np.concatenate((np.arange(known), added))
            dictionary, newest = dictionary.take(pa.array(kept)), newest[kept]
        self._keys, self._newest = dictionary, newest
        return int(chosen[-1]) + 1

    def _identities(self, lengths: Any, blob: bytes) -> Any:
        """Each record's key identity as a large binary array (null keys: empty or
        null): the dict's map key (:func:`_map_keys`), a long key's int hash as its
        16 bytes after ``_LONG_KEY``."""
        pa = self._pa
        count = len(lengths)
        if int(lengths.max()) <= SHORT_KEY_BYTES:  # every key its own bytes: no copy
            bounds = np.zeros(count + 1, dtype=np.int64)
            np.cumsum(np.maximum(lengths, 0), out=bounds[1:])
            return pa.Array.from_buffers(
                pa.large_binary(), count, [None, pa.py_buffer(bounds), pa.py_buffer(blob)]
            )
        return pa.array(
            [
                _LONG_KEY + key.to_bytes(16, "big") if type(key) is int else key
                for key in _map_keys(lengths, blob)
            ],
            pa.large_binary(),
        )

    def newest_offsets(self) -> Any:
        return self._newest


_LONG_KEY = b"\x00"
"""What precedes a long key's 16-byte hash in its Arrow identity (17 bytes in all)."""


def _set_offsets(superseded: SupersededOffsets, chosen: Any) -> None:
    """Mark the offsets ``chosen`` (an ascending int64 array) superseded."""
    low = int(chosen[0])
    flags = np.zeros(int(chosen[-1]) + 1 - low, dtype=bool)
    flags[chosen - low] = True
    superseded._set(low - superseded.start, flags)


def key_map_kind() -> str:
    """Which map :func:`build_superseded` uses here: "arrow" with pyarrow installed,
    else "dict". Imports pyarrow (some 0.2 s, once per process) when there is one."""
    return "dict" if _arrow() is None else "arrow"


@cache
def _arrow() -> tuple[Any, Any] | None:
    """``(pyarrow, pyarrow.compute)`` when pyarrow is installed (the ``server``
    extra installs it), else None: the key map is then a dict."""
    try:
        import pyarrow
        import pyarrow.compute

        # What a first job would otherwise set up, holding the GIL for a few ms: the
        # kernels of the calls its groups make.
        keys = pyarrow.array([b"a", b"a"], pyarrow.large_binary())
        pyarrow.concat_arrays([keys, keys.take(pyarrow.array([0]))])
        pyarrow.compute.dictionary_encode(keys).indices.to_numpy()
    except ImportError:
        return None
    except Exception as error:  # an install that does not load: the dict still works
        _LOG.warning("pyarrow does not load (%s): keyed compaction's key map is a dict", error)
        return None
    return pyarrow, pyarrow.compute


def _map_keys(lengths: Any, blob: bytes) -> list[Any]:
    """What the pass's map holds for each record's key (None for a null key): the
    key itself up to ``SHORT_KEY_BYTES`` (no collision possible), else its 128-bit
    xxh3 hash as an int (never equal to a bytes key)."""
    size = int(lengths[0])
    if 0 < size <= SHORT_KEY_BYTES and int(lengths.min()) == int(lengths.max()):
        return list(np.frombuffer(blob, f"V{size}").tolist())  # one C call: same-size keys
    bounds = np.concatenate(([0], np.cumsum(np.maximum(lengths, 0)))).tolist()
    return [
        None if length < 0 else _map_key(blob[a:b])
        for a, b, length in zip(bounds, bounds[1:], lengths.tolist(), strict=False)
    ]


def _map_key(key: bytes) -> bytes | int:
    return key if len(key) <= SHORT_KEY_BYTES else xxhash.xxh3_128_intdigest(key)


def _bucket(key: bytes | int, buckets: int) -> int:
    """The bucket of a map key: a function of the key alone, whatever batch holds it."""
    digest = xxhash.xxh3_64_intdigest(key) if isinstance(key, bytes) else key
    return digest % buckets


def _key_groups(
    batches: Iterable[Buffer], start: int, end: int, group_records: int
) -> Iterator[tuple[Any, Any, bytes]]:
    """The keys of the non-control batches that hold offsets of ``[start, end)``, in
    groups of about ``group_records``: ``(offsets, key lengths, keys back to back)``
    per group, so that numpy's per-call cost is paid per group, not per batch. The
    keys are copied out of the batches every ``GATHER_BYTES`` of them, while the
    reads' windows that hold them are still in the CPU's cache."""
    pieces: list[tuple[Any, Any, bytes]] = []  # the group's keys copied out so far
    bases: list[int] = []
    counts: list[int] = []
    lengths: list[memoryview] = []
    data: list[memoryview] = []
    records = held = 0
    for batch in batches:
        columns = stored_key_column(batch)  # read_segment checked it
        if columns is None:
            continue  # a control batch, or every key null: nothing to supersede
        base, count, length, key_lengths, keys = columns
        if base >= end or base + count <= start:
            continue
        bases.append(base)
        counts.append(count)
        lengths.append(key_lengths)
        data.append(keys)
        records += count
        held += length
        if held >= GATHER_BYTES or records >= group_records:
            pieces.append(_gather(bases, counts, lengths, data))
            bases, counts, lengths, data, held = [], [], [], [], 0
            if records >= group_records:
                yield _joined(pieces)
                pieces, records = [], 0
    if bases:
        pieces.append(_gather(bases, counts, lengths, data))
    if pieces:
        yield _joined(pieces)


def _joined(pieces: list[tuple[Any, Any, bytes]]) -> tuple[Any, Any, bytes]:
    if len(pieces) == 1:
        return pieces[0]
    offsets, lengths, keys = zip(*pieces, strict=True)
    return np.concatenate(offsets), np.concatenate(lengths), b"".join(keys)


def _gather(
    bases: list[int], counts: list[int], lengths: list[memoryview], data: list[memoryview]
) -> tuple[Any, Any, bytes]:
    joined = np.frombuffer(b"".join(lengths), "<i4")
    sizes = np.asarray(counts, dtype=np.int64)
    firsts = np.cumsum(sizes) - sizes  # index of each batch's first record
    key_bytes = np.add.reduceat(np.maximum(joined, 0), firsts, dtype=np.int64).tolist()
    blob = b"".join(keys[:size] for keys, size in zip(data, key_bytes, strict=True))
    shifts = np.repeat(np.asarray(bases, dtype=np.int64) - firsts, sizes)
    return np.arange(len(joined), dtype=np.int64) + shifts, joined, blob

"""The on-disk segmented log of one partition replica.

Theory of operation
-------------------
A partition directory holds segments named by the base offset of their first
batch (``00000000000000000000.log`` with ``.index`` and ``.timeindex``) and a
``state`` file for the consensus state (the names: :mod:`laminar.segment.layout`;
the bytes: ``docs/disk.md``). Only the last segment (the *active* one) is appended
to; the others are *sealed*.

Appends write the stamped 80-byte header and the untouched payload with one
``pwritev``. Sparse index entries are kept in memory and written out when the
segment is sealed or the log closed; an index can always be rebuilt from the log.

Durability: under ``always`` an append returns once its bytes are fsynced; many
threads appending at once share fsyncs (group commit: one thread syncs on behalf
of all writes before it, the others wait). Sealing a segment always fsyncs it and
its indexes, whatever the policy, so after any crash only the active segment can
hold a torn tail. Creating or deleting a segment file fsyncs the directory.

Offsets increase but need not be dense: keyed compaction leaves gaps between
batches (never inside one), and a sealed segment's batches may start after its
base and end before the next segment's (:mod:`laminar.segment.storage`). A read in
a gap returns the batch after it, crossing into later segments when needed.

Recovery on open: stray files are removed (a ``<base>.log.tmp`` is a segment
replacement a crash cut short: :meth:`SegmentLog.replace_segment`); every batch of
the active segment is validated (header and payload checksums, each starting at or
after the previous one's end, terms not going back) and the file is cut after the
longest valid prefix of whole batches; its indexes are rebuilt from that scan. Sealed
segments keep their index files when these pass structural checks and otherwise
get them rebuilt from the batch headers. Sealed segments are validated lazily:
the first read of a range verifies the checksums of the batches it returns, and a
corrupt batch raises :class:`CorruptSegmentError` naming the file and offset
instead of being served. Batches written by this process are known good.

Scrubbing: :meth:`SegmentLog.scrub` re-reads the log in bounded steps for a
background scrubber and verifies every batch whatever was verified before (bit rot
happens after the first read); :meth:`SegmentLog.check_batch_at` does the same for
one batch a reader reports. Both read like reads do (pinned file, ``pread``
outside the lock) and leave the log's own bookkeeping alone.

Files: a log keeps its active segment's file open; sealed segments' files are
opened when read and kept in a bounded cache shared by the node's logs
(:mod:`laminar.segment.files`), so a node's descriptors do not grow with the
number of segments.

Concurrency: one lock guards the segment list and appends; reads take it only to
look up positions and pin the file, then read with ``pread`` outside it, so readers
do not block appenders. A file is closed (evicted, or its segment deleted) only
once no read has it pinned. A read racing a truncation of the same range is
retried under the lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import logging
import os
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from mmap import ACCESS_READ, mmap

from laminar.errors import (
    ChecksumMismatchError,
    CorruptSegmentError,
    InvalidInputError,
    LogClosedError,
    NonMonotonicOffsetError,
    OffsetOutOfRangeError,
    RecordFormatError,
    StorageError,
    TruncatedBatchError,
)
from laminar.records import (
    HEADER_BYTES,
    BatchHeader,
    decode_batch,
    parse_header,
    stamp,
    verify_batch,
    verify_payload,
)
from laminar.segment.config import FsyncPolicy, LogConfig
from laminar.segment.fallocate import reserve
from laminar.segment.files import SegmentFile, SegmentFiles
from laminar.segment.index import SparseIndex
from laminar.segment.layout import (
    INDEX_SUFFIX,
    INDEX_SUFFIXES,
    SEGMENT_SUFFIX,
    SEGMENT_SUFFIXES,
    TIME_INDEX_SUFFIX,
    fsync_directory,
    is_temporary,
    parse_segment_name,
    pwrite_all,
    replacement_path,
    segment_name,
    segment_path,
    state_path,
)
from laminar.segment.offsets import check_read_range, check_replacement, check_term
from laminar.segment.statefile import StateFile
from laminar.segment.storage import Buffer, SegmentSummary

_LOG = logging.getLogger(__name__)


def has_state(directory: str) -> bool:
    """Whether ``directory`` holds a log's state file. Every replica writes one when
    it is created, so a log directory without one is a creation a crash interrupted
    (:meth:`SegmentLog.create_unsynced` before its batch was synced)."""
    return os.path.exists(state_path(directory))


def sync_filesystem(path: str) -> None:
    """Make everything written to ``path``'s filesystem durable: ``syncfs(2)`` (one
    call for a whole batch of new files and directories), ``sync(2)`` where the C
    library lacks it. Raises :class:`OSError` when the kernel reports a failure."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        if _SYNCFS is None:
            os.sync()
        elif _SYNCFS(descriptor) != 0:
            number = ctypes.get_errno()
            raise OSError(number, os.strerror(number), path)
    finally:
        os.close(descriptor)


def _find_syncfs() -> Callable[[int], int] | None:
    try:
        function: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    return function


_SYNCFS = _find_syncfs()
_TIMESTAMP_MIN = -(2**63)
_TIMESTAMP_MAX = 2**63 - 1
_RECOVERY_CHUNK_BYTES = 1 << 20
_RECENT_MAX = 256  # recent batch starts remembered per segment (halved when full)
_RESERVE_MIN = 256 * 1024  # smallest step of block reservation ahead of appends
_UNRESERVED = 2**63 - 1  # _Segment.allocated when blocks are not reserved


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class SyncTicket:
    """What :meth:`SegmentLog.begin_sync` wrote: the appends and the state save
    that the caller's filesystem sync makes durable."""

    appends: int
    state: int | None


@dataclass(frozen=True, slots=True)
class ScrubCursor:
    """Where a scrub pass over a log stands (see :meth:`SegmentLog.scrub`); opaque
    to callers, who hand back the one they were given."""

    base_offset: int
    """The base offset of the segment being scrubbed."""
    position: int
    """The file position of the next batch to verify in that segment."""
    offset: int
    """The end of the batch before ``position`` (or the segment's base): the batch
    there must start at or after it (a gap between batches is fine)."""
    end_offset: int
    """The log's end when the pass started: the pass ends there, however much is
    appended meanwhile."""
    truncations: int
    """The log's truncation count when ``position`` was reached: after a truncation
    the segment is scrubbed again from its start (its bytes may have changed)."""


@dataclass(frozen=True, slots=True)
class ScrubResult:
    """What one :meth:`SegmentLog.scrub` call did."""

    cursor: ScrubCursor | None
    """Where the next call resumes; None: the pass is complete."""
    scrubbed_bytes: int
    """Bytes read from the log and verified by this call."""
    batches: int
    """Batches verified by this call (each costs about a microsecond of CPU, so a
    caller bounding CPU charges for them too)."""
    damage: CorruptSegmentError | None
    """The first damaged batch found (file, offset, file position, reason), if any."""


@dataclass(slots=True, eq=False)
class _Segment:
    """One segment's file and in-memory bookkeeping; guarded by the log's lock."""

    base_offset: int
    directory: str
    file: SegmentFile
    size: int = 0
    next_offset: int = 0
    max_timestamp_ms: int = _TIMESTAMP_MIN
    # The smallest first timestamp of its data batches (SegmentSummary's oldest),
    # folded in as they are written; _TIMESTAMP_MAX while it holds none. None: not
    # read yet, for a sealed segment opened from its index files (they keep no
    # minimum): segment_summary takes its first data batch's then (_first_data_ms).
    oldest_timestamp_ms: int | None = _TIMESTAMP_MAX
    created_ms: int = 0
    last_term: int = -1
    index: SparseIndex = field(default_factory=SparseIndex)
    bytes_since_index_entry: int = 0
    verified_bytes: int = 0
    # File bytes with disk blocks reserved (see SegmentLog._reserve_locked); an
    # append ending beyond it reserves more; _UNRESERVED when none are.
    allocated: int = 0
    # Where the latest appended batches start (the readers of a log's tail -- the
    # leader sending to followers, consumers keeping up -- ask for exactly these):
    # base offsets and file positions, ascending, at most _RECENT_MAX.
    recent_offsets: list[int] = field(default_factory=list)
    recent_positions: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return segment_name(self.base_offset)

    def path(self, suffix: str) -> str:
        return segment_path(self.directory, self.base_offset, suffix)

    @property
    def log_path(self) -> str:
        return self.path(SEGMENT_SUFFIX)

    def note_batch(self, position: int, header: BatchHeader, index_interval_bytes: int) -> None:
        """Account for the batch written at ``position`` (index, timestamps, end)."""
        self.note_write(
            position,
            header.base_offset,
            header.length,
            header.next_offset,
            header.max_timestamp_ms,
            header.term,
            index_interval_bytes,
        )
        self.note_oldest(header)

    def note_oldest(self, header: BatchHeader) -> None:
        """A data batch's first timestamp lowers the oldest known (control batches
        carry the leader's monotonic clock; None: not known yet, left to
        segment_summary)."""
        oldest_ms = self.oldest_timestamp_ms
        if (
            oldest_ms is not None
            and header.first_timestamp_ms < oldest_ms
            and not header.is_control
        ):
            self.oldest_timestamp_ms = header.first_timestamp_ms

    def note_write(
        self,
        position: int,
        base_offset: int,
        length: int,
        next_offset: int,
        max_timestamp_ms: int,
        term: int,
        index_interval_bytes: int,
    ) -> None:
        # SegmentLog._write_locked inlines this: keep the two in step.
        if position == 0 or self.bytes_since_index_entry >= index_interval_bytes:
            # The time entry carries the running maximum of the batches before this one.
            self.index.add(base_offset - self.base_offset, position, self.max_timestamp_ms)
            self.bytes_since_index_entry = length
        else:
            self.bytes_since_index_entry += length
        self.size = position + length
        self.next_offset = next_offset
        self.max_timestamp_ms = max(self.max_timestamp_ms, max_timestamp_ms)
        self.last_term = term


class SegmentLog:
    """A partition replica's log on disk; implements :class:`LogStorage`. Thread-safe."""

    def __init__(
        self,
        directory: str,
        config: LogConfig,
        clock_ms: Callable[[], int],
        files: SegmentFiles | None = None,
    ) -> None:
        """Use :meth:`open`."""
        self._directory = directory
        self._config = config
        self._clock_ms = clock_ms
        self._files = files if files is not None else SegmentFiles()
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._closed = False
        self._truncations = 0
        # Group commit: _written counts appends; _synced the appends known durable.
        self._sync_condition = threading.Condition(threading.Lock())
        self._written = 0
        self._staged_state: bytes | None = None  # written by the next sync()
        self._synced = 0
        self._syncing = False
        self._last_sync_ms = clock_ms()
        self._reserving = True  # until the filesystem refuses fallocate
        self._sync_creation = True  # False only inside create_unsynced
        self._state_file = StateFile(directory)
        self._set_aside: Callable[[CorruptSegmentError], None] | None = None
        self.damage_found: CorruptSegmentError | None = None
        """Damage recovery cut from the active segment at open (None: none; a torn
        write is not damage)."""
        self._created_state: int | None = None  # create_unsynced's state ticket

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        directory: str,
        config: LogConfig | None = None,
        *,
        initial_offset: int = 0,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        files: SegmentFiles | None = None,
        set_aside: Callable[[CorruptSegmentError], None] | None = None,
    ) -> SegmentLog:
        """Open (creating if needed) and recover the log in ``directory``.

        ``files``: the cache of sealed segments' descriptors, shared by a node's
        logs; by default the log gets one of its own. ``set_aside``: called with
        the damage before recovery cuts a *complete* batch that fails its checksums
        from the active segment (damage, unlike a torn write: see
        :attr:`damage_found`), while the file still holds it.
        """
        os.makedirs(directory, exist_ok=True)
        log = cls(directory, config or LogConfig(), clock_ms, files)
        log._set_aside = set_aside
        try:
            log._recover(initial_offset)
        except BaseException:
            log._close_files()
            raise
        return log

    @classmethod
    def create_unsynced(
        cls,
        directory: str,
        state: bytes,
        config: LogConfig | None = None,
        *,
        files: SegmentFiles | None = None,
    ) -> SegmentLog:
        """Create a new, empty log in ``directory`` (which must not exist) with
        ``state`` as its state file, without a single fsync.

        For creating many partitions at once: the caller makes the whole batch
        durable with one :func:`sync_filesystem` before acting on any of them, so a
        topic of thousands of partitions costs one filesystem sync instead of three
        fsyncs per partition (about 5 ms each here). Until then a crash may leave
        the directory without its state file (see :func:`has_state`).
        """
        os.makedirs(directory)
        log = cls(directory, config or LogConfig(), _wall_clock_ms, files)
        log._sync_creation = False
        try:
            log._recover(0)
            log._created_state = log._write_state(state, sync=False)
        except BaseException:
            log._close_files()
            raise
        finally:
            log._sync_creation = True
        return log

    def created(self) -> None:
        """(After :meth:`create_unsynced`.) The filesystem was synced since."""
        if self._created_state is not None:
            self._state_file.durable(self._created_state)
            self._created_state = None

    def _recover(self, initial_offset: int) -> None:
        bases = self._discover()
        if not bases:
            self._segments.append(self._create_segment(initial_offset))
            return
        for base in bases:
            file = SegmentFile(segment_path(self._directory, base))
            self._segments.append(
                _Segment(base, self._directory, file, next_offset=base, created_ms=0)
            )
        last_term = -1
        for segment, following in zip(self._segments, self._segments[1:], strict=False):
            segment.last_term = last_term  # kept by a segment compaction emptied
            descriptor = self._files.pin(segment.file)
            try:
                self._load_sealed(segment, descriptor, following.base_offset)
            finally:
                self._files.unpin(segment.file)
            last_term = segment.last_term
        active = self._segments[-1]
        self._recover_active(active, self._files.hold(active.file))

    def _discover(self) -> list[int]:
        """Base offsets of the segments present, after removing stray files."""
        logs: set[int] = set()
        others: list[tuple[int, str]] = []
        for name in sorted(os.listdir(self._directory)):
            parsed = parse_segment_name(name)
            if parsed is None:
                if is_temporary(name):
                    os.unlink(os.path.join(self._directory, name))
                continue
            base, suffix = parsed
            if suffix == SEGMENT_SUFFIX:
                logs.add(base)
            else:
                others.append((base, name))
        for base, name in others:
            if base not in logs:
                _LOG.info("removing orphan index file=%s", name)
                os.unlink(os.path.join(self._directory, name))
        return sorted(logs)

    def _load_sealed(self, segment: _Segment, descriptor: int, next_base_offset: int) -> None:
        segment.size = os.fstat(descriptor).st_size
        segment.next_offset = next_base_offset
        index = SparseIndex.read(segment.path(INDEX_SUFFIX), segment.path(TIME_INDEX_SUFFIX))
        if index is not None and index.entries_are_sane(segment.size):
            if not index.positions:  # a segment keyed compaction emptied
                segment.index = index
                return
            last_relative, last_position = index.floor(2**32)
            try:
                expected = segment.base_offset + last_relative
                header = self._read_header(segment, descriptor, last_position, expected)
                sane = (
                    header.base_offset == segment.base_offset + last_relative
                    and header.next_offset <= next_base_offset
                )
            except (RecordFormatError, CorruptSegmentError):
                sane = False
            if sane:
                segment.index = index
                segment.max_timestamp_ms = _indexed_max_timestamp_ms(index)
                segment.oldest_timestamp_ms = None  # read at the first segment_summary
                self._scan_tail_timestamps(segment, descriptor, last_position)
                return
        _LOG.warning("rebuilding index segment=%s", segment.log_path)
        self._rebuild_index_from_headers(segment, descriptor)

    def _scan_tail_timestamps(self, segment: _Segment, descriptor: int, position: int) -> None:
        """Fold the timestamps and term of batches after the last index entry in."""
        expected = -1  # only used in errors, which are swallowed here
        while position < segment.size:
            try:
                header = self._read_header(segment, descriptor, position, expected)
            except (RecordFormatError, CorruptSegmentError):
                return
            segment.max_timestamp_ms = max(segment.max_timestamp_ms, header.max_timestamp_ms)
            segment.last_term = header.term
            position += header.length

    def _rebuild_index_from_headers(self, segment: _Segment, descriptor: int) -> None:
        """Rebuild a sealed segment's index by walking batch headers (not payloads)."""
        size = segment.size
        segment.index = SparseIndex()
        segment.bytes_since_index_entry = 0
        segment.max_timestamp_ms = _TIMESTAMP_MIN
        segment.oldest_timestamp_ms = _TIMESTAMP_MAX
        position = 0
        expected = segment.base_offset
        while position < size:
            try:
                header = self._read_header(segment, descriptor, position, expected)
            except (RecordFormatError, CorruptSegmentError):
                break  # reads reaching this point will report the corruption
            segment.note_batch(position, header, self._config.index_interval_bytes)
            position += header.length
            expected = header.next_offset
        segment.size = size
        segment.index.write(segment.path(INDEX_SUFFIX), segment.path(TIME_INDEX_SUFFIX))

    def _recover_active(self, segment: _Segment, descriptor: int) -> None:
        """Validate every batch; cut the file after the longest valid prefix."""
        size = os.fstat(descriptor).st_size
        position = 0
        expected_offset = segment.base_offset
        last_term = self._segments[-2].last_term if len(self._segments) > 1 else -1
        limits = self._config.limits
        if size:
            with mmap(descriptor, 0, access=ACCESS_READ) as mapped:
                view = memoryview(mapped)
                try:
                    while position < size:
                        try:
                            header = verify_batch(view, position, limits=limits)
                        except RecordFormatError as error:
                            self._note_tail_damage(segment, view, position, expected_offset, error)
                            break
                        # Gaps between batches are allowed (keyed compaction, or a
                        # leader's gapped batches), overlaps and older terms are not.
                        if header.base_offset < expected_offset or header.term < last_term:
                            reason = RecordFormatError(
                                f"batch at offset {header.base_offset} term {header.term} "
                                f"where offset >= {expected_offset} term >= {last_term} belongs"
                            )
                            self._note_tail_damage(segment, view, position, expected_offset, reason)
                            break
                        segment.note_batch(position, header, self._config.index_interval_bytes)
                        expected_offset = header.next_offset
                        last_term = header.term
                        position += header.length
                finally:
                    view.release()
        if position < size:
            _LOG.warning(
                "truncating torn or corrupt tail segment=%s position=%d dropped_bytes=%d",
                segment.log_path,
                position,
                size - position,
            )
            os.ftruncate(descriptor, position)
            os.fsync(descriptor)
        segment.size = position
        segment.allocated = position
        segment.next_offset = expected_offset
        segment.last_term = last_term
        segment.verified_bytes = position
        now_ms = self._clock_ms()
        segment.created_ms = min(segment.max_timestamp_ms, now_ms) if segment.size else now_ms
        for suffix in INDEX_SUFFIXES:
            # The active segment's indexes live in memory until it is sealed.
            path = segment.path(suffix)
            if os.path.exists(path):
                os.unlink(path)

    def _note_tail_damage(
        self,
        segment: _Segment,
        view: memoryview,
        position: int,
        offset: int,
        error: RecordFormatError,
    ) -> None:
        """Recovery stops at ``position`` of the active segment: a torn write (a batch
        cut short, or zeros the crash left unwritten: nothing acknowledged under
        ``fsync=always``), or damage (a whole batch that fails its checksums, or
        data after it), which is reported and set aside before the cut."""
        if isinstance(error, TruncatedBatchError) or not bytes(view[position:]).strip(b"\0"):
            return
        damage = _corrupt(segment.log_path, offset, position, error)
        self.damage_found = damage
        _LOG.error("damaged active segment: %s", damage)
        if self._set_aside is not None:
            self._set_aside(damage)

    def segment_paths_from(self, offset: int) -> list[str]:
        """The files of the segment holding ``offset`` and of every later one (what
        cutting the log at ``offset`` changes or deletes)."""
        with self._lock:
            self._check_open()
            index = max(0, bisect_right(self._segments, offset, key=_base_offset_of) - 1)
            paths = []
            for segment in self._segments[index:]:
                paths += [segment.path(suffix) for suffix in SEGMENT_SUFFIXES]
            return [path for path in paths if os.path.exists(path)]

    @property
    def state_path(self) -> str:
        return self._state_file.path

    def discard_state(self) -> None:
        """Forget the state file (the caller set it aside): the next save writes a
        new one."""
        with self._lock:
            self._check_open()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._state_file.path)
            self._state_file = StateFile(self._directory)

    def _create_segment(self, base_offset: int) -> _Segment:
        path = segment_path(self._directory, base_offset)
        file = self._files.create(path)
        if self._sync_creation:
            fsync_directory(self._directory)
        _LOG.debug("segment created path=%s", path)
        return _Segment(
            base_offset,
            self._directory,
            file,
            next_offset=base_offset,
            created_ms=self._clock_ms(),
        )

    # ------------------------------------------------------------------ properties

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def last_term(self) -> int:
        return self._segments[-1].last_term

    @property
    def size_bytes(self) -> int:
        """Bytes held in all segments."""
        with self._lock:
            return sum(segment.size for segment in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    # ------------------------------------------------------------------ appends

    def append(self, batch: Buffer, *, term: int = 0, verified: bool = False) -> int:
        # The hot path of every produce: properties and small helpers are inlined
        # here, as Python calls are a large share of an append's fixed cost.
        header = self._check_batch(batch, verified=verified)
        with self._lock:
            if self._closed:
                self._check_open()
            active = self._segments[-1]
            if term < active.last_term or term < 0:
                check_term(term, active.last_term)
            base_offset = active.next_offset
            head, payload = stamp(batch, base_offset, term)
            ticket = self._write_locked(head, payload, header, base_offset, term)
        if self._config.fsync_policy is not FsyncPolicy.NEVER:
            self._after_write(ticket)
        return base_offset

    def append_stamped(self, batch: Buffer, *, after: int | None = None) -> int:
        header = self._check_batch(batch)
        with self._lock:
            self._check_open()
            end_offset = self.end_offset
            if (
                header.base_offset != end_offset
                if after is None
                else after != end_offset or header.base_offset < end_offset
            ):
                raise NonMonotonicOffsetError(header.base_offset, end_offset)
            check_term(header.term, self.last_term)
            view = memoryview(batch)
            ticket = self._write_locked(
                view[:HEADER_BYTES], view[HEADER_BYTES:], header, header.base_offset, header.term
            )
        if self._config.fsync_policy is not FsyncPolicy.NEVER:
            self._after_write(ticket)
        return header.base_offset

    def _check_batch(self, batch: Buffer, *, verified: bool = False) -> BatchHeader:
        # The payload checksum too (unless the caller just verified it): an appended
        # batch counts as verified, and a corrupt one would make recovery cut the
        # active segment, losing every batch after it.
        limits = self._config.limits
        header = (
            parse_header(batch, limits=limits) if verified else verify_batch(batch, limits=limits)
        )
        if header.length != len(batch):
            raise InvalidInputError(
                f"buffer holds {len(batch)} bytes but the batch is {header.length} bytes"
            )
        return header

    def _write_locked(
        self, head: Buffer, payload: Buffer, header: BatchHeader, base_offset: int, term: int
    ) -> int:
        config = self._config
        segment = self._segments[-1]
        position = segment.size
        length = header.length
        if position and (
            position + length > config.segment_bytes_max
            or self._clock_ms() - segment.created_ms >= config.segment_age_ms_max
        ):
            segment = self._roll_locked()
            position = segment.size
        end = position + length
        if end > segment.allocated:
            self._reserve_locked(segment, end)
        buffers = [head, payload]
        descriptor = segment.file.descriptor  # the active segment's: held open
        written = os.pwritev(descriptor, buffers, position)
        if written != length:
            _pwrite_rest(descriptor, buffers, position, written)
        # _Segment.note_write, inlined: this runs on every append.
        if position == 0 or segment.bytes_since_index_entry >= config.index_interval_bytes:
            segment.index.add(base_offset - segment.base_offset, position, segment.max_timestamp_ms)
            segment.bytes_since_index_entry = length
        else:
            segment.bytes_since_index_entry += length
        segment.size = end
        recent = segment.recent_offsets
        if len(recent) >= _RECENT_MAX:
            del recent[: _RECENT_MAX // 2], segment.recent_positions[: _RECENT_MAX // 2]
        recent.append(base_offset)
        segment.recent_positions.append(position)
        segment.next_offset = base_offset + header.record_count
        segment.max_timestamp_ms = max(segment.max_timestamp_ms, header.max_timestamp_ms)
        segment.note_oldest(header)
        segment.last_term = term
        # The new batch is known good, but only extends the verified prefix when no
        # unverified bytes lie before it (a sealed segment made active by truncation).
        _advance_verified(segment, position, end)
        self._written += 1
        return self._written

    def _reserve_locked(self, segment: _Segment, needed: int) -> None:
        """Reserve disk blocks for ``segment`` through ``needed`` and some way beyond.

        Ahead by as much as the segment holds (so a quiet partition reserves
        little), within [_RESERVE_MIN, preallocate_bytes_max]. A failure only costs
        speed: it is logged, and retried one step later. So is a step the node's
        disk cannot spare (``SegmentFiles.may_reserve``: it would take free space
        below the node's watermark): the appends grow the file meanwhile.
        """
        step_max = self._config.preallocate_bytes_max
        if not step_max or not self._reserving:
            segment.allocated = _UNRESERVED
            return
        start = max(segment.allocated, segment.size)
        target = needed + min(step_max, max(needed, _RESERVE_MIN))
        if not self._files.may_reserve(target - start):
            segment.allocated = target
            return
        try:
            supported = reserve(segment.file.descriptor, start, target - start)
        except OSError as error:
            _LOG.warning(
                "cannot reserve segment blocks path=%s bytes=%d error=%s",
                segment.log_path,
                target - start,
                error,
            )
            segment.allocated = target
            return
        if not supported:
            self._reserving = False
            segment.allocated = _UNRESERVED
            _LOG.info(
                "filesystem cannot reserve blocks; appends grow files directory=%s", self._directory
            )
            return
        segment.allocated = target

    def _release_reserve(self, segment: _Segment) -> None:
        """Give back the blocks reserved past the end of ``segment``'s file.

        A failure leaves them reserved (disk space, never data, is at stake): it is
        logged, and deleting the segment frees them.
        """
        if segment.size < segment.allocated < _UNRESERVED:
            try:
                os.ftruncate(segment.file.descriptor, segment.size)
            except OSError as error:
                _LOG.warning(
                    "cannot release reserved blocks path=%s error=%s", segment.log_path, error
                )
        segment.allocated = segment.size

    def _after_write(self, ticket: int) -> None:
        policy = self._config.fsync_policy
        if policy is FsyncPolicy.ALWAYS or (
            policy is FsyncPolicy.INTERVAL
            and self._clock_ms() - self._last_sync_ms >= self._config.fsync_interval_ms
        ):
            self._sync_through(ticket)

    def _sync_through(self, ticket: int) -> None:
        """Return once append number ``ticket`` is durable; one fsync serves many."""
        condition = self._sync_condition
        with condition:
            while self._synced < ticket:
                if self._syncing:
                    condition.wait()
                    continue
                self._syncing = True
                condition.release()
                try:
                    with self._lock:
                        self._check_open()
                        target = self._written
                        descriptor = os.dup(self._segments[-1].file.descriptor)
                    try:
                        os.fdatasync(descriptor)
                    finally:
                        os.close(descriptor)
                finally:
                    condition.acquire()
                    self._syncing = False
                    condition.notify_all()
                self._synced = max(self._synced, target)
                self._last_sync_ms = self._clock_ms()

    def sync(self) -> None:
        with self._lock:
            self._check_open()
            ticket = self._written
            staged, self._staged_state = self._staged_state, None
        if staged is not None:
            self._write_state(staged)
        self._sync_through(ticket)

    def begin_sync(self) -> SyncTicket:
        """The first half of a sync shared by many logs: write the staged state
        without fsync and return a ticket; once the caller has made the filesystem
        durable (:func:`sync_filesystem`), :meth:`end_sync` with it marks every
        append before the ticket durable. One ``syncfs`` then serves a round of
        thousands of logs instead of one to three fsyncs each."""
        with self._lock:
            self._check_open()
            ticket = self._written
            staged, self._staged_state = self._staged_state, None
        state_ticket = None
        if staged is not None:
            state_ticket = self._write_state(staged, sync=False)
        return SyncTicket(ticket, state_ticket)

    def end_sync(self, ticket: SyncTicket) -> None:
        """The filesystem was synced after :meth:`begin_sync` returned ``ticket``."""
        if ticket.state is not None:
            self._state_file.durable(ticket.state)
        with self._sync_condition:
            self._synced = max(self._synced, ticket.appends)
            self._last_sync_ms = self._clock_ms()
            self._sync_condition.notify_all()

    def _roll_locked(self) -> _Segment:
        """Seal the active segment (fsync log and indexes) and start a new one."""
        sealed = self._segments[-1]
        self._release_reserve(sealed)
        os.fsync(sealed.file.descriptor)
        sealed.index.write(sealed.path(INDEX_SUFFIX), sealed.path(TIME_INDEX_SUFFIX))
        segment = self._create_segment(sealed.next_offset)
        segment.last_term = sealed.last_term
        self._segments.append(segment)
        self._files.let_go(sealed.file)
        _LOG.info("segment rolled sealed=%s next_base_offset=%d", sealed.name, segment.base_offset)
        self._apply_retention_locked(self._clock_ms())
        return segment

    # ------------------------------------------------------------------ segments

    def roll(self) -> None:
        with self._lock:
            self._check_open()
            if self._segments[-1].size:
                self._roll_locked()

    def sealed_segments(self) -> list[tuple[int, int]]:
        with self._lock:
            self._check_open()
            bases = [segment.base_offset for segment in self._segments]
        return list(itertools.pairwise(bases))

    def read_segment(self, base: int) -> Iterator[Buffer]:
        """(See :meth:`LogStorage.read_segment`.) The batches are read from the file
        as it is when the iteration starts, without holding the log's lock, in windows
        of about a megabyte: each batch is a ``memoryview`` of its window (no copy per
        batch). Checksums are verified past the segment's verified prefix (a damaged
        batch raises :class:`CorruptSegmentError`), and the prefix grows by what this
        read verified, as :meth:`read`'s does: a second scan of an unchanged segment
        (keyed compaction reads its range twice) checks nothing again."""
        with self._lock:
            self._check_open()
            segment = self._segment_at_locked(base)
        return self._segment_batches(segment)

    def _segment_batches(self, segment: _Segment) -> Iterator[memoryview]:
        with self._lock:
            self._check_open()
            if segment not in self._segments:
                raise StorageError(f"segment {segment.log_path} was deleted or replaced")
            size = segment.size
            verified = segment.verified_bytes
            truncations = self._truncations
            file = segment.file
            descriptor = self._files.pin(file)
        try:
            position = 0
            expected = segment.base_offset
            while position < size:
                window = memoryview(
                    os.pread(descriptor, min(_RECOVERY_CHUNK_BYTES, size - position), position)
                )
                window_bytes = len(window)
                at = 0
                # The loop runs once a batch (16,000 times per GiB of keyed compaction's
                # first pass): the header's length and the window's size as locals.
                while at + HEADER_BYTES <= window_bytes:
                    header = self._parse_header(segment, window, at, position + at, expected)
                    stop = at + header.length
                    if stop > window_bytes:
                        if at:
                            break  # read from this batch on
                        window = memoryview(os.pread(descriptor, header.length, position))
                        window_bytes = len(window)
                    if (
                        position + stop > size
                        or stop > window_bytes
                        or header.base_offset < expected
                    ):
                        raise CorruptSegmentError(
                            segment.log_path, expected, position + at, "bad batch in segment"
                        )
                    if position + stop > verified:
                        try:
                            verify_payload(window, at, header)
                        except RecordFormatError as error:
                            raise _corrupt(
                                segment.log_path, expected, position + at, error
                            ) from None
                    yield window[at:stop]
                    at = stop
                    expected = header.base_offset + header.record_count
                if at == 0:
                    raise CorruptSegmentError(
                        segment.log_path, expected, position, "the segment ends inside a batch"
                    )
                position += at
                if position > verified:
                    with self._lock:  # [0, position) is verified now, unless cut meanwhile
                        if truncations == self._truncations:
                            _advance_verified(segment, verified, position)
                    verified = position
        finally:
            self._files.unpin(file)

    def segment_summary(self, base: int) -> SegmentSummary:
        """(See :meth:`LogStorage.segment_summary`.) The segment's file size, the
        running maximum timestamp kept with its index (its time index's last entry
        and the batches after it, folded in when the segment was written or opened)
        and the oldest first timestamp, folded in as batches are written: a lookup
        under the lock, no I/O. The index files keep no minimum: for a segment opened
        from them, the first call reads the header of its first data batch (one
        read, usually) and takes that batch's first timestamp, as Kafka estimates
        every segment's; it is the oldest unless the producers stamped out of
        order, and never older than the oldest. Likewise after a truncation cut a
        segment, from its first batch kept on (then folding in later appends)."""
        with self._lock:
            self._check_open()
            segment = self._segment_at_locked(base)
            if not segment.size:
                return SegmentSummary(0, None, None)
            oldest_ms = segment.oldest_timestamp_ms
            if oldest_ms is None:
                with self._pinned(segment) as descriptor:
                    oldest_ms = segment.oldest_timestamp_ms = self._first_data_ms(
                        segment, descriptor
                    )
            return SegmentSummary(
                segment.size,
                segment.max_timestamp_ms,
                None if oldest_ms == _TIMESTAMP_MAX else oldest_ms,
            )

    def _first_data_ms(self, segment: _Segment, descriptor: int) -> int:
        """The first timestamp of the segment's first data batch, from the headers
        (control batches, skipped, are few); _TIMESTAMP_MAX when it holds none, or
        at a damaged header (reads report it)."""
        position = 0
        expected = segment.base_offset
        while position < segment.size:
            try:
                header = self._read_header(segment, descriptor, position, expected)
            except (RecordFormatError, CorruptSegmentError):
                break
            if not header.is_control:
                return header.first_timestamp_ms
            position += header.length
            expected = header.next_offset
        return _TIMESTAMP_MAX

    def sync_directory(self) -> None:
        """(See :meth:`LogStorage.sync_directory`.)"""
        with self._lock:
            self._check_open()
        fsync_directory(self._directory)

    def replace_segment(
        self, base: int, batches: Iterable[Buffer], *, sync_directory: bool = True
    ) -> None:
        """(See :meth:`LogStorage.replace_segment`.) The new batches are written to
        ``<base>.log.tmp`` and fsynced, without holding the log's lock; then, under
        it, the segment's index files are deleted (directory fsynced; not when the
        new file is empty: see :meth:`_swap_locked`), the new file is renamed over
        ``<base>.log`` (directory fsynced, unless ``sync_directory`` is False) and its
        indexes written (not fsynced).
        A crash before the rename leaves the old file (the ``.tmp`` is removed at
        open), after it the new one; missing, torn or stale indexes are rebuilt at
        open.
        Reads already under way finish on the old file (their descriptor holds it)."""
        with self._lock:
            self._check_open()
            segment = self._segment_at_locked(base)
            number = self._segments.index(segment)
            if number == len(self._segments) - 1:
                raise InvalidInputError(f"segment {base} is the active segment")
            end = self._segments[number + 1].base_offset
            term_min = self._segments[number - 1].last_term if number else -1
            term_max = self._first_term_from_locked(number + 1)
        temporary = replacement_path(self._directory, base)
        new = self._write_replacement(temporary, base, end, term_min, term_max, batches)
        with self._lock:
            try:
                self._check_open()
                if segment not in self._segments or segment is self._segments[-1]:
                    raise StorageError(
                        f"segment {segment.log_path} was deleted or truncated while replaced"
                    )
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
                raise
            self._swap_locked(segment, new, temporary, sync_directory=sync_directory)

    def _first_term_from_locked(self, number: int) -> int:
        """The term of the first batch in segment ``number`` or a later one (the
        log's last term when none holds a batch)."""
        for segment in self._segments[number:]:
            if segment.size:
                with self._pinned(segment) as descriptor:
                    return self._read_header(segment, descriptor, 0, segment.base_offset).term
        return self.last_term

    def _write_replacement(
        self,
        temporary: str,
        base: int,
        end: int,
        term_min: int,
        term_max: int,
        batches: Iterable[Buffer],
    ) -> _Segment:
        """Validate ``batches`` and write them to ``temporary`` (fsynced); the new
        segment's bookkeeping (its file not yet set)."""
        new = _Segment(base, self._directory, SegmentFile(segment_path(self._directory, base)))
        new.next_offset = base
        interval = self._config.index_interval_bytes
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            try:
                pending: list[bytes] = []
                pending_bytes = 0
                position = 0
                offset = base
                for batch in batches:
                    header = self._check_batch(batch)
                    check_replacement(header, base, end, offset, term_min, term_max)
                    term_min = header.term
                    offset = header.next_offset
                    new.note_batch(position, header, interval)
                    position += header.length
                    pending.append(bytes(batch))
                    pending_bytes += header.length
                    if pending_bytes >= _RECOVERY_CHUNK_BYTES:
                        pwrite_all(descriptor, b"".join(pending), position - pending_bytes)
                        pending, pending_bytes = [], 0
                if pending:
                    pwrite_all(descriptor, b"".join(pending), position - pending_bytes)
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        new.next_offset = end
        new.verified_bytes = new.allocated = new.size
        if not new.size:
            new.last_term = term_min
        return new

    def _swap_locked(
        self, old: _Segment, new: _Segment, temporary: str, *, sync_directory: bool = True
    ) -> None:
        """Put the written replacement ``new`` of sealed segment ``old`` in place.

        The old file is held open across the rename, so that the rename does not
        free it: its last close does, on the node's freeing thread
        (:mod:`laminar.segment.files`), outside this lock and after the job."""
        try:
            self._files.pin(old.file)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        try:
            if new.size:
                # The old indexes could pass the open's checks against the new
                # file: they go, durably, before it takes the name. Against an
                # empty file no index with an entry passes (its first position
                # is not below the size), so an emptied segment's are simply
                # overwritten after the rename: one fsync and two unlinks fewer.
                for suffix in INDEX_SUFFIXES:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(old.path(suffix))
                fsync_directory(self._directory)
            os.replace(temporary, old.log_path)
        except BaseException:
            self._files.unpin(old.file)
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        # The name holds the new file from here on, whatever fails next.
        number = self._segments.index(old)
        new.created_ms = old.created_ms
        if not new.size:
            new.last_term = self._segments[number - 1].last_term if number else -1
        self._segments[number] = new
        # Closed once the reads under way let go of it, by the freeing thread.
        self._files.discard(old.file, unlinked=True)
        self._files.unpin(old.file)
        for later in self._segments[number + 1 :]:
            if later.size:
                break
            later.last_term = new.last_term  # a segment compaction emptied
        self._truncations += 1  # scrub cursors and racing reads start over
        if sync_directory:
            fsync_directory(self._directory)
        # Not fsynced: a crash that loses them costs a rebuild from the batch headers of
        # a segment compaction just shrank (two of the five fsyncs of each swap).
        new.index.write(new.path(INDEX_SUFFIX), new.path(TIME_INDEX_SUFFIX), sync=False)
        _LOG.info(
            "segment replaced segment=%s bytes_before=%d bytes_after=%d",
            new.name,
            old.size,
            new.size,
        )

    def _segment_at_locked(self, base: int) -> _Segment:
        index = bisect_left(self._segments, base, key=_base_offset_of)
        if index == len(self._segments) or self._segments[index].base_offset != base:
            raise InvalidInputError(f"no segment starts at offset {base} in {self._directory}")
        return self._segments[index]

    # ------------------------------------------------------------------ retention

    def enforce_retention(self) -> int:
        """Delete sealed segments beyond the size or age limits; returns how many."""
        with self._lock:
            self._check_open()
            return self._apply_retention_locked(self._clock_ms())

    def retention_offset(
        self, now_ms: int, retention_bytes: int | None, retention_ms: int | None
    ) -> int:
        with self._lock:
            self._check_open()
            keep = self._retention_keep_locked(now_ms, retention_bytes, retention_ms)
            return self._segments[keep].base_offset

    def _retention_keep_locked(
        self, now_ms: int, retention_bytes: int | None, retention_ms: int | None
    ) -> int:
        """The index of the oldest segment the limits keep (the active one at most)."""
        segments = self._segments
        total_bytes = sum(segment.size for segment in segments)
        keep = 0
        while keep < len(segments) - 1:
            oldest = segments[keep]
            too_big = retention_bytes is not None and total_bytes - oldest.size >= retention_bytes
            too_old = retention_ms is not None and oldest.max_timestamp_ms < now_ms - retention_ms
            if not (too_big or too_old):
                break
            total_bytes -= oldest.size
            keep += 1
        return keep

    def delete_before(self, offset: int) -> None:
        with self._lock:
            self._check_open()
            while len(self._segments) > 1 and self._segments[0].next_offset <= offset:
                self._delete_oldest_locked()

    def _apply_retention_locked(self, now_ms: int) -> int:
        config = self._config
        keep = self._retention_keep_locked(now_ms, config.retention_bytes, config.retention_ms)
        for _ in range(keep):
            self._delete_oldest_locked()
        return keep

    def _delete_oldest_locked(self) -> None:
        oldest = self._segments.pop(0)
        self._delete_segment_files(oldest)
        _LOG.info(
            "segment deleted by retention segment=%s start_offset=%d",
            oldest.name,
            self.start_offset,
        )

    def _delete_segment_files(self, segment: _Segment) -> None:
        for suffix in SEGMENT_SUFFIXES:
            path = segment.path(suffix)
            if os.path.exists(path):
                os.unlink(path)
        fsync_directory(self._directory)
        self._files.discard(segment.file)

    # ------------------------------------------------------------------ truncation

    def truncate_suffix(self, offset: int) -> int:
        with self._lock:
            self._check_open()
            check_read_range(offset, self.start_offset, self.end_offset)
            if offset == self.end_offset:
                return offset
            while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                self._delete_segment_files(self._segments.pop())
            segment = self._segments[-1]
            descriptor = self._files.hold(segment.file)  # active again, if it was sealed
            # Cut before the batch holding ``offset`` (or the first after it, in a
            # gap): the end is then that of the batch before the cut, which is what
            # recovery finds there (a gap after the last batch would not survive).
            position, _ = self._locate_locked(segment, descriptor, offset)
            new_end = segment.base_offset  # (nothing of the segment kept)
            if position:
                new_end = self._header_before_locked(segment, descriptor, position).next_offset
            self._cut_segment(segment, descriptor, position, new_end)
            self._truncations += 1
            _LOG.info("log truncated requested_offset=%d end_offset=%d", offset, new_end)
            return new_end

    def cut_damaged(self, damage: CorruptSegmentError) -> int:
        """Cut the log before the damaged batch ``damage`` names (at its file position
        in its segment, without reading the damaged header): that segment becomes
        the active one, later ones are deleted. The new log end."""
        with self._lock:
            self._check_open()
            index = next(
                (i for i, s in enumerate(self._segments) if s.log_path == damage.path), None
            )
            if index is None:
                raise StorageError(f"no segment {damage.path} in {self._directory}")
            while len(self._segments) > index + 1:
                self._delete_segment_files(self._segments.pop())
            segment = self._segments[-1]
            descriptor = self._files.hold(segment.file)  # active again, if it was sealed
            self._cut_segment(segment, descriptor, damage.position, damage.offset)
            self._truncations += 1
            _LOG.warning(
                "log cut before damage segment=%s offset=%d end_offset=%d",
                damage.path,
                damage.offset,
                self.end_offset,
            )
            return self.end_offset

    def _cut_segment(self, segment: _Segment, descriptor: int, position: int, new_end: int) -> None:
        os.ftruncate(descriptor, position)  # also frees reserved blocks
        os.fsync(descriptor)
        segment.allocated = position
        for suffix in INDEX_SUFFIXES:
            path = segment.path(suffix)
            if os.path.exists(path):
                os.unlink(path)
        segment.index.truncate(position)
        keep = bisect_left(segment.recent_positions, position)
        del segment.recent_offsets[keep:], segment.recent_positions[keep:]
        segment.size = position
        segment.next_offset = new_end
        segment.verified_bytes = min(segment.verified_bytes, position)
        # Rebuild running figures from the batches that remain after the last entry.
        _, last_position = segment.index.floor(2**32)
        previous = self._segments[-2] if len(self._segments) > 1 else None
        segment.last_term = previous.last_term if previous else -1
        segment.max_timestamp_ms = _indexed_max_timestamp_ms(segment.index)
        # The batches cut may have held the oldest: start again from the first kept.
        segment.oldest_timestamp_ms = _TIMESTAMP_MAX
        if position:
            segment.oldest_timestamp_ms = self._first_data_ms(segment, descriptor)
        segment.bytes_since_index_entry = 0
        if position:
            self._scan_tail_timestamps(segment, descriptor, last_position)
            segment.bytes_since_index_entry = position - last_position

    def reset(self, start_offset: int) -> None:
        if start_offset < 0:
            raise InvalidInputError("start offset must be >= 0")
        with self._lock:
            self._check_open()
            while self._segments:
                self._delete_segment_files(self._segments.pop())
            self._segments.append(self._create_segment(start_offset))
            self._truncations += 1
            _LOG.info("log reset start_offset=%d", start_offset)

    # ------------------------------------------------------------------ reads

    def read(self, offset: int, max_bytes: int, *, upper_offset: int | None = None) -> bytes:
        if not 0 < max_bytes <= self._config.read_bytes_max:
            raise InvalidInputError(
                f"max_bytes must be in (0, {self._config.read_bytes_max}], got {max_bytes}"
            )
        while True:
            data, following = self._read_once(offset, max_bytes, upper_offset)
            if following is None:
                return data
            # ``offset`` is in a gap after the last batch of a (compacted) segment:
            # the batch after the gap is in a later segment.
            offset = following

    def _read_once(
        self, offset: int, max_bytes: int, upper_offset: int | None
    ) -> tuple[bytes, int | None]:
        """One segment's part of :meth:`read`: the batches, or ``(b"", base)`` when
        ``offset`` lies past the last batch of a sealed segment (the next one's base)."""
        with self._lock:
            segment = self._segment_to_read_locked(offset)
            if segment is None:
                return b"", None
            truncations = self._truncations
            file = segment.file
            descriptor = self._files.pin(file)
            size = segment.size
            following = self._following_base_locked(segment)
        error: CorruptSegmentError | None = None
        data = b""
        start = 0
        try:
            data, start = self._read_from(segment, descriptor, offset, max_bytes, upper_offset)
        except CorruptSegmentError as caught:
            error = caught
        finally:
            self._files.unpin(file)
            with self._lock:
                raced = truncations != self._truncations
                if not raced:
                    _advance_verified(segment, start, start + len(data))
        if raced:  # a truncation ran meanwhile: read again, excluding writers
            with self._lock:
                segment = self._segment_to_read_locked(offset)
                if segment is None:
                    return b"", None
                size = segment.size
                following = self._following_base_locked(segment)
                with self._pinned(segment) as descriptor:
                    data, start = self._read_from(
                        segment, descriptor, offset, max_bytes, upper_offset
                    )
                _advance_verified(segment, start, start + len(data))
        elif error is not None:
            raise error
        if not data and start >= size and following is not None:
            return b"", following
        return data, None

    def _following_base_locked(self, segment: _Segment) -> int | None:
        """The base of the segment after ``segment``; None for the active one."""
        if segment is self._segments[-1]:
            return None
        index = bisect_right(self._segments, segment.base_offset, key=_base_offset_of)
        return self._segments[index].base_offset

    def _segment_to_read_locked(self, offset: int) -> _Segment | None:
        # Runs on every read: the properties and _segment_for's common case inlined.
        if self._closed:
            self._check_open()
        segments = self._segments
        active = segments[-1]
        end = active.next_offset
        if not segments[0].base_offset <= offset < end:
            check_read_range(offset, segments[0].base_offset, end)
            return None  # offset == end: nothing to read yet
        return active if offset >= active.base_offset else self._segment_for(offset)

    @contextlib.contextmanager
    def _pinned(self, segment: _Segment) -> Iterator[int]:
        """(Log lock held.) ``segment``'s descriptor, open for the ``with`` block."""
        file = segment.file
        descriptor = self._files.pin(file)
        try:
            yield descriptor
        finally:
            self._files.unpin(file)

    def _read_from(
        self,
        segment: _Segment,
        descriptor: int,
        offset: int,
        max_bytes: int,
        upper_offset: int | None,
    ) -> tuple[bytes, int]:
        """Whole batches from ``offset``, and the file position where they start.

        Batches beyond the segment's verified prefix have their checksums checked
        here; a corrupt first batch raises, a later one ends the result early.
        """
        # Fast path (sequential readers): ``offset`` starts an indexed batch and whole
        # verified batches fit in the window, so no header needs reading at all.
        indexed = _known_start(segment, offset)
        if indexed is not None and indexed < segment.size:
            window_end = min(indexed + max_bytes, segment.size)
            boundary = _batch_boundary(segment, segment.size, indexed, window_end, upper_offset)
            if indexed < boundary <= segment.verified_bytes:
                data = os.pread(descriptor, boundary - indexed, indexed)
                if len(data) == boundary - indexed:
                    return data, indexed
        position, first = self._locate_locked(segment, descriptor, offset)
        if first is None:
            return b"", position
        size = segment.size
        window_end = min(position + max(max_bytes, first.length), size)
        boundary = _batch_boundary(segment, size, position, window_end, upper_offset)
        if boundary > position:
            # Whole batches by construction: read exactly them, and when they are
            # already verified, return the bytes without looking at them.
            data = os.pread(descriptor, boundary - position, position)
            if boundary <= segment.verified_bytes and len(data) == boundary - position:
                return data, position
        else:
            data = os.pread(descriptor, window_end - position, position)
        limits = self._config.limits
        verified_end = segment.verified_bytes - position
        end = 0
        while end + HEADER_BYTES <= len(data):
            try:
                header = parse_header(data, end, limits=limits) if end else first
                if end + header.length > len(data):
                    break
                if upper_offset is not None and header.next_offset > upper_offset:
                    break
                if end + header.length > verified_end:
                    verify_batch(data, end, limits=limits)
            except RecordFormatError as error:
                if end:
                    break  # serve the valid batches before it; the next read reports it
                raise _corrupt(segment.log_path, first.base_offset, position, error) from None
            end += header.length
        return (data[:end] if end < len(data) else data), position

    def _segment_for(self, offset: int) -> _Segment:
        """The segment holding ``offset`` (the first one for offsets below it)."""
        index = bisect_right(self._segments, offset, key=_base_offset_of) - 1
        return self._segments[max(index, 0)]

    def _locate_locked(
        self, segment: _Segment, descriptor: int, offset: int
    ) -> tuple[int, BatchHeader | None]:
        """Position and header of the batch containing ``offset`` in ``segment``.

        Returns ``(segment.size, None)`` when ``offset`` is at the segment's end.
        """
        recent = _recent_floor(segment, offset)
        if recent is not None:
            expected, position = recent
        else:
            relative, position = segment.index.floor(offset - segment.base_offset)
            expected = segment.base_offset + max(relative, 0)
        size = segment.size
        if position >= size:
            return size, None
        # The headers to walk start less than index_interval_bytes after the entry
        # (unless a batch is larger than that, which the first header shows): one
        # pread of that window serves them all, instead of one pread per header.
        window_start = position
        window = os.pread(
            descriptor,
            min(size - position, self._config.index_interval_bytes + HEADER_BYTES),
            position,
        )
        while position < size:
            if position + HEADER_BYTES <= window_start + len(window):
                at = position - window_start
                header = self._parse_header(segment, window, at, position, expected)
            else:
                header = self._read_header(segment, descriptor, position, expected)
            if header.next_offset > offset:
                return position, header
            position += header.length
            expected = header.next_offset
        return size, None

    def _read_header(
        self, segment: _Segment, descriptor: int, position: int, expected: int
    ) -> BatchHeader:
        """The header at ``position``; ``expected``: the end of the batch before it
        (its base offset is at least that: gaps between batches are allowed)."""
        data = os.pread(descriptor, HEADER_BYTES, position)
        return self._parse_header(segment, data, 0, position, expected)

    def _parse_header(
        self, segment: _Segment, data: Buffer, at: int, position: int, expected: int
    ) -> BatchHeader:
        """The header at ``data[at:]``, which lies at ``position`` in ``segment``'s file;
        ``expected`` is the end of the batch before it (or the segment's base).

        A damaged header cannot be trusted for its own offset, so the error names
        the offset the batch must start at or after (the end of the batch before it).
        """
        try:
            return parse_header(data, at, limits=self._config.limits)
        except RecordFormatError as error:
            raise CorruptSegmentError(
                segment.log_path, expected, position, f"bad batch header: {error}"
            ) from None

    def term_at(self, offset: int) -> int:
        with self._lock:
            self._check_open()
            if not self.start_offset <= offset < self.end_offset:
                raise OffsetOutOfRangeError(offset, self.start_offset, self.end_offset)
            segment = self._segment_for(offset)
            with self._pinned(segment) as descriptor:
                return self._term_at_locked(segment, descriptor, offset)

    def _term_at_locked(self, segment: _Segment, descriptor: int, offset: int) -> int:
        """The term of the batch holding ``offset`` in ``segment``, or of the last
        batch before it (gaps); -1 when no batch of the log lies at or before it."""
        position, header = self._locate_locked(segment, descriptor, offset)
        if header is None:  # past the segment's last batch (or it has none)
            return segment.last_term
        if header.base_offset <= offset:
            return header.term
        if position == 0:  # a gap at the segment's start: the term before the segment
            index = bisect_left(self._segments, segment.base_offset, key=_base_offset_of)
            return self._segments[index - 1].last_term if index > 0 else -1
        return self._header_before_locked(segment, descriptor, position).term

    def _header_before_locked(
        self, segment: _Segment, descriptor: int, position: int
    ) -> BatchHeader:
        """The header of the batch that ends at ``position`` (> 0) of ``segment``."""
        index = segment.index
        entry = bisect_left(index.positions, position) - 1
        at = index.positions[entry] if entry >= 0 else 0
        expected = segment.base_offset + (index.relative_offsets[entry] if entry >= 0 else 0)
        while True:
            header = self._read_header(segment, descriptor, at, expected)
            if at + header.length >= position:
                return header
            at += header.length
            expected = header.next_offset

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        with self._lock:
            self._check_open()
            for segment in self._segments:
                if segment.max_timestamp_ms < timestamp_ms:
                    continue
                with self._pinned(segment) as descriptor:
                    found = self._offset_for_timestamp_in(segment, descriptor, timestamp_ms)
                if found is not None:
                    return found
            return None

    def _offset_for_timestamp_in(
        self, segment: _Segment, descriptor: int, timestamp_ms: int
    ) -> int | None:
        relative = segment.index.time_floor(timestamp_ms)
        position, header = self._locate_locked(segment, descriptor, segment.base_offset + relative)
        while header is not None:
            # Control batches carry the leader's monotonic clock, not wall time.
            if not header.is_control and header.max_timestamp_ms >= timestamp_ms:
                data = os.pread(descriptor, header.length, position)
                decoded = decode_batch(data, limits=self._config.limits)
                for index, record_ms in enumerate(decoded.timestamps_ms):
                    if record_ms >= timestamp_ms:
                        return header.base_offset + index
            position += header.length
            expected = header.next_offset
            header = (
                self._read_header(segment, descriptor, position, expected)
                if position < segment.size
                else None
            )
        return None

    # ------------------------------------------------------------------ scrubbing

    def scrub(self, cursor: ScrubCursor | None, max_bytes: int) -> ScrubResult:
        """Re-read about ``max_bytes`` of the log from ``cursor`` (None: start a pass
        at the log start) and verify every batch's header and payload checksums and
        its base offset, whatever the log already considers verified: bit rot
        happens after the first read. For a background scrubber, in a thread.

        A pass covers every segment, sealed or active, up to the log end when it
        started. Each call reads whole batches from one segment (at least one batch,
        so it may read more than ``max_bytes``), with ``pread`` outside the log's
        lock, which it takes only to find the segment and pin its file. A segment
        deleted meanwhile (retention) is skipped; after a truncation its segment is
        scrubbed again from its start; damage in bytes that changed under the read
        is not reported. After damage the pass resumes at the next segment.
        """
        if max_bytes <= 0:
            raise InvalidInputError(f"max_bytes must be > 0, got {max_bytes}")
        with self._lock:
            self._check_open()
            if cursor is None:
                first = self._segments[0]
                cursor = ScrubCursor(
                    first.base_offset, 0, first.base_offset, self.end_offset, self._truncations
                )
            found = self._scrub_start_locked(cursor)
            if found is None:
                return ScrubResult(None, 0, 0, None)
            segment, position, offset, following_base = found
            size = segment.size
            truncations = self._truncations
            file = segment.file
            descriptor = self._files.pin(file)
        try:
            scanned, next_offset, batches, damage = self._verify_batches(
                segment, descriptor, position, offset, size, max_bytes, cursor.end_offset
            )
        finally:
            self._files.unpin(file)
        scrubbed_bytes = scanned - position
        end_offset = cursor.end_offset
        if (
            damage is None
            and scanned >= size
            and following_base is not None
            and next_offset > following_base
        ):
            damage = CorruptSegmentError(
                segment.log_path,
                next_offset,
                scanned,
                f"the segment ends at offset {next_offset}, past the next one's start "
                f"{following_base}",
            )
        with self._lock:
            self._check_open()
            if truncations != self._truncations:
                # The bytes may have changed under the read: verify them again.
                restart = replace(cursor, base_offset=segment.base_offset, truncations=-1)
                return ScrubResult(restart, scrubbed_bytes, batches, None)
            if damage is not None and segment not in self._segments:
                damage = None  # deleted by retention meanwhile: nothing to repair
        if damage is None and scanned < size and next_offset < end_offset:
            resume = ScrubCursor(segment.base_offset, scanned, next_offset, end_offset, truncations)
            return ScrubResult(resume, scrubbed_bytes, batches, None)
        if following_base is None or following_base >= end_offset:
            return ScrubResult(None, scrubbed_bytes, batches, damage)  # the pass is complete
        following = ScrubCursor(following_base, 0, following_base, end_offset, truncations)
        return ScrubResult(following, scrubbed_bytes, batches, damage)

    def check_batch_at(self, offset: int) -> CorruptSegmentError | None:
        """Read the batch holding ``offset`` from disk and verify it as :meth:`scrub`
        does (whatever the log considers verified): the damage found, or None. For
        a report that a copy of it served elsewhere failed its checksum. None also
        when a truncation changed the batch meanwhile. Raises
        :class:`OffsetOutOfRangeError` for an offset outside ``[start, end)``."""
        with self._lock:
            self._check_open()
            if not self.start_offset <= offset < self.end_offset:
                raise OffsetOutOfRangeError(offset, self.start_offset, self.end_offset)
            index = bisect_right(self._segments, offset, key=_base_offset_of) - 1
            segment = self._segments[index]
            size = segment.size
            truncations = self._truncations
            file = segment.file
            descriptor = self._files.pin(file)
            try:
                position, header = self._locate_locked(segment, descriptor, offset)
            except CorruptSegmentError as error:  # a damaged header on the way to it
                self._files.unpin(file)
                return error
            except BaseException:
                self._files.unpin(file)
                raise
        try:
            if header is None:  # (offset < end: a batch holds it)
                return None
            _, _, _, damage = self._verify_batches(
                segment, descriptor, position, header.base_offset, size, 1, header.next_offset
            )
        finally:
            self._files.unpin(file)
        with self._lock:
            self._check_open()
            return damage if truncations == self._truncations else None

    def _scrub_start_locked(
        self, cursor: ScrubCursor
    ) -> tuple[_Segment, int, int, int | None] | None:
        """The segment, file position and offset where ``cursor`` resumes, and the
        base offset of the segment after it (None for the active one); None when
        nothing of the pass is left."""
        segments = self._segments
        index = bisect_left(segments, cursor.base_offset, key=_base_offset_of)
        resume = cursor.truncations == self._truncations
        while index < len(segments):
            segment = segments[index]
            sealed = index < len(segments) - 1
            if resume and segment.base_offset == cursor.base_offset:
                position, offset = cursor.position, cursor.offset
            else:
                position, offset = 0, segment.base_offset
            if offset >= cursor.end_offset:
                return None
            if position < segment.size:
                following = segments[index + 1].base_offset if sealed else None
                return segment, position, offset, following
            if not sealed:
                return None
            index += 1
        return None

    def _verify_batches(
        self,
        segment: _Segment,
        descriptor: int,
        position: int,
        offset: int,
        size: int,
        max_bytes: int,
        end_offset: int,
    ) -> tuple[int, int, int, CorruptSegmentError | None]:
        """Verify the whole batches of ``segment`` from ``position`` (where a batch
        based at ``offset`` or later must start) within about ``max_bytes`` and below
        ``size``, stopping at ``end_offset``. Returns the file position and offset
        after the last good batch, the number of good batches, and the damage found
        after them, if any."""
        limits = self._config.limits
        window = os.pread(descriptor, min(max_bytes, size - position), position)
        at = batches = 0
        damage: str | None = None
        while offset < end_offset and position < size:
            if at + HEADER_BYTES > len(window):
                if position + HEADER_BYTES > size:
                    damage = f"the segment ends {size - position} bytes into a batch header"
                    break
                if at:
                    break  # the next call goes on from here
                window = os.pread(descriptor, HEADER_BYTES, position)
            try:
                header = parse_header(window, at, limits=limits)
                if position + header.length > size:
                    damage = f"a batch of {header.length} bytes runs past the segment end"
                    break
                if at + header.length > len(window):
                    if at:
                        break
                    window = os.pread(descriptor, header.length, position)  # larger than max_bytes
                verify_payload(window, at, header)
            except RecordFormatError as error:
                damage = str(error)
                break
            if header.base_offset < offset:  # (a gap before it is fine)
                damage = f"the batch has base offset {header.base_offset}"
                break
            offset = header.next_offset
            position += header.length
            at += header.length
            batches += 1
        if damage is None:
            return position, offset, batches, None
        found = CorruptSegmentError(segment.log_path, offset, position, damage)
        return position, offset, batches, found

    # ------------------------------------------------------------------ state file

    def save_state(self, state: bytes) -> None:
        with self._lock:
            self._check_open()
            self._staged_state = None
        self._write_state(state)

    def stage_state(self, state: bytes) -> None:
        with self._lock:
            self._check_open()
            self._staged_state = bytes(state)

    def _write_state(self, state: bytes, *, sync: bool = True) -> int:
        """Write ``state`` (in place: see :mod:`laminar.segment.statefile`);
        durable on return when ``sync``. Returns the state file's write ticket."""
        return self._state_file.write(state, sync=sync)

    def load_state(self) -> bytes | None:
        with self._lock:
            self._check_open()
            if self._staged_state is not None:
                return self._staged_state
        return self._state_file.load()

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Sync, write the active segment's indexes, and release every file."""
        with self._lock:
            if self._closed:
                return
            active = self._segments[-1]
            self._release_reserve(active)
            os.fsync(active.file.descriptor)
            active.index.write(active.path(INDEX_SUFFIX), active.path(TIME_INDEX_SUFFIX))
            self._closed = True
            self._close_files()
        with self._sync_condition:
            self._sync_condition.notify_all()

    def _close_files(self) -> None:
        """Release every file (each closed once no read has it pinned)."""
        for segment in self._segments:
            self._files.discard(segment.file)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self._directory} is closed")

    def __enter__(self) -> SegmentLog:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _base_offset_of(segment: _Segment) -> int:
    return segment.base_offset


def _known_start(segment: _Segment, offset: int) -> int | None:
    """The file position of the batch starting at ``offset`` if the index or the
    recent appends know it, else None."""
    relative, indexed = segment.index.floor(offset - segment.base_offset)
    if segment.base_offset + relative == offset:
        return indexed
    recent = _recent_floor(segment, offset)
    return recent[1] if recent is not None and recent[0] == offset else None


def _recent_floor(segment: _Segment, offset: int) -> tuple[int, int] | None:
    """``(base offset, position)`` of the last recently appended batch starting at or
    below ``offset``, or None if ``offset`` is older than the recent appends."""
    recent = segment.recent_offsets
    if not recent or offset < recent[0]:
        return None
    entry = bisect_right(recent, offset) - 1
    return recent[entry], segment.recent_positions[entry]


def _batch_boundary(
    segment: _Segment, size: int, position: int, window_end: int, upper_offset: int | None
) -> int:
    """The furthest known batch start (or the segment end) in ``(position, window_end]``
    such that every batch before it ends at or below ``upper_offset``; or ``position``.

    Known batch starts are the sparse index entries and the end of the segment.
    """
    if window_end >= size and (upper_offset is None or segment.next_offset <= upper_offset):
        return size
    index = segment.index
    entry = bisect_right(index.positions, window_end) - 1
    if upper_offset is not None:
        entry = min(
            entry, bisect_right(index.relative_offsets, upper_offset - segment.base_offset) - 1
        )
    if entry < 0:
        return position
    return max(index.positions[entry], position)


def _indexed_max_timestamp_ms(index: SparseIndex) -> int:
    """The index's running maximum timestamp; 0 is a timestamp, so no ``or`` here."""
    indexed_ms = index.max_timestamp_ms
    return _TIMESTAMP_MIN if indexed_ms is None else indexed_ms


def _advance_verified(segment: _Segment, start: int, end: int) -> None:
    """Extend the segment's verified prefix by a read that verified ``[start, end)``.

    Only contiguous growth is recorded: a read that began beyond the prefix verified
    its own batches but leaves a gap of unverified bytes before them.
    """
    if start <= segment.verified_bytes < end:
        segment.verified_bytes = end


def _pwrite_rest(descriptor: int, buffers: list[Buffer], position: int, written: int) -> None:
    """Finish a ``pwritev`` of ``buffers`` at ``position`` that wrote only ``written``."""
    views = [memoryview(buffer).cast("B") for buffer in buffers]
    while True:
        if written <= 0:
            raise StorageError(f"pwritev wrote {written} bytes at position {position}")
        position += written
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if not views:
            return
        if written:
            views[0] = views[0][written:]
        written = os.pwritev(descriptor, views, position)


def _corrupt(
    path: str, offset: int, position: int, error: RecordFormatError
) -> CorruptSegmentError:
    """The damage ``error`` found at ``position`` of ``path`` (batch at ``offset``)."""
    if isinstance(error, ChecksumMismatchError):
        return CorruptSegmentError(
            path, offset, position, str(error), expected=error.expected, found=error.actual
        )
    return CorruptSegmentError(path, offset, position, str(error))

"""Open segment files on demand, with a bounded cache shared by a node's logs.

A node holds thousands of partition replicas, each with an active segment and any
number of sealed ones. Keeping every segment file open would need one descriptor
per segment (Kafka's way: operators raise ``ulimit -n`` into the hundreds of
thousands). Here a log keeps exactly one descriptor of its own, its active
segment's (appends and fsyncs go there). A sealed segment's file is opened when a
read needs it and then stays open in a least-recently-used cache of *idle*
descriptors, shared by every log of the node, that holds at most ``capacity`` of
them; the oldest is closed when one more would exceed it.

Pins make closing safe. Reads ``pread`` outside the log's lock, so a descriptor
must not be closed (and its number reused by another file) while a read holds it:
whoever uses a descriptor pins its file first, and only an unpinned descriptor is
ever closed. The active segment holds a pin of its own for as long as it is
active (:meth:`SegmentFiles.hold` / :meth:`SegmentFiles.let_go`). A deleted
segment's file is :meth:`SegmentFiles.discard`\\ ed: closed at once if unpinned,
else by its last unpin.

Freeing. The last close of a file whose name is gone (a segment deleted, or
replaced by keyed compaction) is where the kernel frees its cached pages and disk
blocks: about 12 ms for a 64 MiB segment on the reference VM, most of a
compaction's swap of a segment. Such a close (``discard(..., unlinked=True)``) is
handed to the cache's *freeing thread*, as Kafka's log cleaner deletes replaced
segments asynchronously, so the log's lock and the job are not held for it. The
thread closes its queue once no file was queued for ``freeing_delay_ms``: freeing
blocks goes through the filesystem's journal, and a compaction job's fsyncs,
which come in a burst with its swaps, would wait for it (measured: 6-12 ms
fsyncs while the thread closed during the job); at once when more than half of
its room is taken. At most ``freeing_bytes_max`` of disk blocks wait for it
(beyond that, the deleting thread closes the file itself, as it always did):
deferring never holds more than that much deleted data's space, for as long as
the thread takes to close the queue. The thread is started when a close is
queued and ends when the queue is empty; a crash meanwhile loses nothing (the
files' names are gone: the kernel frees them when the process ends, or the
filesystem at its next mount).

The cache's lock guards every field of every :class:`SegmentFile`; a log calls it
with its own lock held (log lock, then cache lock) and the cache never calls back.
Open descriptors in use are therefore one per replica (active segments), plus
one per read under way, plus at most ``capacity`` idle ones, plus the deleted files
the freeing thread has yet to close.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from laminar.errors import ConfigError, StorageError

SEGMENT_FILES_DEFAULT = 1024
"""Idle sealed-segment descriptors a cache keeps open by default."""

FREEING_BYTES_DEFAULT = 1 << 30
"""Disk blocks of deleted files (1 GiB) that may wait for a cache's freeing thread
by default: a compaction job of 1 GiB of 64 MiB segments queues its old files
faster than one thread frees them (about 12 ms each)."""

FREEING_DELAY_MS_DEFAULT = 50
"""How long the freeing thread waits after the last deleted file was queued before
it closes the queue by default."""

_CLOSED = -1


def _always(length_bytes: int) -> bool:
    return True


@dataclass(slots=True, eq=False)
class SegmentFile:
    """One segment file: its path and, while open, its descriptor. Every field is
    guarded by the :class:`SegmentFiles` cache that manages it."""

    path: str
    descriptor: int = _CLOSED
    pins: int = 0
    held: bool = False
    """The log's own pin: this is the active segment's file."""
    dead: bool = False
    """Deleted: never opened again; closed by its last unpin."""
    unlinked: bool = False
    """Its name is gone: its last close frees it (on the freeing thread)."""


class SegmentFiles:
    """A bounded LRU cache of idle segment descriptors (see the module docstring).

    Thread-safe. ``opens`` and ``evictions`` count files opened and idle descriptors
    closed to stay within ``capacity``; ``freed_later`` counts deleted files closed by
    the freeing thread.
    """

    def __init__(
        self,
        capacity: int = SEGMENT_FILES_DEFAULT,
        *,
        may_reserve: Callable[[int], bool] | None = None,
        freeing_bytes_max: int = FREEING_BYTES_DEFAULT,
        freeing_delay_ms: int = FREEING_DELAY_MS_DEFAULT,
    ) -> None:
        """``may_reserve(length_bytes)``: whether the node's logs may reserve that many
        more bytes of disk blocks ahead of their appends (the node keeps free space
        above its watermark, :meth:`laminar.server.disk.DiskWatch.may_reserve`);
        None: always. Called from any thread, once per reservation step.
        ``freeing_bytes_max``: the most disk blocks of deleted files that may wait for
        the freeing thread (module docstring); 0 closes every one at once.
        ``freeing_delay_ms``: how long after the last file was queued the thread
        waits before it closes the queue (:meth:`_free_queued`)."""
        if capacity < 0:
            raise ConfigError(f"segment files capacity must be >= 0, got {capacity}")
        if freeing_bytes_max < 0 or freeing_delay_ms < 0:
            raise ConfigError(
                f"freeing_bytes_max and freeing_delay_ms must be >= 0, "
                f"got {freeing_bytes_max} and {freeing_delay_ms}"
            )
        self._capacity = capacity
        self._freeing_bytes_max = freeing_bytes_max
        self.may_reserve: Callable[[int], bool] = may_reserve or _always
        self._lock = threading.Lock()
        self._idle: OrderedDict[SegmentFile, None] = OrderedDict()
        self.opens = 0
        self.evictions = 0
        self.freed_later = 0
        # The freeing thread's queue: (descriptor, disk bytes), and their bytes (a file
        # counts until its close returns). Guarded by _lock; _freed is notified as
        # the queue drains.
        self._freeing: deque[tuple[int, int]] = deque()
        self._freeing_bytes = 0
        self._freer: threading.Thread | None = None
        self._freeing_delay_s = freeing_delay_ms / 1000
        self._last_queued_s = 0.0
        self._hurry = 0  # wait_freed calls under way: no delay
        self._freed = threading.Condition(self._lock)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def idle(self) -> int:
        """Descriptors open but not in use (closable)."""
        with self._lock:
            return len(self._idle)

    @property
    def freeing_bytes(self) -> int:
        """Disk blocks of deleted files not freed yet (queued for the freeing thread,
        or being closed by it)."""
        with self._lock:
            return self._freeing_bytes

    def wait_freed(self, timeout_s: float | None = None) -> bool:
        """Wait until the freeing thread has closed every deleted file queued so far
        (at most ``timeout_s``; None: no limit); whether it has."""
        with self._freed:
            self._hurry += 1
            self._freed.notify_all()
            try:
                return self._freed.wait_for(lambda: self._freer is None, timeout_s)
            finally:
                self._hurry -= 1

    def create(self, path: str) -> SegmentFile:
        """Create (or empty) the file at ``path`` and hold it: a new active segment.

        The file is created outside the cache's lock (the node's reads need it, and
        founding creates thousands of files from several threads); the lock is taken
        only to count it, or to give back idle descriptors when none are left."""
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC
        try:
            descriptor = os.open(path, flags, 0o644)
        except OSError as error:
            if error.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            with self._lock:
                descriptor = self._open_locked(path, flags)
        else:
            with self._lock:
                self.opens += 1
        return SegmentFile(path, descriptor, pins=1, held=True)

    def hold(self, file: SegmentFile) -> int:
        """Make ``file`` the active segment's (opening it if closed); returns its
        descriptor, valid until :meth:`let_go` or :meth:`discard`."""
        with self._lock:
            if file.held:
                return file.descriptor
            descriptor = self._pin_locked(file)
            file.held = True
            return descriptor

    def let_go(self, file: SegmentFile) -> None:
        """``file`` is sealed: drop the log's own pin (it may be closed when idle)."""
        with self._lock:
            if file.held:
                file.held = False
                self._unpin_locked(file)

    def pin(self, file: SegmentFile) -> int:
        """``file``'s descriptor, opening the file if needed; it stays open until the
        matching :meth:`unpin`. Call with the owning log's lock held (so the file
        cannot have been deleted). Raises :class:`StorageError` if it cannot be opened."""
        with self._lock:
            return self._pin_locked(file)

    def unpin(self, file: SegmentFile) -> None:
        with self._lock:
            if not (file.dead and file.pins == 1):
                self._unpin_locked(file)
                return
            file.pins = 0
            descriptor = _take_locked(file)
        self._release(descriptor, file.unlinked)  # outside the lock: see discard

    def discard(self, file: SegmentFile, *, unlinked: bool = False) -> None:
        """``file`` was deleted (or its log closed): close it once no read uses it.

        ``unlinked``: its name is gone, so its last close frees its pages and blocks
        (about 12 ms for 64 MiB here): that close goes to the freeing thread (module
        docstring). Whoever makes it, it is made outside the cache's lock, which
        every log of the node takes to read."""
        with self._lock:
            if file.dead:
                return
            file.dead = True
            file.unlinked = unlinked
            if file.held:
                file.held = False
                file.pins -= 1
            self._idle.pop(file, None)
            if file.pins:
                return
            descriptor = _take_locked(file)
        self._release(descriptor, unlinked)

    def _release(self, descriptor: int, unlinked: bool) -> None:
        """Close a deleted file's last descriptor: on the freeing thread when its name
        is gone, it holds disk blocks and the queue has room for them; else here.
        Called without the lock."""
        if descriptor == _CLOSED or not unlinked or not self._freeing_bytes_max:
            _close(descriptor)
            return
        try:
            length_bytes = os.fstat(descriptor).st_blocks * 512
        except OSError:
            length_bytes = 0
        with self._lock:
            queued = 0 < length_bytes <= self._freeing_bytes_max - self._freeing_bytes
            if queued:
                self._freeing.append((descriptor, length_bytes))
                self._freeing_bytes += length_bytes
                self._last_queued_s = time.monotonic()
                self._freed.notify_all()
                if self._freer is None:
                    self._freer = threading.Thread(
                        target=self._free_queued, name="laminar-segment-freeing", daemon=True
                    )
                    try:
                        self._freer.start()
                    except RuntimeError:  # no thread to be had: close here
                        self._freer = None
                        self._freeing.pop()
                        self._freeing_bytes -= length_bytes
                        queued = False
        if not queued:
            _close(descriptor)

    def _free_queued(self) -> None:
        """The freeing thread: close queued descriptors until the queue is empty,
        once no file was queued for ``freeing_delay_s`` (a compaction job swaps its
        segments in a burst; a close frees blocks in the filesystem's journal, which
        the job's fsyncs would wait for), or at once when half the queue's room is
        taken or someone waits for it (:meth:`wait_freed`)."""
        while True:
            with self._lock:
                while self._freeing:
                    due_s = self._last_queued_s + self._freeing_delay_s - time.monotonic()
                    if (
                        due_s <= 0
                        or self._hurry
                        or 2 * self._freeing_bytes > self._freeing_bytes_max
                    ):
                        break
                    self._freed.wait(due_s)
                if not self._freeing:
                    self._freer = None
                    self._freed.notify_all()
                    return
                descriptor, length_bytes = self._freeing.popleft()
            _close(descriptor)
            with self._lock:
                self._freeing_bytes -= length_bytes
                self.freed_later += 1
                self._freed.notify_all()

    def _pin_locked(self, file: SegmentFile) -> int:
        assert not file.dead, f"{file.path} is deleted"
        if file.descriptor == _CLOSED:
            try:
                file.descriptor = self._open_locked(file.path, os.O_RDWR)
            except OSError as error:
                raise StorageError(
                    f"cannot open segment file {file.path}: {error.strerror}"
                ) from error
        elif file.pins == 0:
            del self._idle[file]
        file.pins += 1
        return file.descriptor

    def _unpin_locked(self, file: SegmentFile) -> None:
        assert file.pins > 0, f"{file.path} is not pinned"
        file.pins -= 1
        if file.pins:
            return
        if file.dead:
            self._close_locked(file)
            return
        self._idle[file] = None
        while len(self._idle) > self._capacity:
            oldest, _ = self._idle.popitem(last=False)
            self._close_locked(oldest)
            self.evictions += 1

    def _open_locked(self, path: str, flags: int) -> int:
        try:
            descriptor = os.open(path, flags, 0o644)
        except OSError as error:
            if error.errno not in (errno.EMFILE, errno.ENFILE) or not self._idle:
                raise
            # Out of descriptors: give back every idle one and try once more.
            while self._idle:
                oldest, _ = self._idle.popitem(last=False)
                self._close_locked(oldest)
                self.evictions += 1
            descriptor = os.open(path, flags, 0o644)
        self.opens += 1
        return descriptor

    def _close_locked(self, file: SegmentFile) -> None:
        _close(_take_locked(file))


def _take_locked(file: SegmentFile) -> int:
    """``file``'s descriptor, which the caller closes; ``file`` is closed from here on."""
    descriptor, file.descriptor = file.descriptor, _CLOSED
    return descriptor


def _close(descriptor: int) -> None:
    if descriptor != _CLOSED:
        # Linux releases the descriptor even when close reports an error, and
        # nothing written is at stake (logs fsync before letting go of a file).
        with contextlib.suppress(OSError):
            os.close(descriptor)

"""The scrubber: every replica's log re-read in the background, to find bit rot early.

Theory of operation
-------------------
A sealed segment's batches are verified when they are first read; bytes that rot on
disk after that (or in a partition nobody reads) would only be found when a reader
needs them, perhaps after the healthy replicas are gone. The scrubber re-reads every
replica's log at a bounded rate, :attr:`~laminar.server.host.HostConfig.scrub_bytes_per_s`,
and verifies each batch's header and payload checksums and its offset with
:meth:`SegmentLog.scrub <laminar.segment.log.SegmentLog.scrub>`, whatever the log
already counts as verified. Damage goes to the host's ``on_damage`` (which fences the
replica: the group elects and serves from another one, and the reopen repairs it).

A *pass* visits the node's replicas in key order, each from its log start to its
log end when the replica's turn came; replicas created during a pass wait for the
next one, replicas deleted or reopened meanwhile are skipped (a reopened one is
scrubbed from its start next pass). A pass starts no sooner than
``scrub_pass_min_ms`` after the previous one started, so a node holding little data
does not re-read it over and over.

Work happens in *jobs* on one thread of the scrubber's own: the host's tick loop
starts a job when the previous one is done and its bytes have been paid for at the
rate (a job of ``b`` bytes started at ``t`` lets the next one start at ``t + b /
rate``). A job scrubs up to :data:`SCRUB_JOB_MS` worth of the rate, in calls of at
most :data:`SCRUB_CHUNK_BYTES` (each takes the log's lock only to pin a file, and
reads with ``pread`` outside it), and stops at the first damage so that the host
acts on it at once. The rate bounds CPU rather than bytes alone: each call and each
batch is charged a fixed cost on top of the bytes read (:func:`charged_bytes`), so
that thousands of small replicas, or logs of tiny batches, are scrubbed at the same
CPU cost per second as large ones. The scrubber
keeps each replica's cursor between jobs, so a pass resumes where it stopped.

The same thread re-verifies a batch a consumer reports as corrupt
(:meth:`Scrubber.check`), at most :data:`REPORTS_MAX` at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from laminar.errors import CorruptSegmentError, LogClosedError, StorageError, UnavailableError
from laminar.ids import TopicPartition
from laminar.logfields import fields
from laminar.segment.log import ScrubCursor, SegmentLog
from laminar.segment.storage import LogStorage

_LOG = logging.getLogger(__name__)

SCRUB_CHUNK_BYTES = 1 << 20
"""The most one :meth:`SegmentLog.scrub` call reads (a larger batch is read whole)."""
SCRUB_CALL_BYTES = 64 << 10
"""What each scrub call is charged against the rate on top of the bytes it read."""
SCRUB_BATCH_BYTES = 4 << 10
"""What each batch verified is charged on top of its bytes: about a microsecond of
CPU, as much as reading and hashing 4 KiB, so a log of tiny batches is scrubbed
more slowly in bytes but at the same CPU."""
SCRUB_JOB_MS = 1_000
"""A job scrubs this long's worth of the rate (then the next waits its turn)."""
SCRUB_REPLICAS_PER_JOB = 256
"""The most replicas one job visits (a job over empty replicas stays short)."""
REPORTS_MAX = 16
"""Consumer reports being re-verified at once; more are refused (UNAVAILABLE)."""


@dataclass(frozen=True, slots=True)
class ScrubItem:
    """A replica for a job: its log and where its pass stands (None: at the start)."""

    key: TopicPartition
    log: SegmentLog
    cursor: ScrubCursor | None


@dataclass(frozen=True, slots=True)
class ScrubOutcome:
    """What a job did to one replica."""

    key: TopicPartition
    log: SegmentLog
    cursor: ScrubCursor | None
    """Where the replica's pass resumes (when not ``done``)."""
    done: bool
    """The replica's pass is complete (or its log was closed meanwhile)."""
    scrubbed_bytes: int
    batches: int
    calls: int
    damage: CorruptSegmentError | OSError | StorageError | None
    """Damage found (a corrupt batch, or a read the disk failed): the job stopped there."""
    failure: OSError | StorageError | None = None
    """A read that failed for another reason (out of descriptors, say): the replica is
    skipped for this pass, not fenced."""


def charged_bytes(scrubbed_bytes: int, batches: int, calls: int) -> int:
    """What scrubbing costs against the rate: the bytes read, plus a fixed cost per
    batch and per call (:data:`SCRUB_BATCH_BYTES`, :data:`SCRUB_CALL_BYTES`)."""
    return scrubbed_bytes + batches * SCRUB_BATCH_BYTES + calls * SCRUB_CALL_BYTES


DAMAGE_ERRNOS = frozenset({errno.EIO, errno.ENOENT, errno.EBADMSG, errno.EUCLEAN})
"""Read errors that mean the data is damaged or gone: the media failed (``EIO``),
the filesystem found its own checksums wrong (``EBADMSG``, ``EUCLEAN``), or a
segment file the log holds is missing (``ENOENT``)."""


def is_damage(error: BaseException) -> bool:
    """Whether a failed read means damaged data (see :data:`DAMAGE_ERRNOS`), rather
    than a resource the node ran out of."""
    cause = error if isinstance(error, OSError) else error.__cause__
    return isinstance(cause, OSError) and cause.errno in DAMAGE_ERRNOS


def scrub_logs(
    items: Iterable[ScrubItem], budget_bytes: int, stopped: Callable[[], bool]
) -> list[ScrubOutcome]:
    """(The scrub thread.) Scrub ``items`` in order until ``budget_bytes`` are
    spent (as :func:`charged_bytes` counts), damage is found, or ``stopped()``."""
    outcomes: list[ScrubOutcome] = []
    for item in items:
        cursor = item.cursor
        scrubbed = batches = calls = 0
        damage: CorruptSegmentError | OSError | StorageError | None = None
        failure: OSError | StorageError | None = None
        done = False
        while budget_bytes > 0 and not stopped():
            try:
                result = item.log.scrub(cursor, min(SCRUB_CHUNK_BYTES, budget_bytes))
            except LogClosedError:  # the replica was closed (fenced, deleted) meanwhile
                done = True
                break
            except (OSError, StorageError) as error:
                if is_damage(error):
                    damage = error
                else:
                    failure = error
                    done = True
                break
            calls += 1
            scrubbed += result.scrubbed_bytes
            batches += result.batches
            budget_bytes -= charged_bytes(result.scrubbed_bytes, result.batches, 1)
            cursor = result.cursor
            damage = result.damage
            if damage is not None or cursor is None:
                done = cursor is None
                break
        outcomes.append(
            ScrubOutcome(
                item.key, item.log, cursor, done, scrubbed, batches, calls, damage, failure
            )
        )
        if damage is not None or budget_bytes <= 0 or stopped():
            break
    return outcomes


class Scrubber:
    """Schedules scrub jobs from the host's tick loop (see the module docstring).

    ``keys`` lists the host's replicas, ``log_of`` gives one's log (None: gone);
    ``on_damage(key, log, error, source)`` is called on the loop for damage found
    in ``log`` (the host ignores it when the replica's log is another one by then).
    ``counters`` gets ``scrub_bytes``, ``scrub_batches`` and ``scrub_passes``.
    """

    def __init__(
        self,
        node_id: str,
        *,
        bytes_per_s: int,
        pass_min_ms: int,
        keys: Callable[[], Iterable[TopicPartition]],
        log_of: Callable[[TopicPartition], LogStorage | None],
        on_damage: Callable[[TopicPartition, LogStorage, BaseException, str], None],
        counters: dict[str, int],
    ) -> None:
        self._node_id = node_id
        self._bytes_per_s = bytes_per_s
        self._pass_min_ms = pass_min_ms
        self._keys = keys
        self._log_of = log_of
        self._on_damage = on_damage
        self._counters = counters
        counters.setdefault("scrub_bytes", 0)
        counters.setdefault("scrub_batches", 0)
        counters.setdefault("scrub_passes", 0)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scrub")
        self._closed = False
        self._queue: deque[TopicPartition] = deque()
        """Replicas the current pass has still to finish, in order."""
        self._cursors: dict[TopicPartition, tuple[SegmentLog, ScrubCursor]] = {}
        self._job: asyncio.Future[list[ScrubOutcome]] | None = None
        self._due_ms = 0
        self._pass_started_ms: int | None = None  # None: no pass under way
        self._last_pass_started_ms: int | None = None
        self._pass_bytes = 0
        self._pass_damage = 0
        self._reports = 0

    @property
    def enabled(self) -> bool:
        return self._bytes_per_s > 0

    def close(self) -> None:
        """Stop: a running job ends after its current call (the logs close anyway)."""
        self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _stopped(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ passes

    def tick(self, now_ms: int) -> None:
        """(The host's tick loop.) Start the next job if it is due."""
        if not self.enabled or self._closed or now_ms < self._due_ms:
            return
        if self._job is not None and not self._job.done():
            return
        if not self._queue and not self._start_pass(now_ms):
            return
        items = self._items()
        if not items:
            self._due_ms = now_ms  # the replicas left went away: the pass ends next tick
            return
        budget_bytes = max(1, self._bytes_per_s * SCRUB_JOB_MS // 1000)
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(self._executor, scrub_logs, items, budget_bytes, self._stopped)
        job.add_done_callback(partial(self._finished, now_ms))
        self._job = job

    def _start_pass(self, now_ms: int) -> bool:
        """End the pass under way (if any) and start the next if it is time."""
        if self._pass_started_ms is not None:
            self._counters["scrub_passes"] += 1
            _LOG.info(
                "scrub pass complete node=%s bytes=%d seconds=%.1f damage_found=%d",
                self._node_id,
                self._pass_bytes,
                (now_ms - self._pass_started_ms) / 1000,
                self._pass_damage,
                extra=fields(node_id=self._node_id),
            )
            self._pass_started_ms = None
        previous = self._last_pass_started_ms
        if previous is not None and now_ms < previous + self._pass_min_ms:
            self._due_ms = previous + self._pass_min_ms
            return False
        self._queue = deque(
            k for k in sorted(self._keys()) if isinstance(self._log_of(k), SegmentLog)
        )
        self._last_pass_started_ms = now_ms
        if not self._queue:
            self._due_ms = now_ms + max(self._pass_min_ms, SCRUB_JOB_MS)
            return False
        self._pass_started_ms = now_ms
        self._pass_bytes = self._pass_damage = 0
        self._cursors = {k: v for k, v in self._cursors.items() if k in self._queue}
        return True

    def _items(self) -> list[ScrubItem]:
        """The next replicas of the pass with their cursors (dropping those gone)."""
        items: list[ScrubItem] = []
        for key in list(self._queue):
            if len(items) >= SCRUB_REPLICAS_PER_JOB:
                break
            log = self._log_of(key)
            if not isinstance(log, SegmentLog):  # gone (or a memory log: nothing to rot)
                self._queue.remove(key)
                self._cursors.pop(key, None)
                continue
            kept = self._cursors.get(key)
            cursor = kept[1] if kept is not None and kept[0] is log else None
            items.append(ScrubItem(key, log, cursor))
        return items

    def _finished(self, started_ms: int, job: asyncio.Future[list[ScrubOutcome]]) -> None:
        """(The loop.) Apply a job's outcomes; the next job is due once its bytes
        are paid for at the rate."""
        if job.cancelled():
            return
        error = job.exception()
        if error is not None:  # pragma: no cover - a bug; keep scrubbing later, loudly
            _LOG.error(
                "scrub job failed node=%s: %r",
                self._node_id,
                error,
                extra=fields(node_id=self._node_id),
            )
            self._due_ms = started_ms + SCRUB_JOB_MS
            return
        charged = 0
        for outcome in job.result():
            charged += charged_bytes(outcome.scrubbed_bytes, outcome.batches, outcome.calls)
            self._counters["scrub_bytes"] += outcome.scrubbed_bytes
            self._counters["scrub_batches"] += outcome.batches
            self._pass_bytes += outcome.scrubbed_bytes
            key = outcome.key
            if outcome.damage is not None:
                self._pass_damage += 1
                self._on_damage(key, outcome.log, outcome.damage, "scrub")
            if outcome.failure is not None:
                _LOG.warning(
                    "scrub read failed replica=%s/%d node=%s error=%s; skipped this pass",
                    *key,
                    self._node_id,
                    outcome.failure,
                    extra=fields(key, node_id=self._node_id),
                )
            if outcome.done or outcome.damage is not None:
                self._cursors.pop(key, None)
                with contextlib.suppress(ValueError):
                    self._queue.remove(key)
            elif outcome.cursor is not None:
                self._cursors[key] = (outcome.log, outcome.cursor)
        self._due_ms = started_ms + charged * 1000 // self._bytes_per_s

    # ------------------------------------------------------------------ reports

    async def check(self, log: SegmentLog, offset: int) -> CorruptSegmentError | None:
        """Re-verify the batch of ``log`` holding ``offset`` on the scrub thread (see
        :meth:`SegmentLog.check_batch_at`); refused while :data:`REPORTS_MAX` are."""
        if self._reports >= REPORTS_MAX or self._closed:
            raise UnavailableError(
                f"node {self._node_id} is busy re-verifying {self._reports} reported batches"
            )
        self._reports += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, log.check_batch_at, offset)
        finally:
            self._reports -= 1

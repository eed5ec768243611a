"""A node's free disk space and its full-disk watermark (issue 28).

Theory of operation
-------------------
A node is *full* while the filesystem of its data directory has less free space
than its *watermark*: the larger of ``disk_free_bytes_min`` and
``disk_free_percent_min`` percent of the filesystem's size (0 turns either off).
Full is a node-level state, as Kafka's log-directory failure and Redpanda's
free-space thresholds are; the replica host (:mod:`laminar.server.host`) acts on
it:

- its replicas give up their leaderships to in-sync peers that have space, and
  neither campaign nor accept a leadership handed to them
  (:meth:`~laminar.replica.core.NodeLiveness.may_lead`); they keep following as
  long as their appends succeed, and fall out of the in-sync set when they fail;
- it takes no new replicas, and new topics are founded elsewhere; placement itself
  does not change (a weight change would move every partition off the node for
  what may be a brief shortage): the node only loses its place as preferred leader;
- segment preallocation never takes free space below the watermark
  (:meth:`DiskWatch.may_reserve`);
- a write whose partition has no majority of replicas with space is refused at once
  with :class:`~laminar.errors.StorageFullError`.

The state is measured with ``statvfs`` every ``disk_check_ms`` by the host's tick
loop (never per write), and set at once by a write that fails with ``ENOSPC`` or
``EDQUOT`` (:meth:`DiskWatch.note_no_space`). A full node is back in service by
itself once a check finds free space above the watermark by a margin
(:data:`RECOVER_MARGIN_FRACTION` of it, so that a node at the line does not flap) and,
after a write failed for want of space, more free space than there was then (a
quota or inode limit that ``statvfs`` does not show must not make it retry in a
loop): retention, a deleted topic or an operator freed space, no restart needed.

Everything here but :func:`statvfs_usage` is pure: the free-space function is
injected, so tests drive the watermark without a real disk.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from laminar.errors import ConfigError

RECOVER_MARGIN_FRACTION = 0.1
"""A full node returns to service once free space exceeds its watermark by this
fraction of the watermark."""

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""``OSError`` numbers that mean "out of space" (the disk, or a quota)."""


@dataclass(frozen=True, slots=True)
class DiskUsage:
    """Space on the filesystem of a data directory, in bytes."""

    free_bytes: int
    """Free for an unprivileged writer (``f_bavail``: blocks reserved for root excluded)."""
    total_bytes: int


@dataclass(frozen=True, slots=True)
class DiskStatus:
    """What ``cluster status`` shows of a node's disk."""

    free_bytes: int
    total_bytes: int
    watermark_bytes: int
    full: bool


def statvfs_usage(path: str) -> DiskUsage:
    """The space of ``path``'s filesystem (one ``statvfs``: a few microseconds)."""
    stats = os.statvfs(path)
    return DiskUsage(stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize)


def is_no_space(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) says the disk or a quota is full."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in NO_SPACE_ERRNOS:
            return True
        current = current.__cause__ or current.__context__
    return False


def watermark_bytes(total_bytes: int, free_bytes_min: int, free_percent_min: float) -> int:
    """The free space below which a node is full: the larger of the two thresholds."""
    return max(free_bytes_min, math.ceil(total_bytes * free_percent_min / 100))


def check_thresholds(free_bytes_min: int, free_percent_min: float, check_interval_ms: int) -> None:
    """Raise :class:`ConfigError` for impossible settings."""
    if free_bytes_min < 0:
        raise ConfigError("disk_free_bytes_min must be >= 0")
    if not 0 <= free_percent_min < 100:
        raise ConfigError("disk_free_percent_min must be in [0, 100)")
    if check_interval_ms <= 0:
        raise ConfigError("disk_check_ms must be > 0")


class DiskWatch:
    """The full-disk state of one data directory (see the module docstring).

    Not thread-safe, except :meth:`may_reserve` (it only reads its settings and
    calls ``usage``), which logs call from any thread.
    """

    def __init__(
        self,
        *,
        free_bytes_min: int,
        free_percent_min: float,
        check_interval_ms: int,
        usage: Callable[[], DiskUsage],
    ) -> None:
        check_thresholds(free_bytes_min, free_percent_min, check_interval_ms)
        self._free_bytes_min = free_bytes_min
        self._free_percent_min = free_percent_min
        self._check_interval_ms = check_interval_ms
        self._usage = usage
        self.full = False
        self.last: DiskUsage | None = None
        """The last measurement (None before the first, or when it failed)."""
        self.error: str | None = None
        """Why the last measurement failed, if it did."""
        self._due_ms = 0
        self._no_space_free_bytes = -1  # free space when a write last hit ENOSPC

    def watermark(self, total_bytes: int) -> int:
        return watermark_bytes(total_bytes, self._free_bytes_min, self._free_percent_min)

    def due(self, now_ms: int) -> bool:
        """Whether :meth:`check` should run now (once per ``check_interval_ms``)."""
        return now_ms >= self._due_ms

    @property
    def due_ms(self) -> int:
        return self._due_ms

    def check(self, now_ms: int) -> bool:
        """Measure the free space and update the state; True when it changed. A
        failed measurement keeps the state as it was."""
        self._due_ms = now_ms + self._check_interval_ms
        usage = self._measure()
        if usage is None:
            return False
        watermark = self.watermark(usage.total_bytes)
        if self.full:
            margin = math.ceil(watermark * RECOVER_MARGIN_FRACTION)
            full = usage.free_bytes < watermark + margin or (
                usage.free_bytes <= self._no_space_free_bytes
            )
        else:
            full = usage.free_bytes < watermark
        if not full:
            self._no_space_free_bytes = -1
        return self._set(full)

    def note_no_space(self, now_ms: int) -> bool:
        """A write failed for want of space: the node is full at once, whatever a
        check said; True when that is a change."""
        usage = self._measure()
        self._no_space_free_bytes = usage.free_bytes if usage is not None else 0
        return self._set(True)

    def may_reserve(self, length_bytes: int) -> bool:
        """Whether reserving ``length_bytes`` more keeps free space at or above the
        watermark (and the node is not full). Asks the filesystem each time: a log
        reserves in steps of at least 256 KiB, so this is rare."""
        if self.full:
            return False
        try:
            usage = self._usage()
        except OSError:
            return False
        return usage.free_bytes - length_bytes >= self.watermark(usage.total_bytes)

    def status(self) -> DiskStatus:
        usage = self.last
        if usage is None:
            return DiskStatus(0, 0, 0, self.full)
        return DiskStatus(
            usage.free_bytes, usage.total_bytes, self.watermark(usage.total_bytes), self.full
        )

    def _measure(self) -> DiskUsage | None:
        try:
            usage = self._usage()
        except OSError as error:
            self.error = f"{type(error).__name__}: {error}"
            return None
        self.error = None
        self.last = usage
        return usage

    def _set(self, full: bool) -> bool:
        changed = full is not self.full
        self.full = full
        return changed


def write_refusal(voters: Sequence[str], full: Collection[str]) -> tuple[str, ...] | None:
    """The full voters, when they leave the group no majority with space (a write
    could never commit, so it is refused at once); None when a majority has space."""
    full_voters = tuple(voter for voter in voters if voter in full)
    if not voters or len(voters) - len(full_voters) >= len(voters) // 2 + 1:
        return None
    return full_voters

"""Configuration of one partition log."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from laminar.errors import ConfigError
from laminar.records import DEFAULT_LIMITS, BatchLimits

_DAY_MS = 24 * 60 * 60 * 1000
# Index entries store positions as u32, so a segment may not outgrow 4 GiB.
SEGMENT_BYTES_CEILING = 2**32 - 1


class FsyncPolicy(StrEnum):
    """When appended bytes are forced to stable storage.

    ``always``: before ``append`` returns; concurrent appenders share one fsync
    (group commit). ``interval``: at most ``fsync_interval_ms`` after an append
    (checked on every append and by :meth:`SegmentLog.sync`, which the node calls on
    a timer). ``never``: left to the operating system (segment rolls still fsync).
    """

    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class LogConfig:
    """How one partition's log stores, rolls, indexes and forgets data."""

    segment_bytes_max: int = 1024 * 1024 * 1024
    """A segment is rolled before an append would make it larger than this. Bounds
    the unit of retention and of recovery work after a crash."""

    segment_age_ms_max: int = 7 * _DAY_MS
    """A non-empty segment older than this is rolled on the next append, so that
    age-based retention can delete data in a quiet partition."""

    retention_bytes: int | None = None
    """Delete the oldest sealed segments as long as the rest still holds at least
    this many bytes (Kafka's rule: the log may exceed it by up to one segment;
    ``None``: no size limit). The active segment is never deleted."""

    retention_ms: int | None = 7 * _DAY_MS
    """Delete sealed segments whose newest record is older than this
    (``None``: keep for ever)."""

    index_interval_bytes: int = 4096
    """At most this many log bytes between two sparse index entries: the bound on
    how far a read scans batch headers after the index lookup."""

    fsync_policy: FsyncPolicy = FsyncPolicy.ALWAYS
    """See :class:`FsyncPolicy`. ``always`` is what acks=all relies on."""

    fsync_interval_ms: int = 1000
    """The longest an append stays unsynced under the ``interval`` policy."""

    preallocate_bytes_max: int = 32 * 1024 * 1024
    """The active segment's disk blocks are reserved ahead of its appends
    (``fallocate`` with ``KEEP_SIZE``, where the filesystem supports it), by as much
    as the segment already holds, at least 256 KiB and at most this; the unused
    rest is released when the segment is sealed or the log closed. Appends into
    reserved blocks are faster (see :mod:`laminar.segment.fallocate`). 0 turns
    reservation off."""

    read_bytes_max: int = 64 * 1024 * 1024
    """The largest ``max_bytes`` a single read may ask for."""

    limits: BatchLimits = field(default_factory=lambda: DEFAULT_LIMITS)
    """Limits applied to every appended batch."""

    def __post_init__(self) -> None:
        if not 0 < self.segment_bytes_max <= SEGMENT_BYTES_CEILING:
            raise ConfigError(f"segment_bytes_max must be in (0, {SEGMENT_BYTES_CEILING}]")
        if self.segment_age_ms_max <= 0:
            raise ConfigError("segment_age_ms_max must be positive")
        if self.retention_bytes is not None and self.retention_bytes < 0:
            raise ConfigError("retention_bytes must be >= 0 or None")
        if self.retention_ms is not None and self.retention_ms < 0:
            raise ConfigError("retention_ms must be >= 0 or None")
        if self.index_interval_bytes <= 0:
            raise ConfigError("index_interval_bytes must be positive")
        if self.fsync_interval_ms <= 0:
            raise ConfigError("fsync_interval_ms must be positive")
        if self.preallocate_bytes_max < 0:
            raise ConfigError("preallocate_bytes_max must be >= 0")
        if self.read_bytes_max <= 0:
            raise ConfigError("read_bytes_max must be positive")
        if not isinstance(self.fsync_policy, FsyncPolicy):
            raise ConfigError(f"unknown fsync_policy {self.fsync_policy!r}")

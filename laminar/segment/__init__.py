"""The segmented, checksummed, crash-safe partition log.

:class:`SegmentLog` stores a partition replica's record batches on disk;
:class:`MemoryLog` holds them in memory for the simulator. Both implement
:class:`LogStorage`, the only way the replication layer reaches storage.
"""

from laminar.segment.config import FsyncPolicy, LogConfig
from laminar.segment.log import SegmentLog
from laminar.segment.memory import MemoryLog
from laminar.segment.storage import LogStorage

__all__ = ["FsyncPolicy", "LogConfig", "LogStorage", "MemoryLog", "SegmentLog"]

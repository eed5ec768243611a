"""Placement: which members hold each partition, computed identically everywhere.

Pure functions and immutable values, no I/O. :mod:`.rendezvous` defines the score
and the zone-aware pick for one partition (its docstring is the specification a
client in another language follows); :mod:`.table` keeps the assignment of many
partitions and updates it incrementally after a membership change.
"""

from laminar.placement.rendezvous import (
    KEY_SEPARATOR_BYTES,
    PlacementMember,
    partition_key,
    replicas,
    score,
    unit_interval,
)
from laminar.placement.table import AssignmentTable, PartitionMove, diff

__all__ = [
    "KEY_SEPARATOR_BYTES",
    "AssignmentTable",
    "PartitionMove",
    "PlacementMember",
    "diff",
    "partition_key",
    "replicas",
    "score",
    "unit_interval",
]

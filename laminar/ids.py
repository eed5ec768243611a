"""Identifiers shared by every layer, defined once.

``NodeId`` names a node for its whole life (chosen at its first start, kept in its
data directory); ``Term`` numbers a partition group's leadership periods;
``Offset`` is a record's position in a partition's log; ``TopicPartition`` names a
partition (the internal metadata partition is ``("__cluster", 0)``).
"""

from __future__ import annotations

from typing import NewType

NodeId = NewType("NodeId", str)
"""A node's stable identity, chosen at its first start and kept in its data dir."""

Term = NewType("Term", int)
"""A leadership period of one partition's consensus group; -1 means none."""

Offset = int
"""A record's position in a partition's log (increasing from 0; keyed compaction
leaves gaps between batches); an alias, not a NewType,
because offsets are computed with everywhere (sums, ranges, struct fields)."""

TopicPartition = tuple[str, int]
"""A partition: its topic's name and its index in the topic."""

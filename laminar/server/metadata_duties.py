"""What the leader of ``__cluster/0`` does besides replicating it, every groups round.

- **Create ``__groups``** (:func:`creates_groups_topic`): once its catalogue is
  complete (its own term committed, and applied up to its high watermark) and does
  not have the topic. Its spec says :data:`~laminar.server.groups.GROUPS_REPLICATION_MAX`
  replicas; the founding ones are as many as the cluster has now, at least one
  (:func:`groups_topic_founders`), and placement adds the rest as nodes join, as
  for ``__cluster/0``. Applying a creation is idempotent, so a second leader racing
  this one changes nothing.
- **Snapshot the catalogue** (:func:`snapshot_wanted`): when one is due by the rule
  of ``__groups`` (:func:`~laminar.groups.replay.snapshot_due`), the leader appends
  the snapshot's chunks (acks=all) and waits until it is applied here; a failure (a
  lost leadership) leaves a torn snapshot that readers ignore.

The decisions are functions of the catalogue and of ``committed_end``: the high
watermark of this node's replica of ``__cluster/0`` when its own term is committed
there (None otherwise), read by the node.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence

from laminar.errors import LaminarError
from laminar.groups.replay import snapshot_due
from laminar.logfields import fields
from laminar.placement import PlacementMember
from laminar.records import encode_batch
from laminar.replica.types import Acks
from laminar.server import rules
from laminar.server.api import PartitionHost
from laminar.server.groups import GROUPS_PARTITIONS, GROUPS_REPLICATION_MAX, GROUPS_TOPIC
from laminar.server.metadata import (
    METADATA_KEY,
    MetadataState,
    TopicSpec,
    create_topic_command,
    snapshot_commands,
)
from laminar.server.tasks import cancel_and_wait

_LOG = logging.getLogger(__name__)
SNAPSHOT_CHUNKS_PER_BATCH = 3
"""Snapshot chunks (256 KiB each) per appended batch: about the 1 MiB of a groups
append."""


def creates_groups_topic(metadata: MetadataState, committed_end: int | None) -> bool:
    """Whether this node creates ``__groups`` now (module docstring)."""
    if GROUPS_TOPIC in metadata.topics or committed_end is None:
        return False
    return metadata.applied_offset >= committed_end


def groups_topic_founders(
    members: Sequence[PlacementMember], full: Collection[str]
) -> list[tuple[str, ...]]:
    """The founding replicas of each ``__groups`` partition: as many as there are
    eligible members with disk space (at least one, at most the replication factor)."""
    eligible = sum(1 for member in members if member.eligible and member.node_id not in full)
    return rules.plan_topic(
        GROUPS_TOPIC,
        GROUPS_PARTITIONS,
        max(1, min(GROUPS_REPLICATION_MAX, eligible)),
        members,
        full,
    )


def snapshot_wanted(
    metadata: MetadataState, committed_end: int | None, snapshot_bytes_floor: int
) -> bool:
    """Whether this node writes a catalogue snapshot now (module docstring)."""
    if committed_end is None or metadata.seeking or metadata.applied_offset < committed_end:
        return False
    return snapshot_due(
        metadata.bytes_since_snapshot, metadata.last_snapshot_bytes, snapshot_bytes_floor
    )


class MetadataDuties:
    """The duties of the leader of ``__cluster/0`` (module docstring), run by the
    node's groups loop; at most one snapshot is being written at a time."""

    def __init__(
        self,
        node_id: str,
        host: PartitionHost,
        metadata: MetadataState,
        *,
        committed_end: Callable[[], int | None],
        placement_members: Callable[[], list[PlacementMember]],
        wait_metadata: Callable[[int, float], Awaitable[None]],
        snapshot_bytes_floor: Callable[[], int],
    ) -> None:
        """``snapshot_bytes_floor``: the host's current floor (read at each round)."""
        self.node_id = node_id
        self._host = host
        self._metadata = metadata
        self._committed_end = committed_end
        self._placement_members = placement_members
        self._wait_metadata = wait_metadata
        self._snapshot_bytes_floor = snapshot_bytes_floor
        self._snapshot: asyncio.Task[None] | None = None

    async def ensure_groups_topic(self, timeout_s: float) -> None:
        """Create ``__groups`` if this node should, and wait until it is applied."""
        if not creates_groups_topic(self._metadata, self._committed_end()):
            return
        founders = groups_topic_founders(self._placement_members(), self._host.full_nodes())
        spec = TopicSpec(GROUPS_TOPIC, GROUPS_PARTITIONS, GROUPS_REPLICATION_MAX)
        batch = create_topic_command(spec, founders, uuid.uuid4().hex)
        result = await self._host.produce(METADATA_KEY, batch, Acks.ALL, timeout_s)
        await self._wait_metadata(result.base_offset + 1, timeout_s)
        _LOG.info(
            "node %s: created %s", self.node_id, GROUPS_TOPIC, extra=fields(node_id=self.node_id)
        )

    def maybe_snapshot(self, timeout_s: float) -> None:
        """Start writing a catalogue snapshot if one is due and none is being written."""
        if self._snapshot is not None and not self._snapshot.done():
            return
        if not snapshot_wanted(self._metadata, self._committed_end(), self._snapshot_bytes_floor()):
            return
        self._snapshot = asyncio.get_running_loop().create_task(
            self._write_snapshot(timeout_s), name="metadata snapshot"
        )

    async def close(self) -> None:
        """Stop a snapshot being written (the node is stopping)."""
        snapshot, self._snapshot = self._snapshot, None
        await cancel_and_wait(snapshot)

    async def _write_snapshot(self, timeout_s: float) -> None:
        state = self._metadata
        as_of = state.applied_offset
        values = snapshot_commands(state, uuid.uuid4().hex)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        end = as_of
        try:
            for start in range(0, len(values), SNAPSHOT_CHUNKS_PER_BATCH):
                batch = encode_batch(values[start : start + SNAPSHOT_CHUNKS_PER_BATCH])
                remaining = max(0.0, deadline - loop.time())
                result = await self._host.produce(METADATA_KEY, batch, Acks.ALL, remaining)
                end = result.base_offset + min(SNAPSHOT_CHUNKS_PER_BATCH, len(values) - start)
            await self._wait_metadata(end, max(0.1, deadline - loop.time()))
        except (LaminarError, TimeoutError) as error:
            _LOG.info(
                "node %s: metadata snapshot as of %d abandoned: %s",
                self.node_id,
                as_of,
                error,
                extra=fields(node_id=self.node_id),
            )
            return
        _LOG.info(
            "node %s: metadata snapshot as of %d written (%d chunks)",
            self.node_id,
            as_of,
            len(values),
            extra=fields(node_id=self.node_id),
        )

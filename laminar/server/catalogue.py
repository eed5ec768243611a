"""Applying the catalogue to this node: its replicas follow the topics of ``__cluster/0``.

The metadata follower (:mod:`laminar.server.follower`) applies each command of the
metadata log to the catalogue (:class:`~laminar.server.metadata.MetadataState`) and
hands the changes to :class:`CatalogueApplier`, which makes this node's replicas
follow them, in metadata order:

- a topic created: the node founds the replicas it is a founder of
  (:func:`founding_groups`), off the loop in batches
  (:meth:`~laminar.server.host.ReplicaHost.open_founding`), then records the
  founded offset (:mod:`laminar.server.node_files`) so that a restart does not found
  them again;
- partitions added to a topic: the node founds the new ones it is a founder of,
  as for a created topic (the same founded offset guard);
- a topic altered: nothing here; the replan that follows moves replicas towards
  a new replication factor, and retention and compaction read the settings live
  (:func:`laminar.server.placement_keeper.settings_of`);
- a topic deleted: the node deletes its replicas of it;
- a node entering or leaving maintenance: the host learns the new set.

Creations (of topics and of partitions) and deletions run one after the other on
one chain of tasks, so that a topic deleted right after its creation is not
created after its deletion. After each set of changes the node replans
(placement follows the catalogue).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from laminar.ids import TopicPartition
from laminar.replica.types import GroupConfig, NodeId
from laminar.server.metadata import Change, MaintenanceChange, MetadataChange, MetadataState
from laminar.server.node_files import read_founded, write_founded
from laminar.server.tasks import cancel_and_wait

_LOG = logging.getLogger(__name__)


class CatalogueHost(Protocol):
    """The replica host as the applier uses it (``ReplicaHost`` is one)."""

    def set_maintenance(self, nodes: Iterable[str]) -> None: ...

    def reserve_founding(self, keys: Sequence[TopicPartition]) -> None: ...

    async def open_founding(self, groups: Sequence[tuple[TopicPartition, GroupConfig]]) -> None: ...

    def delete_replica(self, key: TopicPartition) -> None: ...


def founding_groups(node_id: str, change: Change) -> list[tuple[TopicPartition, GroupConfig]]:
    """The partitions a creation (of a topic, or of partitions) founds on
    ``node_id`` (:attr:`Change.founded_partitions`), each with its founding group
    (every founder a voter)."""
    topic = change.topic
    groups = []
    for partition in change.founded_partitions:
        founders = topic.founding_replicas[partition]
        if node_id in founders:
            config = GroupConfig(tuple(NodeId(n) for n in founders))
            groups.append(((topic.spec.name, partition), config))
    return groups


class CatalogueApplier:
    """Makes this node's replicas follow the catalogue's changes (module docstring)."""

    def __init__(
        self,
        node_id: str,
        data_dir: str,
        host: CatalogueHost,
        metadata: MetadataState,
        replan: Callable[[], None],
    ) -> None:
        self.node_id = node_id
        self._data_dir = data_dir
        self._host = host
        self._metadata = metadata
        self._replan = replan
        self.founded_offset = read_founded(data_dir)
        """Every creation below this metadata offset has been founded here."""
        self._chain: asyncio.Task[None] | None = None

    def on_changes(self, changes: list[MetadataChange]) -> None:
        """The follower applied ``changes`` to the catalogue: follow them."""
        for change in changes:
            if isinstance(change, MaintenanceChange):
                self._host.set_maintenance(self._metadata.maintenance)
            else:
                self.apply_change(change)
        self._replan()

    def apply_change(self, change: Change) -> None:
        """Create or delete this node's replicas of a topic, in metadata order.

        A creation the node applied before a restart (below its founded offset) is
        not founded again: the replicas that still exist were opened from disk, and
        one deleted since (moved away) must not come back as the term-1 leader of a
        group that has moved on. The same holds for partitions added to a topic.
        """
        topic = change.topic
        if change.kind in ("created", "partitions_added"):
            founded = change.founded_partitions
            _LOG.info(
                "topic %s %s (partitions %d..%d)",
                topic.spec.name,
                change.kind.replace("_", " "),
                founded.start,
                founded.stop - 1,
            )
            if change.offset < self.founded_offset:
                return
            groups = founding_groups(self.node_id, change)
            if groups:
                _LOG.info(
                    "founding %d replicas of topic %s (metadata offset %d)",
                    len(groups),
                    topic.spec.name,
                    change.offset,
                )
            self._host.reserve_founding([key for key, _ in groups])  # before the replan
            self._then(lambda: self._found(groups, change.offset))
        elif change.kind == "altered":
            assert change.previous is not None
            before, after = change.previous.spec.settings(), topic.spec.settings()
            _LOG.info(
                "topic %s altered: %s",
                topic.spec.name,
                " ".join(f"{k}={before[k]}->{v}" for k, v in after.items() if before[k] != v),
            )
        else:
            _LOG.info("topic %s deleted", topic.spec.name)
            keys = [(topic.spec.name, partition) for partition in range(topic.spec.partitions)]
            self._then(lambda: self._delete(keys))

    async def idle(self) -> None:
        """Wait until every change handed over so far has been carried out (tests)."""
        while self._chain is not None and not self._chain.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._chain)

    async def close(self) -> None:
        """Cancel the changes not carried out yet (the node is stopping)."""
        chain, self._chain = self._chain, None
        await cancel_and_wait(chain)

    def _then(self, step: Callable[[], Awaitable[None]]) -> None:
        """Run ``step`` once the changes before it are done (whether or not they failed)."""
        previous = self._chain

        async def run() -> None:
            if previous is not None:
                with contextlib.suppress(Exception):
                    await previous
            await step()

        self._chain = asyncio.get_running_loop().create_task(run())

    async def _found(self, groups: list[tuple[TopicPartition, GroupConfig]], offset: int) -> None:
        await self._host.open_founding(groups)
        self.founded_offset = max(self.founded_offset, offset + 1)
        await asyncio.to_thread(write_founded, self._data_dir, self.founded_offset)

    async def _delete(self, keys: list[TopicPartition]) -> None:
        for key in keys:
            self._host.delete_replica(key)

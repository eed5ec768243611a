"""Applying the catalogue to a node's replicas (laminar.server.catalogue) and the
decisions of the metadata leader's duties (laminar.server.metadata_duties), with a
fake host: no process, no replica."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from laminar.ids import NodeId, TopicPartition
from laminar.placement import PlacementMember
from laminar.replica.types import GroupConfig
from laminar.segment.layout import FOUNDED_FILE
from laminar.server.catalogue import CatalogueApplier, founding_groups
from laminar.server.groups import GROUPS_PARTITIONS, GROUPS_REPLICATION_MAX, GROUPS_TOPIC
from laminar.server.metadata import (
    Change,
    MaintenanceChange,
    MetadataState,
    TopicSpec,
    TopicState,
)
from laminar.server.metadata_duties import (
    creates_groups_topic,
    groups_topic_founders,
    snapshot_wanted,
)
from laminar.server.node_files import read_founded


@dataclass
class FakeHost:
    """Records what the applier asks of the replica host, in order."""

    calls: list[tuple[str, object]] = field(default_factory=list)
    founding: asyncio.Event | None = None
    """When set: open_founding waits for it (a slow founding)."""

    def set_maintenance(self, nodes: Iterable[str]) -> None:
        self.calls.append(("maintenance", sorted(nodes)))

    def reserve_founding(self, keys: Sequence[TopicPartition]) -> None:
        self.calls.append(("reserve", list(keys)))

    async def open_founding(self, groups: Sequence[tuple[TopicPartition, GroupConfig]]) -> None:
        if self.founding is not None:
            await self.founding.wait()
        self.calls.append(("found", [key for key, _ in groups]))

    def delete_replica(self, key: TopicPartition) -> None:
        self.calls.append(("delete", key))


def created(name: str, founders: tuple[tuple[str, ...], ...], offset: int) -> Change:
    spec = TopicSpec(name, len(founders), len(founders[0]))
    return Change("created", TopicState(spec, founders, "id", offset), offset)


def deleted(change: Change, offset: int) -> Change:
    return Change("deleted", change.topic, offset)


def applier(tmp_path: Path, host: FakeHost) -> tuple[CatalogueApplier, list[int]]:
    replans: list[int] = []
    state = MetadataState()
    state.maintenance["n3"] = 7
    return (
        CatalogueApplier("n1", str(tmp_path), host, state, lambda: replans.append(1)),
        replans,
    )


def test_founding_groups_are_the_partitions_this_node_founds() -> None:
    change = created("t", (("n1", "n2"), ("n2", "n3"), ("n3", "n1")), 0)
    assert founding_groups("n1", change) == [
        (("t", 0), GroupConfig((NodeId("n1"), NodeId("n2")))),
        (("t", 2), GroupConfig((NodeId("n3"), NodeId("n1")))),
    ]
    assert founding_groups("n4", change) == []


def test_a_creation_is_founded_and_recorded_then_a_restart_does_not_found_it_again(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        host = FakeHost()
        catalogue, replans = applier(tmp_path, host)
        catalogue.on_changes([created("t", (("n1", "n2"), ("n2", "n3")), 5)])
        assert host.calls == [("reserve", [("t", 0)])]  # at once, before the replan
        assert replans == [1]
        await catalogue.idle()
        assert host.calls[1:] == [("found", [("t", 0)])]
        assert read_founded(str(tmp_path)) == 6 == catalogue.founded_offset
        assert (tmp_path / FOUNDED_FILE).read_text() == "6"

        again = FakeHost()
        restarted, _ = applier(tmp_path, again)
        restarted.on_changes([created("t", (("n1", "n2"), ("n2", "n3")), 5)])
        await restarted.idle()
        assert again.calls == []
        restarted.on_changes([created("u", (("n1",),), 6)])  # at the founded offset: new
        await restarted.idle()
        assert again.calls == [("reserve", [("u", 0)]), ("found", [("u", 0)])]

    asyncio.run(main())


def test_a_deletion_waits_for_the_creation_before_it(tmp_path: Path) -> None:
    async def main() -> None:
        host = FakeHost(founding=asyncio.Event())
        catalogue, _ = applier(tmp_path, host)
        creation = created("t", (("n1",), ("n1",)), 0)
        catalogue.on_changes([creation, deleted(creation, 1)])
        await asyncio.sleep(0)
        assert host.calls == [("reserve", [("t", 0), ("t", 1)])]  # still founding
        assert host.founding is not None
        host.founding.set()
        await catalogue.idle()
        assert host.calls[1:] == [
            ("found", [("t", 0), ("t", 1)]),
            ("delete", ("t", 0)),
            ("delete", ("t", 1)),
        ]

    asyncio.run(main())


def test_maintenance_changes_reach_the_host_and_close_drops_what_is_pending(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        host = FakeHost(founding=asyncio.Event())
        catalogue, replans = applier(tmp_path, host)
        catalogue.on_changes([MaintenanceChange("n3", True, 0), created("t", (("n1",),), 1)])
        assert host.calls == [("maintenance", ["n3"]), ("reserve", [("t", 0)])]
        assert replans == [1]
        await catalogue.close()
        await catalogue.idle()
        assert host.calls == [("maintenance", ["n3"]), ("reserve", [("t", 0)])]
        assert catalogue.founded_offset == 0

    asyncio.run(main())


def grown(change: Change, founders: tuple[tuple[str, ...], ...], offset: int) -> Change:
    """Partitions with ``founders`` added to the topic of ``change`` at ``offset``."""
    before = change.topic
    topic = dataclasses.replace(
        before,
        spec=dataclasses.replace(before.spec, partitions=before.spec.partitions + len(founders)),
        founding_replicas=before.founding_replicas + founders,
        additions=((offset, before.spec.partitions),),
    )
    return Change("partitions_added", topic, offset, previous=before)


def test_added_partitions_are_founded_alone_once_and_a_delete_after_them_wins(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        host = FakeHost(founding=asyncio.Event())
        catalogue, _ = applier(tmp_path, host)
        creation = created("t", (("n1", "n2"), ("n2", "n3")), 3)
        catalogue.on_changes([creation])
        assert host.founding is not None
        host.founding.set()
        await catalogue.idle()
        host.calls.clear()
        added = grown(creation, (("n3", "n1"), ("n2", "n3"), ("n1", "n2")), 5)
        assert founding_groups("n1", added) == [
            (("t", 2), GroupConfig((NodeId("n3"), NodeId("n1")))),
            (("t", 4), GroupConfig((NodeId("n1"), NodeId("n2")))),
        ]
        host.founding.clear()
        catalogue.on_changes([added, deleted(added, 6)])
        await asyncio.sleep(0)
        assert host.calls == [("reserve", [("t", 2), ("t", 4)])]  # only the new ones
        host.founding.set()
        await catalogue.idle()
        assert host.calls[1:] == [("found", [("t", 2), ("t", 4)])] + [
            ("delete", ("t", partition)) for partition in range(5)
        ]
        assert read_founded(str(tmp_path)) == 6

        again = FakeHost()
        restarted, _ = applier(tmp_path, again)
        restarted.on_changes([creation, added])  # replayed after a restart
        await restarted.idle()
        assert again.calls == []

    asyncio.run(main())


def test_an_altered_topic_is_only_replanned(tmp_path: Path) -> None:
    async def main() -> None:
        host = FakeHost()
        catalogue, replans = applier(tmp_path, host)
        creation = created("t", (("n1",),), 0)
        spec = dataclasses.replace(creation.topic.spec, replication_factor=3)
        altered = Change(
            "altered", dataclasses.replace(creation.topic, spec=spec), 1, creation.topic
        )
        catalogue.on_changes([altered])
        await catalogue.idle()
        assert host.calls == [] and replans == [1]

    asyncio.run(main())


def placed(node_id: str) -> PlacementMember:
    return PlacementMember(NodeId(node_id))


def test_groups_topic_is_created_by_a_leader_with_a_complete_catalogue() -> None:
    state = MetadataState()
    state.applied_offset = 10
    assert creates_groups_topic(state, 10)
    assert not creates_groups_topic(state, None)  # not the leader, or its term uncommitted
    assert not creates_groups_topic(state, 11)  # not applied up to its high watermark
    state.topics[GROUPS_TOPIC] = TopicState(TopicSpec(GROUPS_TOPIC, 1, 1), (), "id", 0)
    assert not creates_groups_topic(state, 10)  # there already


def test_groups_topic_founders_are_the_eligible_members_with_space() -> None:
    founders = groups_topic_founders([placed("n1"), placed("n2")], {"n2"})
    assert len(founders) == GROUPS_PARTITIONS
    assert all(group == ("n1",) for group in founders)
    three = groups_topic_founders([placed("n1"), placed("n2"), placed("n3")], ())
    assert {len(group) for group in three} == {min(3, GROUPS_REPLICATION_MAX)}


def test_a_snapshot_is_wanted_when_due_on_a_leader_with_a_complete_catalogue() -> None:
    state = MetadataState()
    state.applied_offset = 10
    state.bytes_since_snapshot = 100
    assert snapshot_wanted(state, 10, snapshot_bytes_floor=50)
    assert not snapshot_wanted(state, 10, snapshot_bytes_floor=500)  # not due
    assert not snapshot_wanted(state, None, snapshot_bytes_floor=50)
    assert not snapshot_wanted(state, 11, snapshot_bytes_floor=50)

"""Internal logs stay bounded by their state, with a real node process (issue 27).

One node, configured with small internal segments and a small snapshot floor (a
``--config`` file), takes many commits of one group and many topic creations and
deletions. Its ``__groups`` partition and ``__cluster/0`` lose their first
segments on disk (the prefix below the latest snapshot), and the node, restarted,
rebuilds both from a snapshot plus the tail: the committed offsets and the
catalogue are intact, and deleted topics stay deleted.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from laminar.errors import RetriableError
from laminar.grpc_errors import error_from_rpc
from laminar.partitioning import key_partition
from laminar.testing.processes import NodeProcess, ProcessCluster, wait_for
from laminar.v1 import laminar_pb2 as pb

GROUP = "bounded"
TOPIC = "events"
PARTITIONS = 4
COMMIT_ROUNDS = 150
TOPIC_PAIRS = 40
WAIT_S = 30.0
CONFIG = """
[host]
snapshot_bytes_floor = 4096
internal_segment_bytes_max = 4096
"""


def segments(node: NodeProcess, topic: str, partition: int) -> list[Path]:
    directory = node.data_dir / "partitions" / topic / str(partition)
    return sorted(directory.glob("*.log"))


def first_base(node: NodeProcess, topic: str, partition: int) -> int:
    found = segments(node, topic, partition)
    return int(found[0].stem) if found else 0


def log_bytes(node: NodeProcess, topic: str, partition: int) -> int:
    return sum(path.stat().st_size for path in segments(node, topic, partition))


def retry(call: object, request: object) -> object:
    """A call retried on retriable gRPC errors (an election, a leader not ready)."""
    result: list[object] = []

    def once() -> bool:
        try:
            result.append(call(request, timeout=5))  # type: ignore[operator]
        except grpc.RpcError as rpc_error:
            if isinstance(error_from_rpc(rpc_error), RetriableError):
                return False
            raise
        return True

    wait_for(once, WAIT_S, f"{request.__class__.__name__} to succeed")
    return result[-1]


def test_internal_logs_are_bounded_and_a_restart_rebuilds_from_snapshots(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text(CONFIG)
    with ProcessCluster(tmp_path) as cluster:
        node = cluster.add_node(bootstrap=True, extra_args=["--config", str(config)])
        cluster.wait_ready(node)
        stub = cluster.stub(node)
        groups_partition = key_partition(GROUP.encode(), 8)
        retry(
            stub.CreateTopic,
            pb.CreateTopicRequest(
                name=TOPIC,
                config=pb.TopicConfig(
                    partitions=PARTITIONS, replication_factor=1, retention_bytes=-1, retention_ms=-1
                ),
            ),
        )
        # One member owns every partition and commits many times.
        answer = retry(stub.GroupHeartbeat, _heartbeat("", 0))
        member_id, epoch = answer.member_id, answer.member_epoch  # type: ignore[attr-defined]
        owned: dict[int, int] = {}

        def owns_all() -> bool:
            reply = retry(stub.GroupHeartbeat, _heartbeat(member_id, epoch))
            owned.update({p.partition: p.assignment_epoch for p in reply.owned})  # type: ignore[attr-defined]
            return len(owned) == PARTITIONS

        wait_for(owns_all, WAIT_S, "the member to own every partition")
        for round_ in range(1, COMMIT_ROUNDS + 1):
            request = pb.CommitOffsetsRequest(
                group=GROUP,
                member_id=member_id,
                member_epoch=epoch,
                offsets=[
                    pb.OffsetCommit(
                        topic=TOPIC, partition=p, next_offset=round_, assignment_epoch=e
                    )
                    for p, e in owned.items()
                ],
            )
            result = retry(stub.CommitOffsets, request)
            assert all(not r.HasField("error") for r in result.partitions)  # type: ignore[attr-defined]
        # Topics come and go: every other one is deleted.
        for n in range(TOPIC_PAIRS):
            spec = pb.TopicConfig(
                partitions=1, replication_factor=1, retention_bytes=-1, retention_ms=-1
            )
            retry(stub.CreateTopic, pb.CreateTopicRequest(name=f"churn-{n}", config=spec))
            if n % 2:
                retry(stub.DeleteTopic, pb.DeleteTopicRequest(name=f"churn-{n}"))
        kept = {f"churn-{n}" for n in range(0, TOPIC_PAIRS, 2)} | {TOPIC}

        # The prefixes are gone on disk; what is left is a few segments.
        wait_for(
            lambda: (
                first_base(node, "__groups", groups_partition) > 0
                and first_base(node, "__cluster", 0) > 0
            ),
            WAIT_S,
            "the first segments of __groups and __cluster/0 to be deleted",
        )
        groups_bytes = log_bytes(node, "__groups", groups_partition)
        assert groups_bytes < 64 * 1024, groups_bytes  # ~150 KB written
        assert log_bytes(node, "__cluster", 0) < 64 * 1024

        # Restarted, the node rebuilds both from a snapshot plus the tail.
        assert cluster.terminate(node) == 0
        cluster.start(node)
        cluster.wait_ready(node)
        stub = cluster.stub(node)

        def offsets() -> dict[int, int]:
            fetched = retry(stub.FetchOffsets, pb.FetchOffsetsRequest(group=GROUP))
            return {o.partition: o.next_offset for o in fetched.offsets}  # type: ignore[attr-defined]

        expected = dict.fromkeys(range(PARTITIONS), COMMIT_ROUNDS)
        wait_for(lambda: offsets() == expected, WAIT_S, "the commits after the restart")
        # The catalogue is rebuilt by the metadata follower, beside the groups.
        wait_for(lambda: {t.name for t in _topics(stub)} == kept, WAIT_S, "the catalogue")
        # Deleted ones stay deleted, on disk too: the catalogue answers as soon as it
        # applied a deletion, and the replica's directory goes right after.
        deleted = [node.data_dir / "partitions" / f"churn-{n}" for n in range(1, TOPIC_PAIRS, 2)]
        wait_for(
            lambda: not any(path.exists() for path in deleted),
            WAIT_S,
            "the deleted topics' directories to be removed",
        )
        log = node.log_path.read_text()
        assert "restored group state from the snapshot" in log
        assert "metadata restored from the snapshot" in log


def _heartbeat(member_id: str, epoch: int) -> pb.GroupHeartbeatRequest:
    return pb.GroupHeartbeatRequest(
        group=GROUP,
        member_id=member_id,
        member_epoch=epoch,
        topics=[TOPIC],
        session_timeout_ms=60_000,
        rebalance_timeout_ms=60_000,
    )


def _topics(stub: object) -> list[pb.TopicInfo]:
    response = stub.ListTopics(pb.ListTopicsRequest(), timeout=5)  # type: ignore[attr-defined]
    return list(response.topics)

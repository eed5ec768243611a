"""The node's log formats (``--log-format text | json``) and the replica core's
partition label (issue 32, part 2)."""

from __future__ import annotations

import io
import json
import logging
import random
import re
from pathlib import Path

import pytest

from laminar.logfields import fields
from laminar.replica.config import ReplicaConfig
from laminar.replica.core import ReplicaCore, StorageDamage
from laminar.replica.types import GroupConfig, NodeId
from laminar.segment.memory import MemoryLog
from laminar.server.logs import configure
from laminar.testing.processes import ProcessCluster, wait_for


@pytest.fixture
def restore_root_logger() -> object:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield None
    root.handlers[:] = handlers
    root.setLevel(level)


def _json_lines(path: Path) -> list[dict[str, object]]:
    """The node's log lines as objects; the one line its stdout writes ("node ...
    ready on ...", the harness merges the two streams) is left out."""
    objects = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.fullmatch(r"node \S+ ready on \S+", line):
            continue
        parsed = json.loads(line)  # every other line is one JSON object
        assert isinstance(parsed, dict)
        objects.append(parsed)
    return objects


def test_a_node_started_with_log_format_json_writes_objects_with_context(
    tmp_path: Path,
) -> None:
    with ProcessCluster(tmp_path) as cluster:
        node = cluster.add_node(bootstrap=True, extra_args=["--log-format", "json"])
        cluster.wait_ready(node)

        def leader_line() -> dict[str, object] | None:
            for line in _json_lines(node.log_path):
                if line.get("topic") == "__cluster" and "LEADER" in str(line["message"]):
                    return line
            return None

        wait_for(leader_line, 30, "the metadata replica's leader line")
    lines = _json_lines(node.log_path)
    assert len(lines) >= 5
    for line in lines:
        assert line["node_id"] == "node0", line
        assert {"time", "level", "logger", "message"} <= line.keys(), line
    became = leader_line()
    assert became is not None
    assert became["partition"] == 0
    assert became["term"] == 1
    assert became["logger"] == "laminar.server.host"
    assert became["message"].startswith("replica __cluster/0: RoleChanged(")  # type: ignore[union-attr]


def test_the_text_format_is_as_before_and_leaves_the_fields_out(
    restore_root_logger: object,
) -> None:
    stream = io.StringIO()
    node_filter = configure("text", "info", stream, node_id="n7")
    logging.getLogger("laminar.server.host").info(
        "replica %s/%d: %s", "orders", 3, "became leader", extra=fields(("orders", 3), term=4)
    )
    line = stream.getvalue()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO laminar\.server\.host: "
        r"replica orders/3: became leader\n",
        line,
    ), line
    assert node_filter.node_id == "n7"


def test_json_lines_carry_the_node_id_the_filter_learns_and_a_call_gives(
    restore_root_logger: object,
) -> None:
    stream = io.StringIO()
    node_filter = configure("json", "info", stream)
    log = logging.getLogger("laminar.test")
    log.info("before the id is known")
    node_filter.node_id = "n1"
    log.warning("peer link closed", extra=fields(peer="n2"))
    log.info("another node's line", extra=fields(node_id="n3"))
    first, second, third = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["node_id"] is None
    assert second == {
        "time": second["time"],
        "level": "WARNING",
        "logger": "laminar.test",
        "message": "peer link closed",
        "peer": "n2",
        "node_id": "n1",
    }
    assert third["node_id"] == "n3"


def test_the_replica_core_names_its_partition_in_every_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = NodeId("a"), NodeId("b")
    caplog.set_level(logging.INFO, logger="laminar.replica.core")
    core = ReplicaCore(
        a,
        MemoryLog(),
        ReplicaConfig.simulation(),
        now_ms=0,
        rng=random.Random(1),
        initial=GroupConfig((a, b)),
        damage=StorageDamage(lost_entries=True),
        name="orders/3",
    )
    assert core.accept_data_loss()
    records = [r for r in caplog.records if r.name == "laminar.replica.core"]
    assert [r.getMessage().split(":")[0] for r in records] == ["a orders/3", "a orders/3"]
    assert "damaged storage" in records[0].getMessage()
    assert "accepting data loss" in records[1].getMessage()
    for record in records:
        assert (record.node_id, record.topic, record.partition) == ("a", "orders", 3)  # type: ignore[attr-defined]
        assert record.term == core.term  # type: ignore[attr-defined]

"""Gossip encryption on real node processes (issue 31): a key rotated across five
nodes and a live switch from plain to encrypted gossip on three, both through
``laminar cluster keyring`` and without a restart, while a watcher polls every
node's view and fails the test if any member is ever declared dead."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from laminar.cli import main as laminar
from laminar.membership.codec import Codec
from laminar.membership.crypto import EncryptionConfig, Keyring
from laminar.membership.keyring import KeyringState, format_key, load_keyring, save_keyring
from laminar.membership.messages import Ping
from laminar.testing.processes import NodeProcess, ProcessCluster, free_port, wait_for
from laminar.v1 import laminar_pb2 as pb
from tests.server.test_cluster import stopped_after

CLUSTER_KEY = "keyring-test-secret"
KEY_OLD = bytes(range(32))
KEY_NEW = bytes(range(100, 132))
KEY_SWITCH = bytes(range(50, 82))


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    with stopped_after(request, ProcessCluster(tmp_path / "cluster", preset="local")) as cluster:
        yield cluster


class DeathWatch:
    """Polls every node's Metadata until stopped; remembers any member seen dead or left."""

    def __init__(self, cluster: ProcessCluster) -> None:
        self._cluster = cluster
        self._stop = threading.Event()
        self.gone: list[tuple[str, str, str]] = []
        self.polls = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DeathWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            for node in self._cluster.nodes:
                try:
                    answer = self._cluster.stub(node).Metadata(pb.MetadataRequest(), timeout=2)
                except grpc.RpcError:
                    continue
                for member in answer.members:
                    if member.state in ("dead", "left"):
                        self.gone.append((f"node{node.index}", member.node_id, member.state))
                self.polls += 1
            self._stop.wait(0.1)


def start_cluster(cluster: ProcessCluster, count: int, keyring: KeyringState | None) -> None:
    for index in range(count):
        if keyring is not None:
            save_keyring(str(cluster.root / f"node{index}" / "keyring.json"), keyring)
        node = cluster.add_node(bootstrap=index == 0, extra_args=["--cluster-key", CLUSTER_KEY])
        cluster.wait_ready(node)
    wait_for(cluster.all_see_each_other, 60, f"{count} nodes to see each other alive")


def keyring_cli(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str], *args: str
) -> list[str]:
    bootstrap = ",".join(node.grpc for node in cluster.nodes)
    code = laminar(["--bootstrap", bootstrap, "cluster", "keyring", *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return out.splitlines()


def keyrings(cluster: ProcessCluster) -> list[pb.GossipKeyringResponse]:
    return [
        cluster.stub(node).GossipKeyring(pb.GossipKeyringRequest(), timeout=5)
        for node in cluster.nodes
    ]


def gossip_flows(cluster: ProcessCluster, capsys: pytest.CaptureFixture[str], weight: int) -> None:
    """A change gossiped by node1 reaches every node (so gossip gets through)."""
    bootstrap = cluster.nodes[0].grpc
    assert laminar(["--bootstrap", bootstrap, "cluster", "set-weight", "node1", str(weight)]) == 0
    capsys.readouterr()

    def everyone_sees_it() -> bool:
        for node in cluster.nodes:
            answer = cluster.stub(node).Metadata(pb.MetadataRequest(), timeout=2)
            member = next(m for m in answer.members if m.node_id == "node1")
            if member.weight != weight:
                return False
        return True

    wait_for(everyone_sees_it, 30, f"every node to see node1's weight {weight}")


def test_key_rotated_across_five_nodes_without_restart_or_death(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    start_cluster(cluster, 5, KeyringState((KEY_OLD,)))
    with DeathWatch(cluster) as watch:
        lines = keyring_cli(cluster, capsys, "install", format_key(KEY_NEW))
        assert len(lines) == 5 and all("2 key(s)" in line for line in lines), lines
        gossip_flows(cluster, capsys, 2)
        keyring_cli(cluster, capsys, "use", format_key(KEY_NEW))
        assert all(k.keys[0] == KEY_NEW for k in keyrings(cluster))
        gossip_flows(cluster, capsys, 3)
        keyring_cli(cluster, capsys, "remove", format_key(KEY_OLD))
        gossip_flows(cluster, capsys, 4)  # through the new key alone
        listing = keyring_cli(cluster, capsys, "list")
        # The last poll round must see the cluster whole too.
        polls = watch.polls
        wait_for(lambda: watch.polls >= polls + 10, 30, "more polls of every node")
    assert watch.gone == []
    assert listing[-2].split() == ["KEY", "HELD", "BY", "PRIMARY", "ON"]
    assert listing[-1].split() == [format_key(KEY_NEW), "5/5", "5/5"]
    for node, answer in zip(cluster.nodes, keyrings(cluster), strict=True):
        assert list(answer.keys) == [KEY_NEW]
        assert answer.encrypt_verify_incoming and answer.encrypt_verify_outgoing
        assert answer.counters.get("dropped_plain", 0) == 0
        saved = load_keyring(str(node.data_dir / "keyring.json"))
        assert saved is not None and saved.keys == (KEY_NEW,)
    with pytest.raises(grpc.RpcError) as refused:
        cluster.stub(cluster.nodes[0]).GossipKeyring(
            pb.GossipKeyringRequest(action=pb.KEYRING_REMOVE, key=KEY_NEW), timeout=5
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "primary" in str(refused.value.details())
    # The running membership dropped the old key: a packet under it is refused.
    before = counter(cluster, cluster.nodes[2], "dropped_unknown_key")
    send_ping(cluster.nodes[2], "node2", KEY_OLD)
    wait_for(
        lambda: counter(cluster, cluster.nodes[2], "dropped_unknown_key") > before,
        10,
        "node2 to refuse a packet under the removed key",
    )


def send_ping(node: NodeProcess, target_id: str, key: bytes | None = None) -> None:
    """A ping under the right cluster key, plain or sealed with ``key``."""
    codec = Codec(CLUSTER_KEY.encode(), metadata_bytes_max=512)
    frame = codec.seal([codec.encode(Ping(1, target_id, "intruder", "127.0.0.1:9"))])
    if key is not None:
        sealer = Keyring(KeyringState((key,)), EncryptionConfig(), os.urandom)
        frame = sealer.seal(frame, time.time_ns() // 1_000_000)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(frame, (node.host, int(node.gossip.rsplit(":", 1)[1])))


def test_live_switch_from_plain_to_encrypted_gossip(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    start_cluster(cluster, 3, None)
    assert all(not k.keys and not k.encrypt_verify_outgoing for k in keyrings(cluster))
    with DeathWatch(cluster) as watch:
        keyring_cli(cluster, capsys, "install", format_key(KEY_SWITCH))
        gossip_flows(cluster, capsys, 2)  # still plain: the switches are off
        keyring_cli(cluster, capsys, "verify", "--outgoing", "on")
        gossip_flows(cluster, capsys, 3)
        lines = keyring_cli(cluster, capsys, "verify", "--incoming", "on")
        assert all("verify incoming on, outgoing on" in line for line in lines), lines
        gossip_flows(cluster, capsys, 4)
    assert watch.gone == []
    first = cluster.nodes[0]
    before = keyrings(cluster)[0].counters.get("dropped_plain", 0)
    send_ping(first, "node0")  # right cluster key, but plain: refused now
    wait_for(
        lambda: counter(cluster, first, "dropped_plain") > before,
        10,
        "node0 to refuse a plain gossip packet",
    )


def counter(cluster: ProcessCluster, node: NodeProcess, name: str) -> int:
    answer = cluster.stub(node).GossipKeyring(pb.GossipKeyringRequest(), timeout=5)
    return int(answer.counters.get(name, 0))


def test_default_cluster_key_refused_once_encryption_is_on(tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    save_keyring(str(data_dir / "keyring.json"), KeyringState((KEY_OLD,)))
    host = "127.0.0.1"
    ports = [free_port(host) for _ in range(3)]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "laminar.server",
            "node",
            "start",
            "--data-dir",
            str(data_dir),
            "--bootstrap",
            "--preset",
            "local",
            "--gossip",
            f"{host}:{ports[0]}",
            "--grpc",
            f"{host}:{ports[1]}",
            "--peer",
            f"{host}:{ports[2]}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("laminar node:")]
    assert errors == [
        f"laminar node: gossip encryption is on (keyring {data_dir}/keyring.json holds 1 "
        "key(s)) but cluster_key is the default 'laminar': set cluster_key (the same secret "
        "on every node) or remove the keyring file"
    ]
    assert sorted(p.name for p in data_dir.iterdir()) == ["keyring.json"]  # nothing saved

"""Multi-host runs: every node on a "host" of its own, on a private bridge.

Theory of operation. A run needs root and happens in two processes:

* the *outer* side (the pytest test) builds a :class:`HostNetwork`: one network
  namespace of its own holding a bridge, and one namespace per host (each node and
  the client) joined to the bridge by a veth pair, with an address of its own on
  ``10.77.0.0/24``. Every link is created inside those namespaces: nothing touches
  the machine's real network. It writes a private hosts file naming the nodes,
  runs ``python -m laminar.testing.multihost`` in the client's namespace, and
  afterwards kills whatever is left in every namespace and deletes them all.
* the *inner* side (:func:`main`, refusing to run outside the client's namespace)
  starts each node in its host's namespace, listening on ``0.0.0.0`` and
  advertising its host's name (``n0.laminar.test``; node 1 advertises its IP
  address instead), then plays the scenario below and writes a JSON report.

Every process of a run (the nodes and the client) sees the private hosts file as
``/etc/hosts``: ``ip netns exec`` gives each command a mount namespace of its own
(its mounts do not propagate back), in which the command bind-mounts the file
first. The file is rewritten in place, so every process sees a change at once.

Scenario: three nodes, a topic of three partitions with three replicas each; a
client produces keyed records (``acks=all``) through every node and reads every
partition back from every node. Then node 2 stops, its host gets a new address
and the hosts file says so (the same name, a new IP: a pod restart), records are
written meanwhile, and it starts again; then node 1 stops, gets a new address and
comes back advertising it (the same node id, a new advertised address). After each,
the node must be alive in every member's view at its advertised address, every
replica in sync, and every acknowledged record readable from every node.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from laminar_client import Client, Producer

from laminar.address import GRPC_RESOLVE_INTERVAL_MS
from laminar.testing.chaos import NetworkNamespace, in_network_namespace, read_replica
from laminar.testing.processes import wait_for
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc

SUBNET_PREFIX = "10.77.0."
DOMAIN = "laminar.test"
GOSSIP_PORT = 7000
GRPC_PORT = 7100
PEER_PORT = 7200
TOPIC = "multihost"
PARTITIONS = 3
NODES = 3
RECORDS_PER_ROUND = 300
SETTLE_TIMEOUT_S = 60.0


def multihost_unsupported_reason() -> str | None:
    """Why this machine cannot run multi-host tests, or None when it can."""
    if os.geteuid() != 0:
        return "multi-host tests need root (network namespaces, veth pairs, a bridge)"
    if subprocess.run(["ip", "-V"], capture_output=True, check=False).returncode != 0:
        return "multi-host tests need ip (apt-get install iproute2)"
    return None


def host_address(index: int) -> str:
    """The first address of host ``index`` (nodes 0..2, the client ``NODES``)."""
    return f"{SUBNET_PREFIX}{10 + index}"


def moved_address(index: int) -> str:
    """The address host ``index`` gets when it moves."""
    return f"{SUBNET_PREFIX}{20 + index}"


def host_name(index: int) -> str:
    return f"n{index}.{DOMAIN}"


def hosts_text(addresses: dict[int, str]) -> str:
    lines = ["127.0.0.1 localhost", "::1 localhost"]
    lines += [f"{address} {host_name(index)}" for index, address in sorted(addresses.items())]
    return "\n".join(lines) + "\n"


def write_in_place(path: Path, text: str) -> None:
    """Rewrite ``path`` keeping its inode: a bind mount of it shows the new text."""
    with open(path, "r+", encoding="utf-8") as file:
        file.truncate(0)
        file.write(text)


class HostNetwork:
    """The outer namespace with a bridge, and one namespace per host on it.

    Use as a context manager; leaving it kills every process left in any of the
    namespaces and deletes them (the bridge and veth ends go with them)."""

    def __init__(self, prefix: str, hosts: int) -> None:
        self.outer = NetworkNamespace(prefix)
        self.hosts = [NetworkNamespace(f"{prefix}-h{index}") for index in range(hosts)]

    def __enter__(self) -> HostNetwork:
        self.outer.__enter__()
        try:
            self.outer.run(["ip", "link", "add", "br0", "type", "bridge"])
            self.outer.run(["ip", "link", "set", "br0", "up"])
            for index, host in enumerate(self.hosts):
                host.__enter__()
                end = f"veth{index}"
                veth = ["type", "veth", "peer", "name", "eth0", "netns", host.name]
                self.outer.run(["ip", "link", "add", end, *veth])
                self.outer.run(["ip", "link", "set", end, "master", "br0", "up"])
                host.run(["ip", "addr", "add", f"{host_address(index)}/24", "dev", "eth0"])
                host.run(["ip", "link", "set", "eth0", "up"])
        except BaseException:
            self.delete()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def delete(self) -> None:
        try:
            for host in self.hosts:
                host.delete()
        finally:
            self.outer.delete()


# --------------------------------------------------------------------------- inner side


@dataclass
class HostedNode:
    index: int
    namespace: str
    data_dir: Path
    log_path: Path
    advertise_host: str
    process: subprocess.Popen[bytes] | None = None

    def address(self, port: int) -> str:
        return f"{self.advertise_host}:{port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class MultiHostRun:
    def __init__(self, root: Path, prefix: str, hosts_file: Path) -> None:
        self.root = root
        self.prefix = prefix
        self.hosts_file = hosts_file
        self.addresses = {index: host_address(index) for index in range(NODES + 1)}
        self.nodes = [
            HostedNode(
                index,
                f"{prefix}-h{index}",
                root / f"node{index}",
                root / f"node{index}.log",
                host_address(index) if index == 1 else host_name(index),
            )
            for index in range(NODES)
        ]
        self.acked: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
        self.report: dict[str, object] = {}
        self._channels: dict[str, grpc.Channel] = {}

    def say(self, text: str) -> None:
        print(f"multihost: {text}", flush=True)

    # ------------------------------------------------------------------ processes

    def start(self, node: HostedNode, *, bootstrap: bool = False) -> None:
        assert not node.running
        node.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            "ip",
            "netns",
            "exec",
            node.namespace,
            "sh",
            "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"',
            str(self.hosts_file),
            sys.executable,
            "-m",
            "laminar.server",
            "node",
            "start",
            "--data-dir",
            str(node.data_dir),
            "--node-id",
            f"node{node.index}",
            "--preset",
            "local",
        ]
        for name, port in (("gossip", GOSSIP_PORT), ("grpc", GRPC_PORT), ("peer", PEER_PORT)):
            command += [f"--{name}", f"0.0.0.0:{port}", f"--advertise-{name}", node.address(port)]
        if bootstrap:
            command.append("--bootstrap")
        seeds = [n.address(GOSSIP_PORT) for n in self.nodes if n is not node and n.running]
        if seeds:
            command += ["--seeds", ",".join(seeds)]
        log = open(node.log_path, "ab")  # noqa: SIM115 - owned by the process
        node.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def stop(self, node: HostedNode) -> None:
        assert node.process is not None
        node.process.send_signal(signal.SIGTERM)
        node.process.wait(30)

    def move(self, node: HostedNode) -> str:
        """Give ``node``'s host a new address (the node is stopped)."""
        new = moved_address(node.index)
        old = self.addresses[node.index]
        netns = ["ip", "netns", "exec", node.namespace, "ip"]
        subprocess.run([*netns, "addr", "del", f"{old}/24", "dev", "eth0"], check=True)
        subprocess.run([*netns, "addr", "add", f"{new}/24", "dev", "eth0"], check=True)
        self.addresses[node.index] = new
        write_in_place(self.hosts_file, hosts_text(self.addresses))
        if node.advertise_host == old:
            node.advertise_host = new
        return new

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        for node in self.nodes:
            if node.running:
                assert node.process is not None
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(15)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait(10)

    # ------------------------------------------------------------------ checks

    def bootstrap(self) -> list[str]:
        return [n.address(GRPC_PORT) for n in self.nodes]

    def wait_members(self) -> None:
        """Every node answers and sees every node alive at its advertised addresses."""
        wanted = {
            f"node{n.index}": (n.address(GRPC_PORT), n.address(GOSSIP_PORT)) for n in self.nodes
        }

        def agree() -> bool:
            for node in self.nodes:
                answer = self.stub(node.address(GRPC_PORT)).Metadata(
                    pb.MetadataRequest(), timeout=2
                )
                seen = {
                    m.node_id: (m.grpc_address, m.gossip_address)
                    for m in answer.members
                    if m.state == "alive"
                }
                if seen != wanted:
                    return False
            return True

        wait_for(agree, SETTLE_TIMEOUT_S, "every node to see every node at its advertised address")

    def stub(self, address: str) -> laminar_pb2_grpc.LaminarStub:
        channel = self._channels.get(address)
        if channel is None:
            options = [("grpc.dns_min_time_between_resolutions_ms", GRPC_RESOLVE_INTERVAL_MS)]
            channel = grpc.insecure_channel(address, options=options)
            self._channels[address] = channel
        return laminar_pb2_grpc.LaminarStub(channel)  # type: ignore[no-untyped-call]

    def wait_in_sync(self, client: Client) -> None:
        def in_sync() -> bool:
            description = client.describe_cluster(timeout_s=5)
            healths = [h for h in description.partitions if h.topic == TOPIC]
            return len(healths) == PARTITIONS and all(
                h.leader is not None and len(h.in_sync) == NODES and not h.under_replicated
                for h in healths
            )

        wait_for(in_sync, SETTLE_TIMEOUT_S, "every replica in sync")

    def produce(self, producer: Producer[bytes, bytes], round_name: str) -> None:
        values = [f"{round_name}-{i}".encode() for i in range(RECORDS_PER_ROUND)]
        futures = [
            producer.send(TOPIC, value, key=f"k{i}".encode()) for i, value in enumerate(values)
        ]
        producer.flush()
        for value, future in zip(values, futures, strict=True):
            metadata = future.result(timeout=30)
            self.acked[metadata.partition][metadata.offset] = value

    def check_every_node_serves_everything(self, client: Client) -> dict[str, int]:
        """Read every partition from every node until every acknowledged record is
        there at its offset (a follower may lag a moment behind the leader), or fail
        naming what is missing. Returns the records each node served."""
        self.wait_in_sync(client)
        reads: dict[str, int] = {}
        missing: dict[str, list[tuple[int, int]]] = {}

        def complete() -> bool:
            missing.clear()
            for node in self.nodes:
                address = node.address(GRPC_PORT)
                count = 0
                for partition in range(PARTITIONS):
                    read = read_replica(client, TOPIC, partition, address)
                    values = dict(read.records)
                    lost = [
                        (partition, offset)
                        for offset, value in sorted(self.acked[partition].items())
                        if values.get(offset) != value
                    ]
                    if lost:
                        missing[address] = lost
                    count += len(read.records)
                reads[f"node{node.index}"] = count
            return not missing

        try:
            wait_for(complete, SETTLE_TIMEOUT_S, "every node to serve every acknowledged record")
        except TimeoutError:
            summary = {a: f"{len(m)} records, e.g. {m[:3]}" for a, m in missing.items()}
            raise AssertionError(f"acknowledged records missing: {summary}") from None
        return reads

    def leaders(self, client: Client) -> dict[int, str | None]:
        description = client.describe_cluster(timeout_s=5)
        return {h.partition: h.leader for h in description.partitions if h.topic == TOPIC}

    # ------------------------------------------------------------------ main

    def run(self) -> dict[str, object]:
        started = time.monotonic()
        self.start(self.nodes[0], bootstrap=True)
        with Client(self.bootstrap()[:1], timeout_s=30) as client:
            wait_for(lambda: client.metadata(refresh=True, timeout_s=2), 30, "node0 to answer")
        for node in self.nodes[1:]:
            self.start(node)
        with (
            Client(self.bootstrap(), timeout_s=30) as client,
            Producer(client, acks="all", linger_s=0.005, delivery_timeout_s=60.0) as producer,
        ):
            self.wait_members()
            client.create_topic(TOPIC, PARTITIONS, NODES, timeout_s=30)
            self.wait_in_sync(client)
            self.report["leaders_before"] = self.leaders(client)
            self.produce(producer, "first")
            self.report["reads_first"] = self.check_every_node_serves_everything(client)
            self.say("produced and read back through every node")

            for index, case in ((2, "same name, new IP"), (1, "same id, new advertised address")):
                node = self.nodes[index]
                moved_at = time.monotonic()
                self.stop(node)
                new = self.move(node)
                self.say(f"node{index} stopped and moved to {new} ({case})")
                self.produce(producer, f"while-node{index}-down")
                self.start(node)
                self.wait_members()
                self.report[f"node{index}_rejoined_s"] = round(time.monotonic() - moved_at, 2)
                self.report[f"node{index}_reads"] = self.check_every_node_serves_everything(client)
                self.report[f"node{index}_back_s"] = round(time.monotonic() - moved_at, 2)
                self.say(f"node{index} back at {node.address(GRPC_PORT)}, serving everything")
            self.produce(producer, "last")
            self.report["reads_last"] = self.check_every_node_serves_everything(client)
            self.report["leaders_after"] = self.leaders(client)
            members = client.describe_cluster(timeout_s=5).members
            self.report["members"] = {
                m.node_id: [m.grpc_address, m.gossip_address, m.state] for m in members
            }
        self.report["acknowledged"] = sum(len(a) for a in self.acked.values())
        self.report["run_s"] = round(time.monotonic() - started, 1)
        return self.report

    def log_tails(self, lines: int = 40) -> str:
        parts = []
        for node in self.nodes:
            try:
                text = node.log_path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                text = []
            parts.append(f"----- {node.log_path} (last lines)\n" + "\n".join(text))
        return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """``ip netns exec PREFIX-h3 python -m laminar.testing.multihost --prefix PREFIX
    --root DIR --hosts-file FILE --report FILE``, as root, with FILE bind-mounted
    on /etc/hosts."""
    parser = argparse.ArgumentParser(prog="python -m laminar.testing.multihost")
    parser.add_argument("--prefix", required=True, help="the run's namespace name prefix")
    parser.add_argument("--root", type=Path, required=True, help="directory for node data")
    parser.add_argument("--hosts-file", type=Path, required=True, help="the private hosts file")
    parser.add_argument("--report", type=Path, required=True, help="JSON report to write")
    args = parser.parse_args(argv)
    if not in_network_namespace(f"{args.prefix}-h{NODES}"):
        print(f"multihost: run me inside network namespace {args.prefix}-h{NODES}", file=sys.stderr)
        return 2
    run = MultiHostRun(args.root, args.prefix, args.hosts_file)
    try:
        report = run.run()
    except BaseException:
        print(run.log_tails(), flush=True)
        raise
    finally:
        run.close()
    args.report.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

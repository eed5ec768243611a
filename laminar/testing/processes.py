"""Real broker node processes on loopback, for integration tests and benchmarks.

:class:`ProcessCluster` starts ``python -m laminar.server node start`` processes (or
another launcher's, e.g. an installed ``laminar`` entry point),
node ``i`` on its own loopback address ``127.0.0.<base + i>`` (gossip, gRPC and
peer replication on fixed ports there), with data and logs under a directory it
owns. It waits on conditions with deadlines (a node is up when its gRPC Metadata
call answers), and :meth:`ProcessCluster.close` stops every process it started
(SIGTERM, then SIGKILL).

With ``tls=True`` the cluster runs with TLS on every port: a throwaway CA
(:mod:`laminar.security.certs`) signs a certificate for each node (its node id and
loopback address), each node gets a ``[tls]`` table in a config file of its own,
and :attr:`ProcessCluster.client_tls` is what clients pass (the CA, and a client
certificate for nodes that require one, ``client_auth``).

With ``secure=True`` the cluster runs as an operator would secure it: TLS with
``client_auth = "request"``, gossip encrypted under one key (a keyring file per
node) with a cluster key of its own, and ``authorization = true`` with an admin
token (:attr:`ProcessCluster.client_token`) and the client certificate as super
users; :meth:`ProcessCluster.client_options` gives what a client passes, and the
harness's own stubs call as the admin.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from laminar_client import Producer, RecordMetadata, TlsOptions

from laminar.segment import layout
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc

ADMIN = "User:admin"
"""The principal of :attr:`ProcessCluster.client_token` (a super user with ``secure``)."""
CLIENT_PRINCIPAL = "User:CN=test-client"
"""The principal of the client certificate (``DEFAULT`` rule: the subject as it is)."""

GOSSIP_PORT = 7000
GRPC_PORT = 7100
PEER_PORT = 7200
METRICS_PORT = 7300


def wait_for(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll ``condition`` until it is truthy; fail with ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception as error:  # a condition may fail while things settle
            last_error = error
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what} ({last_error})")


@dataclass
class NodeProcess:
    index: int
    host: str
    data_dir: Path
    log_path: Path
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables set for this node's process on top of the test's."""

    @property
    def gossip(self) -> str:
        return f"{self.host}:{GOSSIP_PORT}"

    @property
    def grpc(self) -> str:
        return f"{self.host}:{GRPC_PORT}"

    @property
    def peer(self) -> str:
        return f"{self.host}:{PEER_PORT}"

    @property
    def metrics(self) -> str:
        """The HTTP address of ``/metrics``, ``/healthz`` and ``/ready`` (with
        ``metrics=True``)."""
        return f"{self.host}:{METRICS_PORT}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def node_id(self) -> str:
        import json

        with open(layout.node_path(str(self.data_dir)), encoding="utf-8") as file:
            return str(json.load(file)["node_id"])

    def segment_files(self, topic: str, partition: int) -> list[Path]:
        """The segment (``.log``) files of this node's replica of ``topic`` /
        ``partition``, oldest first; none when it holds no replica."""
        directory = layout.partition_directory(str(self.data_dir), topic, partition)
        try:
            bases = layout.segment_bases(directory)
        except FileNotFoundError:
            return []
        return [Path(layout.segment_path(directory, base)) for base in bases]

    @property
    def quarantine_dir(self) -> Path:
        """Where this node sets damaged files aside (:mod:`laminar.segment.quarantine`)."""
        return Path(layout.quarantine_directory(str(self.data_dir)))


class ProcessCluster:
    """Broker processes on 127.0.0.x; use as a context manager."""

    def __init__(
        self,
        root: Path,
        *,
        host_base: int = 0,
        preset: str = "local",
        fsync: bool = True,
        launcher: Sequence[str] = (),
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        tls: bool = False,
        client_auth: str = "require",
        secure: bool = False,
        node_config: str = "",
        metrics: bool = False,
    ) -> None:
        """``launcher``: the command before ``node start ...`` (default: this
        interpreter's ``python -m laminar.server``); ``cwd`` and ``env``: the nodes'
        working directory and environment (default: the caller's), e.g. where no
        checkout can shadow an installed ``laminar``. ``tls``: TLS on every port
        (module docstring), with ``client_auth`` on the gRPC port. ``secure``: TLS
        with ``client_auth = "request"``, gossip encryption and authorization on
        (module docstring). ``node_config``: TOML every node's config file holds.
        ``metrics``: each node serves HTTP metrics on :attr:`NodeProcess.metrics`
        (``--metrics 127.0.0.x:7300``)."""
        if secure:
            tls, client_auth = True, "request"
        self.root = root
        self.launcher = tuple(launcher) or (sys.executable, "-m", "laminar.server")
        self.cwd = cwd
        self.env = None if env is None else dict(env)
        self.preset = preset
        self.fsync = fsync
        self.host_base = host_base or _free_host_base()
        self.nodes: list[NodeProcess] = []
        self._channels: dict[str, grpc.Channel] = {}
        self.client_auth = client_auth
        self.tls_dir = root / "tls"
        self.client_tls: TlsOptions | None = None
        """What a client of this cluster passes (None without TLS)."""
        self._ca: Any = None
        self.secure = secure
        self.node_config = node_config
        self.metrics = metrics
        self.client_token: str | None = None
        """The admin's bearer token (a super user) with ``secure``, else None."""
        self._gossip_key: bytes | None = None
        self._cluster_key = ""
        if tls:
            self._make_tls()
        if secure:
            self._make_secure()

    # ------------------------------------------------------------------ tls

    def _make_tls(self) -> None:
        from laminar.security import certs  # cryptography: the server extra

        self.tls_dir.mkdir(parents=True, exist_ok=True)
        self._ca = certs.make_ca("Laminar test CA")
        self._write_ca([self._ca.cert])
        certs.make_client_cert(self._ca, "test-client").write(
            self.tls_dir / "client.pem", self.tls_dir / "client.key"
        )
        self.client_tls = TlsOptions(
            ca_file=str(self.tls_dir / "ca.pem"),
            cert_file=str(self.tls_dir / "client.pem"),
            key_file=str(self.tls_dir / "client.key"),
        )

    def _make_secure(self) -> None:
        import secrets

        from laminar.membership.keyring import generate_key, parse_key
        from laminar.security.tokens import add_token

        self.client_token = add_token(self.tls_dir / "tokens.toml", "admin")
        self._gossip_key = parse_key(generate_key())
        self._cluster_key = secrets.token_urlsafe(24)

    def client_options(self) -> dict[str, Any]:
        """What a :class:`~laminar_client.Client` of this cluster passes: ``tls`` and
        ``token`` where the cluster has them (none for a plaintext cluster)."""
        options: dict[str, Any] = {}
        if self.client_tls is not None:
            options["tls"] = self.client_tls
        if self.client_token is not None:
            options["token"] = self.client_token
        return options

    def _write_ca(self, bundle: Sequence[bytes]) -> None:
        from laminar.security.certs import write_atomic

        write_atomic(self.tls_dir / "ca.pem", b"".join(bundle))

    def node_cert_paths(self, node: NodeProcess) -> tuple[Path, Path]:
        """Where ``node``'s certificate and key are (with TLS)."""
        return self.tls_dir / f"node{node.index}.pem", self.tls_dir / f"node{node.index}.key"

    def issue_node_cert(self, node: NodeProcess, ca: Any = None, **options: Any) -> None:
        """Write a new certificate for ``node`` signed by ``ca`` (default: the
        cluster's CA); ``options`` go to :func:`~laminar.security.certs.make_node_cert`
        (``node_id`` to name another node, ``valid_days``, ``now``)."""
        from laminar.security import certs

        node_id = options.pop("node_id", f"node{node.index}")
        pem = certs.make_node_cert(ca or self._ca, node_id, (node.host, "localhost"), **options)
        pem.write(*self.node_cert_paths(node))

    def rotate_ca(self, bundle: Sequence[bytes]) -> None:
        """Replace every node's and client's CA file with ``bundle`` (PEM certificates)."""
        self._write_ca(bundle)

    @property
    def ca(self) -> Any:
        """The cluster's CA (:class:`~laminar.security.certs.Pem`), with TLS."""
        return self._ca

    def _config_file(self, node: NodeProcess) -> Path:
        """``node``'s config file: ``node_config``, then ``[tls]`` and, with
        ``secure``, the cluster key, ``[auth]`` and ``[gossip_encryption]``."""
        text = self.node_config.rstrip() + "\n" if self.node_config.strip() else ""
        if self.secure:
            # A top-level key must come before the first table.
            text = f"cluster_key = {json.dumps(self._cluster_key)}\n" + text
        if self.client_tls is not None:
            cert, key = self.node_cert_paths(node)
            if not cert.exists():
                self.issue_node_cert(node)
            text += (
                "\n[tls]\n"
                f"cert_file = {json.dumps(str(cert))}\n"
                f"key_file = {json.dumps(str(key))}\n"
                f"ca_file = {json.dumps(str(self.tls_dir / 'ca.pem'))}\n"
                f"client_auth = {json.dumps(self.client_auth)}\n"
                "reload_check_interval_ms = 200\n"
            )
        if self.secure:
            from laminar.membership.keyring import KeyringState, save_keyring

            keyring = node.data_dir.parent / f"node{node.index}.keyring.json"
            if not keyring.exists():
                assert self._gossip_key is not None
                save_keyring(str(keyring), KeyringState(keys=(self._gossip_key,)))
            text += (
                "\n[auth]\n"
                f"token_file = {json.dumps(str(self.tls_dir / 'tokens.toml'))}\n"
                "authorization = true\n"
                f"super_users = {json.dumps([ADMIN, CLIENT_PRINCIPAL])}\n"
                "\n[gossip_encryption]\n"
                f"keyring_file = {json.dumps(str(keyring))}\n"
            )
        path = self.root / f"node{node.index}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def __enter__(self) -> ProcessCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ processes

    def add_node(
        self,
        *,
        bootstrap: bool = False,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> NodeProcess:
        index = len(self.nodes)
        node = NodeProcess(
            index,
            f"127.0.0.{self.host_base + index}",
            self.root / f"node{index}",
            self.root / f"node{index}.log",
            list(extra_args or []),
            env=dict(env or {}),
        )
        self.nodes.append(node)
        self.start(node, bootstrap=bootstrap)
        return node

    def start(self, node: NodeProcess, *, bootstrap: bool = False) -> None:
        assert not node.running
        command = [
            *self.launcher,
            "node",
            "start",
            "--data-dir",
            str(node.data_dir),
            "--gossip",
            node.gossip,
            "--grpc",
            node.grpc,
            "--peer",
            node.peer,
            "--preset",
            self.preset,
            "--node-id",
            f"node{node.index}",
            *node.extra_args,
        ]
        if bootstrap:
            command.append("--bootstrap")
        seeds = [n.gossip for n in self.nodes if n is not node and n.running]
        if seeds:
            command += ["--seeds", ",".join(seeds)]
        if not self.fsync:
            command.append("--no-fsync")
        if self.metrics:
            command += ["--metrics", node.metrics]
        if self.client_tls is not None or self.node_config.strip():
            command += ["--config", str(self._config_file(node))]
        node.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(node.log_path, "ab")  # noqa: SIM115 - owned by the process
        node.process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.cwd,
            env=(
                {**(self.env if self.env is not None else os.environ), **node.env}
                if node.env
                else self.env
            ),
        )
        log.close()

    def wait_ready(self, node: NodeProcess, timeout_s: float = 30) -> None:
        def up() -> bool:
            if not node.running:
                raise RuntimeError(f"node{node.index} exited; see {node.log_path}")
            self.stub(node).Metadata(pb.MetadataRequest(), timeout=1)
            return True

        wait_for(up, timeout_s, f"node{node.index} to answer")

    def all_see_each_other(self) -> bool:
        """Whether every node's membership says every node of the cluster is alive."""
        for node in self.nodes:
            response = self.stub(node).Metadata(pb.MetadataRequest(), timeout=2)
            if sum(1 for m in response.members if m.state == "alive") != len(self.nodes):
                return False
        return True

    def kill(self, node: NodeProcess) -> None:
        if node.process is not None and node.running:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(10)

    def terminate(self, node: NodeProcess, timeout_s: float = 20) -> int:
        assert node.process is not None
        if node.running:
            node.process.send_signal(signal.SIGTERM)
        try:
            return node.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait(10)
            raise

    def close(self) -> None:
        for node in self.nodes:
            if node.running:
                assert node.process is not None
                node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(10)
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()

    # ------------------------------------------------------------------ rpc

    def stub(self, node: NodeProcess) -> laminar_pb2_grpc.LaminarStub:
        channel = self._channels.get(node.grpc)
        if channel is None:
            channel = self.channel(node.grpc)
            self._channels[node.grpc] = channel
        return laminar_pb2_grpc.LaminarStub(channel)  # type: ignore[no-untyped-call]

    def channel(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        """A new gRPC channel to ``address``: TLS with the client's certificate when
        the cluster runs TLS (the caller closes it)."""
        tls = self.client_tls
        if tls is None:
            return grpc.insecure_channel(address, options=list(options))
        credentials = grpc.ssl_channel_credentials(
            Path(tls.ca_file).read_bytes(),
            Path(tls.key_file).read_bytes(),
            Path(tls.cert_file).read_bytes(),
        )
        if self.client_token is not None:  # "authorization: Bearer <token>" on each call
            token = grpc.access_token_call_credentials(self.client_token)
            credentials = grpc.composite_channel_credentials(credentials, token)
        return grpc.secure_channel(address, credentials, options=list(options))

    def log_tail(self, node: NodeProcess, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(node.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass
class KillWrites:
    """What :func:`write_every_partition_after_kill` saw."""

    killed_at: float
    """``time.monotonic()`` right after the SIGKILL."""
    acked: dict[int, float] = field(default_factory=dict)
    """Partition -> ``time.monotonic()`` when its record was acknowledged."""
    errors: list[BaseException] = field(default_factory=list)


def write_every_partition_after_kill(
    cluster: ProcessCluster,
    addresses: list[str],
    topic: str,
    partitions: int,
    victim: NodeProcess,
    delivery_timeout_s: float,
) -> KillWrites:
    """Failover as a client sees it: a :class:`~laminar_client.Producer` on
    ``addresses`` writes to every partition of ``topic`` (warming its metadata and
    connections), ``victim`` is SIGKILLed, and one record goes to each partition
    (``acks=all``); returns when each was acknowledged, or the errors."""
    lock = threading.Lock()
    result = KillWrites(killed_at=0.0)

    def done(metadata: RecordMetadata, error: BaseException | None) -> None:
        with lock:
            if error is not None:
                result.errors.append(error)
            else:
                result.acked[metadata.partition] = time.monotonic()

    with Producer(
        addresses, acks="all", linger_s=0.0, delivery_timeout_s=delivery_timeout_s
    ) as producer:
        for partition in range(partitions):
            producer.send(topic, b"warm", partition=partition)
        producer.flush()
        cluster.kill(victim)
        result.killed_at = time.monotonic()
        for partition in range(partitions):
            producer.send(topic, b"after the kill", partition=partition, callback=done)
        producer.flush()
    return result


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the kernel's pick; another process may take it
    before the caller binds it, which a caller retries)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as listener:
        listener.bind((host, 0))
        port: int = listener.getsockname()[1]
        return port


def free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct TCP ports free on ``host`` now: all are held while they are
    picked, so that the kernel cannot hand out one twice (as separate
    :func:`free_port` calls may)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listeners = [socket.socket(family) for _ in range(count)]
    try:
        for listener in listeners:
            listener.bind((host, 0))
        return [int(listener.getsockname()[1]) for listener in listeners]
    finally:
        for listener in listeners:
            listener.close()


def _free_host_base() -> int:
    """A block of loopback addresses whose ports are free: every block from 10 to
    240 is tried, starting at one that depends on the process id (so that parallel
    test processes rarely clash) and wrapping around."""
    bases = list(range(10, 250, 10))
    start = os.getpid() % len(bases)
    for base in bases[start:] + bases[:start]:
        if all(_port_free(f"127.0.0.{base + i}") for i in range(6)):
            return base
    raise RuntimeError("no free block of loopback addresses")


def _port_free(host: str) -> bool:
    """Whether a node could listen on ``host`` now. The TCP probe sets SO_REUSEADDR,
    as the node's listeners do, so that connections of an earlier cluster still in
    TIME_WAIT do not count as taking the address."""
    for kind, port in ((socket.SOCK_STREAM, GRPC_PORT), (socket.SOCK_DGRAM, GOSSIP_PORT)):
        with socket.socket(socket.AF_INET, kind) as probe:
            if kind == socket.SOCK_STREAM:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError:
                return False
    return True

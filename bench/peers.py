"""Peers for the client benchmark: NATS JetStream R3 and Redis Streams, measured here.

Run: ``.venv/bin/python -m bench.peers [--records N] [--repeat N] [--peers a,b]``

The servers come from Debian's packages and the Python clients from PyPI, both
installed by ``make bench-peers`` (the clients are also the ``bench-peers`` extra of
pyproject.toml). :func:`available` says which peer can run and, for one that cannot,
why; the caller prints "skipped: <reason>". This module never imports laminar.

Every server is a process of our own: loopback only (127.0.0.1), free ports picked
at start, data in a temporary directory that is removed afterwards, and stopped in
every case (SIGTERM, then SIGKILL after a deadline). A server started by a Debian
package on a default port is never used.

Each peer yields one :class:`PeerFigures`, the same three figures as Laminar's client
bench, with values of ``value_bytes`` (100) bytes:

* ``send_records_s``: ``records`` messages published one per call, as fast as the
  client goes, timed until every one is acknowledged.
* ``send_p99_ms``: p99 of each message's send -> acknowledgement latency in a run at
  a fixed offered load of ``offered_rate_s`` messages/s (``latency_records`` of them,
  into a separate stream). Latency counts from the moment the message is handed to
  the client; the achieved offered rate is in ``notes``.
* ``consume_records_s``: ``records`` messages read back from the start of the
  stream, one message object per iteration on the Python side.

JetStream R3 (:func:`jetstream_r3`): a 3-server cluster (routes, JetStream with a
store dir per server), a stream with file storage and 3 replicas. Publishing uses
``JetStreamContext.publish_async`` with at most 2,000 acknowledgements outstanding
(``publish_async_max_pending``), the latency run the same call paced; reading uses a
durable pull consumer (``AckPolicy.NONE``) and ``fetch`` of up to 10,000 messages.
The client runs on uvloop when it is installed. Durability: the server default for
file storage, i.e. a publish is acknowledged once a quorum of replicas has it in
their store files (page cache); nats-server fsyncs those on its own interval
(2 minutes by default), not per message.

Redis Streams (:func:`redis_streams`): one redis-server (no replicas), with
``--appendonly yes --appendfsync everysec`` (an fsync of the AOF every second, the
usual durable setting) and no RDB snapshots. The sync redis-py client (with hiredis
when installed, it is in the ``bench-peers`` extra) sends ``XADD`` in pipelines of
1,000; the latency run sends each message on its own when it is due, or the due
ones together in one pipeline if the client has fallen behind (each then counts
from the pipeline's send); reading is ``XREAD COUNT 10000`` from ``0-0`` on.

Prints a table, then one JSON object as the last line with
``jetstream_r3_send_records_s``, ``jetstream_r3_send_p99_ms``,
``jetstream_r3_consume_records_s`` and the same with ``redis_``; a skipped peer has
``<peer>_skipped`` with the reason instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import functools
import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

HOST = "127.0.0.1"
PUBLISH_ASYNC_MAX_PENDING = 2_000
NATS_FETCH_BATCH = 10_000
REDIS_PIPELINE = 1_000
REDIS_READ_COUNT = 10_000
REDIS_LATE_GROUP_MAX = 100
DEFAULT_LATENCY_RECORDS = 30_000
START_DEADLINE_S = 30.0
STOP_DEADLINE_S = 10.0
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class PeerFigures:
    """One peer's figures (see the module doc for what each one measures)."""

    send_records_s: float
    send_p99_ms: float
    consume_records_s: float
    notes: str


class PeerError(RuntimeError):
    """A peer could not be started or did not do what the bench asked of it."""


# -- availability ------------------------------------------------------------------


def _binary(name: str) -> str | None:
    """``name`` on PATH, else in the sbin directories (Debian's nats-server is in
    /usr/sbin, which a non-root PATH often lacks)."""
    return shutil.which(name) or shutil.which(name, path="/usr/local/sbin:/usr/sbin:/sbin")


def _client_missing(module: str, dist: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return f"Python client {dist} not installed (make bench-peers)"
    return None


def available() -> dict[str, str | None]:
    """For "jetstream_r3" and "redis": None when the peer can run, else the reason."""
    reasons: dict[str, str | None] = {}
    if _binary("nats-server") is None:
        reasons["jetstream_r3"] = "nats-server not found on PATH (make bench-peers, as root)"
    else:
        reasons["jetstream_r3"] = _client_missing("nats", "nats-py")
        if reasons["jetstream_r3"] is None:
            from nats.js.client import JetStreamContext

            if not hasattr(JetStreamContext, "publish_async"):
                reasons["jetstream_r3"] = "nats-py has no JetStream publish_async (need >= 2.7)"
    if _binary("redis-server") is None:
        reasons["redis"] = "redis-server not found on PATH (make bench-peers, as root)"
    else:
        reasons["redis"] = _client_missing("redis", "redis")
    return reasons


# -- helpers -----------------------------------------------------------------------


def _free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now (held open together so they are distinct)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            ports.append(sock.getsockname()[1])
        return ports


def _p99_ms(latencies_s: Sequence[float]) -> float:
    """Nearest-rank 99th percentile, in milliseconds."""
    ordered = sorted(latencies_s)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)] * 1_000


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _server_version(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"unknown ({error})"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "?"


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def _scratch_dir(workdir: Path | None, prefix: str) -> Iterator[Path]:
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has Linux SIGKILL the child when the bench process dies, so
    a killed bench leaves no server behind (None elsewhere). prctl is looked up here, in
    the parent: the child only makes the call."""
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return set_signal


class _Processes:
    """Server processes started by this module; :meth:`stop_all` ends every one."""

    def __init__(self) -> None:
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # The call is one prctl(2), safe in a child forked from threads.
                preexec_fn=_parent_death_signal(),  # noqa: PLW1509
            )
        self.procs.append((proc, log))
        return proc

    def check_alive(self) -> None:
        for proc, log in self.procs:
            if proc.poll() is not None:
                raise PeerError(
                    f"server {log.stem} exited with {proc.returncode}:\n" + _log_tail(log)
                )

    def stop_all(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_DEADLINE_S
        for proc, _ in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=STOP_DEADLINE_S)
        self.procs.clear()


def _run_async(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``main()`` in a fresh event loop (uvloop if installed), in a thread of its
    own when the caller is already inside a running loop."""

    def run() -> T:
        factory: Callable[[], asyncio.AbstractEventLoop] | None = None
        with contextlib.suppress(ImportError):
            import uvloop

            factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main())

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()


def _uses_uvloop() -> bool:
    return importlib.util.find_spec("uvloop") is not None


# -- NATS JetStream R3 -------------------------------------------------------------


@dataclass(frozen=True)
class _NatsNode:
    name: str
    port: int
    cluster_port: int
    http_port: int


def _nats_config(node: _NatsNode, nodes: list[_NatsNode], store: Path) -> str:
    routes = ", ".join(
        f'"nats-route://{HOST}:{other.cluster_port}"' for other in nodes if other is not node
    )
    return f"""
server_name: {node.name}
host: {HOST}
port: {node.port}
http: "{HOST}:{node.http_port}"
jetstream {{
  store_dir: "{store}"
  max_memory_store: 268435456
  max_file_store: 17179869184
}}
cluster {{
  name: laminar_bench
  listen: "{HOST}:{node.cluster_port}"
  routes: [{routes}]
}}
"""


def _jsz(node: _NatsNode) -> dict[str, Any]:
    url = f"http://{HOST}:{node.http_port}/jsz"
    with urllib.request.urlopen(url, timeout=2) as response:
        data: dict[str, Any] = json.load(response)
        return data


def _wait_meta_leader(nodes: list[_NatsNode], procs: _Processes, deadline_s: float) -> str:
    """Wait until every server reports the same JetStream meta leader of a 3-peer
    cluster and the leader sees both others as current; return the leader's name."""
    deadline = time.monotonic() + deadline_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        procs.check_alive()
        try:
            metas = [_jsz(node).get("meta_cluster") or {} for node in nodes]
        except OSError as error:
            last = f"monitoring not up: {error}"
        else:
            leaders = {meta.get("leader") for meta in metas}
            sizes = {meta.get("cluster_size") for meta in metas}
            if len(leaders) == 1 and None not in leaders and "" not in leaders and sizes == {3}:
                leader = str(next(iter(leaders)))
                leader_meta = metas[[node.name for node in nodes].index(leader)]
                replicas = leader_meta.get("replicas") or []
                if len(replicas) == 2 and all(r.get("current") for r in replicas):
                    return leader
            last = f"leaders={leaders} sizes={sizes}"
        time.sleep(0.05)
    raise PeerError(f"no JetStream meta leader within {deadline_s:.0f} s ({last})")


def _start_nats_cluster(procs: _Processes, root: Path) -> tuple[list[_NatsNode], str]:
    binary = _binary("nats-server")
    if binary is None:
        raise PeerError("nats-server not found")
    ports = _free_ports(9)
    nodes = [
        _NatsNode(f"n{i + 1}", ports[3 * i], ports[3 * i + 1], ports[3 * i + 2]) for i in range(3)
    ]
    for node in nodes:
        store = root / node.name
        store.mkdir()
        conf = root / f"{node.name}.conf"
        conf.write_text(_nats_config(node, nodes, store))
        procs.start([binary, "-c", str(conf)], root / f"{node.name}.log")
    leader = _wait_meta_leader(nodes, procs, START_DEADLINE_S)
    return nodes, leader


async def _nats_bench(
    nodes: list[_NatsNode],
    procs: _Processes,
    records: int,
    value_bytes: int,
    offered_rate_s: float,
    latency_records: int,
) -> tuple[PeerFigures, str]:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
    from nats.js.errors import APIError

    payload = os.urandom(value_bytes)
    servers = [f"nats://{HOST}:{node.port}" for node in nodes]
    nc = await nats.connect(servers=servers, connect_timeout=5, max_reconnect_attempts=0)
    try:
        js = nc.jetstream(timeout=10, publish_async_max_pending=PUBLISH_ASYNC_MAX_PENDING)

        async def create_stream(name: str, subject: str) -> None:
            config = StreamConfig(
                name=name, subjects=[subject], storage=StorageType.FILE, num_replicas=3
            )
            deadline = time.monotonic() + START_DEADLINE_S
            while True:
                try:
                    await js.add_stream(config)
                    info = await js.stream_info(name)
                    cluster = info.cluster
                    if (
                        cluster is not None
                        and cluster.leader
                        and cluster.replicas is not None
                        and len(cluster.replicas) == 2
                        and all(r.current for r in cluster.replicas)
                    ):
                        return
                except (APIError, nats.errors.TimeoutError) as error:
                    if time.monotonic() > deadline:
                        raise PeerError(f"stream {name} not ready: {error!r}") from error
                if time.monotonic() > deadline:
                    raise PeerError(f"stream {name}: replicas not current in time")
                procs.check_alive()
                await asyncio.sleep(0.05)

        await create_stream("BENCH", "bench.tp")
        await create_stream("BENCHLAT", "bench.lat")

        failures: list[BaseException] = []

        def on_ack(future: asyncio.Future[Any]) -> None:
            if future.cancelled():
                failures.append(asyncio.CancelledError())
            elif future.exception() is not None:
                failures.append(future.exception())  # type: ignore[arg-type]

        async def wait_acks(count: int) -> None:
            try:
                await asyncio.wait_for(js.publish_async_completed(), 60 + count / 1_000)
            except TimeoutError as error:
                raise PeerError(
                    f"{js.publish_async_pending()} JetStream acks still pending"
                ) from error
            if failures:
                raise PeerError(f"{len(failures)} publishes failed, first: {failures[0]!r}")

        # Throughput: one message per call, at most 2,000 acks outstanding.
        start = time.perf_counter()
        for _ in range(records):
            future = await js.publish_async("bench.tp", payload)
            future.add_done_callback(on_ack)
        await wait_acks(records)
        send_s = time.perf_counter() - start
        stored = (await js.stream_info("BENCH")).state.messages
        if stored != records:
            raise PeerError(f"stream BENCH holds {stored} messages, expected {records}")

        # Latency at a fixed offered load.
        sent_at = [0.0] * latency_records
        acked_at = [0.0] * latency_records

        def on_latency_ack(index: int, future: asyncio.Future[Any]) -> None:
            acked_at[index] = time.perf_counter()
            on_ack(future)

        index = 0
        paced_start = time.perf_counter()
        while index < latency_records:
            due = min(
                latency_records, int((time.perf_counter() - paced_start) * offered_rate_s) + 1
            )
            while index < due:
                sent_at[index] = time.perf_counter()
                future = await js.publish_async("bench.lat", payload)
                future.add_done_callback(functools.partial(on_latency_ack, index))
                index += 1
            if index < latency_records:
                wake = paced_start + index / offered_rate_s
                await asyncio.sleep(max(0.0, wake - time.perf_counter()))
        paced_s = sent_at[-1] - paced_start if latency_records > 1 else 0.0
        await wait_acks(latency_records)
        p99 = _p99_ms([acked - sent for sent, acked in zip(sent_at, acked_at, strict=True)])
        achieved = (latency_records - 1) / paced_s if paced_s > 0 else float("nan")

        # Consume: durable pull consumer, large fetches, one message per iteration.
        sub = await js.pull_subscribe(
            "bench.tp",
            durable="bench_reader",
            stream="BENCH",
            config=ConsumerConfig(
                ack_policy=AckPolicy.NONE,
                deliver_policy=DeliverPolicy.ALL,
            ),
        )
        got = 0
        read_bytes = 0
        start = time.perf_counter()
        while got < records:
            batch = await sub.fetch(min(NATS_FETCH_BATCH, records - got), timeout=10)
            for msg in batch:
                got += 1
                read_bytes += len(msg.data)
        consume_s = time.perf_counter() - start
        if read_bytes != records * value_bytes:
            raise PeerError(f"read {read_bytes} bytes, expected {records * value_bytes}")
        await sub.unsubscribe()

        figures = PeerFigures(
            send_records_s=records / send_s,
            send_p99_ms=p99,
            consume_records_s=records / consume_s,
            notes="",
        )
        return figures, f"latency run offered {achieved:,.0f} msg/s"
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 5)


def jetstream_r3(
    records: int,
    value_bytes: int = 100,
    offered_rate_s: float = 10_000,
    latency_records: int = DEFAULT_LATENCY_RECORDS,
    workdir: Path | None = None,
) -> PeerFigures:
    """Start a 3-server NATS cluster on 127.0.0.1, measure a file-storage R3 stream with
    nats-py (see the module doc), stop every server and remove its data."""
    reason = available()["jetstream_r3"]
    if reason is not None:
        raise PeerError(reason)
    procs = _Processes()
    with _scratch_dir(workdir, "peers-nats-") as root:
        try:
            nodes, _leader = _start_nats_cluster(procs, root)
            figures, extra = _run_async(
                lambda: _nats_bench(
                    nodes, procs, records, value_bytes, offered_rate_s, latency_records
                )
            )
        finally:
            procs.stop_all()
    version = _server_version([_binary("nats-server") or "nats-server", "--version"])
    notes = (
        f"{version} x3 cluster, stream R3 file storage, server-default sync (acked once in "
        f"a quorum's page cache, fsync every 2 min; 2.9 has no sync_interval option); "
        f"nats-py {_version('nats-py')} publish_async max {PUBLISH_ASYNC_MAX_PENDING} pending, "
        f"pull consumer ack none fetch {NATS_FETCH_BATCH}"
        f"{', uvloop' if _uses_uvloop() else ''}; {extra}"
    )
    return PeerFigures(
        figures.send_records_s, figures.send_p99_ms, figures.consume_records_s, notes
    )


# -- Redis Streams -----------------------------------------------------------------


def _start_redis(procs: _Processes, root: Path) -> int:
    binary = _binary("redis-server")
    if binary is None:
        raise PeerError("redis-server not found")
    (port,) = _free_ports(1)
    argv = [
        binary,
        "--bind",
        HOST,
        "--port",
        str(port),
        "--dir",
        str(root),
        "--save",
        "",
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--daemonize",
        "no",
        "--protected-mode",
        "yes",
    ]
    procs.start(argv, root / "redis.log")
    return port


def redis_streams(
    records: int,
    value_bytes: int = 100,
    offered_rate_s: float = 10_000,
    latency_records: int = DEFAULT_LATENCY_RECORDS,
    workdir: Path | None = None,
) -> PeerFigures:
    """Start one redis-server on 127.0.0.1, measure XADD / XREAD with redis-py (see
    the module doc), stop the server and remove its data."""
    reason = available()["redis"]
    if reason is not None:
        raise PeerError(reason)
    import redis

    payload = os.urandom(value_bytes)
    fields_: dict[Any, Any] = {b"v": payload}
    procs = _Processes()
    with _scratch_dir(workdir, "peers-redis-") as root:
        try:
            port = _start_redis(procs, root)
            client = redis.Redis(host=HOST, port=port, protocol=2, socket_timeout=30)
            deadline = time.monotonic() + START_DEADLINE_S
            while True:
                procs.check_alive()
                try:
                    if client.ping():
                        break
                except redis.exceptions.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    raise PeerError(f"redis-server not answering within {START_DEADLINE_S} s")
                time.sleep(0.02)
            server_version = str(client.info("server").get("redis_version", "?"))
            aof = client.config_get("appendonly").get("appendonly")
            fsync = client.config_get("appendfsync").get("appendfsync")

            # Throughput: pipelines of 1,000 XADD, until every reply is in.
            pipe = client.pipeline(transaction=False)
            start = time.perf_counter()
            for first in range(0, records, REDIS_PIPELINE):
                for _ in range(min(REDIS_PIPELINE, records - first)):
                    pipe.xadd("bench.tp", fields_)
                pipe.execute()
            send_s = time.perf_counter() - start
            stored = client.xlen("bench.tp")
            if stored != records:
                raise PeerError(f"stream holds {stored} entries, expected {records}")

            # Latency at a fixed offered load: each due message on its own, the due
            # ones together in one pipeline when the client is behind.
            latencies: list[float] = []
            index = 0
            groups = 0
            paced_start = time.perf_counter()
            last_send = paced_start
            while index < latency_records:
                due = min(
                    latency_records,
                    int((time.perf_counter() - paced_start) * offered_rate_s) + 1,
                )
                count = min(due - index, REDIS_LATE_GROUP_MAX)
                if count <= 0:
                    wake = paced_start + index / offered_rate_s
                    time.sleep(max(0.0, wake - time.perf_counter()))
                    continue
                last_send = time.perf_counter()
                if count == 1:
                    client.xadd("bench.lat", fields_)
                else:
                    groups += 1
                    for _ in range(count):
                        pipe.xadd("bench.lat", fields_)
                    pipe.execute()
                latencies.extend([time.perf_counter() - last_send] * count)
                index += count
            paced_s = last_send - paced_start
            achieved = (latency_records - 1) / paced_s if paced_s > 0 else float("nan")

            # Consume: XREAD COUNT 10000 from the start, one entry per iteration.
            got = 0
            read_bytes = 0
            last_id: bytes | str = "0-0"
            start = time.perf_counter()
            while got < records:
                reply: Any = client.xread({"bench.tp": last_id}, count=REDIS_READ_COUNT)
                if not reply:
                    raise PeerError(f"XREAD returned nothing after {got} entries")
                for entry_id, entry in reply[0][1]:
                    got += 1
                    read_bytes += len(entry[b"v"])
                    last_id = entry_id
            consume_s = time.perf_counter() - start
            if read_bytes != records * value_bytes:
                raise PeerError(f"read {read_bytes} bytes, expected {records * value_bytes}")
            client.close()
        finally:
            procs.stop_all()
    hiredis = _version("hiredis")
    notes = (
        f"redis-server {server_version}, one node (no replica), appendonly {aof} "
        f"appendfsync {fsync}, no RDB; redis-py {_version('redis')} sync"
        f"{f' + hiredis {hiredis}' if hiredis != 'absent' else ''}, XADD pipelines of "
        f"{REDIS_PIPELINE}, XREAD COUNT {REDIS_READ_COUNT}; latency run offered "
        f"{achieved:,.0f} msg/s, {groups} late groups pipelined"
    )
    return PeerFigures(records / send_s, _p99_ms(latencies), records / consume_s, notes)


# -- repeats and the command line --------------------------------------------------


def median_of(runs: Sequence[PeerFigures]) -> PeerFigures:
    """The median of each figure over ``runs`` (notes of the first, with the count)."""
    if not runs:
        raise ValueError("no runs")
    return PeerFigures(
        send_records_s=statistics.median(run.send_records_s for run in runs),
        send_p99_ms=statistics.median(run.send_p99_ms for run in runs),
        consume_records_s=statistics.median(run.consume_records_s for run in runs),
        notes=f"median of {len(runs)}; {runs[0].notes}",
    )


def median_figures(function: Callable[..., PeerFigures], repeat: int, **kwargs: Any) -> PeerFigures:
    """``function(**kwargs)`` ``repeat`` times; the median of each figure (notes of the
    first run, with the repeat count)."""
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    return median_of([function(**kwargs) for _ in range(repeat)])


PEERS: dict[str, Callable[..., PeerFigures]] = {
    "jetstream_r3": jetstream_r3,
    "redis": redis_streams,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--offered-rate", type=float, default=10_000)
    parser.add_argument("--latency-records", type=int, default=DEFAULT_LATENCY_RECORDS)
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)

    if args.repeat < 1 or args.records < 1 or args.latency_records < 1:
        parser.error("--repeat, --records and --latency-records must be >= 1")
    wanted = [name.strip() for name in args.peers.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in PEERS]
    if unknown:
        parser.error(f"unknown peers {unknown}; known: {list(PEERS)}")
    reasons = available()
    results: dict[str, float | str] = {}
    rows: list[tuple[str, PeerFigures]] = []
    for name in wanted:
        reason = reasons[name]
        if reason is not None:
            print(f"{name}: skipped: {reason}", flush=True)
            results[f"{name}_skipped"] = reason
            continue
        runs = []
        for run in range(args.repeat):
            started = time.perf_counter()
            figures = PEERS[name](
                records=args.records,
                value_bytes=args.value_bytes,
                offered_rate_s=args.offered_rate,
                latency_records=args.latency_records,
                workdir=args.workdir,
            )
            print(
                f"{name} run {run + 1}/{args.repeat} ({args.records:,} records): "
                f"send {figures.send_records_s:,.0f}/s, p99 {figures.send_p99_ms:.2f} ms, "
                f"consume {figures.consume_records_s:,.0f}/s, "
                f"{time.perf_counter() - started:.1f} s",
                flush=True,
            )
            runs.append(figures)
        figures = median_of(runs)
        rows.append((name, figures))
        for field in fields(PeerFigures):
            if field.name != "notes":
                results[f"{name}_{field.name}"] = round(getattr(figures, field.name), 3)

    if rows:
        print()
        print(f"{'peer':<14}{'send rec/s':>14}{'send p99 ms':>14}{'consume rec/s':>16}")
        for name, figures in rows:
            print(
                f"{name:<14}{figures.send_records_s:>14,.0f}{figures.send_p99_ms:>14.2f}"
                f"{figures.consume_records_s:>16,.0f}"
            )
        for name, figures in rows:
            print(f"  {name}: {figures.notes}")
    print(json.dumps(results, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

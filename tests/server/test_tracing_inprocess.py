"""OpenTelemetry traces of a produce (issue 32, part 2): a traced client's call, the
leader's gRPC server span, and under it the partition's produce, replication and
commit, one trace; three in-process nodes, an in-memory span exporter. Skipped
without the ``laminar[otel]`` extra. And a node with tracing off never imports
OpenTelemetry."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import grpc
import pytest

from laminar.records import encode_batch
from laminar.server.config import NodeConfig
from laminar.server.node import Node
from laminar.server.tracing import TracingConfig, missing_tracing_modules
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc
from tests.server.aio import bounded
from tests.server.test_node_inprocess import (
    DEADLINE_S,
    TOPIC,
    MemoryDisks,
    create_topic,
    leader_of,
    stop_nodes,
    wait_until,
)

_HOSTS = "127.0.33"  # a block of loopback addresses of this module's own


def _config(root: Path, index: int, tracing: bool) -> NodeConfig:
    host = f"{_HOSTS}.{index + 1}"
    return NodeConfig.local(
        str(root / f"n{index}"),
        gossip=f"{host}:7000",
        grpc=f"{host}:7100",
        peer=f"{host}:7200",
        node_id=f"n{index}",
        bootstrap=index == 0,
        seeds=() if index == 0 else (f"{_HOSTS}.1:7000",),
        tracing=TracingConfig(enabled=tracing),
    )


@pytest.mark.skipif(bool(missing_tracing_modules()), reason="the laminar[otel] extra")
@bounded(DEADLINE_S * 4)
async def test_a_traced_produce_is_one_trace_from_the_client_to_the_commit(
    tmp_path: Path,
) -> None:
    from opentelemetry.instrumentation.grpc import aio_client_interceptors
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    disks = MemoryDisks()
    nodes: list[Node] = []
    channels: list[grpc.aio.Channel] = []
    try:
        for index in range(3):
            nodes.append(
                await Node.open(
                    _config(tmp_path, index, tracing=True),
                    log_factory=disks.open,
                    tracer_provider=provider,
                )
            )
        await wait_until(lambda: all(len(n.members()) == 3 for n in nodes), "the members")
        await create_topic(nodes, channels)
        leader = leader_of(nodes, (TOPIC, 0))
        assert leader is not None
        exporter.clear()

        channel = grpc.aio.insecure_channel(
            leader.config.grpc,
            options=[("grpc.use_local_subchannel_pool", 1)],
            interceptors=aio_client_interceptors(tracer_provider=provider),
        )
        channels.append(channel)
        stub: Any = laminar_pb2_grpc.LaminarStub(channel)  # type: ignore[no-untyped-call]
        request = pb.ProduceRequest(topic=TOPIC, partition=0, batches=[encode_batch([b"x"])])
        response = await stub.Produce(request, timeout=DEADLINE_S)
        assert len(response.base_offsets) == 1

        def spans() -> dict[str, Any]:
            return {span.name: span for span in exporter.get_finished_spans()}

        wanted = {"laminar.produce", "laminar.replicate", "laminar.commit"}
        await wait_until(lambda: wanted <= spans().keys(), "the produce's spans")
        named = spans()
        rpc = "/laminar.v1.Laminar/Produce"
        calls = [s for s in exporter.get_finished_spans() if s.name == rpc]
        client = next(s for s in calls if s.kind is SpanKind.CLIENT)
        server = next(s for s in calls if s.kind is SpanKind.SERVER)
        produce = named["laminar.produce"]
        replicate = named["laminar.replicate"]
        commit = named["laminar.commit"]
        trace_id = client.context.trace_id
        for span in (server, produce, replicate, commit):
            assert span.context.trace_id == trace_id, span.name
        assert server.parent.span_id == client.context.span_id
        assert produce.parent.span_id == server.context.span_id
        assert replicate.parent.span_id == produce.context.span_id
        assert commit.parent.span_id == produce.context.span_id
        assert dict(produce.attributes) == {
            "laminar.topic": TOPIC,
            "laminar.partition": 0,
            "laminar.batches": 1,
            "laminar.acks": "all",
            "laminar.term": leader.host.get((TOPIC, 0)).core.term,  # type: ignore[union-attr]
        }
        # The round, then the quorum's acknowledgement, within the produce's span.
        assert produce.start_time <= replicate.start_time
        assert replicate.end_time <= commit.start_time
        assert commit.end_time <= produce.end_time <= server.end_time
        assert produce.status.is_ok
    finally:
        for channel in channels:
            await channel.close()
        await stop_nodes(nodes)
        provider.shutdown()


def test_a_node_with_tracing_off_never_imports_opentelemetry(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from pathlib import Path
        from laminar.server.config import NodeConfig
        from laminar.server.node import Node

        async def main():
            host = "{_HOSTS}.9"
            config = NodeConfig.local(
                {str(tmp_path)!r},
                gossip=host + ":7000",
                grpc=host + ":7100",
                peer=host + ":7200",
                bootstrap=True,
            )
            node = await Node.open(config)
            await node.stop(graceful=False)

        asyncio.run(main())
        loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
        print("loaded:", loaded)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "loaded: []" in result.stdout, result.stdout

"""OpenTelemetry traces of a node (optional: the ``laminar[otel]`` extra, off unless
``[tracing] enabled = true``).

With tracing on, a node makes spans for

* every gRPC call it serves (``opentelemetry-instrumentation-grpc``'s server
  interceptor, outermost: a refused call is traced too), continuing the caller's
  trace when the call carries one (W3C ``traceparent`` metadata: an application
  traces its client with ``GrpcInstrumentorClient().instrument()``);
* every gRPC call it makes to another node (metadata catch-up; the client
  interceptors);
* each partition a produce writes on this node, its leader, as children of the
  call's span::

      /laminar.v1.Laminar/ProduceMany        (gRPC server span)
        laminar.produce   orders/3            propose -> reply
          laminar.replicate                   propose -> the leader's round done:
                                              appended, fsynced, sent to followers
          laminar.commit                      -> the reply: a quorum holds it
                                              (acks=all; at once for acks=leader)

The replication itself runs over the peer transport, not gRPC, and the followers
make no spans: the trace context is not carried in peer frames (a follower's
append serves many produces of many traces at once).

Without tracing, nothing here imports OpenTelemetry: a node without the extra never
loads it, and the produce path pays one ``is None`` test.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from laminar.errors import ConfigError

if TYPE_CHECKING:
    import asyncio

    from opentelemetry.trace import Span, Tracer

    from laminar.replica.messages import ProduceReply

EXPORTERS = ("otlp", "console")
TRACING_MODULES = ("opentelemetry.sdk", "opentelemetry.instrumentation.grpc")
"""What tracing needs: the ``laminar[otel]`` extra."""


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """OpenTelemetry traces: gRPC calls served and made, and each produce's
    replication and commit on the leader (docs/operations.md, "Tracing"). Needs the
    ``laminar[otel]`` extra."""

    enabled: bool = False
    """Make and export spans. Off: OpenTelemetry is not even imported."""
    exporter: str = "otlp"
    """Where spans go: ``otlp`` (OTLP over gRPC to ``endpoint``, a collector such
    as the OpenTelemetry Collector, Jaeger or Tempo) or ``console`` (stdout, one
    JSON object per span; for trying it out)."""
    endpoint: str = "http://127.0.0.1:4317"
    """The OTLP collector's gRPC address (``exporter = "otlp"``)."""
    service_name: str = "laminar"
    """The ``service.name`` of the node's spans (``service.instance.id`` is the
    node id)."""
    sample_ratio: float = 1.0
    """The fraction of traces started on this node that are recorded, in [0, 1];
    a call that carries a trace follows its caller's decision."""

    def __post_init__(self) -> None:
        if self.exporter not in EXPORTERS:
            raise ConfigError(
                f"exporter must be one of {', '.join(EXPORTERS)}, got {self.exporter!r}"
            )
        if not 0.0 <= self.sample_ratio <= 1.0:
            raise ConfigError(f"sample_ratio must be in [0, 1], got {self.sample_ratio}")
        if self.exporter == "otlp" and not self.endpoint:
            raise ConfigError('exporter = "otlp" needs an endpoint')


def missing_tracing_modules() -> list[str]:
    """The :data:`TRACING_MODULES` not installed."""
    missing = []
    for name in TRACING_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # the parent package is missing
            found = False
        if not found:
            missing.append(name)
    return missing


class Tracing:
    """A node's tracer, its gRPC interceptors and its produce spans; built by
    :meth:`open` only when tracing is on."""

    def __init__(self, provider: Any, owned: bool) -> None:
        from opentelemetry import trace

        self._provider = provider
        self._owned = owned
        self.tracer: Tracer = provider.get_tracer("laminar.server")
        self._trace = trace

    @classmethod
    def open(cls, config: TracingConfig, node_id: str, provider: Any = None) -> Tracing:
        """The node's tracing; ``provider``: a ``TracerProvider`` of the caller's (a
        test's in-memory exporter) instead of one built from ``config``."""
        missing = missing_tracing_modules()
        if missing:
            raise ConfigError(
                f"[tracing] enabled = true needs OpenTelemetry, not installed here "
                f"({', '.join(missing)}): pip install 'laminar[otel]'"
            )
        if provider is not None:
            return cls(provider, owned=False)
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        resource = Resource.create(
            {"service.name": config.service_name, "service.instance.id": node_id}
        )
        built = TracerProvider(
            resource=resource, sampler=ParentBased(TraceIdRatioBased(config.sample_ratio))
        )
        exporter: Any
        if config.exporter == "console":
            exporter = ConsoleSpanExporter()
        else:
            try:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ImportError:
                raise ConfigError(
                    '[tracing] exporter = "otlp" needs opentelemetry-exporter-otlp-proto-grpc: '
                    "pip install 'laminar[otel]'"
                ) from None
            exporter = OTLPSpanExporter(endpoint=config.endpoint)
        built.add_span_processor(BatchSpanProcessor(exporter))
        return cls(built, owned=True)

    def server_interceptor(self) -> Any:
        from opentelemetry.instrumentation.grpc import aio_server_interceptor

        return aio_server_interceptor(tracer_provider=self._provider)  # type: ignore[no-untyped-call]

    def client_interceptors(self) -> list[Any]:
        from opentelemetry.instrumentation.grpc import aio_client_interceptors

        interceptors = aio_client_interceptors(tracer_provider=self._provider)  # type: ignore[no-untyped-call]
        return list(interceptors)

    def produce(
        self,
        key: tuple[str, int],
        futures: list[asyncio.Future[ProduceReply]],
        *,
        acks: str,
        term: int,
        rounds: int,
    ) -> ProduceTrace:
        """Spans for one partition's produce on its leader, begun now (the proposal),
        under the current span (the gRPC call's); ended as ``futures`` (its replies)
        are done."""
        return ProduceTrace(self, key, futures, acks, term, rounds)

    def shutdown(self) -> None:
        """Export what is left (a provider built here)."""
        if self._owned:
            self._provider.shutdown()


class ProduceTrace:
    """The ``laminar.produce`` span of one partition's proposal and its children
    ``laminar.replicate`` (until :meth:`round_done` was called ``rounds`` times: the
    leader's round holding the proposal is over) and ``laminar.commit`` (until every
    reply is in)."""

    __slots__ = ("_commit", "_outstanding", "_produce", "_replicate", "_rounds", "_tracing")

    def __init__(
        self,
        tracing: Tracing,
        key: tuple[str, int],
        futures: list[asyncio.Future[ProduceReply]],
        acks: str,
        term: int,
        rounds: int,
    ) -> None:
        tracer, trace = tracing.tracer, tracing._trace
        self._tracing = tracing
        attributes: dict[str, str | int] = {
            "laminar.topic": key[0],
            "laminar.partition": key[1],
            "laminar.batches": len(futures),
            "laminar.acks": acks,
            "laminar.term": term,
        }
        self._produce: Span = tracer.start_span("laminar.produce", attributes=attributes)
        self._replicate: Span | None = tracer.start_span(
            "laminar.replicate", context=trace.set_span_in_context(self._produce)
        )
        self._commit: Span | None = None
        self._rounds = rounds
        self._outstanding = len(futures)
        for future in futures:
            future.add_done_callback(self._replied)

    def round_done(self) -> bool:
        """A round of the replica's is over; True when this trace waits for no more."""
        self._rounds -= 1
        if self._rounds > 0:
            return False
        if self._replicate is not None and self._outstanding > 0:
            self._replicate.end()
            self._replicate = None
            context = self._tracing._trace.set_span_in_context(self._produce)
            self._commit = self._tracing.tracer.start_span("laminar.commit", context=context)
        return True

    def _replied(self, future: asyncio.Future[ProduceReply]) -> None:
        from opentelemetry.trace import Status, StatusCode

        if future.cancelled():
            error = "cancelled"
        elif future.exception() is not None:
            error = str(future.exception())
        else:
            reply = future.result()
            error = "" if reply.status.value in ("ok", "duplicate") else reply.status.value
        if error:
            self._produce.set_status(Status(StatusCode.ERROR, error))
        self._outstanding -= 1
        if self._outstanding > 0:
            return
        for span in (self._replicate, self._commit):
            if span is not None:
                span.end()
        self._replicate = self._commit = None
        self._produce.end()

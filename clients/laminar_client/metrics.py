"""What a producer or consumer measured: :meth:`Producer.metrics` and
:meth:`Consumer.metrics` return a :class:`ProducerMetrics` / :class:`ConsumerMetrics`
snapshot; :func:`laminar_client.metrics_registry.register_metrics` exports them to
a ``prometheus_client`` registry the application owns.

The counts are kept where the client already accounts, per batch and per fetch,
never per record: a producer adds to them when a batch is resolved (acknowledged or
failed) and when an attempt fails; a consumer when a fetch answers, when the
application takes a fetch answer, and when it has been handed a chunk's records.
A snapshot is read without stopping the client, so its fields may be a batch or a
fetch apart from each other; each one alone is exact.

This module imports no other client module (the collectors of
:mod:`laminar_client._prometheus` read these types) and not ``prometheus_client``
(``import laminar_client`` must not need it).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from laminar.errors import InvalidInputError, LaminarError

if TYPE_CHECKING:
    from laminar_client.types import TopicPartition

__all__ = [
    "FETCH_LATENCY_BOUNDS_S",
    "ConsumerMetrics",
    "LatencyHistogram",
    "ProducerMetrics",
    "TopicSent",
    "error_name",
]

FETCH_LATENCY_BOUNDS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""The upper bounds of the fetch latency histogram's buckets, in seconds (a last
bucket takes the rest). A caught-up partition's fetch waits up to ``fetch_wait_s``
(0.5 s by default) on the node, so its latency lands near that bound."""
UNEXPECTED_ERROR = "Unexpected"
"""The error name of an exception outside :class:`~laminar.errors.LaminarError`
(a transport surprise), so that the error label stays a short, fixed set."""


def error_name(error: BaseException) -> str:
    """The name errors are counted by: the class name of a Laminar error (the
    classes of ``laminar.errors``: ``NotLeaderError``, ``AttemptTimeoutError``,
    ...), else ``"Unexpected"``."""
    return type(error).__name__ if isinstance(error, LaminarError) else UNEXPECTED_ERROR


# ----------------------------------------------------------------------------- latency


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """Latencies counted in buckets.

    - ``bounds_s``: the buckets' upper bounds in seconds, ascending.
    - ``counts``: how many latencies fell in each bucket, not cumulative:
      ``counts[i]`` were in ``(bounds_s[i-1], bounds_s[i]]``, the last one (one more
      than the bounds) above ``bounds_s[-1]``.
    - ``sum_s``: the sum of every latency counted, in seconds.
    """

    bounds_s: tuple[float, ...]
    counts: tuple[int, ...]
    sum_s: float

    @property
    def count(self) -> int:
        """How many latencies were counted."""
        return sum(self.counts)

    @property
    def mean_s(self) -> float:
        """The mean latency in seconds (0.0 before the first)."""
        count = self.count
        return self.sum_s / count if count else 0.0

    def quantile_s(self, quantile: float) -> float:
        """An estimate of the ``quantile`` (0 to 1: 0.99 is the 99th percentile), in
        seconds, interpolated within its bucket as Prometheus' ``histogram_quantile``
        does (the last bound when it falls above every bound; 0.0 before the first
        latency)."""
        if not 0 <= quantile <= 1:
            raise InvalidInputError(f"quantile must be in [0, 1], got {quantile}")
        count = self.count
        if count == 0:
            return 0.0
        rank = quantile * count
        below = 0
        for index, bucket_count in enumerate(self.counts):
            if bucket_count and below + bucket_count >= rank:
                if index == len(self.bounds_s):
                    return self.bounds_s[-1]
                lower_s = self.bounds_s[index - 1] if index > 0 else 0.0
                upper_s = self.bounds_s[index]
                return lower_s + (upper_s - lower_s) * (rank - below) / bucket_count
            below += bucket_count
        return self.bounds_s[-1]


class LatencyRecorder:
    """Where a client counts latencies (one :func:`bisect` and two additions each);
    :meth:`snapshot` copies them into a :class:`LatencyHistogram`."""

    __slots__ = ("_bounds_s", "_counts", "_sum_s")

    def __init__(self, bounds_s: tuple[float, ...] = FETCH_LATENCY_BOUNDS_S) -> None:
        if not bounds_s or any(b <= a for a, b in itertools.pairwise(bounds_s)):
            raise InvalidInputError("histogram bounds must be ascending and not empty")
        if not all(math.isfinite(bound) and bound > 0 for bound in bounds_s):
            raise InvalidInputError("histogram bounds must be finite and > 0")
        self._bounds_s = bounds_s
        self._counts = [0] * (len(bounds_s) + 1)
        self._sum_s = 0.0

    def observe(self, latency_s: float) -> None:
        self._counts[bisect.bisect_left(self._bounds_s, latency_s)] += 1
        self._sum_s += latency_s

    def snapshot(self) -> LatencyHistogram:
        return LatencyHistogram(self._bounds_s, tuple(self._counts), self._sum_s)


# ----------------------------------------------------------------------------- snapshots


@dataclass(frozen=True, slots=True)
class TopicSent:
    """What a producer delivered to one topic (acknowledged batches only).

    - ``records``: records acknowledged (with ``acks="none"``: sent).
    - ``bytes``: their batches' encoded size in bytes, as sent (headers, compression
      included).
    - ``batches``: batches acknowledged.
    """

    records: int
    bytes: int
    batches: int


@dataclass(frozen=True, slots=True)
class ProducerMetrics:
    """A producer's counts since it was created (:meth:`Producer.metrics`).

    - ``topics``: per topic written to, a :class:`TopicSent`; the totals are
      ``records_sent``, ``bytes_sent`` and ``batches_sent``.
    - ``records_sent``: records acknowledged, every topic (``acks="none"``: sent
      without an error).
    - ``bytes_sent``: the encoded bytes of the batches holding them.
    - ``batches_sent``: batches acknowledged. Their mean size:
      ``batch_records_mean`` (records a batch) and ``batch_bytes_mean`` (bytes a
      batch).
    - ``attempts``: produce attempts, counted per batch (a batch sent twice counts
      two; a ``ProduceMany`` request of several partitions counts one per batch).
    - ``retries``: attempts that failed in a way that is retried (the batch is sent
      again after a backoff, or at once to a new leader).
    - ``attempt_errors``: failed attempts by error name (:func:`error_name`: the
      class of ``laminar.errors``, e.g. ``NotLeaderError``,
      ``AttemptTimeoutError``), retried or not.
    - ``records_failed``: records whose delivery failed, by the error their future
      got (``DeliveryTimeoutError``, ``StorageFullError``, ``ClientClosedError``, ...).
    - ``restamps``: times a partition's unresolved batches were given a new
      producer id (the broker proved them unwritten: ``docs/format.md``, section 2).
    - ``partition_count_changes``: times a topic this producer writes to was seen
      with more partitions than before (``add-partitions``): keyed records map by
      the new count from then on, and a WARNING names the share of keys that move.
    - ``batches_in_flight``: batches in an attempt now: waiting for its answer (or
      for the backoff before it, or for the metadata refresh it needs).
    - ``buffer_bytes``: bytes of records taken by ``send`` and not yet acknowledged
      or failed; ``buffer_bytes_max``: the limit (``buffer_bytes_max`` setting), at
      which ``send`` blocks.
    """

    topics: Mapping[str, TopicSent]
    records_sent: int
    bytes_sent: int
    batches_sent: int
    attempts: int
    retries: int
    attempt_errors: Mapping[str, int]
    records_failed: Mapping[str, int]
    restamps: int
    batches_in_flight: int
    buffer_bytes: int
    buffer_bytes_max: int
    partition_count_changes: int = 0

    @property
    def batch_records_mean(self) -> float:
        """Records per acknowledged batch (0.0 before the first)."""
        return self.records_sent / self.batches_sent if self.batches_sent else 0.0

    @property
    def batch_bytes_mean(self) -> float:
        """Encoded bytes per acknowledged batch (0.0 before the first)."""
        return self.bytes_sent / self.batches_sent if self.batches_sent else 0.0


@dataclass(frozen=True, slots=True)
class ConsumerMetrics:
    """A consumer's counts since it was created (:meth:`Consumer.metrics`).

    - ``fetches``: fetch requests sent (every partition's fetch loop, every replica).
    - ``fetch_latency``: the latency of the fetches that answered, from the request
      to its answer, as a :class:`LatencyHistogram` in seconds
      (``fetch_latency.quantile_s(0.99)``). A caught-up partition's fetch is a long
      poll: it waits on the node up to ``fetch_wait_s`` for new records.
    - ``fetch_errors``: fetches that failed, by error name (:func:`error_name`:
      ``NotLeaderError``, ``OffsetOutOfRangeError``, ``NodeUnreachableError``, ...).
    - ``bytes_fetched``: bytes of record batches the fetches brought (what the
      consumer then holds for the application, up to ``prefetch_bytes_max``).
    - ``records_consumed``: records handed to the application (by ``records()`` and
      as ``ConsumerBatch`` es by ``batches()``; control records are not counted).
    - ``bytes_consumed``: bytes of the fetch answers the application took (those it
      took after a seek moved past them are not counted).
    - ``lag_records``: per assigned partition whose high watermark a fetch has
      reported, that high watermark minus the position (records not yet handed
      out; 0 when caught up). A partition not fetched yet is absent (``lag()`` asks
      the nodes for those).
    - ``prefetched_bytes``: bytes fetched and not yet taken by the application;
      ``prefetch_bytes_max``: the limit (``prefetch_bytes_max`` setting).
    - ``replica_switches``: times a partition's fetches moved to another replica.
    - ``corrupt_batches``: batches a replica served corrupt (read again from
      another replica, and reported to the node).
    """

    fetches: int
    fetch_latency: LatencyHistogram
    fetch_errors: Mapping[str, int]
    bytes_fetched: int
    records_consumed: int
    bytes_consumed: int
    lag_records: Mapping[TopicPartition, int]
    prefetched_bytes: int
    prefetch_bytes_max: int
    replica_switches: int
    corrupt_batches: int


# ----------------------------------------------------------------------------- registry


class MetricsSource(Protocol):
    """A producer or consumer, for :func:`~laminar_client.metrics_registry.register_metrics`."""

    def metrics(self) -> ProducerMetrics | ConsumerMetrics: ...

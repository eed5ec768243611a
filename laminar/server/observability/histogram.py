"""Latency histograms and request counters kept on the node's event loop.

Cheaper than ``prometheus_client``'s own metrics (no lock, no label lookup by
keyword): one observation is a ``bisect`` and three additions. Every writer and the
scrape's snapshot (:mod:`laminar.server.observability.snapshot`) run on the node's
event loop, so nothing is shared across threads; a scrape copies the counts there
(:meth:`Histogram.copy`) and exports the copy from the HTTP thread.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

REQUEST_BUCKETS_S = (
    0.0005,
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
    30.0,
)
"""Upper bounds of the request latency buckets, seconds (a fetch long-polls up to
``fetch_wait_ms_max``, 30 s by default)."""
FSYNC_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
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
)
"""Upper bounds of the fsync round latency buckets, seconds."""
REQUEST_SERIES_MAX = 2_048
"""Most (RPC, code) pairs kept: the RPC names and codes are finite sets of the
node's own, this only bounds a bug."""


class Histogram:
    """Counts of observations per bucket (``bounds`` ascending, the last bucket
    ``+Inf`` implied), their sum and their count."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        assert list(bounds) == sorted(set(bounds)), bounds
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def copy(self) -> HistogramCounts:
        return HistogramCounts(self.bounds, tuple(self.counts), self.sum)


@dataclass(frozen=True, slots=True)
class HistogramCounts:
    """A histogram as of a snapshot: per-bucket counts (not cumulative)."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, cumulative count)`` per bucket, ``+Inf`` last (Prometheus' shape)."""
        buckets: list[tuple[str, int]] = []
        total = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return buckets


@dataclass(frozen=True, slots=True)
class RequestCounts:
    """The request statistics as of a snapshot (:meth:`RequestStats.copy`)."""

    latency: dict[tuple[str, str], HistogramCounts]
    """(RPC, code) -> latency histogram; code ``OK`` or the error's detail code."""
    produced_records: int
    produced_bytes: int
    fetched_records: int
    fetched_bytes: int


class RequestStats:
    """The gRPC service's statistics: latency by RPC and outcome, records and bytes
    produced (appended, duplicates not counted) and fetched."""

    __slots__ = (
        "_latency",
        "fetched_bytes",
        "fetched_records",
        "produced_bytes",
        "produced_records",
    )

    def __init__(self) -> None:
        self._latency: dict[tuple[str, str], Histogram] = {}
        self.produced_records = 0
        self.produced_bytes = 0
        self.fetched_records = 0
        self.fetched_bytes = 0

    def observe(self, rpc: str, code: str, seconds: float) -> None:
        """One call of ``rpc`` answered with ``code`` after ``seconds``."""
        histogram = self._latency.get((rpc, code))
        if histogram is None:
            if len(self._latency) >= REQUEST_SERIES_MAX:
                return
            histogram = self._latency[rpc, code] = Histogram(REQUEST_BUCKETS_S)
        histogram.observe(seconds)

    def copy(self) -> RequestCounts:
        return RequestCounts(
            {key: histogram.copy() for key, histogram in self._latency.items()},
            self.produced_records,
            self.produced_bytes,
            self.fetched_records,
            self.fetched_bytes,
        )

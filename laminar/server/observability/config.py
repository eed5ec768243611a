"""The ``[metrics]`` table of a node's TOML file (``--metrics HOST:PORT``)."""

from __future__ import annotations

from dataclasses import dataclass

from laminar.address import parse_address
from laminar.errors import ConfigError

PARTITION_SERIES = ("none", "leaders", "all")


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The HTTP endpoint of Prometheus metrics, ``/healthz``, ``/ready`` and the
    status page (``/``, ``/status.json``).

    Off while ``address`` is empty. docs/operations.md ("What to watch") lists the
    metric families and the alerts to set on them."""

    address: str = ""
    """``host:port`` to serve ``/metrics`` (Prometheus text format), ``/healthz`` and
    ``/ready`` on (HTTP, no TLS: keep it on a private network). Empty: off. Also
    ``--metrics HOST:PORT``."""
    partition_series: str = "none"
    """Per-partition series (high watermark, log start offset, and each group's
    committed offset and lag): ``none``; ``leaders`` (the partitions this node
    leads, and the groups it coordinates on them); ``all`` (every replica on this
    node). Series count: none adds 0; leaders adds 2 per led partition plus 2 per
    committed group offset on one; all adds 2 per replica plus 2 per committed
    offset of a coordinated group on one (a node holding 3,000 replicas, a third of
    them led, with no groups: 0, 2,000 or 6,000 series on top of the node's own)."""
    scrape_timeout_ms: int = 5_000
    """How long a scrape (or ``/ready``) waits for the node's event loop to take its
    snapshot; a busier loop answers 503."""
    requests_max: int = 8
    """HTTP requests served at once (one thread each); more connections are answered
    503 at once."""
    request_head_bytes_max: int = 8_192
    """The largest request line and headers together; a longer head is refused
    (431) without being read further."""
    sample_interval_ms: int = 5_000
    """How often the node samples its produce and fetch counters for the status
    page's rate charts (``GET /``); it keeps 10 minutes of samples. Sampled whether
    or not this node serves HTTP: a page served by another node shows this one's
    rates too."""
    status_call_timeout_ms: int = 1_500
    """How long ``/status.json`` waits for each other node's ``NodeStatus`` answer
    (asked in parallel); a node that does not answer in time is shown as such.
    At most half of ``scrape_timeout_ms`` is used, whatever this says."""

    def __post_init__(self) -> None:
        if self.address:
            parse_address(self.address, what="metrics address", port_zero=True)
        if self.partition_series not in PARTITION_SERIES:
            raise ConfigError(
                f"partition_series must be one of {', '.join(PARTITION_SERIES)}, "
                f"got {self.partition_series!r}"
            )
        if not 1 <= self.scrape_timeout_ms <= 600_000:
            raise ConfigError("scrape_timeout_ms must be in 1..600000")
        if not 1 <= self.requests_max <= 1_000:
            raise ConfigError("requests_max must be in 1..1000")
        if not 256 <= self.request_head_bytes_max <= 1 << 20:
            raise ConfigError("request_head_bytes_max must be in 256..1048576")
        if not 100 <= self.sample_interval_ms <= 60_000:
            raise ConfigError("sample_interval_ms must be in 100..60000")
        if not 10 <= self.status_call_timeout_ms <= 60_000:
            raise ConfigError("status_call_timeout_ms must be in 10..60000")

    @property
    def enabled(self) -> bool:
        return bool(self.address)

"""The producer's settings, :class:`ProducerConfig` (re-exported by
:mod:`laminar_client.producer`, where the options are described in prose): a module
of their own so that the producer's accumulator, its core and its facades share
them without importing one another."""

from __future__ import annotations

from dataclasses import dataclass

from laminar.errors import InvalidInputError
from laminar.records import DEFAULT_LIMITS, Compression
from laminar_client._sender import MAX_IN_FLIGHT_LIMIT
from laminar_client.client import ACKS
from laminar_client.types import AcksMode

__all__ = ["ProducerConfig"]


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """A producer's settings (the keyword arguments of :class:`Producer`).

    - ``acks``: ``"all"`` (a majority stored the batch; the default, and what
      idempotence needs), ``"leader"`` or ``"none"``.
    - ``idempotent``: stamp batches with a producer id and sequences, so that retries
      never duplicate or reorder records (needs ``acks="all"``).
    - ``linger_s``: how long a batch waits for more records after its first one
      (Kafka's ``linger.ms``, in seconds like every duration here: 0.005 is 5 ms;
      0 sends each batch as soon as the core sees it).
    - ``batch_bytes_max``: a batch is sealed before it would pass this many bytes
      (a single larger record goes alone); keyless records switch partition after
      about this many bytes.
    - ``buffer_bytes_max``: bytes of records taken and not yet acknowledged or failed.
    - ``max_in_flight``: batches per partition in flight, at most 5.
    - ``compression``: ``Compression.NONE`` or ``Compression.ZSTD``, per batch.
    - ``delivery_timeout_s``: from ``send`` to the record's outcome, retries included.
    - ``max_block_s``: how long ``send`` waits for buffer room (or for a topic's
      metadata) before it raises.
    - ``attempt_timeout_s``: the deadline of one produce RPC.
    """

    acks: AcksMode = "all"
    idempotent: bool = True
    linger_s: float = 0.005
    batch_bytes_max: int = 1024 * 1024
    buffer_bytes_max: int = 32 * 1024 * 1024
    max_in_flight: int = MAX_IN_FLIGHT_LIMIT
    compression: Compression = Compression.NONE
    delivery_timeout_s: float = 120.0
    max_block_s: float = 60.0
    attempt_timeout_s: float = 3.0

    def __post_init__(self) -> None:
        if self.acks not in ACKS:
            raise InvalidInputError(f"acks must be one of {sorted(ACKS)}, got {self.acks!r}")
        if self.idempotent and self.acks != "all":
            raise InvalidInputError(
                "an idempotent producer needs acks='all' (pass idempotent=False for "
                "acks='leader' or 'none')"
            )
        if not 0 <= self.linger_s <= 60:
            raise InvalidInputError("linger_s must be in [0, 60]")
        limit = DEFAULT_LIMITS.batch_bytes_max
        if not 1024 <= self.batch_bytes_max <= limit:
            raise InvalidInputError(f"batch_bytes_max must be in [1024, {limit}]")
        if self.buffer_bytes_max < self.batch_bytes_max:
            raise InvalidInputError("buffer_bytes_max must be >= batch_bytes_max")
        if not 1 <= self.max_in_flight <= MAX_IN_FLIGHT_LIMIT:
            raise InvalidInputError(
                f"max_in_flight must be in [1, {MAX_IN_FLIGHT_LIMIT}] (the broker keeps "
                f"the last {MAX_IN_FLIGHT_LIMIT} batches of each producer)"
            )
        if not isinstance(self.compression, Compression):
            raise InvalidInputError("compression must be a laminar.records.Compression")
        for name in ("delivery_timeout_s", "attempt_timeout_s"):
            if not getattr(self, name) > 0:
                raise InvalidInputError(f"{name} must be > 0")
        if self.max_block_s < 0:
            raise InvalidInputError("max_block_s must be >= 0")
        if self.delivery_timeout_s < self.linger_s + self.attempt_timeout_s:
            raise InvalidInputError(
                "delivery_timeout_s must be at least linger_s + attempt_timeout_s"
            )

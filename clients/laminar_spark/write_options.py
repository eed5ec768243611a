"""The writer's options, parsed and checked without Spark or a cluster.

Every error is an :class:`~laminar.errors.InvalidInputError` (a ``ValueError``)
naming the option and what it allows. Spark's Kafka sink's names are accepted
too (:mod:`laminar_spark.kafka_options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from laminar.address import parse_address_list
from laminar.errors import ConfigError, InvalidInputError
from laminar.records import Compression
from laminar_spark.kafka_options import sort_options
from laminar_spark.security import SECURITY_OPTIONS, ClientSecurity, parse_security

__all__ = [
    "BATCH_BYTES_MAX_CEILING",
    "BATCH_BYTES_MAX_DEFAULT",
    "BATCH_RECORDS_MAX_CEILING",
    "BATCH_RECORDS_MAX_DEFAULT",
    "WRITE_OPTIONS",
    "WriteOptions",
    "parse_write_options",
]

WRITE_OPTIONS = (
    "servers",
    "topic",
    "batchRecordsMax",
    "batchBytesMax",
    "compression",
    "acks",
    *SECURITY_OPTIONS,
)
STREAM_ONLY_OPTIONS = ("checkpointLocation",)
"""Spark hands a streaming query's checkpoint location to its sink; not used here."""

BATCH_RECORDS_MAX_DEFAULT = 100_000
BATCH_RECORDS_MAX_CEILING = 1_000_000
"""A node's default ``record_count_max`` per batch."""
BATCH_BYTES_MAX_DEFAULT = 1024 * 1024
BATCH_BYTES_MAX_FLOOR = 1024
BATCH_BYTES_MAX_CEILING = 8 * 1024 * 1024
"""Half a node's default batch limit (16 MiB), so that a batch of records that each
fit stays under it even when a last record takes it past ``batchBytesMax``."""
_COMPRESSIONS = {"none": Compression.NONE, "zstd": Compression.ZSTD}


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """A write's options, checked.

    ``batch_bytes_max`` counts each record as its key, value and header bytes plus
    16 (what the uncompressed payload spends on it, about), the measure the client's
    producer uses; a single larger record goes alone. ``compression`` is per batch,
    zstd by default: measured with 100-byte values, as fast as none when values
    compress 2:1 (the nodes replicate and store half the bytes), faster when they
    compress better.
    """

    servers: str
    security: ClientSecurity = field(default_factory=ClientSecurity)  # repr redacts the token
    topic: str | None = None
    batch_records_max: int = BATCH_RECORDS_MAX_DEFAULT
    batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT
    compression: Compression = Compression.ZSTD
    ignored: tuple[str, ...] = ()  # options accepted with no effect, each with its reason


def parse_write_options(options: Mapping[str, str], *, streaming: bool) -> WriteOptions:
    """Check ``options`` (names case-insensitive, values strings) into :class:`WriteOptions`."""
    known = WRITE_OPTIONS + (STREAM_ONLY_OPTIONS if streaming else ())
    what = "a laminar streaming write" if streaming else "a laminar write"
    given = sort_options(options, known, write=True, what=what)
    named = given.named
    servers = named.get("servers", "").strip()
    if not servers:
        raise InvalidInputError(
            "option 'servers' is required: a comma-separated list of host:port addresses"
        )
    try:
        parse_address_list(servers, what="option 'servers'")
    except ConfigError as error:
        raise InvalidInputError(str(error)) from None
    topic = named.get("topic")
    if topic is not None:
        topic = topic.strip()
        if not topic:
            raise InvalidInputError("option 'topic' must be a topic name, got an empty string")
    acks = named.get("acks", "all").strip().lower()
    if acks not in ("all", "-1"):
        raise InvalidInputError(
            f"option 'acks' must be 'all' (got {acks!r}): the writer's no-duplicates "
            "guarantee needs every batch acknowledged by a majority of replicas"
        )
    compression_name = named.get("compression", "zstd").strip().lower()
    compression = _COMPRESSIONS.get(compression_name)
    if compression is None:
        raise InvalidInputError(
            f"option 'compression' must be one of {', '.join(_COMPRESSIONS)}, "
            f"got {compression_name!r}"
        )
    return WriteOptions(
        servers=servers,
        security=parse_security(named),
        topic=topic,
        batch_records_max=_bounded(
            "batchRecordsMax", named, BATCH_RECORDS_MAX_DEFAULT, 1, BATCH_RECORDS_MAX_CEILING
        ),
        batch_bytes_max=_bounded(
            "batchBytesMax",
            named,
            BATCH_BYTES_MAX_DEFAULT,
            BATCH_BYTES_MAX_FLOOR,
            BATCH_BYTES_MAX_CEILING,
        ),
        compression=compression,
        ignored=given.ignored,
    )


def _bounded(name: str, named: Mapping[str, str], default: int, low: int, high: int) -> int:
    text = named.get(name)
    if text is None:
        return default
    text = text.strip()
    if not text.isdigit() or not low <= int(text) <= high:
        raise InvalidInputError(
            f"option {name!r} must be an integer in [{low}, {high}], got {text!r}"
        )
    return int(text)

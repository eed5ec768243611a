"""The reader's options, parsed and checked without Spark or a cluster.

Every error is an :class:`~laminar.errors.InvalidInputError` (a ``ValueError``)
naming the option and what it allows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from laminar.errors import InvalidInputError

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "ReadOptions",
    "parse_options",
]

EARLIEST = -2
"""Kafka's "earliest" in per-partition JSON: the log start offset."""
LATEST = -1
"""Kafka's "latest" in per-partition JSON: the high watermark at planning."""

KNOWN_OPTIONS = (
    "servers",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "minPartitions",
    "maxRecordsPerPartition",
    "includeHeaders",
    "failOnDataLoss",
)
_BY_LOWER = {name.lower(): name for name in KNOWN_OPTIONS}

OffsetSpec = int | dict[str, dict[int, int]]
"""``EARLIEST``/``LATEST``, or ``{topic: {partition: offset}}`` (offset may be -2/-1)."""

TimeSpec = int | dict[str, dict[int, int]]
"""A time in ms for every partition, or ``{topic: {partition: time_ms}}``."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """A batch read's options, checked (see the package docstring)."""

    servers: str
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: dict[str, tuple[int, ...]] | None = None
    starting: OffsetSpec = EARLIEST
    ending: OffsetSpec = LATEST
    starting_time: TimeSpec | None = None  # overrides ``starting`` (resolved at planning)
    ending_time: TimeSpec | None = None  # overrides ``ending``
    starting_time_strategy: str = "error"  # no record at or after the time: "error"/"latest"
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True


def parse_options(options: Mapping[str, str]) -> ReadOptions:
    """Check ``options`` (names case-insensitive, values strings) into :class:`ReadOptions`."""
    named: dict[str, str] = {}
    for raw_name, value in options.items():
        name = _BY_LOWER.get(raw_name.lower())
        if name is None:
            raise InvalidInputError(
                f"unknown option {raw_name!r} for the laminar source; allowed: "
                + ", ".join(KNOWN_OPTIONS)
            )
        named[name] = str(value)
    servers = named.get("servers", "").strip()
    if not servers:
        raise InvalidInputError(
            "option 'servers' is required: a comma-separated list of host:port addresses"
        )
    chosen = [name for name in ("subscribe", "subscribePattern", "assign") if name in named]
    if len(chosen) != 1:
        raise InvalidInputError(
            "exactly one of the options 'subscribe', 'subscribePattern' and 'assign' "
            f"must be given, got {chosen or 'none'}"
        )
    subscribe = subscribe_pattern = assign = None
    if "subscribe" in named:
        subscribe = _subscribe(named["subscribe"])
    elif "subscribePattern" in named:
        subscribe_pattern = _pattern(named["subscribePattern"])
    else:
        assign = _assign(named["assign"])
    starting = _offsets("startingOffsets", named.get("startingOffsets", "earliest"))
    ending = _offsets("endingOffsets", named.get("endingOffsets", "latest"))
    # Spark's Kafka source's precedence: the time for every partition, then the
    # times per partition, then the offsets.
    starting_time = _times("startingTimestamp", "startingOffsetsByTimestamp", named)
    ending_time = _times("endingTimestamp", "endingOffsetsByTimestamp", named)
    strategy = named.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidInputError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {strategy!r}"
        )
    return ReadOptions(
        servers=servers,
        subscribe=subscribe,
        subscribe_pattern=subscribe_pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_time=starting_time,
        ending_time=ending_time,
        starting_time_strategy=strategy,
        min_partitions=_positive("minPartitions", named.get("minPartitions")),
        max_records_per_partition=_positive(
            "maxRecordsPerPartition", named.get("maxRecordsPerPartition")
        ),
        include_headers=_boolean("includeHeaders", named.get("includeHeaders", "false")),
        fail_on_data_loss=_boolean("failOnDataLoss", named.get("failOnDataLoss", "true")),
    )


def _times(every: str, per_partition: str, named: Mapping[str, str]) -> TimeSpec | None:
    """``every`` (ms for every partition) if given, else ``per_partition`` (JSON of
    topic -> partition -> ms), else None."""
    if every in named:
        text = named[every].strip()
        if not text.lstrip("-").isdigit():
            raise InvalidInputError(
                f"option {every!r} must be a time in milliseconds since the epoch, got {text!r}"
            )
        return int(text)
    if per_partition not in named:
        return None
    value = named[per_partition]
    shape = 'JSON {"topic": {"0": time_ms}}'
    parsed = _json(per_partition, value, shape)
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidInputError(f"option {per_partition!r} must be {shape}, got {value!r}")
    times: dict[str, dict[int, int]] = {}
    for topic, entries in parsed.items():
        if not isinstance(entries, dict) or not entries:
            raise InvalidInputError(
                f"option {per_partition!r}: topic {topic!r} needs an object of partition -> "
                f"time ({shape}), got {entries!r}"
            )
        per: dict[int, int] = {}
        for raw_partition, time_ms in entries.items():
            partition = _partition(per_partition, topic, raw_partition)
            if isinstance(time_ms, bool) or not isinstance(time_ms, int):
                raise InvalidInputError(
                    f"option {per_partition!r}: time of {topic}-{partition} must be an "
                    f"integer (ms since the epoch), got {time_ms!r}"
                )
            per[partition] = time_ms
        times[topic] = per
    return times


def _subscribe(value: str) -> tuple[str, ...]:
    topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
    if not topics:
        raise InvalidInputError(
            f"option 'subscribe' must be a comma-separated list of topics, got {value!r}"
        )
    return topics


def _pattern(value: str) -> str:
    if not value:
        raise InvalidInputError("option 'subscribePattern' must be a non-empty regex")
    try:
        re.compile(value)
    except re.error as error:
        raise InvalidInputError(
            f"option 'subscribePattern' is not a valid regex ({error}): {value!r}"
        ) from None
    return value


def _json(option: str, value: str, shape: str) -> object:
    try:
        return json.loads(value)
    except ValueError as error:
        raise InvalidInputError(
            f"option {option!r} is not valid JSON ({error}); expected {shape}, got {value!r}"
        ) from None


def _partition(option: str, topic: str, raw: object) -> int:
    text = str(raw)
    if isinstance(raw, bool) or not (isinstance(raw, int) or text.isdigit()):
        raise InvalidInputError(
            f"option {option!r}: partition {raw!r} of topic {topic!r} is not an integer >= 0"
        )
    number = int(text)
    if number < 0:
        raise InvalidInputError(f"option {option!r}: partition {number} of {topic!r} is < 0")
    return number


def _assign(value: str) -> dict[str, tuple[int, ...]]:
    shape = 'a JSON object of topic -> list of partitions, e.g. {"events": [0, 1]}'
    parsed = _json("assign", value, shape)
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidInputError(f"option 'assign' must be {shape}, got {value!r}")
    assign: dict[str, tuple[int, ...]] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not partitions:
            raise InvalidInputError(
                f"option 'assign': topic {topic!r} needs a non-empty list of partitions "
                f"({shape}), got {partitions!r}"
            )
        numbers = [_partition("assign", topic, p) for p in partitions]
        assign[topic] = tuple(dict.fromkeys(numbers))
    return assign


def _offsets(option: str, value: str) -> OffsetSpec:
    word = value.strip().lower()
    shape = (
        '"earliest", "latest" or JSON {"topic": {"0": offset}} (-2 = earliest, -1 = latest)'
        if option == "startingOffsets"
        else '"latest" or JSON {"topic": {"0": offset}} (-1 = latest)'
    )
    if word == "earliest":
        if option == "endingOffsets":
            raise InvalidInputError(f"option 'endingOffsets' cannot be earliest; allowed: {shape}")
        return EARLIEST
    if word == "latest":
        return LATEST
    if not value.strip().startswith("{"):
        raise InvalidInputError(f"option {option!r} must be {shape}, got {value!r}")
    parsed = _json(option, value, shape)
    if not isinstance(parsed, dict) or not parsed:
        raise InvalidInputError(f"option {option!r} must be {shape}, got {value!r}")
    offsets: dict[str, dict[int, int]] = {}
    for topic, per_partition in parsed.items():
        if not isinstance(per_partition, dict) or not per_partition:
            raise InvalidInputError(
                f"option {option!r}: topic {topic!r} needs an object of partition -> offset "
                f"({shape}), got {per_partition!r}"
            )
        entries: dict[int, int] = {}
        for raw_partition, offset in per_partition.items():
            partition = _partition(option, topic, raw_partition)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise InvalidInputError(
                    f"option {option!r}: offset of {topic}-{partition} must be an integer "
                    f">= 0, -2 (earliest) or -1 (latest), got {offset!r}"
                )
            if option == "endingOffsets" and offset == EARLIEST:
                raise InvalidInputError(
                    f"option 'endingOffsets': {topic}-{partition} cannot end at -2 (earliest)"
                )
            entries[partition] = offset
        offsets[topic] = entries
    return offsets


def _positive(option: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        number = 0
    if number < 1:
        raise InvalidInputError(f"option {option!r} must be an integer >= 1, got {value!r}")
    return number


def _boolean(option: str, value: str) -> bool:
    word = value.strip().lower()
    if word not in {"true", "false"}:
        raise InvalidInputError(f"option {option!r} must be true or false, got {value!r}")
    return word == "true"

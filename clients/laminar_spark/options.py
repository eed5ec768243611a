"""The reader's options, parsed and checked without Spark or a cluster.

Every error is an :class:`~laminar.errors.InvalidInputError` (a ``ValueError``)
naming the option and what it allows. Spark's Kafka source's names are accepted
too (:mod:`laminar_spark.kafka_options`), and its rules kept: a batch read cannot
start at ``latest`` nor end at ``earliest``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from laminar.address import parse_address_list
from laminar.errors import ConfigError, InvalidInputError
from laminar_spark.kafka_options import sort_options
from laminar_spark.security import SECURITY_OPTIONS, ClientSecurity, parse_security

__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_TRIGGER_DELAY_S_MAX",
    "OffsetSpec",
    "ReadOptions",
    "parse_assign",
    "parse_boolean",
    "parse_duration_s",
    "parse_options",
    "parse_pattern",
    "parse_subscribe",
]

EARLIEST = -2
"""Kafka's "earliest" in per-partition JSON: the log start offset."""
LATEST = -1
"""Kafka's "latest" in per-partition JSON: the high watermark at planning."""
OFFSETS_PER_TRIGGER_MAX = 2**63 - 1
"""Spark keeps offsets and counts as longs."""
MAX_TRIGGER_DELAY_S_DEFAULT = 15 * 60.0
"""Spark's Kafka source's default ``maxTriggerDelay``: ``15m``."""
MAX_TRIGGER_DELAY_S_MAX = 7 * 24 * 3600.0
"""Longest ``maxTriggerDelay`` accepted: a week (a longer wait is surely a typo)."""
_DURATION_UNITS_S = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
"""Spark's time-string suffixes (``JavaUtils.timeStringAs``); no suffix means ms."""
_ENDING_OPTIONS = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
_PER_TRIGGER_OPTIONS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")

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
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    *SECURITY_OPTIONS,
)

OffsetSpec = int | dict[str, dict[int, int]]
"""``EARLIEST``/``LATEST``, or ``{topic: {partition: offset}}`` (offset may be -2/-1)."""

TimeSpec = int | dict[str, dict[int, int]]
"""A time in ms for every partition, or ``{topic: {partition: time_ms}}``."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """A read's options, checked (see the package docstring)."""

    servers: str
    security: ClientSecurity = field(default_factory=ClientSecurity)  # repr redacts the token
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
    # Streaming only (a batch read accepts and ignores them, as Spark's Kafka source):
    max_offsets_per_trigger: int | None = None  # most offsets one micro-batch reads
    min_offsets_per_trigger: int | None = None  # fewer new offsets: wait (see max_trigger_delay_s)
    max_trigger_delay_s: float = MAX_TRIGGER_DELAY_S_DEFAULT  # longest wait for the minimum
    # Options accepted with no effect, each with its reason (one warning lists them).
    ignored: tuple[str, ...] = ()


def parse_options(options: Mapping[str, str], *, streaming: bool | None = False) -> ReadOptions:
    """Check ``options`` (names case-insensitive, values strings) into :class:`ReadOptions`.

    ``streaming`` (``readStream``) changes what Spark's Kafka source changes:
    ``startingOffsets`` defaults to ``latest`` instead of ``earliest``, and the
    ending options are errors, since a stream has no end. A batch read (False)
    refuses to start at ``latest`` (the word, or -1 in the JSON), as Kafka's does
    ("starting offset can't be latest for batch queries on Kafka",
    ``KafkaSourceProvider.validateBatchOptions``), and ignores the per-trigger
    options (checked all the same) with a warning, as Kafka's does. None: the
    mode is not known yet (:meth:`LaminarDataSource.schema`), so only the checks
    common to both modes are made.
    """
    what = "a laminar streaming read" if streaming else "a laminar read"
    given = sort_options(options, KNOWN_OPTIONS, write=False, what=what)
    named = given.named
    ignored = list(given.ignored)
    servers = named.get("servers", "").strip()
    if not servers:
        raise InvalidInputError(
            "option 'servers' is required: a comma-separated list of host:port addresses"
        )
    try:
        parse_address_list(servers, what="option 'servers'")
    except ConfigError as error:
        raise InvalidInputError(str(error)) from None
    chosen = [name for name in ("subscribe", "subscribePattern", "assign") if name in named]
    if len(chosen) != 1:
        raise InvalidInputError(
            "exactly one of the options 'subscribe', 'subscribePattern' and 'assign' "
            f"must be given, got {chosen or 'none'}"
        )
    subscribe = subscribe_pattern = assign = None
    if "subscribe" in named:
        subscribe = parse_subscribe(named["subscribe"])
    elif "subscribePattern" in named:
        subscribe_pattern = parse_pattern(named["subscribePattern"])
    else:
        assign = parse_assign(named["assign"])
    if streaming:
        ending_given = [name for name in _ENDING_OPTIONS if name in named]
        if ending_given:
            raise InvalidInputError(
                f"option {ending_given[0]!r} is not allowed for a streaming read: a stream has "
                "no end (use a batch read, spark.read, to read up to an offset or a time)"
            )
    default_start = "latest" if streaming else "earliest"
    starting = _offsets("startingOffsets", named.get("startingOffsets", default_start))
    ending = _offsets("endingOffsets", named.get("endingOffsets", "latest"))
    # Spark's Kafka source's precedence: the time for every partition, then the
    # times per partition, then the offsets.
    starting_time = _times("startingTimestamp", "startingOffsetsByTimestamp", named)
    ending_time = _times("endingTimestamp", "endingOffsetsByTimestamp", named)
    if streaming is False:
        if starting_time is None:
            _refuse_latest_start(starting)
        ignored += [
            f"{name} (a batch read has no triggers)"
            for name in _PER_TRIGGER_OPTIONS
            if name in named
        ]
    strategy = named.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidInputError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {strategy!r}"
        )
    most, least, delay_s = _per_trigger(named)
    return ReadOptions(
        servers=servers,
        security=parse_security(named),
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
        include_headers=parse_boolean("includeHeaders", named.get("includeHeaders", "false")),
        fail_on_data_loss=parse_boolean("failOnDataLoss", named.get("failOnDataLoss", "true")),
        max_offsets_per_trigger=most,
        min_offsets_per_trigger=least,
        max_trigger_delay_s=delay_s,
        ignored=tuple(ignored),
    )


def _refuse_latest_start(starting: OffsetSpec) -> None:
    """Refuse ``latest`` (the word or -1) as a batch read's start: Spark's Kafka
    source does, since such a read ends where it starts."""
    if starting == LATEST:
        raise InvalidInputError(
            "option 'startingOffsets' cannot be 'latest' in a batch read (as in Spark's "
            "Kafka source): use 'earliest', a JSON of offsets, or a starting time; "
            "'latest' is for a streaming read (spark.readStream)"
        )
    if isinstance(starting, dict):
        for topic, entries in starting.items():
            for partition, offset in entries.items():
                if offset == LATEST:
                    raise InvalidInputError(
                        f"option 'startingOffsets': {topic}-{partition} cannot start at -1 "
                        "(latest) in a batch read (as in Spark's Kafka source); -1 is for a "
                        "streaming read"
                    )


def _per_trigger(named: Mapping[str, str]) -> tuple[int | None, int | None, float]:
    """The streaming limits: ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` and
    ``maxTriggerDelay`` (Spark's duration form), checked against each other."""
    most = _positive("maxOffsetsPerTrigger", named.get("maxOffsetsPerTrigger"))
    least = _positive("minOffsetsPerTrigger", named.get("minOffsetsPerTrigger"))
    for option, number in (("maxOffsetsPerTrigger", most), ("minOffsetsPerTrigger", least)):
        if number is not None and number > OFFSETS_PER_TRIGGER_MAX:
            raise InvalidInputError(
                f"option {option!r} must be at most {OFFSETS_PER_TRIGGER_MAX}, got {number}"
            )
    if most is not None and least is not None and least > most:
        raise InvalidInputError(
            f"option 'minOffsetsPerTrigger' ({least}) must not be above "
            f"'maxOffsetsPerTrigger' ({most})"
        )
    delay_s = MAX_TRIGGER_DELAY_S_DEFAULT
    if "maxTriggerDelay" in named:
        delay_s = parse_duration_s("maxTriggerDelay", named["maxTriggerDelay"])
    return most, least, delay_s


def parse_duration_s(option: str, value: str) -> float:
    """Spark's time string (``JavaUtils.timeStringAs``): an integer and a unit among
    us, ms, s, m, min, h, d (none: ms), e.g. ``15m``, ``30s``; in seconds, from 0 to
    :data:`MAX_TRIGGER_DELAY_S_MAX`."""
    text = value.strip().lower()
    match = re.fullmatch(r"(\d{1,15})\s*([a-z]*)", text)  # 15 digits: > 7 d in us
    units = ", ".join(_DURATION_UNITS_S)
    if match is None or match.group(2) not in ("", *_DURATION_UNITS_S):
        raise InvalidInputError(
            f"option {option!r} must be a duration: an integer >= 0 and a unit among "
            f"{units} (none: ms), e.g. '15m' or '30s'; got {value!r}"
        )
    seconds = int(match.group(1)) * _DURATION_UNITS_S.get(match.group(2), 1e-3)
    if seconds > MAX_TRIGGER_DELAY_S_MAX:
        raise InvalidInputError(
            f"option {option!r} must be at most {MAX_TRIGGER_DELAY_S_MAX:.0f} s (7d), got {value!r}"
        )
    return seconds


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


def parse_subscribe(value: str) -> tuple[str, ...]:
    topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
    if not topics:
        raise InvalidInputError(
            f"option 'subscribe' must be a comma-separated list of topics, got {value!r}"
        )
    return topics


def parse_pattern(value: str) -> str:
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


def parse_assign(value: str) -> dict[str, tuple[int, ...]]:
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


def parse_boolean(option: str, value: str) -> bool:
    word = value.strip().lower()
    if word not in {"true", "false"}:
        raise InvalidInputError(f"option {option!r} must be true or false, got {value!r}")
    return word == "true"

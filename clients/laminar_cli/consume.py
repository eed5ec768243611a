"""``laminar consume``: the records of one or more partitions, one per line."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from laminar_client import Consumer, ConsumerRecord, PartitionOffsets

from laminar.errors import InvalidInputError, RequestTimeoutError
from laminar_cli.common import ATTEMPT_TIMEOUT_S, connect, non_negative_int, out, positive_int
from laminar_cli.progress import Progress, add_progress_options, progress_wanted

CONSUMER_IDLE_S = 0.2
"""How often ``consume`` without ``--follow`` looks whether it reached the end while
no record arrives (the end may be control records, which are never handed out)."""


def register(commands: Any) -> None:
    consume = commands.add_parser(
        "consume",
        help="print records of one or more partitions",
        description=(
            "Print the records of one or more partitions of a topic, one per line: the "
            "value (text), or an object with topic, partition, offset, timestamp_ms, key "
            "and value (json). Bytes that are not UTF-8 are shown with replacement "
            "characters. Without --follow it stops at the end each partition had when "
            "the command started (its high watermark); with --follow it waits for new "
            "records until interrupted. Records of several partitions are interleaved, "
            "each partition's in order."
        ),
    )
    consume.add_argument("topic", help="topic name")
    consume.add_argument(
        "--partition",
        type=_partition_list,
        action="append",
        metavar="P[,P...]",
        help="partition(s) to read; repeat or comma-separate for several (default 0)",
    )
    consume.add_argument(
        "--from",
        dest="start",
        default="earliest",
        metavar="earliest|latest|OFFSET",
        help=(
            "where to start in each partition: the oldest record, the end, or an offset "
            "between the two (default earliest)"
        ),
    )
    consume.add_argument(
        "--follow", action="store_true", help="keep waiting for new records (Ctrl-C to stop)"
    )
    consume.add_argument(
        "--max",
        type=positive_int,
        metavar="N",
        help="stop after N records in all (default: no limit)",
    )
    consume.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: the value only (default); json: one object per record",
    )
    add_progress_options(consume, "consumed")
    consume.set_defaults(handler=_consume)


def _consume(args: argparse.Namespace) -> int:
    stream = out()
    topic = args.topic
    numbers = list(dict.fromkeys(n for group in args.partition or [[0]] for n in group))
    printed = 0
    with (
        connect(args) as client,
        Progress("consumed", lambda: printed, progress_wanted(args, stdout_busy=True)),
    ):
        # From the leaders: a follower's high watermark may trail by a heartbeat (a
        # node just restarted), and every record acknowledged before now is printed.
        listed = client.list_offsets(topic, numbers, leader=True)
        starts = {n: _start_offset(topic, n, listed[n], args.start) for n in numbers}
        # Without --follow: each partition's end as it was at the start.
        ends = {n: listed[n].high_watermark for n in numbers}
        if not args.follow:
            starts = {n: s for n, s in starts.items() if s < ends[n]}
        if not starts:
            return 0
        text = args.format == "text"  # else json
        consumer: Consumer[bytes, bytes] = Consumer(
            client, attempt_timeout_s=min(ATTEMPT_TIMEOUT_S, args.timeout)
        )
        with consumer:
            consumer.assign({(topic, n): offset for n, offset in starts.items()})
            if args.follow:
                for record in consumer:
                    stream.write(_format_record(record, text))
                    stream.write("\n")
                    stream.flush()
                    printed += 1
                    if printed == args.max:
                        break
                return 0
            reading = set(starts)
            idle_since = time.monotonic()
            while reading:
                for record in consumer.records(timeout_s=CONSUMER_IDLE_S):
                    number = record.partition
                    if number not in reading:
                        continue
                    if record.offset >= ends[number]:
                        _done_with(consumer, topic, number, reading)
                        continue
                    stream.write(_format_record(record, text))
                    stream.write("\n")
                    printed += 1
                    if printed == args.max:
                        return 0
                    if record.offset + 1 >= ends[number]:
                        _done_with(consumer, topic, number, reading)
                        if not reading:
                            return 0
                    idle_since = time.monotonic()
                # Idle: partitions may have reached their end on records never handed
                # out (control batches); give up when nothing moves for --timeout.
                for number in list(reading):
                    if consumer.position((topic, number)) >= ends[number]:
                        _done_with(consumer, topic, number, reading)
                if reading and time.monotonic() - idle_since > args.timeout:
                    behind = ", ".join(
                        f"{topic}/{n} at {consumer.position((topic, n))} of {ends[n]}"
                        for n in sorted(reading)
                    )
                    raise RequestTimeoutError(f"no records for {args.timeout:g} s ({behind})")
    return 0


def _done_with(
    consumer: Consumer[bytes, bytes], topic: str, number: int, reading: set[int]
) -> None:
    """A partition reached its end: stop fetching it."""
    reading.discard(number)
    consumer.pause((topic, number))


def _start_offset(topic: str, partition: int, offsets: PartitionOffsets, start: str) -> int:
    """Where ``--from`` starts reading a partition with these offsets."""
    if start in ("earliest", "latest"):
        return offsets.log_start_offset if start == "earliest" else offsets.high_watermark
    try:
        offset = int(start)
    except ValueError:
        raise InvalidInputError(
            f"--from must be earliest, latest or an offset, got {start!r}"
        ) from None
    if offset < 0:
        raise InvalidInputError(f"--from offset must be >= 0, got {offset}")
    if not offsets.log_start_offset <= offset <= offsets.high_watermark:
        raise InvalidInputError(
            f"--from {offset} is outside {topic}/{partition}, which holds offsets "
            f"{offsets.log_start_offset}..{offsets.high_watermark - 1}"
        )
    return offset


def _format_record(record: ConsumerRecord[bytes, bytes], text: bool) -> str:
    if text:
        return _text(record.value) or ""
    return json.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp_ms": record.timestamp_ms,
            "key": _text(record.key),
            "value": _text(record.value),
        },
        ensure_ascii=False,
    )


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def _partition_list(text: str) -> list[int]:
    """``P[,P...]``: partition numbers (>= 0)."""
    try:
        return [non_negative_int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a partition number or list: {text!r}") from None

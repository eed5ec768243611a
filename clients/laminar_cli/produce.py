"""``laminar produce``: lines from stdin or a file, one record each, through the
batching :class:`~laminar_client.Producer`."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Iterable
from typing import IO, Any

from laminar_client import ACKS, Producer, RecordMetadata

from laminar.errors import InvalidInputError, LaminarError
from laminar_cli.common import (
    ATTEMPT_TIMEOUT_S,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    connect,
    non_negative_int,
    one_line,
    out,
    partition_count,
    positive_int,
    warn,
)
from laminar_cli.progress import Progress, add_progress_options, progress_wanted

INTERRUPT_GRACE_S = 2.0
"""After Ctrl-C, how long ``produce`` waits for the records already sent."""


def register(commands: Any) -> None:
    produce = commands.add_parser(
        "produce",
        help="write lines from stdin or a file, one record per line",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Write one record per input line (without its line ending) through the\n"
            "batching producer (laminar_client.Producer): records are batched per\n"
            "partition (up to 1 MiB, sent within 5 ms of a batch's first record), several\n"
            "batches are in flight, and with --acks all retries never duplicate a record.\n"
            "\n"
            "Partition: --partition P (default 0). With --key-partitioning each line is\n"
            "KEY<separator>VALUE and goes to laminar_client.key_partition(KEY, partitions)\n"
            "(xxh3-64 of the key modulo the partition count, as every Laminar writer does);\n"
            "a line without the separator has no key and goes where the producer puts\n"
            "keyless records: one partition chosen at random, until about 1 MiB went to it,\n"
            "then another (the sticky partitioner).\n"
            "\n"
            "At the end it prints one line per partition written to: 'produced N records\n"
            "to TOPIC/P at offsets A..B'. Each record must be acknowledged within --timeout.\n"
            "If a record fails (or a line cannot be sent), it stops reading input, waits for\n"
            "the records already sent, prints the summary and one error line, and exits 1.\n"
            f"Ctrl-C stops reading, waits up to {INTERRUPT_GRACE_S:g} s for the records "
            "already sent, prints\nthe summary and exits 130."
        ),
    )
    produce.add_argument("topic", help="topic name")
    where = produce.add_mutually_exclusive_group()
    where.add_argument(
        "--partition", type=non_negative_int, metavar="P", help="partition (default 0)"
    )
    where.add_argument(
        "--key-partitioning",
        action="store_true",
        help="read KEY<separator>VALUE lines and choose the partition from the key",
    )
    produce.add_argument(
        "--key-separator",
        default="\t",
        metavar="SEP",
        help="separator between key and value with --key-partitioning (default: tab)",
    )
    produce.add_argument(
        "--file", metavar="F", help="read lines from this file instead of stdin ('-' = stdin)"
    )
    produce.add_argument(
        "--acks",
        choices=sorted(ACKS),
        default="all",
        help=(
            "all: a majority stored it, written once even when retried (default); "
            "leader: the leader stored it; none: answered at once, nothing promised"
        ),
    )
    produce.add_argument(
        "--batch-size",
        type=positive_int,
        metavar="N",
        help=(
            "deprecated and ignored: the producer batches by bytes (1 MiB) and time "
            "(5 ms), not by record count"
        ),
    )
    add_progress_options(produce, "produced")
    produce.set_defaults(handler=_produce)


def _produce(args: argparse.Namespace) -> int:
    if args.batch_size is not None:
        warn("--batch-size is deprecated and ignored: the producer batches by bytes and time")
    separator = os.fsencode(args.key_separator) if args.key_partitioning else None
    if separator == b"":
        raise InvalidInputError("--key-separator must not be empty")
    if args.partition is not None:
        partition: int | None = args.partition
    else:
        partition = None if args.key_partitioning else 0
    tally = _Delivered()
    interrupted = False
    attempt_s = min(ATTEMPT_TIMEOUT_S, args.timeout)
    with (
        connect(args) as client,
        _open_input(args.file) as lines,
        Progress("produced", tally.count, progress_wanted(args, stdout_busy=False)),
    ):
        partitions = partition_count(client, args.topic)
        if partition is not None and partition >= partitions:
            raise InvalidInputError(
                f"topic {args.topic!r} has partitions 0..{partitions - 1}, not {partition}"
            )
        producer: Producer[bytes, bytes] = Producer(
            client,
            acks=args.acks,
            idempotent=args.acks == "all",
            attempt_timeout_s=attempt_s,
            delivery_timeout_s=max(args.timeout, attempt_s + 0.1),
            max_block_s=args.timeout,
        )
        grace_s: float | None = None
        try:
            for number, line in enumerate(lines, start=1):
                if tally.stop:
                    break  # stop at the first failure; what was sent is still waited for
                key, value = _split_line(line, separator)
                try:
                    producer.send(
                        args.topic, value, key=key, partition=partition, callback=tally.callback
                    )
                except LaminarError as error:
                    tally.refuse(number, error)
                    break
            producer.flush()
        except KeyboardInterrupt:
            interrupted = True
            grace_s = INTERRUPT_GRACE_S
        finally:
            producer.close(grace_s)  # every callback has run once it returns
    tally.report(args.topic)
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_ERROR if tally.stop else 0


class _Delivered:
    """What ``produce`` learned: per partition, the records acknowledged and their
    first and last offsets (from the delivery callbacks, which run on the producer's
    thread); the records that failed and the first error; the line ``send`` refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._partitions: dict[int, list[int]] = {}  # partition -> [count, first, last]
        self.acknowledged = 0
        self.failed = 0
        self._first_error = ""
        self._refused = ""

    def count(self) -> int:
        return self.acknowledged

    @property
    def stop(self) -> bool:
        """Whether to stop reading input (a record failed, or a line was refused)."""
        return self.failed > 0 or bool(self._refused)

    def callback(self, metadata: RecordMetadata, error: BaseException | None) -> None:
        with self._lock:
            if error is not None:
                self.failed += 1
                if not self._first_error:
                    where = f"{metadata.topic}/{metadata.partition}"
                    self._first_error = f"{where}: {one_line(error)}"
                return
            self.acknowledged += 1
            offset = metadata.offset
            entry = self._partitions.get(metadata.partition)
            if entry is None:
                self._partitions[metadata.partition] = [1, offset, offset]
            else:
                entry[0] += 1
                if offset >= 0:
                    entry[1] = offset if entry[1] < 0 else min(entry[1], offset)
                    entry[2] = max(entry[2], offset)

    def refuse(self, number: int, error: LaminarError) -> None:
        """``send`` refused line ``number`` (it raised: no future, no callback)."""
        self._refused = f"line {number}: {one_line(error)}"

    def report(self, topic: str) -> None:
        """The per-partition summary on stdout; one error line on stderr if anything
        failed. Call it once the producer is closed (every callback has run then)."""
        stream = out()
        with self._lock:
            partitions = sorted(self._partitions.items())
            failed, first_error = self.failed, self._first_error
        if not partitions:
            print("produced 0 records", file=stream)
        for partition, (count, first, last) in partitions:
            where = f" at offsets {first}..{last}" if first >= 0 else " (offsets not reported)"
            print(f"produced {count} records to {topic}/{partition}{where}", file=stream)
        stream.flush()
        errors = [self._refused] if self._refused else []
        if failed:
            records = "1 record" if failed == 1 else f"{failed} records"
            errors.append(f"{records} not written: {first_error}")
        if errors:
            print(f"laminar: error: {'; '.join(errors)}", file=sys.stderr)


def _split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    line = line.rstrip(b"\r\n")
    if separator is not None and separator in line:
        key, value = line.split(separator, 1)
        return key, value
    return None, line


class _open_input:  # noqa: N801 - used like open()
    """stdin, or the named file, as a context manager of lines as bytes (records hold
    bytes: input that is not UTF-8 goes through unchanged)."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._file: IO[bytes] | None = None

    def __enter__(self) -> Iterable[bytes]:
        if self._path is None or self._path == "-":
            buffer: IO[bytes] | None = getattr(sys.stdin, "buffer", None)
            if buffer is not None:
                return buffer
            return (line.encode() for line in sys.stdin)  # a text-only stdin (tests)
        self._file = open(self._path, "rb")
        return self._file

    def __exit__(self, *exc_info: object) -> None:
        if self._file is not None:
            self._file.close()

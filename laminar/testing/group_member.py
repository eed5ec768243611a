"""A consumer-group member as its own OS process, for tests and benchmarks.

Threads in one process cannot die, stall or lose their network the way a member
process does; this module makes a member that can be SIGKILLed, SIGSTOPped and
SIGCONTed. Run it as::

    python -m laminar.testing.group_member --bootstrap H:P[,H:P...] --group G \\
        --topic T [--topic T2 ...] [--instance-id I] [--session-timeout-s S] \\
        [--rebalance-timeout-s R] [--events FILE] [--no-auto-commit] \\
        [--commit-every-batches N] [--commit-on-revoke] [--delay-ms-per-batch D]
        [--log-values]

It makes a :class:`~laminar_client.Consumer` with ``group=G`` and reads
``consumer.batches()`` until SIGTERM or SIGINT; then it closes the consumer (which
commits, with auto-commit, and leaves the group) and exits 0. Any other way out
(an exception) writes an ``error`` event and exits 1. ``--delay-ms-per-batch``
sleeps after each batch, as if processing it; ``--commit-every-batches N`` commits
the position of every assigned partition after every N batches (0: rely on
auto-commit) and, on the way out, what was read since the last one;
``--commit-on-revoke`` commits in ``on_revoked`` (the final commit a Kafka user
writes there; ``close()`` revokes too).

Events
------
One JSON object per line, flushed after each line, appended to ``--events FILE``
(stdout without it). Every object has ``"t"`` (``time.time()``: wall clock, so that
another process can put the events of several members on one time line) and
``"event"``; partitions are ``[topic, partition]`` pairs. Others parse exactly these
names (``bench/group_bench.py``, the process tests): add fields, never rename them.

=============  ==================================================================
event          other fields
=============  ==================================================================
started        ``pid``, ``member_id`` (once the consumer exists)
assigned       ``partitions`` (the ``on_assigned`` hook: reading starts)
revoked        ``partitions`` (the ``on_revoked`` hook, just before the release; with
               auto-commit, after the partition's commit)
lost           ``partitions`` (the ``on_lost`` hook: taken away without a chance
               to commit, because the member was fenced or its lease lapsed)
batch          ``topic``, ``partition``, ``first`` (first offset), ``next`` (offset
               after the last record), ``count``; ``values`` (each value as UTF-8,
               hex when it is not UTF-8, null for none) with ``--log-values`` only
committed      ``offsets``: ``[topic, partition, next_offset]`` triples, after an
               explicit commit (``--commit-every-batches``) succeeded
commit_error   ``error`` (``"ClassName: message"``, e.g. ``FencedMemberError: ...``),
               ``offsets`` (what it tried to commit); the member reads on
closed         after a clean close; the process exits 0 next
error          ``error`` (``repr`` of the exception); the process exits 1 next (also
               when ``assignment()`` ever differs from what the hooks said)
=============  ==================================================================

:class:`GroupMemberProcess` starts one such process and reads its events back.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

from laminar_client import Consumer
from laminar_client.consumer import ConsumerBatch, TopicPartition

from laminar.errors import ConfigError, LaminarError

__all__ = ["EventLog", "GroupMemberProcess", "MemberOptions", "main", "zombie_records"]

IDLE_TIMEOUT_S = 0.2
"""How long one ``batches()`` round waits without records before the loop looks at
the stop flag again (a SIGTERM is noticed within this, or one batch's processing)."""
EVENT_POLL_S = 0.02
"""How often :meth:`GroupMemberProcess.wait_event` reads the events file again."""
STOP_TIMEOUT_S = 20.0
"""How long :meth:`GroupMemberProcess.stop` waits for a clean exit before SIGKILL:
the close commits and leaves, each bounded by the client's attempt timeouts."""

Event = dict[str, Any]


@dataclass(frozen=True, slots=True)
class MemberOptions:
    """What one member process does: the command line as a value (parsed by
    :func:`parse_options`, written back by :meth:`to_argv`)."""

    bootstrap: tuple[str, ...]
    group: str
    topics: tuple[str, ...]
    events_path: Path | None = None
    """Where the events go (None: stdout)."""
    instance_id: str | None = None
    """A static member's instance id (its partitions survive a restart)."""
    session_timeout_s: float = 3.0
    """Silence after which the coordinator expires the member: short, so tests and
    benches see a dead member's partitions move within seconds."""
    rebalance_timeout_s: float = 10.0
    """How long the member may take to release a partition it must give up."""
    auto_commit: bool = True
    """Commit what was handed out between batches, before a release and on close."""
    commit_every_batches: int = 0
    """Commit explicitly after every this many batches (0: never; auto-commit only)."""
    commit_on_revoke: bool = False
    """Commit the revoked partitions' positions in ``on_revoked``."""
    delay_ms_per_batch: int = 0
    """Simulated processing time per batch."""
    log_values: bool = False
    """Put every record's value in the ``batch`` events (tests; off for benches)."""

    def __post_init__(self) -> None:
        if not self.bootstrap or not self.topics:
            raise ConfigError("a member needs a bootstrap address and at least one topic")
        if self.commit_every_batches < 0 or self.delay_ms_per_batch < 0:
            raise ConfigError("commit_every_batches and delay_ms_per_batch must be >= 0")

    def to_argv(self) -> list[str]:
        """The command-line arguments that :func:`parse_options` turns back into this."""
        argv = ["--bootstrap", ",".join(self.bootstrap), "--group", self.group]
        for topic in self.topics:
            argv += ["--topic", topic]
        if self.events_path is not None:
            argv += ["--events", str(self.events_path)]
        if self.instance_id is not None:
            argv += ["--instance-id", self.instance_id]
        argv += [
            "--session-timeout-s",
            repr(self.session_timeout_s),
            "--rebalance-timeout-s",
            repr(self.rebalance_timeout_s),
            "--commit-every-batches",
            str(self.commit_every_batches),
            "--delay-ms-per-batch",
            str(self.delay_ms_per_batch),
        ]
        if not self.auto_commit:
            argv.append("--no-auto-commit")
        if self.commit_on_revoke:
            argv.append("--commit-on-revoke")
        if self.log_values:
            argv.append("--log-values")
        return argv


def parse_options(argv: Sequence[str] | None) -> MemberOptions:
    """The command line (see the module docstring) as :class:`MemberOptions`."""
    parser = argparse.ArgumentParser(prog="python -m laminar.testing.group_member")
    parser.add_argument("--bootstrap", required=True, help="host:port[,host:port...]")
    parser.add_argument("--group", required=True, help="the consumer group to join")
    parser.add_argument(
        "--topic", dest="topics", action="append", required=True, help="a topic to read; repeat"
    )
    parser.add_argument("--instance-id", help="static membership: the member's stable key")
    parser.add_argument("--session-timeout-s", type=float, default=3.0, help="default: 3")
    parser.add_argument("--rebalance-timeout-s", type=float, default=10.0, help="default: 10")
    parser.add_argument(
        "--events", type=Path, help="JSON-lines file to append to (default: stdout)"
    )
    parser.add_argument(
        "--no-auto-commit", dest="auto_commit", action="store_false", help="commit explicitly only"
    )
    parser.add_argument(
        "--commit-every-batches",
        type=int,
        default=0,
        help="explicit commit every N batches (0: none)",
    )
    parser.add_argument(
        "--commit-on-revoke", action="store_true", help="commit in on_revoked (and so at close)"
    )
    parser.add_argument(
        "--delay-ms-per-batch", type=int, default=0, help="simulated processing time per batch"
    )
    parser.add_argument("--log-values", action="store_true", help="values in the batch events")
    args = parser.parse_args(argv)
    try:
        return MemberOptions(
            bootstrap=tuple(a for a in args.bootstrap.split(",") if a),
            group=args.group,
            topics=tuple(args.topics),
            events_path=args.events,
            instance_id=args.instance_id,
            session_timeout_s=args.session_timeout_s,
            rebalance_timeout_s=args.rebalance_timeout_s,
            auto_commit=args.auto_commit,
            commit_every_batches=args.commit_every_batches,
            commit_on_revoke=args.commit_on_revoke,
            delay_ms_per_batch=args.delay_ms_per_batch,
            log_values=args.log_values,
        )
    except ConfigError as error:
        parser.error(str(error))


# ----------------------------------------------------------------------------- the member


class EventLog:
    """Writes events as JSON lines, one ``write`` + flush per line, so a reader in
    another process sees whole lines (a SIGKILL can tear only the last one)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, event: str, **fields: object) -> None:
        line = json.dumps({"t": time.time(), "event": event, **fields}, separators=(",", ":"))
        self._stream.write(line + "\n")
        self._stream.flush()


class _StopFlag:
    """Set by SIGTERM/SIGINT; a plain attribute, as a signal handler may not take
    locks the interrupted main thread could be holding."""

    def __init__(self) -> None:
        self._requested = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self._requested = True

    def requested(self) -> bool:
        return self._requested


def _pairs(partitions: Iterable[TopicPartition]) -> list[list[object]]:
    return [[tp.topic, tp.partition] for tp in sorted(partitions)]


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return value.hex()


class _Member:
    """The loop of one member process: read, log, commit, until told to stop."""

    def __init__(self, options: MemberOptions, log: EventLog, stop: _StopFlag) -> None:
        self.options = options
        self.log = log
        self.stop = stop
        self.owned: set[TopicPartition] = set()
        """What the hooks say this member reads (checked against ``assignment()``)."""
        self.uncommitted_batches = 0
        self.consumer: Consumer[bytes, bytes] = Consumer(
            list(options.bootstrap),
            group=options.group,
            topics=list(options.topics),
            instance_id=options.instance_id,
            session_timeout_s=options.session_timeout_s,
            rebalance_timeout_s=options.rebalance_timeout_s,
            auto_commit=options.auto_commit,
            on_assigned=self._assigned,
            on_revoked=self._revoked,
            on_lost=self._lost,
        )

    def _assigned(self, partitions: list[TopicPartition]) -> None:
        self.owned.update(partitions)
        self.log.write("assigned", partitions=_pairs(partitions))

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        if self.options.commit_on_revoke:
            self._commit({tp: self.consumer.position(tp) for tp in partitions})
        self.owned.difference_update(partitions)
        self.log.write("revoked", partitions=_pairs(partitions))

    def _lost(self, partitions: list[TopicPartition]) -> None:
        self.owned.difference_update(partitions)
        self.log.write("lost", partitions=_pairs(partitions))

    def run(self) -> None:
        """Read until the stop flag is set, then close (commit, leave)."""
        session = self.consumer.group_session
        assert session is not None  # made with group=
        self.log.write("started", pid=os.getpid(), member_id=session.member.member_id)
        while not self.stop.requested():
            for batch in self.consumer.batches(timeout_s=IDLE_TIMEOUT_S):
                self._check_hooks()
                self._handle(batch)
                if self.stop.requested():
                    break
            self._check_hooks()
        if self.options.commit_every_batches and self.uncommitted_batches:
            self._commit()
        self.consumer.close()
        self.log.write("closed")

    def _handle(self, batch: ConsumerBatch[bytes, bytes]) -> None:
        fields: dict[str, object] = {
            "topic": batch.topic,
            "partition": batch.partition,
            "first": batch.first_offset,
            "next": batch.next_offset,
            "count": len(batch),
        }
        if self.options.log_values:
            fields["values"] = [_text(record.value) for record in batch.records()]
        self.log.write("batch", **fields)
        if self.options.delay_ms_per_batch:
            time.sleep(self.options.delay_ms_per_batch / 1000)
        self.uncommitted_batches += 1
        every = self.options.commit_every_batches
        if every and self.uncommitted_batches >= every:
            self._commit()

    def _commit(self, positions: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``positions`` (default: the position of every assigned partition).
        It names partitions the member may have lost meanwhile on purpose: a
        zombie's commit must be refused (``commit_error``), not silently skipped."""
        self.uncommitted_batches = 0
        consumer = self.consumer
        if positions is None:
            positions = {tp: consumer.position(tp) for tp in sorted(consumer.assignment())}
        offsets: dict[tuple[str, int], int] = {
            tp: offset for tp, offset in positions.items() if offset >= 0
        }
        if not offsets:
            return
        triples = [[topic, partition, offset] for (topic, partition), offset in offsets.items()]
        try:
            consumer.commit(offsets)
        except LaminarError as error:
            self.log.write(
                "commit_error", error=f"{type(error).__name__}: {error}", offsets=triples
            )
            return
        self.log.write("committed", offsets=triples)

    def _check_hooks(self) -> None:
        if self.consumer.assignment() != self.owned:
            raise AssertionError(
                f"assignment {sorted(self.consumer.assignment())} differs from what the hooks "
                f"said: {sorted(self.owned)}"
            )

    def abandon(self) -> None:
        """Close after an error, keeping the original exception."""
        with contextlib.suppress(Exception):
            self.consumer.close()


def main(argv: Sequence[str] | None = None) -> int:
    """The process: 0 after a clean close on SIGTERM/SIGINT, 1 after an error."""
    options = parse_options(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    stop = _StopFlag()
    signal.signal(signal.SIGTERM, stop.handle)
    signal.signal(signal.SIGINT, stop.handle)
    stream: IO[str]
    if options.events_path is None:
        stream = sys.stdout
    else:
        stream = open(options.events_path, "a", encoding="utf-8")  # noqa: SIM115 - till exit
    log = EventLog(stream)
    member: _Member | None = None
    try:
        member = _Member(options, log, stop)
        member.run()
    except Exception as error:
        log.write("error", error=repr(error))
        logging.getLogger(__name__).exception("group member failed")
        if member is not None:
            member.abandon()
        return 1
    finally:
        if stream is not sys.stdout:
            stream.close()
    return 0


# ----------------------------------------------------------------------------- the handle


class GroupMemberProcess:
    """A running ``python -m laminar.testing.group_member`` and its events file.

    Use it as a context manager (or call :meth:`stop`), so that no member process
    outlives the test or bench that started it. Its stdout and stderr (the
    client's logs) go to ``<events file>.log``.
    """

    def __init__(self, process: subprocess.Popen[bytes], events_path: Path, log_path: Path) -> None:
        self.process = process
        self.events_path = events_path
        self.log_path = log_path
        self._paused = False

    @classmethod
    def start(
        cls,
        bootstrap: str | Sequence[str],
        group: str,
        topics: Sequence[str],
        events_path: Path,
        *,
        instance_id: str | None = None,
        session_timeout_s: float = 3.0,
        rebalance_timeout_s: float = 10.0,
        auto_commit: bool = True,
        commit_every_batches: int = 0,
        commit_on_revoke: bool = False,
        delay_ms_per_batch: int = 0,
        log_values: bool = False,
    ) -> GroupMemberProcess:
        """Start a member process (the options are the command line's); the events
        file is emptied first, so it holds this process's events only."""
        addresses = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
        options = MemberOptions(
            bootstrap=tuple(addresses),
            group=group,
            topics=tuple(topics),
            events_path=events_path,
            instance_id=instance_id,
            session_timeout_s=session_timeout_s,
            rebalance_timeout_s=rebalance_timeout_s,
            auto_commit=auto_commit,
            commit_every_batches=commit_every_batches,
            commit_on_revoke=commit_on_revoke,
            delay_ms_per_batch=delay_ms_per_batch,
            log_values=log_values,
        )
        events_path.write_bytes(b"")
        log_path = events_path.with_name(events_path.name + ".log")
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "laminar.testing.group_member", *options.to_argv()],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C meant for the test does not reach it
            )
        return cls(process, events_path, log_path)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def events(self) -> list[Event]:
        """The events written so far; a last line without its newline (torn by a
        SIGKILL, or being written) is left out."""
        try:
            data = self.events_path.read_bytes()
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")
        return [json.loads(line) for line in lines[:-1] if line]

    def wait_event(
        self,
        predicate: Callable[[Event], bool],
        timeout_s: float,
        what: str = "an event",
        *,
        since: int = 0,
    ) -> Event:
        """The first event from index ``since`` on that satisfies ``predicate``,
        waiting up to ``timeout_s`` for it. Raises :class:`TimeoutError` (with the
        last events and log lines) on timeout, and at once if the process exits
        without writing one."""
        deadline_s = time.monotonic() + timeout_s
        while True:
            exited = not self.running  # before reading, so no last event is missed
            for event in self.events()[since:]:
                if predicate(event):
                    return event
            if exited:
                raise TimeoutError(self._describe(f"exited ({self.process.returncode})", what))
            if time.monotonic() >= deadline_s:
                raise TimeoutError(self._describe(f"timed out after {timeout_s:.0f} s", what))
            time.sleep(EVENT_POLL_S)

    def _describe(self, outcome: str, what: str) -> str:
        events = "\n".join(json.dumps(e)[:300] for e in self.events()[-10:])
        return (
            f"group member pid {self.pid} {outcome} waiting for {what}\n"
            f"last events:\n{events}\nlast log lines:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def pause(self) -> None:
        """SIGSTOP: every thread stops, heartbeats too (a stalled process)."""
        self.process.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self.process.send_signal(signal.SIGCONT)
        self._paused = False

    def kill(self) -> None:
        """SIGKILL (no close, no leave: a crash) and reap the process."""
        if self.running:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM (a clean close), then SIGKILL if it has not exited within
        ``timeout_s``; its exit status (negative: killed by that signal)."""
        if self.running:
            self.process.send_signal(signal.SIGTERM)
            if self._paused:
                self.resume()  # a stopped process acts on SIGTERM only once continued
            try:
                return self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(10)

    def __enter__(self) -> GroupMemberProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())


def zombie_records(events: Sequence[Event], resumed_t: float, held: Iterable[Sequence[Any]]) -> int:
    """Records a member resumed at ``resumed_t`` (after a stop past its session)
    handed out of partitions it ``held`` when it stopped, before an ``assigned``
    event gave each back to it: by then another member owned them. (Counting by the
    member's own hooks would miss exactly the records of a member that was not
    told.)"""
    lost = {(topic, partition) for topic, partition in held}
    zombies = 0
    for event in events:
        if event["t"] < resumed_t:
            continue
        partitions = {(topic, partition) for topic, partition in event.get("partitions", ())}
        if event["event"] == "assigned":
            lost -= partitions
        elif event["event"] == "batch" and (event["topic"], event["partition"]) in lost:
            zombies += int(event["count"])
    return zombies

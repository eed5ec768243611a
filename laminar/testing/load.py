"""A paced writer for tests and benchmarks that watch a cluster while it works.

:class:`PacedWriter` sends one record to one partition every ``interval_s`` from a
thread, through a :class:`~laminar_client.Producer` (acks=all, idempotent, no
linger), on a schedule (a late send does not push the later ones back), and keeps
every acknowledgement (partition, offset, value, when it arrived) with its latency,
and every error. The disk-full and repair runs, and the TLS rotation test, read
what they need from it: the longest gap without an acknowledgement, the latency
percentile of a window, the values sent and acknowledged.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from laminar_client import Producer, RecordMetadata

from laminar.testing.chaos import Ack

WAIT_S = 60.0
"""The producer's delivery timeout, and how long :meth:`PacedWriter.stop` flushes."""
ERROR_EXAMPLES_MAX = 5


@dataclass
class PacedWriter:
    """One record to ``topic``/``partition`` every ``interval_s`` (see the module
    docstring). ``value(sequence)`` makes each record's value; ``producer_options``
    go to the :class:`~laminar_client.Producer` (e.g. TLS options)."""

    bootstrap: list[str]
    topic: str
    partition: int = 0
    interval_s: float = 0.005
    value: Callable[[int], bytes] = field(default=lambda sequence: b"%09d" % sequence)
    producer_options: dict[str, Any] = field(default_factory=dict)
    acks: list[Ack] = field(default_factory=list)
    latencies: list[tuple[float, float]] = field(default_factory=list)
    """(send time, latency) of each acknowledged record, in ``time.monotonic()`` s."""
    sent: set[bytes] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)
    error_examples: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        options = {"linger_s": 0.0, "delivery_timeout_s": WAIT_S, **self.producer_options}
        self._producer: Producer[bytes, bytes] = Producer(self.bootstrap, **options)
        self._thread = threading.Thread(target=self._run, name="paced-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop sending, wait for the records sent (at most :data:`WAIT_S`), close."""
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(WAIT_S)
        self._producer.close()

    def last_ack_s(self) -> float:
        """When the last acknowledgement arrived (-1 before the first)."""
        with self._lock:
            return self.acks[-1].at_s if self.acks else -1.0

    def gap_s(self, start_s: float, end_s: float) -> float:
        """The longest time in ``[start_s, end_s]`` without an acknowledgement."""
        with self._lock:
            moments = [start_s, *(a.at_s for a in self.acks if start_s < a.at_s < end_s), end_s]
        return max(later - earlier for earlier, later in itertools.pairwise(moments))

    def p99_s(self, start_s: float, end_s: float) -> tuple[float, int]:
        """The 99th percentile latency of the records sent in ``[start_s, end_s)``,
        and how many there were."""
        with self._lock:
            window = sorted(latency for sent, latency in self.latencies if start_s <= sent < end_s)
        if len(window) < 2:
            return (window[0] if window else float("nan")), len(window)
        return statistics.quantiles(window, n=100, method="inclusive")[98], len(window)

    def _run(self) -> None:
        started = time.monotonic()
        for sequence in itertools.count():
            delay = started + sequence * self.interval_s - time.monotonic()
            if self._stop.wait(max(0.0, delay)):
                return
            value = self.value(sequence)
            with self._lock:
                self.sent.add(value)
            sent_s = time.monotonic()
            self._producer.send(
                self.topic,
                value,
                partition=self.partition,
                callback=partial(self._done, value, sent_s),
            )

    def _done(
        self, value: bytes, sent_s: float, metadata: RecordMetadata, error: BaseException | None
    ) -> None:
        now_s = time.monotonic()
        with self._lock:
            if error is None:
                self.acks.append(Ack(metadata.partition, metadata.offset, value, now_s))
                self.latencies.append((sent_s, now_s - sent_s))
                return
            self.errors[type(error).__name__] += 1
            if len(self.error_examples) < ERROR_EXAMPLES_MAX:
                self.error_examples.append(f"{type(error).__name__}: {error}")

"""The audit log: one JSON object per line for every authentication failure, every
denial and every admin operation, in a file of its own (``[auth] audit_log_file``).

A line::

    {"time": "2025-05-01T12:00:00.123Z", "node": "n1", "event": "denied",
     "principal": "User:bob", "method": "Produce", "operation": "write",
     "resource": "topic:orders", "result": "PERMISSION_DENIED",
     "reason": "no ACL allows it", "peer": "127.0.0.1:50412"}

``event`` is ``authentication_failed``, ``denied`` or ``admin`` (an admin call,
allowed: its ``result`` is ``OK`` or the status it failed with). The RPC path never
waits for the disk: :meth:`AuditLog.record` puts the line on a bounded queue that
a thread writes; when the queue is full the line is dropped and counted
(``dropped``), and the next line written says how many were. The file is bounded:
once it would pass ``bytes_max`` it is renamed ``<file>.1`` (replacing the
previous one) and a new file started, so the two together hold at most about
twice ``bytes_max``.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

_LOG = logging.getLogger(__name__)

QUEUE_LINES_MAX = 10_000
"""Lines waiting for the writer thread; more are dropped (and counted)."""
FIELD_CHARS_MAX = 512
"""Longest value of one field (a client-chosen name is cut there)."""


def _utc_now() -> str:
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


class AuditLog:
    """A size-bounded JSON-lines file written by a thread of its own."""

    def __init__(
        self,
        path: str,
        *,
        bytes_max: int,
        node_id: str = "",
        queue_lines_max: int = QUEUE_LINES_MAX,
        now: Callable[[], str] = _utc_now,
    ) -> None:
        self.path = path
        self.bytes_max = bytes_max
        self.node_id = node_id
        self.dropped = 0
        self._now = now
        self._queue: queue.Queue[str | None] = queue.Queue(maxsize=queue_lines_max)
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - the thread closes it
        self._size = self._file.tell()
        self._thread = threading.Thread(target=self._run, name="audit log", daemon=True)
        self._thread.start()

    def record(self, event: str, **fields: Any) -> None:
        """Queue one line (never blocks: dropped and counted when the queue is full)."""
        line: dict[str, Any] = {"time": self._now(), "node": self.node_id, "event": event}
        for name, value in fields.items():
            too_long = isinstance(value, str) and len(value) > FIELD_CHARS_MAX
            line[name] = value[:FIELD_CHARS_MAX] + "..." if too_long else value
        try:
            self._queue.put_nowait(json.dumps(line, separators=(",", ":")) + "\n")
        except queue.Full:
            self.dropped += 1

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued and stop the thread."""
        if not self._thread.is_alive():
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout_s)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        reported_dropped = 0
        try:
            while True:
                line = self._queue.get()
                if line is None:
                    return
                dropped = self.dropped
                if dropped != reported_dropped:
                    note = {
                        "time": self._now(),
                        "node": self.node_id,
                        "event": "dropped",
                        "lines": dropped - reported_dropped,
                    }
                    reported_dropped = dropped
                    self._write(json.dumps(note, separators=(",", ":")) + "\n")
                self._write(line)
                if self._queue.empty():
                    self._file.flush()
        except OSError as error:
            _LOG.error("audit log %s: %s; audit lines are no longer written", self.path, error)
        finally:
            self._file.close()

    def _write(self, line: str) -> None:
        data = line.encode()
        if self._size and self._size + len(data) > self.bytes_max:
            self._file.close()
            os.replace(self.path, self.path + ".1")
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
            self._size = 0
        self._file.write(line)
        self._size += len(data)

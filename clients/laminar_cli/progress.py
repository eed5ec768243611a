"""The progress line of ``produce`` and ``consume`` on stderr (``--progress``)."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

PROGRESS_INTERVAL_S = 1.0
"""How often the progress line is rewritten."""


def add_progress_options(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=(
            f"show a progress line on stderr, rewritten at most every second ('{verb} "
            f"1,234,567 records (245,000/s)'), and the total at the end; --no-progress: "
            f"never (default: on runs longer than a second, when stderr is a terminal"
            + (" and stdout is not" if verb == "consumed" else "")
            + ")"
        ),
    )


def progress_wanted(args: argparse.Namespace, *, stdout_busy: bool) -> bool | None:
    """True: show progress and the total; None: show it if the run lasts; False: never.

    ``--progress``/``--no-progress`` decide; else progress is shown on a terminal
    stderr, unless records go to stdout on the same terminal (``stdout_busy``), where
    the rewritten line would tangle with them.
    """
    if args.progress is not None:
        return bool(args.progress)
    if not isatty(sys.stderr) or (stdout_busy and isatty(sys.stdout)):
        return False
    return None


def isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A progress line on stderr: ``<verb> 1,234,567 records (245,000/s)``.

    A thread rewrites it in place (``\\r``) every ``PROGRESS_INTERVAL_S`` with the
    count ``count()`` returns and the rate since the previous line. On exit, the
    total and the mean rate end the line with a newline: always when ``wanted`` is
    True, only if a line was shown when it is None (short runs stay quiet); never
    when it is False.
    """

    def __init__(self, verb: str, count: Callable[[], int], wanted: bool | None) -> None:
        self._verb = verb
        self._count = count
        self._wanted = wanted
        self._stream = sys.stderr
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = 0  # length of the line on screen; 0: none yet
        self._started_s = time.monotonic()

    def __enter__(self) -> Progress:
        self._started_s = time.monotonic()
        if self._wanted is not False:
            self._thread = threading.Thread(target=self._run, name="laminar-progress", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        last_s, last_count = self._started_s, 0
        while not self._stop.wait(PROGRESS_INTERVAL_S):
            now_s, count = time.monotonic(), self._count()
            rate = (count - last_count) / max(now_s - last_s, 1e-9)
            self._show(f"{self._verb} {count:,} records ({rate:,.0f}/s)", end="")
            last_s, last_count = now_s, count

    def _show(self, line: str, *, end: str) -> None:
        with self._lock:
            if self._stop.is_set() and end == "":
                return  # finished meanwhile
            padding = " " * max(0, self._shown - len(line))
            try:
                self._stream.write(f"\r{line}{padding}{end}")
                self._stream.flush()
            except (OSError, ValueError):
                return
            self._shown = len(line) if end == "" else 0

    def __exit__(self, *exc_info: object) -> None:
        if self._thread is None:
            return
        with self._lock:
            self._stop.set()
            shown = self._shown > 0
        self._thread.join()
        if self._wanted or shown:
            elapsed_s = time.monotonic() - self._started_s
            count = self._count()
            rate = count / max(elapsed_s, 1e-9)
            self._show(
                f"{self._verb} {count:,} records in {elapsed_s:.1f} s ({rate:,.0f}/s)", end="\n"
            )

"""What every benchmark prints at its end: figures, their runs, notes, missed targets.

A bench measures into ``results`` (name -> median) and, where a figure has several
runs, ``runs`` (name -> each run's value); then :func:`print_report` prints one line
a figure with its spread, the notes (the machine and its load among them), the
targets missed, and the figures as one JSON line for scripts. :func:`run_main` is the
``__main__`` wrapper: Ctrl-C exits 130 without a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence

Targets = Mapping[str, tuple[str, float]]
"""Figure name -> (``">="`` or ``"<="``, target)."""


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``/proc/loadavg`` gives them."""
    with open("/proc/loadavg", encoding="ascii") as file:
        return " ".join(file.read().split()[:3])


def machine_note(load_before: str) -> str:
    """One line naming the machine's cores and its load before and after the run."""
    return (
        f"machine: {os.cpu_count()} cores, load average (1, 5, 15 min) {load_before} "
        f"before, {load_average()} after"
    )


def missed_targets(
    results: Mapping[str, float], targets: Targets, *, unmeasured: bool = False
) -> list[str]:
    """Each figure that misses its target; with ``unmeasured``, a target whose figure
    is absent counts as missed too."""
    missed = []
    for name, (op, target) in targets.items():
        value = results.get(name)
        if value is None:
            if unmeasured:
                missed.append(f"{name} not measured")
            continue
        if (op == ">=" and value < target) or (op == "<=" and value > target):
            missed.append(f"{name} {value:,.3f} (target {op} {target:,.4g})")
    return missed


def print_report(
    results: Mapping[str, float],
    *,
    missed: Sequence[str],
    runs: Mapping[str, Sequence[float]] | None = None,
    notes: Iterable[str] = (),
    digits: int = 3,
) -> None:
    """Print the figures (with each one's runs when there were several), the notes,
    the targets missed, and a JSON line of the figures rounded to ``digits + 1``."""
    width = max(map(len, results), default=0)
    for key, value in results.items():
        spread = (runs or {}).get(key, [])
        extra = ""
        if len(spread) > 1:
            extra = f"   (runs: {', '.join(f'{v:,.{digits}f}' for v in spread)})"
        print(f"{key:<{width}}  {value:,.{digits}f}{extra}")
    for note in notes:
        print(note)
    print("targets missed: " + ("; ".join(missed) if missed else "none"))
    print(json.dumps({key: round(value, digits + 1) for key, value in results.items()}))


def run_main(main: Callable[[], None]) -> None:
    """Run a bench's ``main``: exit 0, or 130 on Ctrl-C without a traceback."""
    with contextlib.suppress(KeyboardInterrupt):
        main()
        sys.exit(0)
    sys.exit(130)

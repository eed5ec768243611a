"""Range and term checks shared by the disk and memory logs."""

from __future__ import annotations

from laminar.errors import InvalidInputError, OffsetOutOfRangeError
from laminar.records import BatchHeader


def check_read_range(offset: int, start_offset: int, end_offset: int) -> None:
    """Raise ``OffsetOutOfRangeError`` unless ``start_offset <= offset <= end_offset``."""
    if not start_offset <= offset <= end_offset:
        raise OffsetOutOfRangeError(offset, start_offset, end_offset)


def check_term(term: int, last_term: int) -> None:
    """Terms in a log never go backward (Raft's log invariant)."""
    if term < 0:
        raise InvalidInputError(f"term must be >= 0, got {term}")
    if term < last_term:
        raise InvalidInputError(f"term {term} is below the log's last term {last_term}")


def check_replacement(
    header: BatchHeader, segment: int, end: int, after: int, term_min: int, term_max: int
) -> None:
    """A replacement batch of the segment ``[segment, end)`` must lie inside it, after
    the previous batch (which ended at ``after``), with a term in
    ``[term_min, term_max]`` (the previous batch's term, the log's next one)."""
    base_offset, next_offset = header.base_offset, header.next_offset
    if base_offset < after or next_offset > end:
        raise InvalidInputError(
            f"batch [{base_offset}, {next_offset}) does not fit in segment {segment} "
            f"after offset {after} and before {end}"
        )
    if not term_min <= header.term <= term_max:
        raise InvalidInputError(
            f"batch at offset {base_offset} has term {header.term}, outside "
            f"[{term_min}, {term_max}] of its place in the log"
        )

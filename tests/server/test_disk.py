"""Unit tests of the full-disk watermark (laminar.server.disk): a fake free-space
function, no disk and no sleeps."""

from __future__ import annotations

import errno

import pytest

from laminar.errors import ConfigError, StorageError
from laminar.server.disk import (
    DiskUsage,
    DiskWatch,
    is_no_space,
    watermark_bytes,
    write_refusal,
)

MIB = 1 << 20


class FakeDisk:
    """A filesystem of ``total_bytes`` whose free space the test sets; counts calls."""

    def __init__(self, free_bytes: int, total_bytes: int = 100 * MIB) -> None:
        self.free_bytes = free_bytes
        self.total_bytes = total_bytes
        self.calls = 0
        self.error: OSError | None = None

    def usage(self) -> DiskUsage:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return DiskUsage(self.free_bytes, self.total_bytes)


def watch(disk: FakeDisk, *, bytes_min: int = 10 * MIB, percent_min: float = 0.0) -> DiskWatch:
    return DiskWatch(
        free_bytes_min=bytes_min,
        free_percent_min=percent_min,
        check_interval_ms=500,
        usage=disk.usage,
    )


def test_the_watermark_is_the_larger_of_bytes_and_percent() -> None:
    assert watermark_bytes(100 * MIB, 10 * MIB, 0.0) == 10 * MIB
    assert watermark_bytes(100 * MIB, 10 * MIB, 20.0) == 20 * MIB
    assert watermark_bytes(100 * MIB, 0, 0.0) == 0


def test_below_the_watermark_the_node_is_full_and_back_only_above_it_by_a_tenth() -> None:
    disk = FakeDisk(free_bytes=50 * MIB)
    state = watch(disk, bytes_min=10 * MIB, percent_min=5.0)
    assert not state.check(0) and not state.full
    disk.free_bytes = 10 * MIB - 1
    assert state.check(500) and state.full  # changed: full
    disk.free_bytes = 10 * MIB + MIB // 2  # above the watermark, within the margin
    assert not state.check(1000) and state.full
    disk.free_bytes = 11 * MIB
    assert state.check(1500) and not state.full
    status = state.status()
    assert (status.free_bytes, status.total_bytes, status.watermark_bytes) == (
        11 * MIB,
        100 * MIB,
        10 * MIB,
    )


def test_the_percentage_alone_makes_a_node_full() -> None:
    disk = FakeDisk(free_bytes=15 * MIB)
    state = watch(disk, bytes_min=0, percent_min=20.0)
    assert state.check(0) and state.full
    assert state.status().watermark_bytes == 20 * MIB


def test_checks_run_at_most_once_per_interval() -> None:
    disk = FakeDisk(free_bytes=50 * MIB)
    state = watch(disk)
    assert state.due(0)
    state.check(0)
    assert not state.due(499) and state.due(500)
    assert state.due_ms == 500 and disk.calls == 1


def test_a_write_without_space_makes_the_node_full_until_space_grows_past_that() -> None:
    """ENOSPC with free space above the watermark (a quota, inodes): the node stays
    full until a check sees more free space than at the failure, not in a loop."""
    disk = FakeDisk(free_bytes=50 * MIB)
    state = watch(disk)
    state.check(0)
    assert state.note_no_space(10) and state.full
    assert not state.note_no_space(20)  # no change
    assert not state.check(500) and state.full  # as much space as at the failure
    disk.free_bytes += 1
    assert state.check(1000) and not state.full


def test_a_failed_measurement_keeps_the_state_and_says_why() -> None:
    disk = FakeDisk(free_bytes=5 * MIB)
    state = watch(disk)
    assert state.check(0) and state.full
    disk.error = OSError(errno.EIO, "Input/output error")
    assert not state.check(500) and state.full
    assert state.error is not None and "Input/output error" in state.error


def test_reservations_never_take_free_space_below_the_watermark() -> None:
    disk = FakeDisk(free_bytes=20 * MIB)
    state = watch(disk, bytes_min=10 * MIB)
    assert state.may_reserve(10 * MIB)
    assert not state.may_reserve(10 * MIB + 1)
    state.note_no_space(0)
    assert not state.may_reserve(1)  # nothing at all while full
    disk.error = OSError(errno.EIO, "Input/output error")
    assert not watch(disk).may_reserve(1)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"bytes_min": -1}, "disk_free_bytes_min"),
        ({"percent_min": 100.0}, "disk_free_percent_min"),
        ({"percent_min": -1.0}, "disk_free_percent_min"),
    ],
)
def test_impossible_settings_are_refused(settings: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        watch(FakeDisk(0), **settings)  # type: ignore[arg-type]


def test_no_space_errors_are_recognised_through_their_causes() -> None:
    assert is_no_space(OSError(errno.ENOSPC, "No space left on device"))
    assert is_no_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not is_no_space(OSError(errno.EIO, "Input/output error"))
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as error:
            raise StorageError("cannot write the state file") from error
    except StorageError as wrapped:
        assert is_no_space(wrapped)


def test_a_write_is_refused_only_without_a_majority_of_voters_with_space() -> None:
    voters = ("a", "b", "c")
    assert write_refusal(voters, set()) is None
    assert write_refusal(voters, {"a"}) is None  # b and c commit
    assert write_refusal(voters, {"a", "c", "x"}) == ("a", "c")
    assert write_refusal(("a",), {"a"}) == ("a",)
    assert write_refusal(("a", "b"), {"b"}) == ("b",)  # two voters need both
    assert write_refusal((), {"a"}) is None

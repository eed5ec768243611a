"""laminar.tuning: the allocator settings a node applies at start."""

from __future__ import annotations

import platform
import resource
import subprocess
import sys
import textwrap

import pytest

from laminar.tuning import (
    GRPC_EXPERIMENTS,
    raise_open_files_limit,
    tune_allocator,
    tune_grpc,
    tune_numpy,
)

# Megabyte-sized blocks of varying size, two alive at a time, above a heap of
# smaller blocks: the allocation pattern of a node serving fetches. Prints the
# page faults of the loop after a warm-up round.
_SCRIPT = textwrap.dedent(
    """
    import os, resource, sys
    from laminar.tuning import tune_allocator
    if sys.argv[1] == "tuned":
        assert tune_allocator()
    heap = [os.urandom(112_081) for _ in range(600)]
    def churn():
        data = None
        for i in range(300):
            data = b"\\0" * ((1 << 20) - (i % 3) * 100_000)
    churn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    churn()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)

glibc_only = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt is glibc's",
)


def _faults(mode: str) -> int:
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(result.stdout.strip())


@glibc_only
def test_tuned_allocator_stops_refaulting_megabyte_blocks() -> None:
    # 300 blocks of ~1 MB: untuned, glibc trims the heap top and faults it back in
    # (tens of thousands of faults here); tuned, the pages are reused.
    assert _faults("tuned") < 300


@glibc_only
def test_untuned_pattern_does_fault() -> None:
    # The check above means something only if the pattern faults without tuning.
    assert _faults("untuned") > 3000


def test_thresholds_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="mmap_threshold"):
        tune_allocator(mmap_threshold=1 << 40)
    with pytest.raises(ValueError, match="trim_threshold"):
        tune_allocator(trim_threshold=0)


def test_grpc_experiments_are_set_only_on_measured_versions() -> None:
    environ: dict[str, str] = {}
    assert tune_grpc("1.85.1", environ) is True
    assert environ == {"GRPC_EXPERIMENTS": GRPC_EXPERIMENTS}
    for version in ("1.99.0", "2.0.0", "1.84.2", "not-a-version", ""):
        untouched: dict[str, str] = {}
        assert tune_grpc(version, untouched) is False
        assert untouched == {}


def test_an_operators_grpc_experiments_are_kept() -> None:
    environ = {"GRPC_EXPERIMENTS": "something_else"}
    assert tune_grpc("1.85.1", environ) is False
    assert environ == {"GRPC_EXPERIMENTS": "something_else"}


def test_tune_numpy_keeps_one_blas_thread_unless_the_operator_chose() -> None:
    environ: dict[str, str] = {"OMP_NUM_THREADS": "4"}
    tune_numpy(environ)
    assert environ == {"OMP_NUM_THREADS": "4", "OPENBLAS_NUM_THREADS": "1"}


def test_the_open_files_limit_is_raised_to_the_hard_limit_and_a_low_one_is_reported() -> None:
    limits = {resource.RLIMIT_NOFILE: (1024, 1_048_576)}

    def get(which: int) -> tuple[int, int]:
        return limits[which]

    def put(which: int, value: tuple[int, int]) -> None:
        limits[which] = value

    assert raise_open_files_limit(get, put) == (1_048_576, None)
    assert limits[resource.RLIMIT_NOFILE] == (1_048_576, 1_048_576)
    limits[resource.RLIMIT_NOFILE] = (1024, 4096)
    soft, warning = raise_open_files_limit(get, put)
    assert soft == 4096
    assert warning is not None and "4096" in warning and "ulimit -n" in warning

    def refuse(which: int, value: tuple[int, int]) -> None:
        raise ValueError("not allowed")

    limits[resource.RLIMIT_NOFILE] = (1024, 1_048_576)
    soft, warning = raise_open_files_limit(get, refuse)
    assert soft == 1024 and warning is not None and "not allowed" in warning

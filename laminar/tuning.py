"""Process-wide tuning a node applies once at start (benchmarks apply it too).

Allocator
---------
glibc's ``malloc`` serves a request of 128 KiB or more with a fresh ``mmap`` until a
block that large is freed, and from then on from the heap, whose free top it hands
back to the kernel (``trim``) whenever it exceeds twice that size. A broker lives on
allocations of about a megabyte (a fetch's batches, a produce request) of which two
or three are alive at a time; with the default thresholds glibc keeps trimming the
heap top and faulting it back in. Measured on a 512 MiB sequential read through
:class:`laminar.segment.SegmentLog` in 1 MiB reads: 14,600 page faults and 5.2 GB/s
with the defaults, 0 faults and 8.2 GB/s with the values below. In the 3-node
cluster bench, a consumer reading from a follower went from 1.7-1.9M to 2.7-3.9M
records/s.

:func:`tune_allocator` fixes both thresholds: blocks below ``mmap_threshold`` come
from the heap, and up to ``trim_threshold`` bytes of free heap top are kept for
reuse instead of being returned. The cost is that much memory kept mapped after a
burst; it is bounded by ``trim_threshold``.

gRPC
----
grpcio's default server listener runs connections on its EventEngine threads, which
hand every completion to the completion-queue poller thread and that to the event
loop. :func:`tune_grpc` turns the ``event_engine_listener`` experiment off, so the
poller thread does the socket work itself. Measured on the 3-node bench (2 cores):
12 thread context switches per produce on the leader instead of 17, and the
one-record produce latency 0.1-0.3 ms lower at p50 and 0.04-0.6 ms lower at p99 in
four of four interleaved run pairs. Experiments are a grpcio implementation detail:
the setting is applied only on grpcio versions it was measured on (others would log
"Unknown experiment" once it is gone), and never over an operator's own
``GRPC_EXPERIMENTS``.

numpy
-----
The leader checks each produced batch's columns with numpy
(:func:`laminar.records.check_payload`), one small array at a time: no linear
algebra. Importing numpy starts OpenBLAS's thread pool (one thread per core), whose
threads took the 3-node bench's produce throughput down by 3-8% on 2 cores. :func:`tune_numpy`
keeps it to one thread (``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``) unless the
operator set them; it must run before numpy is imported. Measured, three interleaved
rounds each: rf1/rf3 records/s 1.53M/855k before numpy, 1.51M/820k with numpy's
default pool, 1.63M/862k with one thread.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import logging
import os
import platform
import resource
from collections.abc import Callable, MutableMapping

from laminar import libc

_LOG = logging.getLogger(__name__)

# mallopt parameter numbers, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MIB = 1024 * 1024
MMAP_THRESHOLD_BYTES = 32 * MIB
"""Allocations below this come from the heap (32 MiB is glibc's default ceiling on
64-bit hosts, where its adaptive threshold stops growing)."""

TRIM_THRESHOLD_BYTES = 64 * MIB
"""Free heap top kept for reuse instead of being returned to the kernel."""


def tune_allocator(
    mmap_threshold: int = MMAP_THRESHOLD_BYTES, trim_threshold: int = TRIM_THRESHOLD_BYTES
) -> bool:
    """Set glibc's mmap and trim thresholds; False (and nothing changed) off glibc.

    Both are set or neither: fixing only the trim threshold turns off glibc's
    adaptive mmap threshold, and every megabyte-sized block would then be a fresh
    ``mmap`` (measured: 3.5x slower reads).
    """
    for name, value in (("mmap_threshold", mmap_threshold), ("trim_threshold", trim_threshold)):
        if not 0 < value < 2**31:
            raise ValueError(f"{name} must be in (0, 2**31), got {value}")
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = libc.function("mallopt")
    if mallopt is None:  # pragma: no cover - unusual libc
        _LOG.debug("allocator left untuned: no mallopt in the C library")
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if not mallopt(_M_MMAP_THRESHOLD, mmap_threshold):
        _LOG.debug("mallopt(M_MMAP_THRESHOLD, %d) refused", mmap_threshold)
        return False
    if not mallopt(_M_TRIM_THRESHOLD, trim_threshold):  # pragma: no cover - never refused
        _LOG.debug("mallopt(M_TRIM_THRESHOLD, %d) refused", trim_threshold)
        return False
    return True


GRPC_EXPERIMENTS = "-event_engine_listener"
GRPC_VERSIONS_MEASURED = ((1, 85),)
"""grpcio (major, minor) versions on which :data:`GRPC_EXPERIMENTS` was measured."""


def tune_grpc(
    grpc_version: str | None = None, environ: MutableMapping[str, str] = os.environ
) -> bool:
    """Set ``GRPC_EXPERIMENTS`` for this process unless already set or untested.

    Call it before the process creates its first gRPC server or channel (gRPC
    reads the variable then). ``grpc_version`` defaults to the installed grpcio's.
    Returns whether it set the variable.
    """
    if "GRPC_EXPERIMENTS" in environ:
        return False
    try:
        if grpc_version is None:
            grpc_version = importlib.metadata.version("grpcio")
        major, minor = (int(part) for part in grpc_version.split(".")[:2])
    except (ValueError, importlib.metadata.PackageNotFoundError):
        return False
    if (major, minor) not in GRPC_VERSIONS_MEASURED:
        _LOG.info(
            "gRPC left at its defaults: %s was measured on grpcio %s, this is %s",
            GRPC_EXPERIMENTS,
            ", ".join(f"{a}.{b}" for a, b in GRPC_VERSIONS_MEASURED),
            grpc_version,
        )
        return False
    environ["GRPC_EXPERIMENTS"] = GRPC_EXPERIMENTS
    return True


NUMPY_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


def tune_numpy(environ: MutableMapping[str, str] = os.environ) -> None:
    """One BLAS thread for this process (see the module docstring), unless set."""
    for name in NUMPY_THREAD_VARIABLES:
        environ.setdefault(name, "1")


OPEN_FILES_LOW = 65_536
"""Below this hard limit a node says so at start: each replica holds its active
segment's file open, sealed segments' files are cached up to ``[host]
segment_files_max`` for the whole node, and clients, peers and sockets need theirs."""


def raise_open_files_limit(
    getrlimit: Callable[[int], tuple[int, int]] | None = None,
    setrlimit: Callable[[int, tuple[int, int]], None] | None = None,
) -> tuple[int, str | None]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (a node with thousands of
    partitions needs thousands of descriptors; the usual soft default is 1,024).

    Returns the soft limit now in force and a warning to print when the limit is
    low (None otherwise). The functions are parameters for tests.
    """
    get = getrlimit or resource.getrlimit
    put = setrlimit or resource.setrlimit
    soft, hard = get(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            put(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as error:
            return soft, f"could not raise the open files limit from {soft} to {wanted}: {error}"
    if soft != resource.RLIM_INFINITY and soft < OPEN_FILES_LOW:
        return soft, (
            f"the open files limit is {soft} (hard limit {hard}); a node holds about one "
            f"per partition replica plus connections: raise it (ulimit -n, or LimitNOFILE= "
            f"in a systemd unit) to at least {OPEN_FILES_LOW} for thousands of partitions"
        )
    return soft, None

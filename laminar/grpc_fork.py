"""gRPC's fork handlers off, so that a process using Laminar can start subprocesses.

``import laminar`` (the first thing ``laminar_client``, ``laminar_spark`` and every
``laminar.*`` module do) calls :func:`turn_off_grpc_fork_handlers` before any Laminar
module imports grpc. It sets ``GRPC_ENABLE_FORK_SUPPORT=false`` in ``os.environ``
unless the variable is already set (a value the user chose wins).

Why. grpcio's C core is built with fork support, on unless that variable says
otherwise, and registers ``pthread_atfork`` handlers. Since grpcio 1.80 the child
handler of its EventEngine starts the epoll poller thread again in every forked
child, once the process has a channel open (idle or busy, sync or ``grpc.aio``).
``subprocess.Popen`` with a ``preexec_fn`` forks (no vfork, so the handlers run),
then closes every descriptor above 2 (``close_fds``) before ``execve``: that closes
the poller's epoll descriptor under the new thread, whose next ``epoll_wait`` fails
with ``EBADF``, and gRPC aborts the child ("Epoll1Poller ... encountered epoll_wait
error: Bad file descriptor", SIGABRT) before it could exec. PySpark starts its JVM
just so (``java_gateway.launch_gateway``: ``Popen(command, preexec_fn=...)``) and
reports the dead child as ``JAVA_GATEWAY_EXITED``: a SparkSession started after a
Laminar client was used in the same process failed now and then. Measured on the
project's machine (grpcio 1.85.3, Python 3.11; ``Popen(["/bin/true"],
preexec_fn=...)`` in a loop): 3 to 5 % of the children died (SIGABRT) while an idle
Producer or only a plain gRPC channel was open, 21 % (most of them SIGSEGV) while a
Producer was sending; none of 400 once every channel was closed, and none of 400
with fork support off, idle or sending. The bug is gRPC's (grpc/grpc issue 43055,
open, which dates it to grpcio 1.80); turning the experiment ``event_engine_fork``
off does not help (3 of 400 still died).

Why an environment variable. gRPC reads it once, when its core initializes, which is
when grpc is imported; nothing in grpcio turns fork support off later, so the
variable must be in the environment before the first ``import grpc``. Setting it here
is the one place the library can do that for every entry point. Child processes
inherit it (Spark's JVM and its Python workers too), which is what they need as well.

What it costs. A child forked *without* exec cannot use gRPC state inherited from
the parent: with fork support off a new channel in such a child hangs (with it on,
the same test failed 4 times in 10 here). gRPC documents fork support in Python as
opt-in anyway; a process that uses Laminar should start workers with ``spawn`` or
``forkserver``, not ``fork``. Whoever needs gRPC's fork handlers sets
``GRPC_ENABLE_FORK_SUPPORT=true`` before importing Laminar, and takes the risk above.

If grpc was imported before Laminar, with the variable unset, it is too late for
this process: :func:`turn_off_grpc_fork_handlers` then warns (``RuntimeWarning``)
and says what to do.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping, MutableMapping

FORK_SUPPORT_VARIABLE = "GRPC_ENABLE_FORK_SUPPORT"
"""The environment variable gRPC's core reads at initialization."""

GRPC_CORE_MODULE = "grpc._cython.cygrpc"
"""Importing this module initializes gRPC's core (``import grpc`` imports it)."""

TOO_LATE_MESSAGE = (
    "grpc was imported before laminar, with GRPC_ENABLE_FORK_SUPPORT unset: gRPC's "
    "fork handlers stay on in this process, and a subprocess started with preexec_fn "
    "while a gRPC channel is open (PySpark's JVM launch is one) can die before exec "
    "(JAVA_GATEWAY_EXITED). Import laminar before grpc, or set "
    "GRPC_ENABLE_FORK_SUPPORT=false in the environment; see laminar.grpc_fork."
)


def turn_off_grpc_fork_handlers(
    environ: MutableMapping[str, str] | None = None,
    modules: Mapping[str, object] | None = None,
) -> bool:
    """Set ``GRPC_ENABLE_FORK_SUPPORT=false`` in ``environ`` (default ``os.environ``)
    unless it is set; True if it was set here.

    Warns when it was set here but gRPC's core is already in ``modules`` (default
    ``sys.modules``), so that the setting cannot take effect in this process.
    """
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if FORK_SUPPORT_VARIABLE in environ:
        return False
    environ[FORK_SUPPORT_VARIABLE] = "false"
    if GRPC_CORE_MODULE in modules:
        warnings.warn(TOO_LATE_MESSAGE, RuntimeWarning, stacklevel=2)
    return True

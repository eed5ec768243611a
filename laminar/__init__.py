"""Laminar: a peer-to-peer clustered, partitioned log broker.

Importing the package turns gRPC's fork handlers off (``GRPC_ENABLE_FORK_SUPPORT``,
unless set) before any Laminar module imports grpc, so that a process using Laminar
can start subprocesses such as PySpark's JVM: see :mod:`laminar.grpc_fork`.
"""

from laminar.grpc_fork import turn_off_grpc_fork_handlers

turn_off_grpc_fork_handlers()

__version__ = "0.1.0"

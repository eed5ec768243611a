"""Which tier each test belongs to: ``unit``, ``sim`` or ``process``.

Every collected test carries exactly one tier marker, so a tier can be selected
(``make test-fast`` runs ``-m "unit or sim"``; ``make test`` runs all three but the
slow, root-only and build tiers):

- ``unit``: one Python process, no node (neither a node process nor a ``Node``
  object), no child process, no Spark. In-process fakes on loopback (the client's
  ``FakeCluster``) count as unit.
- ``sim``: the deterministic simulators (``tests/sim``), seeded and in one process.
- ``process``: real nodes (processes, or ``Node`` objects serving on loopback),
  anything that starts a child process (the CLI, a bench, ``local_cluster.sh``), and
  Spark (its JVM is a child process).

A test gets its tier from an explicit marker (``@pytest.mark.process``, or
``pytestmark`` in its module) when it has one, else from this table: the directories
below, then the module's name (:data:`PROCESS_SUFFIXES`), then
:data:`PROCESS_MODULES`, else ``unit``. A ``unit`` or ``sim`` test that starts a child
process or a ``Node`` fails (``tests/conftest.py`` guards it), naming this table, so
the tiers stay honest as tests are added.
"""

from __future__ import annotations

TIERS = ("unit", "sim", "process")

SIM_DIRECTORIES = frozenset({"tests/sim"})

PROCESS_DIRECTORIES = frozenset(
    {
        "tests/chaos",
        "tests/disk_full",
        "tests/dist",
        "tests/multihost",
        "tests/spark",
        "tests/spark_cluster",
    }
)

PROCESS_SUFFIXES = ("_processes.py", "_inprocess.py")
"""A module named ``test_*_processes.py`` (node processes) or ``test_*_inprocess.py``
(``Node`` objects in the test's process) is a process test by its name."""

PROCESS_MODULES = frozenset(
    {
        "tests/client/test_migrating.py",
        "tests/security/test_authz_node.py",
        "tests/server/test_client_cluster.py",
        "tests/server/test_cluster.py",
        "tests/server/test_list_offsets.py",
        "tests/server/test_logs.py",
        "tests/server/test_produce_many.py",
        "tests/server/test_status_page_unit.py",
        "tests/server/test_transport.py",
        "tests/test_bench_smoke.py",
        "tests/test_cli.py",
        "tests/test_grpc_fork.py",
        "tests/test_local_cluster.py",
        "tests/test_operations_guide.py",
        "tests/test_packaging.py",
        "tests/test_systemd_unit.py",
        "tests/test_tuning.py",
    }
)


def tier_of(path: str) -> str:
    """The tier of the test module at ``path`` (relative to the checkout, with
    forward slashes) when it has no explicit tier marker."""
    directory = path.rsplit("/", 1)[0]
    while directory.count("/"):
        if directory in SIM_DIRECTORIES:
            return "sim"
        if directory in PROCESS_DIRECTORIES:
            return "process"
        directory = directory.rsplit("/", 1)[0]
    if path.endswith(PROCESS_SUFFIXES) or path in PROCESS_MODULES:
        return "process"
    return "unit"

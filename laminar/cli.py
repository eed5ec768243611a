"""The ``laminar`` console script: the client commands of :mod:`laminar_cli` and
``laminar node ...`` of :func:`laminar.server.cli.register`.

The one module that joins the two: :mod:`laminar_cli` imports no server module, and
the server's ``node`` family takes the client-side ``node maintenance`` command as
an argument instead of importing it. ``python -m laminar.cli`` runs the same command.

Contract for ``register``: it adds parsers to the given subparsers object and sets,
on each leaf parser, the default ``handler``: a callable taking the parsed
:class:`argparse.Namespace` and returning the exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from laminar_cli import app
from laminar_cli.cluster import add_maintenance_command

from laminar.server.cli import register as register_server


def _node_commands(commands: Any) -> None:
    """``laminar node start|config`` and, from the client side, ``node maintenance``."""
    register_server(commands, add_maintenance_command)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (exposed for tests and documentation)."""
    return app.build_parser([_node_commands])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``laminar`` command; the process exit code."""
    return app.main(argv, [_node_commands])


if __name__ == "__main__":
    sys.exit(main())

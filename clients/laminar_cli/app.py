"""The ``laminar`` command's parser and runner: the global options, each command
family's ``register``, and one-line errors with the exit codes of
:mod:`laminar_cli.common`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from laminar.errors import ClusterUnreachableError, LaminarError
from laminar_cli import cluster, consume, group, partition, produce, security, topic
from laminar_cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    LOCAL_CLUSTER_HINT,
    Handler,
    add_connection_options,
    one_line,
)

Register = Callable[[Any], None]
"""A command family: adds its parsers to the ``laminar`` command's subparsers."""

FAMILIES: tuple[Register, ...] = (
    topic.register,
    produce.register,
    consume.register,
    cluster.register,
    group.register,
    partition.register,
    security.register,
)
"""The client command families, in the order ``laminar --help`` lists them."""


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (plus the hint to ask for ``--help``), exit 2."""

    def error(self, message: str) -> Any:  # argparse's signature says NoReturn
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(extra_commands: Sequence[Register] = ()) -> argparse.ArgumentParser:
    """The full argument parser: the client families, then ``extra_commands`` (the
    console script adds ``node`` there)."""
    parser = _Parser(
        prog="laminar",
        # No abbreviated global options: "--to" of a subcommand must not read as
        # an ambiguous "--token".
        allow_abbrev=False,
        description="Operate a Laminar cluster: topics, produce, consume, groups, cluster status.",
    )
    add_connection_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in (*FAMILIES, *extra_commands):
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None, extra_commands: Sequence[Register] = ()) -> int:
    """Run the ``laminar`` command; the process exit code."""
    parser = build_parser(extra_commands)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    handler: Handler = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (e.g. `laminar consume ... | head`): not an error.
        _silence_stdout()
        return 0
    except (LaminarError, OSError) as error:
        message = one_line(error)
        if isinstance(error, ClusterUnreachableError):
            message += f" Start a local cluster with {LOCAL_CLUSTER_HINT}"
        print(f"laminar: error: {message}", file=sys.stderr)
        return EXIT_ERROR


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass

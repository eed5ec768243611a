"""What every command family shares: the global options (bootstrap, timeout,
token, TLS) and the :class:`~laminar_client.Client` they make, output helpers
(stdout, tables, one-line errors and warnings) and argument types."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from laminar_client import Client, TlsOptions
from laminar_client.client import UNKNOWN_TOPIC_WAIT_S
from laminar_client.tls import TLS_ENV
from laminar_client.transport import read_token_file

from laminar.errors import InvalidInputError

DEFAULT_BOOTSTRAP = "127.0.0.1:7100"
BOOTSTRAP_ENV = "LAMINAR_BOOTSTRAP"
TOKEN_ENV = "LAMINAR_TOKEN"
LOCAL_CLUSTER_HINT = (
    "`scripts/local_cluster.sh start` (it prints the export LAMINAR_BOOTSTRAP=... line "
    "to use), or give running nodes' gRPC addresses in --bootstrap or $LAMINAR_BOOTSTRAP."
)
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

ATTEMPT_TIMEOUT_S = 3.0
"""The longest one attempt of ``produce`` or ``consume`` waits (capped by ``--timeout``)."""

Handler = Callable[[argparse.Namespace], int]


# --------------------------------------------------------------------------- options


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap``, ``--timeout``, ``--token``, ``--token-file`` and the TLS
    options: what :func:`connect` reads."""
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP),
        metavar="ADDR[,ADDR]",
        help=(
            "gRPC address(es) of any node(s), comma-separated "
            f"(default: ${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP})"
        ),
    )
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=30.0,
        metavar="SECONDS",
        help=(
            "deadline of each call, retries included (default: 30); a call gives up "
            "within about a second when every bootstrap address refuses the connection"
        ),
    )
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV) or None,
        metavar="TOKEN",
        help=(
            "bearer token sent with every call (default: $LAMINAR_TOKEN); see "
            "`laminar token create`. Without one the command calls as User:ANONYMOUS"
        ),
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="read the bearer token from this file (its first line) instead of --token",
    )
    _add_tls_options(parser)


def _add_tls_options(parser: argparse.ArgumentParser) -> None:
    tls = parser.add_argument_group(
        "TLS", "for a cluster whose nodes serve TLS (docs/operations.md, TLS)"
    )
    for flag, name, metavar, what in (
        (
            "--tls-ca",
            "ca_file",
            "FILE",
            "PEM bundle of the CAs that signed the nodes' certificates",
        ),
        ("--tls-cert", "cert_file", "FILE", "PEM client certificate (nodes with client_auth)"),
        ("--tls-key", "key_file", "FILE", "PEM key of --tls-cert"),
        (
            "--tls-server-name",
            "server_name",
            "NAME",
            "name to check the nodes' certificates against instead of each address's host",
        ),
    ):
        variable = TLS_ENV[name]
        tls.add_argument(
            flag,
            dest=f"tls_{name}",
            default=os.environ.get(variable, ""),
            metavar=metavar,
            help=f"{what} (default: ${variable})",
        )


def _tls_options(args: argparse.Namespace) -> TlsOptions | None:
    """The TLS options the flags (or ``LAMINAR_TLS_*``) give; None without a CA."""
    values = [args.tls_ca_file, args.tls_cert_file, args.tls_key_file, args.tls_server_name]
    if not args.tls_ca_file:
        if any(values):
            raise InvalidInputError("--tls-cert, --tls-key and --tls-server-name need --tls-ca")
        return None
    return TlsOptions(*values)


def connect(args: argparse.Namespace) -> Client:
    """The client the global options describe."""
    return Client(
        args.bootstrap, timeout_s=args.timeout, token=_token(args), tls=_tls_options(args)
    )


def _token(args: argparse.Namespace) -> str | None:
    """The bearer token: ``--token-file``'s first line, else ``--token`` / $LAMINAR_TOKEN."""
    path = getattr(args, "token_file", None)
    if path:
        return read_token_file(path, "--token-file")
    token: str | None = getattr(args, "token", None)
    return token


def partition_count(client: Client, topic: str) -> int:
    """The topic's partition count; :class:`UnknownTopicOrPartitionError` once it
    stayed unknown for ``UNKNOWN_TOPIC_WAIT_S`` (a topic created a moment ago may not
    have reached every node yet)."""
    deadline_s = time.monotonic() + UNKNOWN_TOPIC_WAIT_S
    metadata = client.metadata()
    while topic not in metadata.topics and time.monotonic() < deadline_s:
        time.sleep(0.1)
        metadata = client.metadata(refresh=True)
    return metadata.topic(topic).config.partitions


# --------------------------------------------------------------------------- output


def out() -> TextIO:
    return sys.stdout


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    stream = out()
    for row in [header, *rows]:
        stream.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        stream.write("\n")


def one_line(error: BaseException) -> str:
    """An error as one line: its message's first line, or its type's name."""
    text = str(error)
    return text.splitlines()[0] if text else type(error).__name__


def warn(message: str) -> None:
    print(f"laminar: warning: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- argument types


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value

"""The client commands of ``laminar``: topics, produce, consume, consumer groups,
cluster operations, ACLs and tokens.

Every command talks to the cluster through :class:`laminar_client.Client`,
bootstrapping from ``--bootstrap`` (comma-separated ``host:port`` gRPC addresses;
default: the ``LAMINAR_BOOTSTRAP`` environment variable, else ``127.0.0.1:7100``,
the first node of ``scripts/local_cluster.sh``). Any error prints one line,
``laminar: error: <message>``, to stderr and exits non-zero (1 for a Laminar or
I/O error, 2 for bad usage, 130 when interrupted); never a traceback. When every
bootstrap address refuses the connection (nothing listens there) a command fails
within about a second, saying so and how to start a local cluster (and so when
every TLS handshake fails, saying why: ``--tls-ca``, ``--tls-cert``, ``--tls-key``
or ``LAMINAR_TLS_CA`` etc. give the CA and client certificate); errors that can
pass (a node starting, an election) are retried until ``--timeout``.

One module per command family, each with a ``register(commands)`` that adds its
parsers to the ``laminar`` command's subparsers and sets, on each leaf parser, the
default ``handler`` (a callable taking the parsed :class:`argparse.Namespace` and
returning the exit code): :mod:`~laminar_cli.topic`, :mod:`~laminar_cli.produce`,
:mod:`~laminar_cli.consume`, :mod:`~laminar_cli.cluster` (with
:mod:`~laminar_cli.keyring`, and :mod:`~laminar_cli.rolling` for ``cluster
rolling-restart``), :mod:`~laminar_cli.group`,
:mod:`~laminar_cli.partition`, :mod:`~laminar_cli.security` (``acl``, ``token``).
What they share: :mod:`~laminar_cli.common` (the global options, the client they
make, output and argument helpers) and :mod:`~laminar_cli.progress`.
:mod:`~laminar_cli.app` builds the parser and runs a command.

This package imports no server module: the ``laminar`` console script,
:mod:`laminar.cli`, adds ``laminar node ...`` (:func:`laminar.server.cli.register`)
through :func:`laminar_cli.app.main`'s ``extra_commands``.
"""

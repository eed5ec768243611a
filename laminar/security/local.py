"""A throwaway secured set-up for a local cluster: CA, node certificates, a gossip
keyring, an admin token, and each node's ``[tls]``/``[auth]``/``[gossip_encryption]``.

``scripts/local_cluster.sh start N --secure`` runs ``python -m laminar.security.local
DIR node0 node1 ...``; tests and benchmarks call :func:`make_secure_dir`. Everything
lands in ``DIR`` (keys with mode 0600):

- ``ca.crt`` / ``ca.key``: the CA (clients pass ``ca.crt``: ``LAMINAR_TLS_CA``);
- ``<node>.crt`` / ``<node>.key``: each node's certificate, naming
  ``laminar:node/<node>``, 127.0.0.1 and localhost;
- ``admin.crt`` / ``admin.key``: a client certificate whose principal is
  ``User:admin``;
- ``tokens.toml`` and ``admin.token``: the token file the nodes read, and the admin's
  token (``LAMINAR_TOKEN``), a super user;
- ``<node>.keyring.json``: the gossip keyring of each node (one key, both verify
  switches on; one file a node, since a node rewrites its own on a change);
- ``<node>.toml``: the node's config file (``--config``).

Not for production: one CA key on the same disk, a year's validity, and every node
a super user. docs/operations.md ("Security") shows what an operator sets instead.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from laminar.membership.keyring import KeyringState, parse_key, save_keyring
from laminar.membership.keyring import generate_key as generate_gossip_key
from laminar.security import certs
from laminar.security.tokens import add_token

ADMIN = "User:admin"
"""The super user whose token and certificate the set-up makes."""
DEFAULT_HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True, slots=True)
class SecureFiles:
    """Where :func:`make_secure_dir` put things (see the module docstring)."""

    root: Path
    ca_file: Path
    admin_token: str
    admin_cert: Path
    admin_key: Path
    node_configs: dict[str, Path]

    def client_env(self) -> dict[str, str]:
        """The environment a ``laminar`` command needs to talk to the cluster as admin."""
        return {"LAMINAR_TLS_CA": str(self.ca_file), "LAMINAR_TOKEN": self.admin_token}


def make_secure_dir(
    root: str | os.PathLike[str],
    node_ids: Sequence[str],
    *,
    hosts: Sequence[str] = DEFAULT_HOSTS,
    client_auth: str = "request",
    authorization: bool = True,
    gossip_encryption: bool = True,
    audit_log: bool = True,
) -> SecureFiles:
    """Make the files of a secured local cluster of ``node_ids`` under ``root``."""
    directory = Path(root).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    ca = certs.make_ca("Laminar local CA")
    ca.write(directory / "ca.crt", directory / "ca.key")
    admin = certs.make_client_cert(ca, "admin")
    admin.write(directory / "admin.crt", directory / "admin.key")
    token_file = directory / "tokens.toml"
    token_file.unlink(missing_ok=True)
    token = add_token(token_file, "admin")
    token_path = directory / "admin.token"
    descriptor = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(descriptor, token.encode() + b"\n")
    finally:
        os.close(descriptor)
    gossip_key = parse_key(generate_gossip_key())
    cluster_key = secrets.token_urlsafe(24)
    configs: dict[str, Path] = {}
    for node_id in node_ids:
        node = certs.make_node_cert(ca, node_id, list(hosts))
        node.write(directory / f"{node_id}.crt", directory / f"{node_id}.key")
        lines = [
            f"cluster_key = {_toml(cluster_key)}",
            "",
            "[tls]",
            f"cert_file = {_toml(directory / f'{node_id}.crt')}",
            f"key_file = {_toml(directory / f'{node_id}.key')}",
            f"ca_file = {_toml(directory / 'ca.crt')}",
            f"client_auth = {_toml(client_auth)}",
            "",
            "[auth]",
            f"token_file = {_toml(token_file)}",
            f"authorization = {'true' if authorization else 'false'}",
            f'super_users = ["{ADMIN}"]',
        ]
        if audit_log:
            lines.append(f"audit_log_file = {_toml(directory / f'{node_id}.audit.log')}")
        if gossip_encryption:
            keyring = directory / f"{node_id}.keyring.json"
            save_keyring(str(keyring), KeyringState(keys=(gossip_key,)))
            lines += ["", "[gossip_encryption]", f"keyring_file = {_toml(keyring)}"]
        path = directory / f"{node_id}.toml"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        configs[node_id] = path
    return SecureFiles(
        directory,
        directory / "ca.crt",
        token,
        directory / "admin.crt",
        directory / "admin.key",
        configs,
    )


def _toml(value: object) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(str(value))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m laminar.security.local",
        description=(
            "Make a throwaway CA, node certificates, a gossip keyring, an admin token "
            "and node config files for a secured local cluster (not for production)."
        ),
    )
    parser.add_argument("dir", help="directory for the files (created)")
    parser.add_argument("nodes", nargs="+", help="node ids (node0 node1 ...)")
    parser.add_argument(
        "--host",
        action="append",
        dest="hosts",
        help="an address or name the nodes are reached at (repeat; default 127.0.0.1, localhost)",
    )
    args = parser.parse_args(argv)
    files = make_secure_dir(args.dir, args.nodes, hosts=args.hosts or DEFAULT_HOSTS)
    for name, value in files.client_env().items():
        print(f"export {name}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

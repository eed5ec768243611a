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
- ``gossip.key`` and ``cluster.key``: the gossip encryption key and the cluster key
  every node is given;
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
    """Make the files of a secured local cluster of ``node_ids`` under ``root``.

    Again on the same ``root`` (more nodes, a restart), it keeps the CA, the token,
    the gossip key and the cluster key it made the first time, and writes only what
    is missing: a node's certificate, keyring and config are made once."""
    directory = Path(root).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "ca.crt").exists() and (directory / "ca.key").exists():
        ca = certs.Pem((directory / "ca.crt").read_bytes(), (directory / "ca.key").read_bytes())
    else:
        ca = certs.make_ca("Laminar local CA")
        ca.write(directory / "ca.crt", directory / "ca.key")
    if not (directory / "admin.crt").exists():
        certs.make_client_cert(ca, "admin").write(directory / "admin.crt", directory / "admin.key")
    token_file = directory / "tokens.toml"
    token_path = directory / "admin.token"
    if token_path.exists() and token_file.exists():
        token = token_path.read_text(encoding="utf-8").strip()
    else:
        token_file.unlink(missing_ok=True)
        token = add_token(token_file, "admin")
        _write_secret(token_path, token + "\n")
    gossip_key_path = directory / "gossip.key"
    if not gossip_key_path.exists():
        _write_secret(gossip_key_path, generate_gossip_key() + "\n")
    gossip_key = parse_key(gossip_key_path.read_text(encoding="utf-8").strip())
    cluster_key_path = directory / "cluster.key"
    if not cluster_key_path.exists():
        _write_secret(cluster_key_path, secrets.token_urlsafe(24) + "\n")
    cluster_key = cluster_key_path.read_text(encoding="utf-8").strip()
    configs: dict[str, Path] = {}
    for node_id in node_ids:
        path = directory / f"{node_id}.toml"
        configs[node_id] = path
        if path.exists():
            continue
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
            # The admin certificate (CN=admin) is User:admin; others keep their DN.
            f"principal_rules = {_toml_list(['RULE:^CN=admin$/admin/', 'DEFAULT'])}",
        ]
        if audit_log:
            lines.append(f"audit_log_file = {_toml(directory / f'{node_id}.audit.log')}")
        if gossip_encryption:
            keyring = directory / f"{node_id}.keyring.json"
            save_keyring(str(keyring), KeyringState(keys=(gossip_key,)))
            lines += ["", "[gossip_encryption]", f"keyring_file = {_toml(keyring)}"]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return SecureFiles(
        directory,
        directory / "ca.crt",
        token,
        directory / "admin.crt",
        directory / "admin.key",
        configs,
    )


def _write_secret(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(descriptor, text.encode())
    finally:
        os.close(descriptor)


def _toml_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(_toml(value) for value in values) + "]"


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

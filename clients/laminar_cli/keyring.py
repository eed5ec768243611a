"""``laminar cluster keyring generate|list|install|use|remove|verify``: gossip
encryption keys, on every live member."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from laminar_client import Client, GossipKeyring

from laminar.errors import InvalidInputError, LaminarError
from laminar.membership.keyring import (
    KeyringState,
    format_key,
    generate_key,
    key_fingerprint,
    parse_key,
    save_keyring,
)
from laminar_cli.common import EXIT_ERROR, connect, one_line, out, table, warn

_KEYRING_DESCRIPTION = (
    "Gossip encryption keys (AES-256-GCM), Serf style: install, use, list and remove "
    "go to every live member and print one line per node; a node that fails is named "
    "and the command exits 1 (run it again: every change is idempotent). Rotation: "
    "install NEW; use NEW; remove OLD (each step on every node before the next). "
    "Switching a running cluster from plain to encrypted gossip: install KEY (a node "
    "started without a keyring file has both switches off, so nothing changes yet), "
    "then verify --outgoing on, then verify --incoming on. Each node saves its keyring "
    "([gossip_encryption] keyring_file, default <data_dir>/keyring.json) before it "
    "applies a change. Keys are secrets: keep them out of shell history and logs. "
    "See docs/operations.md, 'Gossip encryption'."
)


def register(actions: Any) -> None:
    """``keyring ...`` under ``actions`` (``laminar cluster``'s)."""
    keyring = actions.add_parser(
        "keyring",
        help="gossip encryption keys: generate, list, install, use, remove; verify switches",
        description=_KEYRING_DESCRIPTION,
    )
    commands = keyring.add_subparsers(dest="keyring_action", metavar="ACTION", required=True)
    generate = commands.add_parser(
        "generate",
        help="print a new random key (base64, 32 bytes)",
        description=(
            "Print a new random 32-byte key, base64. With --keyring-file, also write a "
            "new keyring file holding it as the primary key (copy it to each node's "
            "keyring_file before their first start to start encrypted); an existing "
            "file is never overwritten."
        ),
    )
    generate.add_argument("--keyring-file", metavar="PATH", help="write a new keyring file")
    generate.set_defaults(handler=_keyring_generate)
    listing = commands.add_parser(
        "list",
        help="each member's keys and switches, then each key with how many members hold it",
    )
    listing.set_defaults(handler=_keyring_list)
    for name, text in (
        ("install", "add a key on every live member (received with, not yet sent with)"),
        ("use", "make an installed key the primary (sent with) on every live member"),
        ("remove", "remove a key from every live member (not the primary)"),
    ):
        command = commands.add_parser(name, help=text, description=text)
        command.add_argument("key", help="the key, base64 (from keyring generate)")
        command.set_defaults(handler=_keyring_change, keyring_change=name)
    verify = commands.add_parser(
        "verify",
        help="set encrypt_verify_incoming / encrypt_verify_outgoing on every live member",
        description=(
            "--outgoing off: send plain gossip; on: seal it with the primary key. "
            "--incoming off: accept plain gossip too; on: refuse it. Both are off on a "
            "node started without a keyring file and on in a file that generate "
            "--keyring-file writes. Switching a running cluster to encryption: outgoing "
            "on everywhere before incoming on anywhere."
        ),
    )
    verify.add_argument("--incoming", choices=("on", "off"), help="refuse plain gossip")
    verify.add_argument("--outgoing", choices=("on", "off"), help="seal sent gossip")
    verify.set_defaults(handler=_keyring_change, keyring_change="set-verify")


def _keyring_generate(args: argparse.Namespace) -> int:
    text = generate_key()
    path = args.keyring_file
    if path is not None:
        if os.path.exists(path):
            raise InvalidInputError(f"{path} exists: not overwriting a keyring file")
        save_keyring(path, KeyringState((parse_key(text),)))
    print(text, file=out())
    return 0


def _keyring_list(args: argparse.Namespace) -> int:
    answers, failed = _keyring_on_members(
        args, lambda client, address: client.gossip_keyring(address)
    )
    holders: dict[bytes, list[str]] = {}
    primaries: dict[bytes, list[str]] = {}
    for answer in answers:
        for key in answer.keys:
            holders.setdefault(key, []).append(answer.node_id)
        if answer.primary is not None:
            primaries.setdefault(answer.primary, []).append(answer.node_id)
    total = len(answers) + failed
    rows = [
        [format_key(key), f"{len(nodes)}/{total}", f"{len(primaries.get(key, []))}/{total}"]
        for key, nodes in sorted(holders.items(), key=lambda item: -len(item[1]))
    ]
    if rows:
        table(["KEY", "HELD BY", "PRIMARY ON"], rows)
    return EXIT_ERROR if failed else 0


def _keyring_change(args: argparse.Namespace) -> int:
    action = args.keyring_change
    if action == "set-verify":
        if args.incoming is None and args.outgoing is None:
            raise InvalidInputError("give --incoming on|off and/or --outgoing on|off")
        incoming = None if args.incoming is None else args.incoming == "on"
        outgoing = None if args.outgoing is None else args.outgoing == "on"
        key = b""
    else:
        incoming = outgoing = None
        key = parse_key(args.key)

    def change(client: Client, address: str) -> GossipKeyring:
        return client.gossip_keyring(
            address,
            action,
            key=key,
            encrypt_verify_incoming=incoming,
            encrypt_verify_outgoing=outgoing,
        )

    _, failed = _keyring_on_members(args, change)
    return EXIT_ERROR if failed else 0


def _keyring_on_members(
    args: argparse.Namespace, call: Callable[[Client, str], GossipKeyring]
) -> tuple[list[GossipKeyring], int]:
    """``call`` on every live member, one line each; the answers and the failures."""
    stream = out()
    answers: list[GossipKeyring] = []
    failed = 0
    with connect(args) as client:
        members = sorted(client.metadata(refresh=True).members.values(), key=lambda m: m.node_id)
        for member in members:
            if not member.live:
                continue
            try:
                if not member.grpc_address:
                    raise InvalidInputError("no known gRPC address")
                answer = call(client, member.grpc_address)
            except LaminarError as error:
                failed += 1
                print(f"{member.node_id}: failed: {one_line(error)}", file=stream, flush=True)
                continue
            answers.append(answer)
            print(f"{member.node_id}: {_keyring_line(answer)}", file=stream, flush=True)
    if failed:
        warn(f"{failed} node(s) failed: run the command again once they are reachable")
    return answers, failed


def _keyring_line(answer: GossipKeyring) -> str:
    primary = answer.primary
    return (
        f"{len(answer.keys)} key(s), primary "
        f"{'none' if primary is None else key_fingerprint(primary)}, "
        f"verify incoming {'on' if answer.encrypt_verify_incoming else 'off'}, "
        f"outgoing {'on' if answer.encrypt_verify_outgoing else 'off'}"
    )

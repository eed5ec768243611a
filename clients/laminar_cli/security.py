"""``laminar acl create|list|delete`` and ``laminar token create``."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from laminar.errors import InvalidInputError
from laminar.security.acl import OPERATIONS as ACL_OPERATIONS
from laminar.security.acl import Acl, AclFilter
from laminar_cli.common import connect, out


def register(commands: Any) -> None:
    """``acl`` and ``token``."""
    _add_acl_commands(commands)
    _add_token_commands(commands)


def _add_acl_commands(commands: Any) -> None:
    acl = commands.add_parser(
        "acl",
        help="create, list or delete access control lists",
        description=(
            "ACLs say which principal (User:NAME, from a token or a client certificate; "
            "User:* for everyone) may do which operation on a topic, a consumer group or "
            "the cluster. They are kept in the cluster metadata and apply on every node "
            "once [auth] authorization = true: then what no ACL allows is denied (except "
            "to super_users), a deny wins over any allow, and read, write, alter or "
            "delete on a resource also allow describe. Changing ACLs needs alter on the "
            "cluster; listing them describe. See docs/operations.md, "
            '"Authentication and ACLs".'
        ),
    )
    actions = acl.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create an ACL (allow, or --deny)")
    _acl_arguments(create, required=True)
    create.set_defaults(handler=_acl_create)
    listing = actions.add_parser("list", help="list ACLs (all, or those matching the options)")
    _acl_arguments(listing, required=False)
    listing.set_defaults(handler=_acl_list)
    delete = actions.add_parser(
        "delete", help="delete every ACL matching the options (at least one option)"
    )
    _acl_arguments(delete, required=False)
    delete.set_defaults(handler=_acl_delete)


def _acl_arguments(parser: Any, *, required: bool) -> None:
    which = "" if required else " (filter)"
    parser.add_argument(
        "--principal", required=required, help=f"User:NAME, or User:* for everyone{which}"
    )
    parser.add_argument(
        "--operation",
        required=required,
        choices=ACL_OPERATIONS,
        help=f"the operation{which}",
    )
    resource = parser.add_mutually_exclusive_group(required=required)
    resource.add_argument("--topic", help=f"a topic name (or prefix, with --prefixed){which}")
    resource.add_argument("--group", help=f"a consumer group name (or prefix){which}")
    resource.add_argument("--cluster", action="store_true", help=f"the cluster{which}")
    parser.add_argument(
        "--prefixed", action="store_true", help="the name is a prefix (default: literal)"
    )
    parser.add_argument("--deny", action="store_true", help="a deny ACL (default: allow)")


def _acl_resource(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.topic is not None:
        return "topic", args.topic
    if args.group is not None:
        return "group", args.group
    if args.cluster:
        return "cluster", "cluster"
    return None, None


def _acl_create(args: argparse.Namespace) -> int:
    resource_type, name = _acl_resource(args)
    assert resource_type is not None and name is not None  # required by the parser
    acl = Acl(
        args.principal,
        args.operation,
        resource_type,
        name,
        "prefixed" if args.prefixed else "literal",
        "deny" if args.deny else "allow",
    )
    with connect(args) as client:
        client.create_acls([acl])
    print(f"created: {acl.describe()}", file=out())
    return 0


def _acl_filter(args: argparse.Namespace) -> AclFilter:
    resource_type, name = _acl_resource(args)
    return AclFilter(
        principal=args.principal,
        operation=args.operation,
        resource_type=resource_type,
        resource_name=name,
        pattern="prefixed" if args.prefixed else None,
        permission="deny" if args.deny else None,
    )


def _acl_list(args: argparse.Namespace) -> int:
    with connect(args) as client:
        acls = client.list_acls(_acl_filter(args))
    stream = out()
    for acl in acls:
        print(acl.describe(), file=stream)
    if not acls:
        print("no ACLs", file=stream)
    return 0


def _acl_delete(args: argparse.Namespace) -> int:
    acl_filter = _acl_filter(args)
    if acl_filter == AclFilter():
        raise InvalidInputError("give at least one option: deleting every ACL takes a filter")
    with connect(args) as client:
        deleted = client.delete_acls([acl_filter])
    stream = out()
    for acl in deleted:
        print(f"deleted: {acl.describe()}", file=stream)
    if not deleted:
        print("no ACL matched: nothing deleted", file=stream)
    return 0


def _add_token_commands(commands: Any) -> None:
    token = commands.add_parser("token", help="make bearer tokens for the nodes' token file")
    actions = token.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser(
        "create",
        help="make a token for NAME: add its hash to the token file, print the token once",
        description=(
            "Makes a random token for the principal User:NAME (or NAME itself if it has "
            "a type, Type:name), appends its entry (a salted scrypt hash, no secret) to "
            "FILE, created with mode 0600 if missing, and prints the token: it is shown "
            "only now. Copy FILE to every node's [auth] token_file (nodes read it again "
            "when it changes); give the token to the client (--token, $LAMINAR_TOKEN, "
            "Client(token=...)). Works offline: no node is called."
        ),
    )
    create.add_argument("name", help="the principal's name (User:NAME)")
    create.add_argument("--file", required=True, help="the token file (TOML)")
    create.set_defaults(handler=_token_create)


def _token_create(args: argparse.Namespace) -> int:
    try:
        tokens = importlib.import_module("laminar.security.tokens")
    except ImportError:
        raise InvalidInputError(
            "making tokens needs the server extra (pip install 'laminar[server]')"
        ) from None
    token: str = tokens.add_token(args.file, args.name)
    print(token, file=out())
    return 0

"""Access control lists and the authorizer: who may do what to which resource.

An :class:`Acl` says that a principal is allowed (or denied) one operation on a
resource: a topic, a consumer group or the cluster, named literally or by a prefix.
ACLs live in the cluster metadata (``__cluster/0``, :mod:`laminar.server.metadata`),
so every node holds the same set; :class:`Authorizer` answers checks against it.

The rules, as Kafka's ``StandardAuthorizer``:

- **Off** (``authorization = false``): everything is allowed.
- **Super users** (``super_users``) and **nodes** (principal ``Node:<id>``, from a
  node certificate) are allowed everything.
- **Deny over allow**: a deny ACL matching the principal, the operation and the
  resource refuses the check whatever allows it.
- Otherwise an allow ACL must match; **nothing matching is a denial**.
- **Implied operations**: ``describe`` is allowed by an allow ACL for ``read``,
  ``write``, ``alter`` or ``delete`` on the same resource (a producer may look up
  the topics it writes). A deny ACL applies to its own operation only: denying
  ``describe`` does not deny ``read``.
- **Matching**: a ``literal`` ACL matches the resource of exactly that name (the
  name ``*`` matches every resource of its type); a ``prefixed`` ACL every resource
  whose name starts with it. The principal ``User:*`` matches every principal.

Checks are fast (one produce pays one, see ``bench/acl_bench.py``): the ACLs are
indexed by resource type and name, the prefixed ones by their lengths, and the
answers of recent checks are kept until the ACLs change.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from laminar.errors import InvalidInputError

OPERATIONS = ("read", "write", "create", "delete", "alter", "describe", "cluster_action")
"""What an ACL can allow or deny."""
RESOURCE_TYPES = ("topic", "group", "cluster")
PATTERNS = ("literal", "prefixed")
PERMISSIONS = ("allow", "deny")

CLUSTER_NAME = "cluster"
"""The name of the one cluster resource."""
WILDCARD_PRINCIPAL = "User:*"
"""The principal of an ACL that applies to every caller."""
WILDCARD_NAME = "*"
"""A literal resource name matching every resource of its type."""
ANONYMOUS = "User:ANONYMOUS"
"""The principal of a caller that presented neither a token nor a certificate."""
NODE_PRINCIPAL_PREFIX = "Node:"
"""Principals of nodes (from their certificates): allowed everything."""

IMPLIED_BY: dict[str, tuple[str, ...]] = {
    "describe": ("describe", "read", "write", "alter", "delete"),
}
"""Operations an allow ACL of which allows the key operation (itself included)."""

PRINCIPAL_BYTES_MAX = 256
RESOURCE_NAME_BYTES_MAX = 255
ACLS_MAX = 100_000
"""Most ACLs a cluster holds (a create beyond it is refused)."""
DECISIONS_KEPT_MAX = 65_536
"""Recent check answers kept (dropped whole when the ACLs change)."""


@dataclass(frozen=True, slots=True, order=True)
class Acl:
    """One access control entry."""

    principal: str
    """``Type:name`` (``User:alice``), or ``User:*`` for every principal."""
    operation: str
    resource_type: str
    resource_name: str
    """The topic or group name, or prefix; ``cluster`` for the cluster."""
    pattern: str = "literal"
    permission: str = "allow"

    def validate(self) -> None:
        """Raise :class:`InvalidInputError` naming the first bad field."""
        validate_principal(self.principal)
        _one_of("operation", self.operation, OPERATIONS)
        _one_of("resource type", self.resource_type, RESOURCE_TYPES)
        _one_of("pattern", self.pattern, PATTERNS)
        _one_of("permission", self.permission, PERMISSIONS)
        name = self.resource_name
        if not name or len(name.encode()) > RESOURCE_NAME_BYTES_MAX or "\x00" in name:
            raise InvalidInputError(
                f"a resource name is 1-{RESOURCE_NAME_BYTES_MAX} bytes without NUL, "
                f"got {name!r:.80}"
            )
        if self.resource_type == "cluster" and (name != CLUSTER_NAME or self.pattern != "literal"):
            raise InvalidInputError(
                f"the cluster resource is named {CLUSTER_NAME!r}, literally; got {name!r}"
            )
        if self.pattern == "prefixed" and name == WILDCARD_NAME:
            raise InvalidInputError("a prefixed ACL cannot be '*' (use a literal '*')")

    def fields(self) -> list[str]:
        """The ACL as a list (its encoding in the cluster metadata)."""
        return [
            self.principal,
            self.operation,
            self.resource_type,
            self.resource_name,
            self.pattern,
            self.permission,
        ]

    @classmethod
    def from_fields(cls, fields: list[object]) -> Acl:
        principal, operation, resource_type, resource_name, pattern, permission = fields
        acl = cls(
            str(principal),
            str(operation),
            str(resource_type),
            str(resource_name),
            str(pattern),
            str(permission),
        )
        acl.validate()
        return acl

    def describe(self) -> str:
        """One line for people: ``allow User:bob write on topic orders (prefixed)``."""
        suffix = " (prefixed)" if self.pattern == "prefixed" else ""
        return (
            f"{self.permission} {self.principal} {self.operation} on "
            f"{self.resource_type} {self.resource_name}{suffix}"
        )


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Which ACLs a list or delete names: each field set must match; None: any."""

    principal: str | None = None
    operation: str | None = None
    resource_type: str | None = None
    resource_name: str | None = None
    pattern: str | None = None
    permission: str | None = None

    def matches(self, acl: Acl) -> bool:
        return all(
            wanted is None or wanted == getattr(acl, name)
            for name, wanted in (
                ("principal", self.principal),
                ("operation", self.operation),
                ("resource_type", self.resource_type),
                ("resource_name", self.resource_name),
                ("pattern", self.pattern),
                ("permission", self.permission),
            )
        )

    def validate(self) -> None:
        if self.principal is not None:
            validate_principal(self.principal)
        for name, value, allowed in (
            ("operation", self.operation, OPERATIONS),
            ("resource type", self.resource_type, RESOURCE_TYPES),
            ("pattern", self.pattern, PATTERNS),
            ("permission", self.permission, PERMISSIONS),
        ):
            if value is not None:
                _one_of(name, value, allowed)


def validate_principal(principal: str) -> None:
    kind, _, name = principal.partition(":")
    if not kind or not name or len(principal.encode()) > PRINCIPAL_BYTES_MAX:
        raise InvalidInputError(
            f"a principal is Type:name (User:alice), at most {PRINCIPAL_BYTES_MAX} bytes; "
            f"got {principal!r:.80}"
        )


def _one_of(what: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise InvalidInputError(f"{what} must be one of {', '.join(allowed)}, got {value!r:.40}")


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to one check; ``reason`` for the audit log and the node log."""

    allowed: bool
    reason: str


_Grants = dict[str, dict[str, tuple[bool, bool]]]
"""principal -> operation -> (allowed, denied), for one resource name and pattern."""


class AclIndex:
    """A set of ACLs indexed for checks: built once per change of the set."""

    def __init__(self, acls: Iterable[Acl]) -> None:
        self.literal: dict[tuple[str, str], _Grants] = {}
        self.prefixed: dict[tuple[str, str], _Grants] = {}
        lengths: dict[str, set[int]] = {}
        count = 0
        for acl in acls:
            count += 1
            key = (acl.resource_type, acl.resource_name)
            table = self.literal if acl.pattern == "literal" else self.prefixed
            if acl.pattern == "prefixed":
                lengths.setdefault(acl.resource_type, set()).add(len(acl.resource_name))
            grants = table.setdefault(key, {}).setdefault(acl.principal, {})
            allowed, denied = grants.get(acl.operation, (False, False))
            if acl.permission == "allow":
                allowed = True
            else:
                denied = True
            grants[acl.operation] = (allowed, denied)
        self.size = count
        self.prefix_lengths: dict[str, tuple[int, ...]] = {
            kind: tuple(sorted(found)) for kind, found in lengths.items()
        }

    def matching(self, resource_type: str, name: str) -> list[tuple[str, _Grants]]:
        """The grants of every ACL pattern matching the resource, with what matched."""
        found = []
        literal = self.literal
        for candidate in (name, WILDCARD_NAME):
            grants = literal.get((resource_type, candidate))
            if grants is not None:
                found.append((candidate, grants))
        prefixed = self.prefixed
        for length in self.prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            grants = prefixed.get((resource_type, name[:length]))
            if grants is not None:
                found.append((name[:length] + "*", grants))
        return found


class Authorizer:
    """Answers ``may principal do operation on resource`` (rules: module docstring).

    ``acls_source`` gives the current ACLs and their version (the cluster metadata);
    the index is rebuilt when the version changes, on the next check.
    """

    def __init__(
        self,
        *,
        enabled: bool,
        super_users: Iterable[str] = (),
        decisions_kept_max: int = DECISIONS_KEPT_MAX,
    ) -> None:
        self.enabled = enabled
        self.super_users = frozenset(super_users)
        self._index = AclIndex(())
        self._version: object = None
        self._decisions: OrderedDict[tuple[str, str, str, str], Decision] = OrderedDict()
        self._decisions_kept_max = decisions_kept_max

    def update(self, version: object, acls: Iterable[Acl]) -> None:
        """Use ``acls`` from now on, unless ``version`` is the one already in use."""
        if version == self._version:
            return
        self._index = AclIndex(acls)
        self._version = version
        self._decisions.clear()

    @property
    def acl_count(self) -> int:
        return self._index.size

    def filters(self, principal: str) -> bool:
        """Whether listings are cut for ``principal`` (authorization on, and it is
        neither a super user nor a node)."""
        return (
            self.enabled
            and principal not in self.super_users
            and not principal.startswith(NODE_PRINCIPAL_PREFIX)
        )

    def check(self, principal: str, operation: str, resource_type: str, name: str) -> Decision:
        """Whether ``principal`` may do ``operation`` on the resource."""
        if not self.enabled:
            return _OFF
        if principal in self.super_users:
            return _SUPER
        if principal.startswith(NODE_PRINCIPAL_PREFIX):
            return _NODE
        key = (principal, operation, resource_type, name)
        decisions = self._decisions
        decision = decisions.get(key)
        if decision is None:
            decision = self._decide(principal, operation, resource_type, name)
            decisions[key] = decision
            if len(decisions) > self._decisions_kept_max:
                decisions.popitem(last=False)
        return decision

    def _decide(self, principal: str, operation: str, resource_type: str, name: str) -> Decision:
        implied = IMPLIED_BY.get(operation, (operation,))
        allowed_by = ""
        for matched, grants in self._index.matching(resource_type, name):
            for who in (principal, WILDCARD_PRINCIPAL):
                by_operation = grants.get(who)
                if by_operation is None:
                    continue
                if by_operation.get(operation, _NONE)[1]:
                    return Decision(False, f"denied by an ACL for {who} on {matched}")
                if not allowed_by:
                    for granted in implied:
                        if by_operation.get(granted, _NONE)[0]:
                            allowed_by = f"allowed by an ACL for {who} {granted} on {matched}"
                            break
        if allowed_by:
            return Decision(True, allowed_by)
        return Decision(False, "no ACL allows it")


_NONE = (False, False)
_OFF = Decision(True, "authorization off")
_SUPER = Decision(True, "super user")
_NODE = Decision(True, "node")

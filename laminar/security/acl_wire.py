"""ACLs and ACL filters to and from their wire form (``AclBinding``, ``AclFilter``),
for the client and the node alike: an empty ``pattern`` is literal, an empty
``permission`` allow, an empty filter field matches anything."""

from __future__ import annotations

from laminar.security.acl import Acl, AclFilter
from laminar.v1 import laminar_pb2 as pb


def binding_of(acl: Acl) -> pb.AclBinding:
    """The wire form of ``acl``."""
    return pb.AclBinding(
        principal=acl.principal,
        operation=acl.operation,
        resource_type=acl.resource_type,
        resource_name=acl.resource_name,
        pattern=acl.pattern,
        permission=acl.permission,
    )


def acl_of(binding: pb.AclBinding) -> Acl:
    """The ACL a binding names (not validated: :meth:`Acl.validate` does)."""
    return Acl(
        principal=binding.principal,
        operation=binding.operation,
        resource_type=binding.resource_type,
        resource_name=binding.resource_name,
        pattern=binding.pattern or "literal",
        permission=binding.permission or "allow",
    )


def filter_message(acl_filter: AclFilter) -> pb.AclFilter:
    """The wire form of ``acl_filter`` (None fields empty)."""
    return pb.AclFilter(
        principal=acl_filter.principal or "",
        operation=acl_filter.operation or "",
        resource_type=acl_filter.resource_type or "",
        resource_name=acl_filter.resource_name or "",
        pattern=acl_filter.pattern or "",
        permission=acl_filter.permission or "",
    )


def filter_of(message: pb.AclFilter) -> AclFilter:
    """The filter a message names (not validated: :meth:`AclFilter.validate` does)."""
    return AclFilter(
        principal=message.principal or None,
        operation=message.operation or None,
        resource_type=message.resource_type or None,
        resource_name=message.resource_name or None,
        pattern=message.pattern or None,
        permission=message.permission or None,
    )

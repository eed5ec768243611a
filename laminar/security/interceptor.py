"""The client API's gate: who is calling (authentication) and may they (authorization).

:class:`AuthInterceptor` is a ``grpc.aio`` server interceptor that wraps every
method of the node's gRPC server. For each call it

1. finds the caller's principal (:class:`Authenticator`): a bearer token in the
   ``authorization`` metadata if one is given (a wrong one is ``UNAUTHENTICATED``,
   never anonymous), else the client certificate (:mod:`laminar.security.principals`),
   else ``User:ANONYMOUS``;
2. checks every requirement :data:`RPC_RULES` lists for the method against the
   :class:`~laminar.security.acl.Authorizer`, before the handler runs (so a refused
   call does and writes nothing); the first refused is ``PERMISSION_DENIED`` naming
   the operation and resource. A requirement is met by any one of its checks
   (``CreateTopic``: create on the topic, or on the cluster);
3. for ``Metadata`` (all topics), ``ListTopics`` and ``ListGroups``, removes from the
   answer what the caller may not describe. A topic named in a request is checked
   before it is looked up, so a refusal reads the same whether it exists or not;
4. writes the audit log: authentication failures, denials, and every admin call
   with its result.

A method of the Laminar service missing from :data:`RPC_RULES` is refused to all
but nodes and super users (``tests/security/test_interceptor.py`` fails when the
proto has a method the table lacks). The gRPC health service is open (load
balancers and probes carry no credentials; it tells nothing but "serving"); server
reflection needs describe on the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from cryptography.hazmat.primitives import serialization
from google.protobuf.message import Message

from laminar.errors import AuthenticationError, AuthorizationError, LaminarError
from laminar.grpc_errors import abort_with, error_to_status
from laminar.security.acl import ANONYMOUS, CLUSTER_NAME, Acl, Authorizer
from laminar.security.assertion import METADATA_KEY as ASSERTION_METADATA_KEY
from laminar.security.assertion import AssertionVerifier, CertAssertionError
from laminar.security.audit import AuditLog
from laminar.security.principals import CertificatePrincipals
from laminar.security.tokens import TokenStore

_LOG = logging.getLogger(__name__)

LAMINAR_SERVICE = "laminar.v1.Laminar"
HEALTH_SERVICE = "grpc.health.v1.Health"
REFLECTION_SERVICES = (
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
)
INTERNAL_TOPIC = "__cluster"
"""Read by nodes only (metadata catch-up): cluster_action on the cluster."""
AUTHORIZATION_METADATA_KEY = "authorization"
BEARER = "Bearer "


@dataclass(frozen=True, slots=True)
class Check:
    """One operation on one resource."""

    operation: str
    resource_type: str
    resource_name: str


Requirement = tuple[Check, ...]
"""Met when any one of its checks is allowed."""


def _one(operation: str, resource_type: str, name: str) -> Requirement:
    return (Check(operation, resource_type, name),)


def _cluster(operation: str) -> Callable[[Any], list[Requirement]]:
    return lambda request: [_one(operation, "cluster", CLUSTER_NAME)]


def _topic_read(request: Any) -> list[Requirement]:
    if request.topic == INTERNAL_TOPIC:
        return [_one("cluster_action", "cluster", CLUSTER_NAME)]
    return [_one("read", "topic", request.topic)]


def _group(operation: str) -> Callable[[Any], list[Requirement]]:
    return lambda request: [_one(operation, "group", request.group)]


def _group_and_topics(request: Any) -> list[Requirement]:
    """Read on the group, and read on each topic whose offsets it sets (Kafka's rule
    for OffsetCommit)."""
    topics = dict.fromkeys(offset.topic for offset in request.offsets)
    return [_one("read", "group", request.group)] + [_one("read", "topic", t) for t in topics]


def _produce_many(request: Any) -> list[Requirement]:
    topics = dict.fromkeys(entry.topic for entry in request.partitions)
    return [_one("write", "topic", topic) for topic in topics]


def _create_topic(request: Any) -> list[Requirement]:
    return [(Check("create", "topic", request.name), Check("create", "cluster", CLUSTER_NAME))]


def _none(request: Any) -> list[Requirement]:
    return []


@dataclass(frozen=True, slots=True)
class RpcRule:
    """What a method needs: ``requires`` from the request; ``filtered`` answers are
    cut to what the caller may describe; ``admin`` calls are always audited."""

    requires: Callable[[Any], list[Requirement]]
    filtered: bool = False
    admin: bool = False


RPC_RULES: dict[str, RpcRule] = {
    "Produce": RpcRule(lambda r: [_one("write", "topic", r.topic)]),
    "ProduceMany": RpcRule(_produce_many),
    "Fetch": RpcRule(_topic_read),
    "ListOffsets": RpcRule(_topic_read),
    "ReportCorruption": RpcRule(_topic_read),
    "Metadata": RpcRule(lambda r: [_one("describe", "topic", t) for t in r.topics], True),
    "CreateTopic": RpcRule(_create_topic, admin=True),
    "DeleteTopic": RpcRule(lambda r: [_one("delete", "topic", r.name)], admin=True),
    "AlterTopic": RpcRule(lambda r: [_one("alter", "topic", r.name)], admin=True),
    "CreatePartitions": RpcRule(lambda r: [_one("alter", "topic", r.name)], admin=True),
    "ListTopics": RpcRule(_none, filtered=True),
    "DescribeCluster": RpcRule(_cluster("describe")),
    "NodeStatus": RpcRule(_cluster("describe")),
    "UpdateNode": RpcRule(_cluster("alter"), admin=True),
    "SetMaintenance": RpcRule(_cluster("alter"), admin=True),
    "RecoverPartition": RpcRule(_cluster("alter"), admin=True),
    "GroupHeartbeat": RpcRule(_group("read")),
    "CommitOffsets": RpcRule(_group_and_topics),
    "FetchOffsets": RpcRule(_group("describe")),
    "LeaveGroup": RpcRule(_group("read")),
    "ListGroups": RpcRule(_none, filtered=True),
    "DescribeGroup": RpcRule(_group("describe")),
    "ResetOffsets": RpcRule(_group_and_topics, admin=True),
    "DeleteGroup": RpcRule(_group("delete"), admin=True),
    "CreateAcls": RpcRule(_cluster("alter"), admin=True),
    "ListAcls": RpcRule(_cluster("describe")),
    "DeleteAcls": RpcRule(_cluster("alter"), admin=True),
    # Even a list answers with the keys (secrets): alter, as for a change.
    "GossipKeyring": RpcRule(_cluster("alter"), admin=True),
}
"""Every method of ``laminar.v1.Laminar`` and what it needs (docs/design.md,
"Authorization", shows the table)."""

_REFLECTION_RULE = RpcRule(_cluster("describe"))
_UNKNOWN_RULE = RpcRule(lambda request: [_one("cluster_action", "cluster", CLUSTER_NAME)])
"""A method without a rule: nodes and super users only."""


class Authenticator:
    """The principal of a call (module docstring, step 1)."""

    def __init__(
        self,
        tokens: TokenStore | None,
        certificates: CertificatePrincipals,
        assertions: Callable[[], AssertionVerifier | None] = lambda: None,
    ) -> None:
        self.tokens = tokens
        self.certificates = certificates
        self._assertions = assertions
        """The verifier of certificate assertions (``client_auth = request``; it
        follows the CA file), or None where they are not accepted."""
        self._checking: dict[str, asyncio.Future[str]] = {}

    async def principal(self, context: grpc.aio.ServicerContext) -> str:
        metadata = context.invocation_metadata() or ()
        token = _bearer_token(metadata)
        if token is not None:
            return await self._token_principal(token)
        pems = (context.auth_context() or {}).get("x509_pem_cert")
        if pems:
            return self._certificate_principal(pems[0])
        assertion = _metadata_text(metadata, ASSERTION_METADATA_KEY)
        verifier = self._assertions()
        if assertion is not None and verifier is not None:
            try:
                verified = verifier.verify(assertion, time.time_ns() // 1_000_000)
            except CertAssertionError as error:
                raise AuthenticationError(str(error)) from None
            cert = verified.certificate.public_bytes(serialization.Encoding.PEM)
            return self._certificate_principal(cert)
        return ANONYMOUS

    def _certificate_principal(self, cert_pem: bytes) -> str:
        principal = self.certificates.principal_of(cert_pem)
        if principal is None:
            raise AuthenticationError("no principal rule maps the client certificate")
        return principal

    async def _token_principal(self, token: str) -> str:
        tokens = self.tokens
        if tokens is None:
            raise AuthenticationError("this node accepts no bearer token ([auth] token_file)")
        remembered = tokens.remembered(token)
        if remembered:
            return remembered
        if remembered == "":
            raise AuthenticationError("the bearer token is not valid")
        # One scrypt per new token however many calls bring it at once, off the loop.
        pending = self._checking.get(token)
        if pending is None:
            pending = asyncio.ensure_future(asyncio.to_thread(tokens.check, token))
            self._checking[token] = pending
            pending.add_done_callback(lambda _: self._checking.pop(token, None))
        return await asyncio.shield(pending)


def _metadata_text(metadata: Iterable[Any], wanted: str) -> str | None:
    for key, value in metadata:
        if key == wanted:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None


def _bearer_token(metadata: Iterable[Any]) -> str | None:
    for key, value in metadata:
        if key == AUTHORIZATION_METADATA_KEY:
            text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
            if not text.startswith(BEARER):
                raise AuthenticationError("the authorization metadata must be 'Bearer <token>'")
            return text[len(BEARER) :].strip()
    return None


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Authentication, authorization and audit of every call (module docstring).

    ``acls`` gives the ACLs in force and their version (the node's metadata);
    ``audit`` is None without an audit log.
    """

    def __init__(
        self,
        authenticator: Authenticator,
        authorizer: Authorizer,
        acls: Callable[[], tuple[object, Iterable[Acl]]],
        audit: AuditLog | None = None,
    ) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self._acls = acls
        self.audit = audit
        self.counters = {"authentication_failed": 0, "denied": 0}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        service, _, method = str(handler_call_details.method).lstrip("/").partition("/")
        if service == HEALTH_SERVICE:
            return handler
        if service == LAMINAR_SERVICE:
            rule = RPC_RULES.get(method, _UNKNOWN_RULE)
        elif service in REFLECTION_SERVICES:
            rule = _REFLECTION_RULE
        else:
            rule = _UNKNOWN_RULE
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, rule, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._stream(method, rule, handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # no other kind is served  # pragma: no cover

    def _unary(self, method: str, rule: RpcRule, behavior: Any) -> Any:
        async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            principal = await self._admit(method, rule, request, context)
            if not rule.admin:
                response = await behavior(request, context)
            else:
                response = await self._audited(method, principal, request, context, behavior)
            if rule.filtered and principal is not None:
                self._filter(principal, response)
            return response

        return checked

    def _stream(self, method: str, rule: RpcRule, behavior: Any) -> Any:
        async def checked(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            await self._admit(method, rule, None, context)
            async for response in behavior(requests, context):
                yield response

        return checked

    async def _admit(
        self, method: str, rule: RpcRule, request: Any, context: grpc.aio.ServicerContext
    ) -> str | None:
        """The caller's principal once every requirement is met; else abort the call.
        None for a request body that did not parse (the handler refuses it)."""
        try:
            principal = await self.authenticator.principal(context)
        except AuthenticationError as error:
            self.counters["authentication_failed"] += 1
            self._record("authentication_failed", "", method, context, reason=str(error))
            await abort_with(context, error)
        if request is not None and not isinstance(request, Message):
            return None  # malformed: refused by the handler, nothing done
        self.authorizer.update(*self._acls())
        requirements = rule.requires(request) if request is not None else rule.requires(None)
        for requirement in requirements:
            reason = ""
            for check in requirement:
                decision = self.authorizer.check(
                    principal, check.operation, check.resource_type, check.resource_name
                )
                if decision.allowed:
                    break
                reason = reason or decision.reason
            else:
                await self._deny(principal, method, requirement[-1], reason, context)
        return principal

    async def _deny(
        self,
        principal: str,
        method: str,
        check: Check,
        reason: str,
        context: grpc.aio.ServicerContext,
    ) -> None:
        self.counters["denied"] += 1
        resource = f"{check.resource_type} {check.resource_name}"
        self._record(
            "denied",
            principal,
            method,
            context,
            operation=check.operation,
            resource=f"{check.resource_type}:{check.resource_name}",
            result="PERMISSION_DENIED",
            reason=reason,
        )
        await abort_with(
            context,
            AuthorizationError(
                f"{principal} may not {check.operation} {resource}",
                operation=check.operation,
                resource_type=check.resource_type,
                resource_name=check.resource_name,
            ),
        )

    async def _audited(
        self,
        method: str,
        principal: str | None,
        request: Any,
        context: grpc.aio.ServicerContext,
        behavior: Any,
    ) -> Any:
        result = "OK"
        try:
            return await behavior(request, context)
        except LaminarError as error:
            result = error_to_status(error)[0].name
            raise
        except BaseException:
            code = _code_of(context)
            result = code.name if code is not None else "CANCELLED"
            raise
        finally:
            self._record(
                "admin",
                principal or "",
                method,
                context,
                resource=_admin_resource(method, request),
                result=result,
            )

    def _filter(self, principal: str, response: Any) -> None:
        """Cut a listing to what ``principal`` may describe."""
        check = self.authorizer.check
        if hasattr(response, "groups"):
            kept = [
                g for g in response.groups if check(principal, "describe", "group", g.group).allowed
            ]
            del response.groups[:]
            response.groups.extend(kept)
            return
        topics = [
            t for t in response.topics if check(principal, "describe", "topic", t.name).allowed
        ]
        del response.topics[:]
        response.topics.extend(topics)
        if hasattr(response, "filtered"):  # Metadata: say it was (not what was cut)
            response.filtered = self.authorizer.filters(principal)

    def _record(
        self,
        event: str,
        principal: str,
        method: str,
        context: grpc.aio.ServicerContext,
        **fields: Any,
    ) -> None:
        if self.audit is not None:
            self.audit.record(
                event, principal=principal, method=method, peer=context.peer(), **fields
            )


def _code_of(context: grpc.aio.ServicerContext) -> grpc.StatusCode | None:
    code = getattr(context, "code", None)
    value = code() if callable(code) else None
    return value if isinstance(value, grpc.StatusCode) else None


def _admin_resource(method: str, request: Any) -> str:
    """The resource an admin call names, for the audit line."""
    if not hasattr(request, "ListFields"):
        return ""
    for field, kind in (("name", "topic"), ("group", "group"), ("node_id", "node")):
        value = getattr(request, field, None)
        if isinstance(value, str) and value:
            return f"{kind}:{value}"
    if method in ("CreateAcls", "DeleteAcls"):
        items = getattr(request, "acls", None) or getattr(request, "filters", None) or ()
        return "acls:" + "; ".join(
            f"{a.permission or 'allow'} {a.principal or '*'} {a.operation or '*'} "
            f"{a.resource_type or '*'}:{a.resource_name or '*'}"
            for a in list(items)[:20]
        )
    if method == "RecoverPartition":
        return f"partition:{request.topic}/{request.partition}"
    return "cluster:" + CLUSTER_NAME

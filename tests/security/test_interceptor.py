"""The interceptor's table and certificate principals, on an in-process TLS server.

The server is a bare ``grpc.aio`` server with ``grpc.ssl_server_credentials``
(client certificates required: grpc Python's ``require_client_auth=False`` does not
ask for one at all, so a certificate principal needs ``require``) and the
interceptor, serving ``DescribeCluster`` from a stub handler: what is under test
is who the caller is taken for and what the check answers, not the node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest

from laminar.errors import AuthenticationError, AuthorizationError
from laminar.grpc_errors import error_from_rpc
from laminar.security import certs
from laminar.security.acl import Acl, Authorizer
from laminar.security.interceptor import RPC_RULES, Authenticator, AuthInterceptor
from laminar.security.principals import (
    CertificatePrincipals,
    certificate_names,
    map_certificate,
    parse_rules,
)
from laminar.v1 import laminar_pb2 as pb
from tests.server.aio import bounded

run = bounded(30)


def test_every_rpc_of_the_proto_has_an_authorization_rule() -> None:
    methods = {m.name for m in pb.DESCRIPTOR.services_by_name["Laminar"].methods}
    assert methods - RPC_RULES.keys() == set(), "add the new RPC to RPC_RULES"
    assert RPC_RULES.keys() - methods == set()


def test_mapping_rules_apply_in_order_to_the_subject_then_the_sans() -> None:
    ca = certs.make_ca()
    alice = certs.make_client_cert(ca, "Alice", uris=["spiffe://corp/svc/billing"])
    names = certificate_names(alice.cert)
    assert names.subject == "CN=Alice"
    rules = parse_rules((r"RULE:^CN=([^,]+)$/$1/L", "DEFAULT"))
    assert map_certificate(names, rules) == "User:alice"
    by_san = parse_rules((r"RULE:^URI:spiffe:\/\/corp\/svc\/(.*)$/svc-$1/",))
    assert map_certificate(names, by_san) == "User:svc-billing"
    assert map_certificate(names, parse_rules(("RULE:^CN=bob$/bob/",))) is None
    assert map_certificate(names, parse_rules(("DEFAULT",))) == "User:CN=Alice"
    node = certs.make_node_cert(ca, "n7")
    assert map_certificate(certificate_names(node.cert), rules) == "Node:n7"


@pytest.mark.parametrize("rule", ["RULE:x/y", "RULE:(/y/", "NOPE", "RULE:a/b/Q"])
def test_bad_mapping_rules_are_config_errors(rule: str) -> None:
    from laminar.errors import ConfigError

    with pytest.raises(ConfigError):
        parse_rules((rule,))


async def _describe_cluster(request: Any, context: grpc.aio.ServicerContext) -> Any:
    return pb.DescribeClusterResponse(node_id="stub")


@run
async def test_a_certificate_principal_through_the_mapping_rules(tmp_path: Path) -> None:
    ca = certs.make_ca()
    server_pem = certs.make_node_cert(ca, "n0")
    acls = [Acl("User:alice", "describe", "cluster", "cluster")]
    authorizer = Authorizer(enabled=True)
    interceptor = AuthInterceptor(
        Authenticator(None, CertificatePrincipals((r"RULE:^CN=([^,]+)$/$1/L",))),
        authorizer,
        lambda: (1, acls),
    )
    server = grpc.aio.server(interceptors=[interceptor])
    handlers = {
        "DescribeCluster": grpc.unary_unary_rpc_method_handler(
            _describe_cluster,
            request_deserializer=pb.DescribeClusterRequest.FromString,
            response_serializer=pb.DescribeClusterResponse.SerializeToString,
        )
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("laminar.v1.Laminar", handlers),)
    )
    credentials = grpc.ssl_server_credentials(
        [(server_pem.key, server_pem.cert)], root_certificates=ca.cert, require_client_auth=True
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()

    async def call(client: certs.Pem | None, token: str | None = None) -> Any:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=ca.cert,
            private_key=client.key if client else None,
            certificate_chain=client.cert if client else None,
        )
        async with grpc.aio.secure_channel(
            f"127.0.0.1:{port}",
            credentials,
            options=[("grpc.ssl_target_name_override", "localhost")],
        ) as channel:
            method = channel.unary_unary(
                "/laminar.v1.Laminar/DescribeCluster",
                request_serializer=pb.DescribeClusterRequest.SerializeToString,
                response_deserializer=pb.DescribeClusterResponse.FromString,
            )
            metadata = (("authorization", f"Bearer {token}"),) if token else None
            try:
                return await method(pb.DescribeClusterRequest(), timeout=10, metadata=metadata)
            except grpc.aio.AioRpcError as rpc_error:
                return error_from_rpc(rpc_error)

    try:
        # CN=Alice maps to User:alice, whom an ACL allows.
        answer = await call(certs.make_client_cert(ca, "Alice"))
        assert answer.node_id == "stub"
        # CN=Bob maps to User:bob: no ACL.
        refused = await call(certs.make_client_cert(ca, "Bob"))
        assert isinstance(refused, AuthorizationError) and "User:bob" in str(refused)
        # A node certificate is a node: allowed without an ACL.
        assert (await call(certs.make_node_cert(ca, "n1"))).node_id == "stub"
        # A token where the node takes none: refused as unauthenticated, not anonymous.
        refused = await call(certs.make_client_cert(ca, "Alice"), token="lmt.x.y")
        assert isinstance(refused, AuthenticationError)
        # Denials come back once the ACL is gone (the index follows the version).
        acls.clear()
        interceptor._acls = lambda: (2, acls)
        refused = await call(certs.make_client_cert(ca, "Alice"))
        assert isinstance(refused, AuthorizationError)
    finally:
        await server.stop(None)

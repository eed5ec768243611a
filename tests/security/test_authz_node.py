"""Tokens, ACLs and the audit log on real in-process nodes, over real gRPC.

Node TLS is not in these tests (it comes with the TLS work), and the node refuses
``authorization = true`` without it (nodes recognise each other by certificate).
The tests therefore put the ``[auth]`` table in place after the config's check
(:func:`with_auth`), and, where a node must catch up on ``__cluster/0`` from
another, make ``User:ANONYMOUS`` a super user: it stands in for the node
certificates (``Node:<id>``) the nodes' own calls will carry. Every refused call
below is made with a token, so it is checked for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from laminar.errors import AuthenticationError, AuthorizationError
from laminar.grpc_errors import error_from_rpc
from laminar.records import encode_batch
from laminar.replica.types import Role
from laminar.security.config import AuthConfig
from laminar.security.tokens import add_token
from laminar.server.config import NodeConfig
from laminar.server.node import Node
from laminar.v1 import laminar_pb2 as pb
from laminar.v1 import laminar_pb2_grpc
from tests.server import aio
from tests.server.aio import bounded

DEADLINE_S = 20.0
run = bounded(DEADLINE_S * 4)


def with_auth(config: NodeConfig, auth: AuthConfig) -> NodeConfig:
    """``config`` with ``auth``, past the check that wants TLS (module docstring)."""
    object.__setattr__(config, "auth", auth)
    return config


def node_config(root: Path, index: int, auth: AuthConfig, *, subnet: int = 31) -> NodeConfig:
    host = f"127.0.{subnet}.{index + 1}"
    config = NodeConfig.local(
        str(root / f"n{index}"),
        gossip=f"{host}:7000",
        grpc=f"{host}:7100",
        peer=f"{host}:7200",
        node_id=f"n{index}",
        bootstrap=index == 0,
        seeds=() if index == 0 else (f"127.0.{subnet}.1:7000",),
    )
    return with_auth(config, auth)


class Caller:
    """Calls to one node as one principal (a token, or none)."""

    def __init__(self, node: Node, token: str | None, channels: list[grpc.aio.Channel]) -> None:
        channel = grpc.aio.insecure_channel(
            node.config.grpc, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        channels.append(channel)
        self.stub = laminar_pb2_grpc.LaminarStub(channel)  # type: ignore[no-untyped-call]
        self.metadata = (("authorization", f"Bearer {token}"),) if token else None

    async def __call__(self, method: str, request: Any) -> Any:
        return await getattr(self.stub, method)(request, timeout=DEADLINE_S, metadata=self.metadata)

    async def refused(self, method: str, request: Any) -> Exception:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await self(method, request)
        return error_from_rpc(caught.value)


def acl(principal: str, operation: str, kind: str, name: str, **more: str) -> pb.AclBinding:
    return pb.AclBinding(
        principal=principal, operation=operation, resource_type=kind, resource_name=name, **more
    )


def produce_request(topic: str, value: bytes = b"v") -> pb.ProduceRequest:
    return pb.ProduceRequest(topic=topic, partition=0, batches=[encode_batch([value])])


async def wait_leader(node: Node, key: tuple[str, int]) -> None:
    def leads() -> bool:
        replica = node.host.get(key)
        return replica is not None and replica.core.role is Role.LEADER

    await aio.wait_until(leads, f"{node.node_id} to lead {key}", timeout_s=DEADLINE_S)


@run
async def test_tokens_acls_and_audit_on_one_node(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    admin_token = add_token(tokens, "admin")
    bob_token = add_token(tokens, "bob")
    audit_file = tmp_path / "audit.jsonl"
    auth = AuthConfig(
        token_file=str(tokens),
        authorization=True,
        super_users=("User:admin",),
        audit_log_file=str(audit_file),
    )
    node = await Node.open(node_config(tmp_path, 0, auth))
    channels: list[grpc.aio.Channel] = []
    try:
        await wait_leader(node, ("__cluster", 0))
        admin = Caller(node, admin_token, channels)
        bob = Caller(node, bob_token, channels)
        anonymous = Caller(node, None, channels)
        wrong = Caller(node, bob_token[:-2] + "xx", channels)
        for name in ("orders", "orders-eu", "payments", "secret"):
            config = pb.TopicConfig(partitions=1, replication_factor=1)
            await admin("CreateTopic", pb.CreateTopicRequest(name=name, config=config))
        for name in ("orders", "orders-eu", "payments", "secret"):
            await wait_leader(node, (name, 0))

        # No token: User:ANONYMOUS, whom no ACL allows anything.
        error = await anonymous.refused("Produce", produce_request("orders"))
        assert isinstance(error, AuthorizationError)
        assert (error.operation, error.resource_type, error.resource_name) == (
            "write",
            "topic",
            "orders",
        )
        assert "User:ANONYMOUS" in str(error)
        # A wrong token is refused as such, not taken for anonymous.
        error = await wrong.refused("Metadata", pb.MetadataRequest())
        assert isinstance(error, AuthenticationError)
        # A valid token without an ACL: refused, and nothing written.
        high_watermark = node.host.get(("orders", 0)).core.high_watermark  # type: ignore[union-attr]
        error = await bob.refused("Produce", produce_request("orders"))
        assert isinstance(error, AuthorizationError)
        assert error.operation == "write"
        many = pb.ProduceManyRequest(
            partitions=[
                pb.PartitionBatches(topic="orders", partition=0, batches=[encode_batch([b"a"])])
            ]
        )
        assert isinstance(await bob.refused("ProduceMany", many), AuthorizationError)
        assert node.host.get(("orders", 0)).core.high_watermark == high_watermark  # type: ignore[union-attr]

        # A literal ACL allows writing exactly that topic.
        await admin(
            "CreateAcls", pb.CreateAclsRequest(acls=[acl("User:bob", "write", "topic", "orders")])
        )
        answer = await bob("Produce", produce_request("orders"))
        assert answer.base_offsets[0] == high_watermark
        error = await bob.refused("Produce", produce_request("orders-eu"))
        assert isinstance(error, AuthorizationError)
        # ProduceMany is refused whole when one topic is denied (nothing written).
        many = pb.ProduceManyRequest(
            partitions=[
                pb.PartitionBatches(topic="orders", partition=0, batches=[encode_batch([b"a"])]),
                pb.PartitionBatches(topic="payments", partition=0, batches=[encode_batch([b"b"])]),
            ]
        )
        written = node.host.get(("orders", 0)).core.high_watermark  # type: ignore[union-attr]
        error = await bob.refused("ProduceMany", many)
        assert isinstance(error, AuthorizationError) and error.resource_name == "payments"
        assert node.host.get(("orders", 0)).core.high_watermark == written  # type: ignore[union-attr]

        # A prefixed ACL: every topic starting with "orders".
        await admin(
            "CreateAcls",
            pb.CreateAclsRequest(
                acls=[acl("User:bob", "read", "topic", "orders", pattern="prefixed")]
            ),
        )
        await bob("Fetch", pb.FetchRequest(topic="orders-eu", partition=0, offset=0))
        error = await bob.refused("Fetch", pb.FetchRequest(topic="payments", partition=0))
        assert isinstance(error, AuthorizationError) and error.operation == "read"

        # Metadata and ListTopics show only what bob may describe (read/write imply it);
        # a denied describe reads the same for a topic that exists and one that does not.
        listed = await bob("ListTopics", pb.ListTopicsRequest())
        assert sorted(t.name for t in listed.topics) == ["orders", "orders-eu"]
        metadata = await bob("Metadata", pb.MetadataRequest())
        assert sorted(t.name for t in metadata.topics) == ["orders", "orders-eu"]
        hidden = await bob.refused("Metadata", pb.MetadataRequest(topics=["secret"]))
        missing = await bob.refused("Metadata", pb.MetadataRequest(topics=["no-such"]))
        assert type(hidden) is type(missing) is AuthorizationError
        assert str(hidden).replace("secret", "X") == str(missing).replace("no-such", "X")
        error = await bob.refused("Produce", produce_request("no-such"))
        assert isinstance(error, AuthorizationError)

        # Deny over allow: a deny for one topic under the prefix wins.
        await admin(
            "CreateAcls",
            pb.CreateAclsRequest(
                acls=[acl("User:bob", "read", "topic", "orders-eu", permission="deny")]
            ),
        )
        error = await bob.refused("Fetch", pb.FetchRequest(topic="orders-eu", partition=0))
        assert isinstance(error, AuthorizationError)
        await bob("Fetch", pb.FetchRequest(topic="orders", partition=0, offset=0))

        # A super user is allowed everything without an ACL.
        await admin("Fetch", pb.FetchRequest(topic="secret", partition=0, offset=0))
        # Bob may not change ACLs (alter on the cluster).
        error = await bob.refused(
            "CreateAcls", pb.CreateAclsRequest(acls=[acl("User:bob", "write", "topic", "secret")])
        )
        assert isinstance(error, AuthorizationError) and error.resource_type == "cluster"

        # Listing and deleting ACLs (DeleteAcls answers what it deleted).
        listed_acls = await admin(
            "ListAcls", pb.ListAclsRequest(filter=pb.AclFilter(principal="User:bob"))
        )
        assert len(listed_acls.acls) == 3
        deleted = await admin(
            "DeleteAcls",
            pb.DeleteAclsRequest(filters=[pb.AclFilter(principal="User:bob", operation="write")]),
        )
        assert [(a.operation, a.resource_name) for a in deleted.deleted] == [("write", "orders")]
        error = await bob.refused("Produce", produce_request("orders"))
        assert isinstance(error, AuthorizationError)

        # The audit log: the failed authentication, denials, and admin calls.
        def lines() -> list[dict[str, Any]]:
            if not audit_file.exists():
                return []
            return [json.loads(line) for line in audit_file.read_text().splitlines()]

        await aio.wait_until(
            lambda: any(line.get("method") == "DeleteAcls" for line in lines()),
            "the audit log to show the ACL deletion",
            timeout_s=DEADLINE_S,
        )
        events = lines()
        failed = [e for e in events if e["event"] == "authentication_failed"]
        assert failed and failed[0]["method"] == "Metadata" and failed[0]["peer"]
        denied = [e for e in events if e["event"] == "denied"]
        assert {
            "principal": "User:bob",
            "method": "Produce",
            "operation": "write",
            "resource": "topic:orders",
            "result": "PERMISSION_DENIED",
            "reason": "no ACL allows it",
        }.items() <= denied[1].items()  # [0] is the anonymous caller's
        assert denied[0]["principal"] == "User:ANONYMOUS"
        admins = [e for e in events if e["event"] == "admin"]
        assert {e["method"] for e in admins} >= {"CreateTopic", "CreateAcls", "DeleteAcls"}
        assert all(e["principal"] == "User:admin" and e["result"] == "OK" for e in admins)
        assert all(e["time"].endswith("Z") and e["node"] == "n0" for e in events)
    finally:
        for channel in channels:
            await channel.close()
        await node.stop(graceful=False)


@run
async def test_a_removed_acl_takes_effect_on_every_node(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    admin_token = add_token(tokens, "admin")
    bob_token = add_token(tokens, "bob")
    auth = AuthConfig(
        token_file=str(tokens),
        authorization=True,
        # Stands in for the nodes' certificates (module docstring).
        super_users=("User:admin", "User:ANONYMOUS"),
    )
    nodes: list[Node] = []
    channels: list[grpc.aio.Channel] = []
    try:
        for index in range(3):
            nodes.append(await Node.open(node_config(tmp_path, index, auth, subnet=32)))
        await aio.wait_until(
            lambda: all(len(n.members()) == 3 for n in nodes), "3 members", timeout_s=DEADLINE_S
        )
        admin = Caller(nodes[0], admin_token, channels)
        create = pb.CreateTopicRequest(
            name="orders", config=pb.TopicConfig(partitions=1, replication_factor=3)
        )
        await _admin_call(nodes, admin_token, channels, "CreateTopic", create)
        grant = pb.CreateAclsRequest(acls=[acl("User:bob", "describe", "topic", "orders")])
        await _admin_call(nodes, admin_token, channels, "CreateAcls", grant)
        bobs = [Caller(node, bob_token, channels) for node in nodes]
        request = pb.MetadataRequest(topics=["orders"])

        async def allowed_everywhere(expected: bool) -> bool:
            for bob in bobs:
                try:
                    await bob("Metadata", request)
                    if not expected:
                        return False
                except grpc.aio.AioRpcError as rpc_error:
                    if rpc_error.code() != grpc.StatusCode.PERMISSION_DENIED or expected:
                        return False
            return True

        await _until(lambda: allowed_everywhere(True), "every node to allow bob")
        revoke = pb.DeleteAclsRequest(filters=[pb.AclFilter(principal="User:bob")])
        deleted = await _admin_call(nodes, admin_token, channels, "DeleteAcls", revoke)
        assert len(deleted.deleted) == 1
        await _until(lambda: allowed_everywhere(False), "every node to refuse bob")
        del admin
    finally:
        for channel in channels:
            await channel.close()
        for node in nodes:
            await node.stop(graceful=False)


async def _admin_call(
    nodes: list[Node], token: str, channels: list[grpc.aio.Channel], method: str, request: Any
) -> Any:
    """``method`` on the metadata leader (it answers admin calls)."""

    def leader() -> Node | None:
        for node in nodes:
            replica = node.host.get(("__cluster", 0))
            if replica is not None and replica.core.role is Role.LEADER:
                return node
        return None

    await aio.wait_until(leader, "a metadata leader", timeout_s=DEADLINE_S)
    node = leader()
    assert node is not None
    return await Caller(node, token, channels)(method, request)


async def _until(condition: Any, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not await condition():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def laminar(*argv: str) -> tuple[int, str, str]:
    """``laminar ARGV``: exit code, standard output, standard error."""
    from laminar import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


@run
async def test_the_cli_manages_acls_and_a_refused_command_prints_one_line(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    code, admin_token, _ = laminar("token", "create", "admin", "--file", str(tokens))
    assert code == 0 and admin_token.startswith("lmt.")
    admin_token_file = tmp_path / "admin.token"
    admin_token_file.write_text(admin_token)
    bob_token = add_token(tokens, "bob")
    auth = AuthConfig(token_file=str(tokens), authorization=True, super_users=("User:admin",))
    node = await Node.open(node_config(tmp_path, 0, auth, subnet=33))
    try:
        await wait_leader(node, ("__cluster", 0))
        base = ["--bootstrap", node.config.grpc, "--timeout", "10"]
        admin = [*base, "--token-file", str(admin_token_file)]
        bob = [*base, "--token", bob_token]

        async def run_cli(*argv: str) -> tuple[int, str, str]:
            return await asyncio.to_thread(laminar, *argv)

        topic = ("topic", "create", "orders", "--partitions", "1", "--replication-factor", "1")
        assert (await run_cli(*admin, *topic))[0] == 0
        code, out, _ = await run_cli(
            *admin, "acl", "create", "--principal", "User:bob", "--operation", "write",
            "--topic", "ord", "--prefixed",
        )  # fmt: skip
        assert code == 0 and "allow User:bob write on topic ord (prefixed)" in out
        code, out, _ = await run_cli(*admin, "acl", "list")
        assert out.splitlines() == ["allow User:bob write on topic ord (prefixed)"]
        # bob may not list ACLs: one line on stderr, exit code 1.
        code, out, err = await run_cli(*bob, "acl", "list")
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and "User:bob may not describe cluster cluster" in err
        code, out, _ = await run_cli(*admin, "acl", "delete", "--principal", "User:bob")
        assert code == 0 and out.startswith("deleted: allow User:bob write")
        assert (await run_cli(*admin, "acl", "list"))[1] == "no ACLs\n"
        code, _, err = await run_cli(*base, "--token", "lmt.bad.token", "topic", "list")
        assert code == 1 and "not valid" in err
    finally:
        await node.stop(graceful=False)

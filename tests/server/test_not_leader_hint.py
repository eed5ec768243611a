"""Where a node without a replica of a partition sends a writer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from laminar.server.config import ServiceConfig
from laminar.server.service import LaminarService


def member(node_id: str, *, gone: bool = False) -> Any:
    return SimpleNamespace(node_id=node_id, state=SimpleNamespace(is_gone=gone))


class Node(SimpleNamespace):
    """The few NodeApi members ``_not_leader`` reads."""

    def members(self) -> list[Any]:
        return list(self.view)

    def target_of(self, key: tuple[str, int]) -> tuple[str, ...]:
        return tuple(self.target)

    def grpc_address_of(self, node_id: str | None) -> str | None:
        return None if node_id is None else f"{node_id}:7100"


def hint(node: Node) -> tuple[str | None, str | None]:
    error = LaminarService(node, ServiceConfig())._not_leader(("events", 0))  # type: ignore[arg-type]
    return error.leader_id, error.leader_address


def test_the_first_live_replica_of_the_target() -> None:
    node = Node(node_id="n9", view=[member("n1", gone=True), member("n2")], target=["n1", "n2"])
    assert hint(node) == ("n2", "n2:7100")


def test_never_this_node_itself() -> None:
    """In the target but without a replica yet (it has not applied the catalogue
    entry that creates it): naming itself would send the client straight back."""
    node = Node(node_id="n1", view=[member("n1"), member("n2")], target=["n1", "n2", "n3"])
    assert hint(node) == ("n2", "n2:7100")
    alone = Node(node_id="n1", view=[member("n1")], target=["n1"])
    assert hint(alone) == (None, None)

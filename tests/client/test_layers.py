"""The client's modules form layers: no import circle among them, and the value
types sit in a leaf module (issue 33, point 5). The package's ``__init__`` imports
every module, so importing one alone in a fresh interpreter proves nothing here:
the graph is read from the source.

Every import counts, as import-linter counts them: at module level, under
``TYPE_CHECKING`` and inside functions (a lazy import hides a circle from the
interpreter, not from the reader).
"""

from __future__ import annotations

import ast
from pathlib import Path

import laminar_client

PACKAGE = "laminar_client"
ROOT = Path(laminar_client.__file__).parent


def _module_name(path: Path) -> str:
    return PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"


def import_graph() -> dict[str, set[str]]:
    """Module -> the ``laminar_client`` modules it imports (the package itself left
    out: every module is imported through it)."""
    modules = {_module_name(path) for path in ROOT.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(ROOT.glob("*.py")):
        name = _module_name(path)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                base = node.module
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            found.update(t for t in targets if t in modules and t not in (PACKAGE, name))
        graph[name] = found
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a path that ends where it starts, or None."""
    done: set[str] = set()
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> list[str] | None:
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target in on_stack:
                return [*stack[stack.index(target) :], target]
            if target not in done:
                cycle = visit(target)
                if cycle is not None:
                    return cycle
        stack.pop()
        on_stack.discard(node)
        done.add(node)
        return None

    for node in sorted(graph):
        if node not in done:
            cycle = visit(node)
            if cycle is not None:
                return cycle
    return None


def test_find_cycle_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_client_modules_import_one_another_without_a_circle() -> None:
    graph = import_graph()
    assert {"laminar_client.client", "laminar_client.consumer"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_value_types_are_a_leaf() -> None:
    graph = import_graph()
    assert graph["laminar_client.types"] == set()
    assert graph["laminar_client.group_wire"] == set()
    # The value types a circle used to bring along come from the leaf.
    assert "laminar_client.consumer" not in graph["laminar_client.groups"]
    assert "laminar_client.consumer" not in graph["laminar_client.metrics"]
    assert "laminar_client.groups" not in graph["laminar_client.client"]


def test_topic_partition_is_defined_once() -> None:
    from laminar_client import TopicPartition, consumer, groups, types

    assert TopicPartition is types.TopicPartition is consumer.TopicPartition
    assert groups.Hook.__args__[0] == list[types.TopicPartition]  # type: ignore[attr-defined]
    definitions = [
        path.name
        for path in ROOT.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef | ast.Assign)
        and "TopicPartition"
        in (
            [node.name]
            if isinstance(node, ast.ClassDef)
            else [t.id for t in node.targets if isinstance(t, ast.Name)]
        )
    ]
    assert definitions == ["types.py"]


_STATEFUL_CALLS = frozenset(
    {
        "threading.Lock",
        "threading.RLock",
        "threading.Condition",
        "threading.Event",
        "weakref.WeakSet",
        "weakref.WeakKeyDictionary",
        "weakref.WeakValueDictionary",
        "atexit.register",
    }
)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def test_no_module_holds_mutable_state() -> None:
    """No lock, weak set or exit hook at module level (conventions: "No global
    state"): such state belongs to an object with an owner (the producer's
    events lock, its exit warning)."""
    found = []
    for path in sorted(ROOT.glob("*.py")):
        tree = ast.parse(path.read_text())
        for statement in tree.body:
            decorators = getattr(statement, "decorator_list", [])
            calls = [d for d in decorators if _dotted(d) in _STATEFUL_CALLS]
            if isinstance(statement, ast.Assign | ast.AnnAssign | ast.Expr):
                calls += [
                    node
                    for node in ast.walk(statement)
                    if isinstance(node, ast.Call) and _dotted(node.func) in _STATEFUL_CALLS
                ]
            found += [f"{path.name}:{statement.lineno}" for _ in calls]
    assert found == []

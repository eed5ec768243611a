"""No import circles inside ``laminar_cli`` and ``laminar_spark``.

Two checks per package: the import graph read from the source (every import
statement, the ones inside functions and ``TYPE_CHECKING`` blocks included, as
import-linter reads them) has no cycle; and each module imports alone in a fresh
interpreter (no module works only because another one was imported first).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

PACKAGES = ("laminar_cli", "laminar_spark")


def package_modules(package: str) -> dict[str, Path]:
    """Every module of ``package`` (the package itself for its ``__init__``)."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations is not None, package
    (root,) = (Path(location) for location in spec.submodule_search_locations)
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join((package, *parts))] = path
    return modules


def imported(path: Path, module: str, known: Mapping[str, Path]) -> set[str]:
    """The modules of ``known`` that ``path`` (module ``module``) imports anywhere."""
    found: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from package import name``: the submodule ``name`` if there is one.
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            target = name
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
    return found


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that returns to its start, or None."""
    state: dict[str, str] = {}  # "open" while on the path, "done" after

    def visit(node: str, path: list[str]) -> Iterator[list[str]]:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                yield [*path[path.index(target) :], target]
            elif target not in state:
                yield from visit(target, path)
        path.pop()
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            for cycle in visit(start, []):
                return cycle
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_the_import_graph_has_no_cycle(package: str) -> None:
    modules = package_modules(package)
    graph = {name: imported(path, name, modules) for name, path in modules.items()}
    assert sum(len(targets) for targets in graph.values()) > 0  # the graph was read
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_find_cycle_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"b", "d"}, "d": set()}
    assert find_cycle(graph) == ["b", "c", "b"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


ALONE = """
import importlib, json, sys
failed = {}
for module in sys.argv[2:]:
    for loaded in [m for m in sys.modules if m == sys.argv[1] or m.startswith(sys.argv[1] + ".")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(module)
    except Exception as error:
        failed[module] = repr(error)
print(json.dumps(failed))
"""
"""Imports each module named after the package with none of the package's modules
loaded before it (other packages stay loaded: one interpreter, not one a module)."""


@pytest.mark.process  # a fresh interpreter per package
@pytest.mark.parametrize("package", PACKAGES)
def test_each_module_imports_alone(package: str, tmp_path: Path) -> None:
    modules = sorted(package_modules(package))
    done = subprocess.run(
        [sys.executable, "-c", ALONE, package, *modules],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert len(modules) > 5 and json.loads(done.stdout) == {}

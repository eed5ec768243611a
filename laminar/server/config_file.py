"""The node's TOML file written from the config classes: ``laminar node config``.

:func:`defaults_toml` writes every setting a node's file may hold, with the preset's
value and the field's own documentation as a comment above it, so the file cannot
drift from the code: a field added to :class:`~laminar.server.config.NodeConfig` or
to one of its parts' classes shows up, documented, the next time it is run.
Documentation comes from the field's attribute docstring (the string literal right
after it in the class body, read with :mod:`ast`) or, in classes that document their
fields in the class docstring, from the paragraph that starts with ````name````:
(or ````a```` / ````b````: for two fields together).

:func:`check_file` validates a file exactly as ``laminar node start --config``
would, and lists what it sets differently from its preset.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import re
import textwrap
from typing import Any

from laminar.server.config import (
    NOT_IN_FILE,
    TABLES,
    NodeConfig,
    build_config,
    load_toml,
    toml_value,
)

DATA_DIR_EXAMPLE = "/var/lib/laminar"
"""The ``data_dir`` a generated file holds unless another is given."""
_WIDTH = 88
_ENTRY = re.compile(r"^((?:``\w+``\s*/\s*)*``\w+``):\s*(.*)$")


def field_docs(cls: type) -> dict[str, str]:
    """Each documented field of dataclass ``cls`` and its documentation."""
    docs: dict[str, str] = {}
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    for statement, following in itertools.pairwise(body):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = " ".join(following.value.value.split())
    for names, text in _docstring_entries(inspect.getdoc(cls) or ""):
        for name in names:
            docs.setdefault(name, text)
    return docs


def _docstring_entries(docstring: str) -> list[tuple[list[str], str]]:
    """The ````name````: paragraphs of a class docstring, each until the next one or
    a blank line."""
    entries: list[tuple[list[str], list[str]]] = []
    current: list[str] | None = None
    for line in docstring.splitlines():
        match = _ENTRY.match(line.strip())
        if match is not None:
            current = [match.group(2)]
            entries.append((re.findall(r"``(\w+)``", match.group(1)), current))
        elif not line.strip():
            current = None
        elif current is not None:
            current.append(line.strip())
    texts = [(names, " ".join(" ".join(lines).split())) for names, lines in entries]
    return [(names, text[:1].upper() + text[1:]) for names, text in texts]


def defaults_toml(preset: str, data_dir: str = DATA_DIR_EXAMPLE) -> str:
    """A complete, commented TOML file of the ``preset``'s settings: fed back to
    :func:`~laminar.server.config.build_config` it gives the preset's config."""
    config = build_config({"data_dir": data_dir, "preset": preset})
    lines = [
        f"# Laminar node settings: every setting with its value in the {preset!r} preset.",
        f"# Written by `laminar node config --defaults --preset {preset}` from the config",
        "# classes and their documentation. Check a file with `laminar node config --check",
        "# FILE`; start a node with `laminar node start --config FILE`. Command-line",
        "# options override this file, which overrides the preset. Delete what you do",
        "# not change: a setting left out takes the preset's value.",
        "",
    ]
    lines += _table_lines(config, None, set(TABLES))
    for table in TABLES:
        lines += _table_lines(getattr(config, table), table, set())
    return "\n".join(lines).rstrip("\n") + "\n"


def _table_lines(config: Any, table: str | None, skip: set[str]) -> list[str]:
    lines = [f"[{table}]", ""] if table is not None else []
    docs = field_docs(type(config))
    class_doc = (inspect.getdoc(type(config)) or "").split("\n\n")[0]
    if table is not None and class_doc:
        lines[1:1] = _comment(f"{class_doc} ({type(config).__name__})")
    nested: list[tuple[str, Any]] = []
    excluded = NOT_IN_FILE.get(table or "", {})
    previous_doc = ""
    for item in dataclasses.fields(config):
        name, value = item.name, getattr(config, item.name)
        if name in skip:
            continue
        if dataclasses.is_dataclass(value):
            nested.append((name, value))
            continue
        if name in excluded:
            lines += [*_comment(f"{name}: not set here; {excluded[name]}."), ""]
            continue
        doc = docs.get(name, "")
        lines += _comment("See above." if doc == previous_doc else doc)
        previous_doc = doc
        if value is None:
            lines.append(f"# {name} is not set by default.")
        else:
            lines.append(f"{name} = {toml_value(value)}")
        lines.append("")
    for name, value in nested:
        lines += _table_lines(value, f"{table}.{name}" if table else name, set())
    return lines


def _comment(text: str) -> list[str]:
    # reStructuredText literals and roles read as Markdown literals
    text = re.sub(r":\w+:`", "`", text).replace("``", "`")
    wrapped = textwrap.wrap(text, _WIDTH - 2, break_long_words=False, break_on_hyphens=False)
    return [f"# {line}" for line in wrapped]


def check_file(path: str) -> tuple[NodeConfig, list[str]]:
    """The config the file at ``path`` gives (a missing ``data_dir`` is taken as
    given on the command line) and its settings that differ from its preset."""
    values = load_toml(path)
    options = {} if "data_dir" in values else {"data_dir": DATA_DIR_EXAMPLE}
    config = build_config(options, values)
    base = build_config({"data_dir": config.data_dir, "preset": config.preset})
    return config, _differences(base, config, None)


def _differences(base: Any, config: Any, table: str | None) -> list[str]:
    found: list[str] = []
    for item in dataclasses.fields(config):
        old, new = getattr(base, item.name), getattr(config, item.name)
        if old == new:
            continue
        if dataclasses.is_dataclass(new):
            found += _differences(old, new, f"{table}.{item.name}" if table else item.name)
        elif item.name != "data_dir":
            where = f"[{table}] " if table else ""
            preset = "not set" if old is None else toml_value(old)
            found.append(f"{where}{item.name} = {toml_value(new)} (preset: {preset})")
    return found

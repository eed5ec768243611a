"""The node process's logging: ``laminar node start --log-format text | json``.

``text`` (the default) is the format the operations guide shows, one line each::

    2025-01-01 12:00:00,000 INFO laminar.server.host: replica orders/3: RoleChanged(...)

``json`` writes one JSON object per line (python-json-logger), for a log pipeline:
``time``, ``level``, ``logger``, ``message``, ``node_id`` on every line, and where
the line is about one of them ``topic``, ``partition``, ``term``, ``peer``
(:mod:`laminar.logfields`), plus ``exc_info`` with a traceback. Rate limits are the
log calls' own (the host's replica-event summary, the transport's per-peer limits):
the format changes how a line is written, not which lines are.

Only the entry point calls :func:`configure`; library code only logs.
"""

from __future__ import annotations

import logging
from typing import TextIO

from laminar.errors import ConfigError
from laminar.logfields import NODE_ID

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The text line, as it always was (operators' documents show it)."""
_JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s"
_JSON_RENAMES = {"asctime": "time", "levelname": "level", "name": "logger"}


class NodeLogFilter(logging.Filter):
    """Gives every record the node's id (``node_id``) unless its call gave one.

    The node learns its id from its data directory while it starts
    (``Node.open(on_identity=...)`` sets :attr:`node_id`); lines written before
    that carry the ``--node-id`` given, or null for a new node choosing its id.
    One node per process: threads (membership, the fsync pool) log with it too."""

    def __init__(self, node_id: str | None = None) -> None:
        super().__init__()
        self.node_id = node_id

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, NODE_ID, None) is None:
            setattr(record, NODE_ID, self.node_id)
        return True


def configure(
    log_format: str, level: str, stream: TextIO, node_id: str | None = None
) -> NodeLogFilter:
    """Send the root logger's lines to ``stream`` in ``log_format`` at ``level``;
    the filter whose ``node_id`` the caller sets once the node knows it."""
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"log_format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(stream)
    node_filter = NodeLogFilter(node_id)
    handler.addFilter(node_filter)
    if log_format == "json":
        from pythonjsonlogger.json import JsonFormatter  # the server extra

        handler.setFormatter(
            JsonFormatter(_JSON_FIELDS, rename_fields=_JSON_RENAMES, json_ensure_ascii=False)
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    return node_filter

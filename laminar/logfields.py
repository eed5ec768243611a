"""The structured context of the node's log lines: the fields a JSON log line carries
besides its time, level, logger and message (docs/operations.md, "Log format").

A log call passes its context as ``extra=fields(...)``; the fields become attributes
of the :class:`logging.LogRecord`, which the JSON formatter of ``laminar node start
--log-format json`` writes as keys of the line's object (the text format leaves them
out: its messages say the same in prose, as they always did). Only the fields that
apply are given; ``node_id`` is filled in for every line by the node's log filter
(:class:`laminar.server.logs.NodeLogFilter`) when a call does not give it.

No logging is configured here: that is the entry point's job.
"""

from __future__ import annotations

NODE_ID = "node_id"
"""The node that wrote the line (every line)."""
TOPIC = "topic"
PARTITION = "partition"
"""A partition's topic and index (lines about one partition replica)."""
TERM = "term"
"""The partition group's leadership term, where the line is about one."""
PEER = "peer"
"""The other node the line is about (a peer link, a member, a follower)."""

FIELDS = (NODE_ID, TOPIC, PARTITION, TERM, PEER)


def fields(
    key: tuple[str, int] | None = None,
    *,
    node_id: str | None = None,
    term: int | None = None,
    peer: str | None = None,
) -> dict[str, object]:
    """The ``extra`` of a log call: ``key`` (topic, partition) and the other fields
    that are given."""
    extra: dict[str, object] = {}
    if node_id is not None:
        extra[NODE_ID] = node_id
    if key is not None:
        extra[TOPIC], extra[PARTITION] = key
    if term is not None:
        extra[TERM] = term
    if peer is not None:
        extra[PEER] = peer
    return extra


def partition_name(key: tuple[str, int]) -> str:
    """``topic/partition``, as log messages name a partition."""
    return f"{key[0]}/{key[1]}"


def parse_partition_name(name: str) -> tuple[str, int] | None:
    """The key of a :func:`partition_name` (topic names hold no ``/``); None for
    another label (a simulator's replica name)."""
    topic, _, index = name.rpartition("/")
    return (topic, int(index)) if topic and index.isdigit() else None

"""A topic's setting names and cleanup policies: one list for the node and the clients.

The settings are the fields of the wire message ``TopicConfig``
(``proto/laminar/v1/laminar.proto``), read from its generated descriptor, so a
setting added to the proto is known at once to the node
(:mod:`laminar.server.metadata`, which may not be imported by clients) and to the
client library (:mod:`laminar_client.metadata`, which the node may not import);
each keeps a dataclass field of that name for it (``TopicSpec``, ``TopicConfig``:
``tests/test_topic_settings.py`` checks they agree with the proto).
"""

from __future__ import annotations

from laminar.v1 import laminar_pb2 as pb

TOPIC_SETTINGS: tuple[str, ...] = tuple(field.name for field in pb.TopicConfig.DESCRIPTOR.fields)
"""Every ``TopicConfig`` field, in the proto's order (the order ``topic describe``
shows them)."""

ALTERABLE_SETTINGS = tuple(name for name in TOPIC_SETTINGS if name != "partitions")
"""The settings ``AlterTopic`` changes or resets (``partitions`` only grows, by
``CreatePartitions``)."""

LATER_SETTINGS: tuple[str, ...] = tuple(
    field.name
    for field in pb.TopicConfig.DESCRIPTOR.fields
    if field.number >= pb.TopicConfig.CLEANUP_POLICY_FIELD_NUMBER
)
"""The settings added since the first release (keyed compaction's, field 5 on): a
node that predates one leaves it unset on the wire (read as its default), and the
metadata snapshot keeps them under a key of their own."""

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
"""A topic's ``cleanup_policy`` values: delete old segments by retention, keyed
compaction (keep the newest record of each key), or both (docs/design.md, "Keyed
compaction")."""

__all__ = ["ALTERABLE_SETTINGS", "CLEANUP_POLICIES", "LATER_SETTINGS", "TOPIC_SETTINGS"]

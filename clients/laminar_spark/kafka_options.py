"""Spark's Kafka source and sink option names, accepted as they are.

A job written for ``format("kafka")`` runs with ``format("laminar")`` and nothing
else changed (``docs/migrating-from-kafka.md`` lists every option): this module
sorts each option name a reader or writer receives into

- a Laminar option (``servers``, ``subscribe``, ...), by its own name or by the
  Kafka source's name for the same thing (``kafka.bootstrap.servers``);
- an option accepted with no effect here, each with its reason (Kafka consumer
  tuning, consumer group names): one warning lists them, as Spark and Kafka's
  client warn about settings they do not use;
- an option refused with its reason: those Spark's Kafka source refuses too (the
  (de)serializers, ``auto.offset.reset``, ...) and those whose silent loss would
  change what the job does: Kafka's TLS and SASL settings, refused with the Laminar
  option to use instead (``tls.ca``, ``tls.cert`` / ``tls.key``,
  ``tls.serverName``, ``token`` / ``tokenFile``, :mod:`laminar_spark.security`),
  none mapped for it: Kafka's stores are JKS or PKCS12 by default, a PEM store
  holds the key and the chain in one file, and a SASL mechanism is not a Laminar
  bearer token, so a job's security settings are rewritten, never half-taken;
- an unknown option, whose error names the Laminar option the user may have meant.

PySpark hands a Python data source its option names lower-cased (checked with
PySpark 4.3: ``option("Kafka.Bootstrap.Servers", ...)`` arrives as
``kafka.bootstrap.servers``), so names match case-insensitively, messages name a
known option in its documented case, and an unknown one as received.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from laminar.errors import InvalidInputError

__all__ = [
    "KAFKA_PREFIX",
    "SERVERS_ALIAS",
    "SortedOptions",
    "sort_options",
    "unknown_option",
    "warn_ignored",
]

log = logging.getLogger("laminar_spark")

KAFKA_PREFIX = "kafka."
"""Spark's Kafka source passes ``kafka.<name>`` options to Kafka's clients."""
SERVERS_ALIAS = "kafka.bootstrap.servers"
"""The Kafka source's name for Laminar's ``servers``."""

_SPARK_REFUSES = "(Spark's Kafka source refuses it too)"
_TLS_OPTIONS = "'tls.ca' (and 'tls.cert' with 'tls.key' for a client certificate)"
_PEM = "PEM files, the key unencrypted; Kafka's JKS and PKCS12 stores are not read"
_KAFKA_SECURITY = {
    "security.protocol": (
        f"remove it: {_TLS_OPTIONS} turns TLS on, 'token' or 'tokenFile' sends a "
        "Laminar bearer token"
    ),
    "ssl.truststore.": f"use 'tls.ca', a PEM file of the CA certificates ({_PEM})",
    "ssl.keystore.": f"use 'tls.cert' and 'tls.key' ({_PEM})",
    "ssl.key.": f"use 'tls.cert' and 'tls.key' ({_PEM})",
    "ssl.endpoint.identification.algorithm": (
        "the nodes' certificates are always checked against their host name; "
        "'tls.serverName' names another name to check"
    ),
    "ssl.": (
        f"Laminar's TLS options are 'tls.ca', 'tls.cert', 'tls.key' and 'tls.serverName' ({_PEM})"
    ),
    "sasl.": (
        "use 'token' or 'tokenFile' (a Laminar bearer token, `laminar token create`); "
        "Kafka's SASL mechanisms are not spoken"
    ),
}
"""Kafka's security settings (a name, or a prefix ending in a dot; the first match
wins) and the Laminar option to use instead."""

READ_IGNORED = {
    "kafkaConsumer.pollTimeoutMs": (
        "a task's fetch gives up on a replica after the client's attempt timeout and "
        "moves to the next replica; a task fails after 30 s without progress"
    ),
    "fetchOffset.numRetries": "the client retries ListOffsets on other replicas itself",
    "fetchOffset.retryIntervalMs": "the client retries ListOffsets on other replicas itself",
    "groupIdPrefix": "reads use no consumer group (the query's checkpoint holds its progress)",
}
"""Kafka source options accepted with no effect on a read, and why."""

WRITE_IGNORED = {
    "includeHeaders": (
        "a 'headers' column is written when the DataFrame has one, as by Kafka's sink"
    ),
}
"""Kafka sink options accepted with no effect on a write, and why."""

_KAFKA_READ_REFUSED = {
    "auto.offset.reset": (
        "set the option 'startingOffsets' to 'earliest' or 'latest' instead " + _SPARK_REFUSES
    ),
    "key.deserializer": (
        "keys are read as bytes: deserialize them with DataFrame operations " + _SPARK_REFUSES
    ),
    "value.deserializer": (
        "values are read as bytes: deserialize them with DataFrame operations " + _SPARK_REFUSES
    ),
    "enable.auto.commit": (
        "nothing is committed to the cluster: the query's checkpoint holds its progress "
        + _SPARK_REFUSES
    ),
    "interceptor.classes": "there is no Kafka consumer to intercept " + _SPARK_REFUSES,
}
_KAFKA_WRITE_REFUSED = {
    "key.serializer": (
        "keys are written as bytes or UTF-8 strings: serialize them with DataFrame "
        "operations " + _SPARK_REFUSES
    ),
    "value.serializer": (
        "values are written as bytes or UTF-8 strings: serialize them with DataFrame "
        "operations " + _SPARK_REFUSES
    ),
    "partitioner.class": (
        "a keyed record goes to key_partition(key), as every Laminar writer puts it; "
        "choose partitions with a 'partition' column"
    ),
}
_KAFKA_READ_NOTED = {
    "group.id": "reads use no consumer group (the query's checkpoint holds its progress)",
}
_KAFKA_WRITE_NOTED = {
    "acks": "every write waits for acks=all (a majority of replicas), whatever this says",
}

_HINTS = {
    "bootstrap.servers": f"'servers' (or '{SERVERS_ALIAS}')",
    "brokers": "'servers'",
    "topics": "'subscribe' (a comma-separated list)",
}
"""Names users write for which the Laminar option is not a close spelling."""
_READ_HINTS = {"topic": "'subscribe' to read a topic ('topic' names a write's topic)"}
_WRITE_HINTS = {
    "subscribe": "'topic' (or a 'topic' column) to name the topic written",
    "partition": "a 'partition' column to choose partitions",
}


@dataclass(frozen=True, slots=True)
class SortedOptions:
    """An options mapping sorted by :func:`sort_options`.

    ``named`` maps each Laminar option given (documented case) to its value;
    ``ignored`` names the options accepted with no effect, each with its reason.
    """

    named: dict[str, str]
    ignored: tuple[str, ...]


def sort_options(
    options: Mapping[str, str], known: Iterable[str], *, write: bool, what: str
) -> SortedOptions:
    """Sort ``options`` (see the module docstring) for a reader (``write`` False) or a
    writer; ``known`` lists the Laminar options allowed here, ``what`` names the
    reader or writer in messages ("the laminar source", ...).

    Raises :class:`InvalidInputError` for a refused or unknown option, and when
    ``servers`` and ``kafka.bootstrap.servers`` are both given.
    """
    known = tuple(known)
    by_lower = {name.lower(): name for name in known}
    ignored_options = WRITE_IGNORED if write else READ_IGNORED
    ignored_by_lower = {name.lower(): name for name in ignored_options}
    named: dict[str, str] = {}
    ignored: list[str] = []
    for raw_name, value in options.items():
        lower = raw_name.lower()
        if lower == SERVERS_ALIAS and "servers" in by_lower.values():
            if "servers" in named:
                raise InvalidInputError(_both_servers())
            named["servers"] = str(value)
            continue
        name = by_lower.get(lower)
        if name is not None:
            if name == "servers" and "servers" in named:
                raise InvalidInputError(_both_servers())
            named[name] = str(value)
        elif lower in ignored_by_lower:
            option = ignored_by_lower[lower]
            ignored.append(f"{option} ({ignored_options[option]})")
        elif lower.startswith(KAFKA_PREFIX):
            ignored.append(_kafka_config(raw_name, str(value), write=write))
        else:
            raise InvalidInputError(unknown_option(raw_name, known, write=write, what=what))
    return SortedOptions(named, tuple(ignored))


def _both_servers() -> str:
    return (
        f"give one of the options 'servers' and '{SERVERS_ALIAS}' (the Kafka source's "
        "name for it), not both"
    )


def _kafka_config(raw_name: str, value: str, *, write: bool) -> str:
    """How a ``kafka.<config>`` option is taken: refused (raises), or ignored (the
    text for the warning)."""
    config = raw_name.lower()[len(KAFKA_PREFIX) :]
    refused = _KAFKA_WRITE_REFUSED if write else _KAFKA_READ_REFUSED
    reason = refused.get(config)
    plaintext = config == "security.protocol" and value.strip().upper() == "PLAINTEXT"
    if not plaintext:
        reason = next(
            (
                why
                for name, why in _KAFKA_SECURITY.items()
                if config == name or (name.endswith(".") and config.startswith(name))
            ),
            reason,
        )
    if reason is not None:
        raise InvalidInputError(f"option {raw_name!r} is not supported: {reason}")
    noted = _KAFKA_WRITE_NOTED if write else _KAFKA_READ_NOTED
    if config in noted:
        return f"{raw_name} ({noted[config]})"
    return f"{raw_name} (a Kafka client setting; Laminar's client has no use for it)"


def unknown_option(raw_name: str, known: Iterable[str], *, write: bool, what: str) -> str:
    """The message for an unknown option: the Laminar option meant, when a hint or a
    close spelling finds one, then every option allowed."""
    known = tuple(known)
    lower = raw_name.lower()
    hints = {**_HINTS, **(_WRITE_HINTS if write else _READ_HINTS)}
    meant = hints.get(lower)
    if meant is None:
        close = difflib.get_close_matches(lower, [n.lower() for n in known], n=1, cutoff=0.75)
        by_lower = {name.lower(): name for name in known}
        meant = f"{by_lower[close[0]]!r}" if close else None
    text = f"unknown option {raw_name!r} for {what}"
    if meant is not None:
        text += f"; the Laminar option is {meant}"
    return text + "; allowed: " + ", ".join(known)


def warn_ignored(ignored: Iterable[str], what: str) -> None:
    """One warning naming every option accepted with no effect (none: no warning)."""
    ignored = tuple(ignored)
    if ignored:
        log.warning("%s: options with no effect on Laminar: %s", what, "; ".join(ignored))

"""Consumer groups, sans-IO: who reads which partition, and whose commits count.

One concern per module:

- :mod:`~laminar.groups.assignment` — the target assignment, a pure function of the
  group id, its members and its partitions (capped weighted rendezvous);
- :mod:`~laminar.groups.entries` — the log entries of the ``__groups`` topic and
  their bounded msgpack encoding;
- :mod:`~laminar.groups.state` — :class:`~laminar.groups.state.GroupState`, the
  deterministic state machine every replica applies the entries to, which is where
  ownership and commits are validated;
- :mod:`~laminar.groups.coordinator` — the leader's heartbeat handling: sessions in
  memory, the entries to append;
- :mod:`~laminar.groups.member` — the client's side: which partitions to start,
  which to release, when to rejoin.

Nothing here does I/O or reads a clock; the gRPC service and the consumer client
wrap these classes.
"""

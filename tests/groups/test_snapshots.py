"""Snapshots of a ``__groups`` partition: the chunk codec, assembling (torn ones
ignored), the copy-before-write capture, and rebuilding from a log whose prefix is
gone (:class:`GroupReplay`)."""

from __future__ import annotations

import msgpack
import pytest

from laminar.errors import GroupEntryFormatError, InvalidInputError
from laminar.groups.entries import (
    ENTRY_BYTES_MAX,
    Commit,
    Delete,
    GroupEntry,
    Join,
    Own,
    Partitions,
    Reset,
    Subscription,
    decode_entry,
    decode_record,
    encode_entry,
    encode_snapshot_chunk,
)
from laminar.groups.replay import GroupReplay, snapshot_due
from laminar.groups.state import GroupState
from laminar.records import DEFAULT_LIMITS, encode_batch
from laminar.snapshots import (
    CHUNK_BYTES_MAX,
    SNAPSHOT_BYTES_MAX,
    SnapshotAssembler,
    SnapshotChunk,
    split_snapshot,
)


def chunks_of(payload: bytes, *, as_of: int = 7, chunk_bytes: int = CHUNK_BYTES_MAX) -> list:  # type: ignore[type-arg]
    return split_snapshot(
        payload, snapshot_id="s1", as_of_offset=as_of, applied_count=3, chunk_bytes=chunk_bytes
    )


# ---------------------------------------------------------------- codec and limits


def test_a_large_snapshot_is_split_into_chunks_that_fit_records_and_batches() -> None:
    payload = bytes(range(256)) * (3 * CHUNK_BYTES_MAX // 256 + 10)
    chunks = chunks_of(payload)
    assert len(chunks) == 4 and [c.index for c in chunks] == [0, 1, 2, 3]
    assert all(c.count == 4 and len(c.payload) <= CHUNK_BYTES_MAX for c in chunks)
    values = [encode_snapshot_chunk(chunk) for chunk in chunks]
    assert all(len(value) <= ENTRY_BYTES_MAX for value in values)
    assert all(len(encode_batch([v])) <= DEFAULT_LIMITS.batch_bytes_max for v in values)
    assert [decode_record(value) for value in values] == chunks
    assembler = SnapshotAssembler(keep_payload=True)
    results = [assembler.add(chunk, 100 + n) for n, chunk in enumerate(chunks)]
    assert results[:3] == [None, None, None]
    complete = results[3]
    assert complete is not None and complete.payload == payload
    assert (complete.as_of_offset, complete.applied_count, complete.end_offset) == (7, 3, 104)


def test_an_empty_snapshot_is_one_chunk() -> None:
    (chunk,) = chunks_of(b"")
    complete = SnapshotAssembler(keep_payload=True).add(chunk, 0)
    assert complete is not None and complete.payload == b""


def test_snapshot_limits_are_enforced() -> None:
    with pytest.raises(InvalidInputError, match="snapshot of"):
        split_snapshot(
            b"x" * (SNAPSHOT_BYTES_MAX + 1), snapshot_id="s", as_of_offset=0, applied_count=0
        )
    with pytest.raises(InvalidInputError, match="chunk_bytes"):
        chunks_of(b"x", chunk_bytes=CHUNK_BYTES_MAX + 1)
    good = chunks_of(b"abc")[0]
    for bad in (
        {"index": 1},  # index must be < count
        {"count": 0},
        {"payload": b"x" * (CHUNK_BYTES_MAX + 1)},
        {"snapshot_id": ""},
        {"as_of_offset": -1},
    ):
        fields = {
            name: getattr(good, name)
            for name in (
                "snapshot_id",
                "as_of_offset",
                "applied_count",
                "index",
                "count",
                "snapshot_bytes",
                "checksum",
                "payload",
            )
        }
        with pytest.raises(InvalidInputError):
            SnapshotChunk(**{**fields, **bad})


def test_decoding_refuses_other_versions_and_malformed_chunks() -> None:
    value = encode_snapshot_chunk(chunks_of(b"abc")[0])
    body = msgpack.unpackb(value)
    for change, message in (
        ({"chunk_v": 2}, "unsupported snapshot chunk version"),
        ({"v": 2}, "unsupported group entry version"),
        ({"index": "0"}, "index must be an int"),
    ):
        with pytest.raises(GroupEntryFormatError, match=message):
            decode_record(msgpack.packb({**body, **change}))
    missing = dict(body)
    del missing["crc"]
    with pytest.raises(GroupEntryFormatError, match="lacks field"):
        decode_record(msgpack.packb(missing))
    with pytest.raises(GroupEntryFormatError, match="a snapshot chunk, not a group entry"):
        decode_entry(value)


# ---------------------------------------------------------------- torn snapshots


def test_torn_and_interleaved_snapshots_are_ignored() -> None:
    payload = b"0123456789" * 10
    first = chunks_of(payload, chunk_bytes=30)  # 4 chunks
    second = split_snapshot(
        payload, snapshot_id="s2", as_of_offset=9, applied_count=3, chunk_bytes=30
    )
    assembler = SnapshotAssembler(keep_payload=True)
    # The writer of s1 lost its leadership after two chunks; s2 follows in full.
    fed = [first[0], first[1], *second]
    results = [assembler.add(chunk, n) for n, chunk in enumerate(fed)]
    assert [r.snapshot_id for r in results if r is not None] == ["s2"]
    assert assembler.torn == 1
    # A chunk missing in the middle, or the tail of one whose start was not seen.
    assembler = SnapshotAssembler(keep_payload=False)
    assert [assembler.add(c, n) for n, c in enumerate([first[0], first[2], first[3]])] == [
        None,
        None,
        None,
    ]
    assert assembler.torn == 1
    # Chunks whose bytes do not add up to the checksum.
    bad = [first[0], first[1], first[2], SnapshotChunk(**{**_fields(first[3]), "payload": b"?"})]
    assert [SnapshotAssembler(keep_payload=False).add(c, n) for n, c in enumerate(bad)][-1] is None


def _fields(chunk: SnapshotChunk) -> dict:  # type: ignore[type-arg]
    return {name: getattr(chunk, name) for name in SnapshotChunk.__slots__}


# ---------------------------------------------------------------- capture


def sub() -> Subscription:
    return Subscription(("t",))


def test_capture_is_the_state_at_its_start_whatever_applies_meanwhile() -> None:
    state = GroupState()
    for name in ("a", "b", "c"):
        state.apply(Join(name, "m", sub()))
    state.apply(Reset("empty", (("t", 0, 5),)))
    before = state.snapshot()
    builder = state.begin_snapshot()
    assert not builder.step(1)  # "a" captured; the rest while entries apply
    state.apply(Join("b", "m2", sub()))  # changes b before it is captured
    state.apply(Delete("empty"))  # deletes a group not captured yet
    state.apply(Join("new", "m", sub()))  # created after the start: not in it
    assert builder.step(10)
    state.end_snapshot(builder)
    restored = GroupState.restore_payload(builder.payload())
    assert restored.snapshot() == before
    state.apply(Join("c", "m3", sub()))  # no capture any more
    assert GroupState.restore_payload(builder.payload()).snapshot() == before


def test_restoring_a_malformed_payload_is_refused() -> None:
    for payload in (b"", msgpack.packb([2, 0, 1]), msgpack.packb([99, 0, 0]), b"\xc1"):
        with pytest.raises(InvalidInputError):
            GroupState.restore_payload(payload)


def test_a_snapshot_is_due_after_max_of_the_floor_and_twice_its_size() -> None:
    assert not snapshot_due(4 << 20, 0)
    assert snapshot_due((4 << 20) + 1, 0)
    assert not snapshot_due(20 << 20, 10 << 20)
    assert snapshot_due((20 << 20) + 1, 10 << 20)


# ---------------------------------------------------------------- rebuilding


def entries_for(group: str, commits: int) -> list[GroupEntry]:
    entries: list[GroupEntry] = [
        Join(group, "m", sub()),
        Partitions(group, (("t", 2),)),
        Own(group, "t", 0, "m", 1),
    ]
    entries += [Commit(group, "t", 0, n, "m", 1, 1) for n in range(1, commits + 1)]
    return entries


class Log:
    """A log of one record per batch, with the writer's state applied as it grows."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.state = GroupState()

    def append(self, entries: list[GroupEntry]) -> None:
        for entry in entries:
            self.values.append(encode_entry(entry))
            self.state.apply(entry)

    def snapshot(self, *, tail: list[GroupEntry], torn: bool = False) -> int:
        """A snapshot as of the end, with ``tail`` appended before its chunks."""
        as_of = len(self.values)
        builder = self.state.begin_snapshot()
        self.append(tail)
        assert builder.step(1000)
        self.state.end_snapshot(builder)
        chunks = split_snapshot(
            builder.payload(),
            snapshot_id=f"s{as_of}",
            as_of_offset=as_of,
            applied_count=builder.applied_count,
            chunk_bytes=40,
        )
        assert len(chunks) > 2
        for chunk in chunks[: len(chunks) // 2] if torn else chunks:
            self.values.append(encode_snapshot_chunk(chunk))
            self.append([Commit("g0", "t", 0, 10_000 + len(self.values), "m", 1, 1)])
        return as_of

    def replay(self, start: int) -> GroupReplay:
        replay = GroupReplay(start)
        while replay.read_offset < len(self.values):
            offset = replay.read_offset
            out = replay.apply_batch(offset, offset + 1, [(offset, self.values[offset])])
            assert out.errors == []
        return replay


def test_a_replica_whose_prefix_is_gone_rebuilds_from_the_snapshot_and_the_tail() -> None:
    log = Log()
    log.append(entries_for("g0", 20) + entries_for("g1", 5))
    first = log.snapshot(tail=entries_for("g2", 3))  # X > A: entries in between
    log.append(entries_for("g3", 4))
    torn = log.snapshot(tail=[], torn=True)  # its writer lost the leadership
    log.append([Commit("g1", "t", 0, 99, "m", 1, 1)])
    # The prefix below the first snapshot's A is deleted: start there, or at any
    # offset up to A.
    for start in (first, first - 3):
        replay = log.replay(start)
        assert replay.restored_from is not None
        assert replay.restored_from.as_of_offset == first
        assert replay.state.snapshot() == log.state.snapshot()
    # From 0 it replays everything and agrees (the snapshots change nothing).
    assert log.replay(0).state.snapshot() == log.state.snapshot()
    # A start past the complete snapshot but before the torn one: nothing to restore.
    # (It is never used: a replica deletes its prefix only below a complete one.)
    stuck = log.replay(torn)
    assert stuck.seeking and stuck.applied_offset == -1 and stuck.restored_from is None


def test_a_start_between_snapshots_uses_the_first_complete_one_after_it() -> None:
    log = Log()
    log.append(entries_for("g0", 10))
    first = log.snapshot(tail=entries_for("g1", 2))
    log.append(entries_for("g2", 10))
    second = log.snapshot(tail=[Commit("g2", "t", 0, 500, "m", 1, 1)])
    log.append([Commit("g0", "t", 0, 600, "m", 1, 1)])
    replay = log.replay(first + 1)  # first's A is gone: its snapshot cannot be used
    assert replay.restored_from is not None and replay.restored_from.as_of_offset == second
    assert replay.state.snapshot() == log.state.snapshot()


def test_a_snapshot_that_disagrees_with_the_replayed_log_is_reported_and_ignored() -> None:
    log = Log()
    log.append(entries_for("g0", 5))
    state = log.state
    chunks = split_snapshot(
        b"",  # a follower checks the count only; the payload matters to a restore
        snapshot_id="bad",
        as_of_offset=len(log.values),
        applied_count=state.applied_count + 1,  # one entry more than was applied
    )
    log.values.append(encode_snapshot_chunk(chunks[0]))
    replay = GroupReplay(0)
    errors = []
    completed = []
    for offset, value in enumerate(log.values):
        out = replay.apply_batch(offset, offset + 1, [(offset, value)])
        errors += out.errors
        completed += out.snapshots
    assert len(errors) == 1 and "holds 9 entries, this replica applied 8" in errors[0]
    assert completed == []  # not reported: the log below it is kept

"""Seeded simulation of one consumer group: coordinator, log, members, faults.

    .venv/bin/python -m tests.groups.group_sim --seeds 5000 [--start 0]
    .venv/bin/python -m tests.groups.group_sim --replay 1234

A fake clock advances in steps of ``STEP_MS``. Members heartbeat every session/15
through the real :class:`Coordinator` (the shell's prepare/apply/answer loop),
read their partitions and commit; the coordinator ticks every step. The log is a
list of encoded entries (every entry goes through encode/decode), applied to a
:class:`GroupState` as it is appended. During the fault phase random faults hit:
members join, leave, crash without leaving (static ones may restart with a new
member id), pause past their session timeout and then commit, the coordinator
fails over (the state is rebuilt from the log and must equal the old one), and
topics gain partitions. Then faults stop and the group must settle.

Each member's application side runs the client's own
:func:`~laminar.groups.member.handover_steps` (hooks, reads, auto-commits before
revocations) and checks its lease before every read and commit, as the real
consumer does; a few members are *lease-unaware* (an older client) so that the
coordinator's fencing of a resumed zombie's commits stays exercised.

Log compaction (see :mod:`laminar.groups.replay`): during faults the leader now and
then starts a snapshot as of the log's end ``A``, captures it a few groups per step
while entries keep applying (admin resets and deletes of bystander groups give it
several groups to capture), and appends its chunks over later steps, so they sit
at ``X > A`` among other entries; some snapshots are torn (abandoned part-way, or
by a failover). A follower applies the whole log through :class:`GroupReplay`
(its paired checks must pass, and it must equal the live state), and a failover
rebuilds the state from the latest complete snapshot's ``A`` (the log start a
replica would have after deleting the prefix) plus the tail, and also from offset
0: both must equal the live state, and the new leader continues from the one
rebuilt from the snapshot.

Invariants, checked after every step (and per entry where they concern one):

- at most one confirmed owner per partition: an ``own`` applies only to a free
  partition, and at most one member reads a partition at its confirmed epoch;
- committed offsets change only through an applied commit of the partition's
  owner at its member and assignment epochs, and never move backwards;
- a member that was expired while paused has its commits ``FENCED``;
- from the application's side: every change of what a member reads is announced
  by exactly one hook (``assigned`` for a partition not read, ``revoked`` while it
  is still read, ``lost`` after it was dropped), and after every heartbeat what
  the reader reads equals what the hooks said and what the member holds;
- a lease-aware member never reads or commits a partition after the coordinator
  expired it (it stops when its own lease lapses, which is never later), nor one
  the coordinator does not confirm it owns, unless it was fenced for keeping a
  partition past the rebalance timeout (which it learns at its next heartbeat);
- delayed proposals (tick output applied steps later) and retried old entries are
  refused or harmless when applied (they must not break any invariant here);
- a new owner resumes at the committed offset;
- the target assignment's loads differ by at most one (equal weights);
- within session + rebalance timeout (+ two heartbeats) after faults stop, every
  partition is owned by a live member at its target, and every owner reads it.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from laminar.groups.coordinator import PREPARE_ROUNDS_MAX, Coordinator
from laminar.groups.entries import (
    Commit,
    Delete,
    GroupEntry,
    Leave,
    Reset,
    Subscription,
    decode_entry,
    decode_record,
    encode_entry,
    encode_snapshot_chunk,
)
from laminar.groups.member import (
    CommitNow,
    GroupMember,
    MemberActions,
    Notify,
    Read,
    Released,
    handover_steps,
)
from laminar.groups.replay import GroupReplay
from laminar.groups.state import ApplyResult, Group, GroupState, Outcome, SnapshotBuilder
from laminar.ids import TopicPartition
from laminar.snapshots import SnapshotChunk, split_snapshot

STEP_MS = 100
SESSION_TIMEOUT_MS = 3000
REBALANCE_TIMEOUT_MS = 2000
HEARTBEAT_INTERVAL_MS = SESSION_TIMEOUT_MS // 15
FAULT_STEPS = 120
MEMBERS_MAX = 6
PARTITIONS_MAX = 24
GROUP_ID = "sim-group"
LEARNT_AT_HEARTBEAT = frozenset({"fenced", "replaced", "stale"})
"""Ownerships the coordinator ends that a member learns of at its next heartbeat
(its lease cannot tell): fenced past the rebalance timeout, replaced by a static
member's new incarnation, or a stale proposal (this simulator's own fault)."""
SUBSCRIPTION = Subscription(("a", "b"))


@dataclass
class SimMember:
    core: GroupMember
    status: str = "alive"  # alive | paused | crashed | left
    paused_until_ms: int = 0
    next_heartbeat_ms: int = 0
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    """What the reader reads (its assignment) and the position of each."""
    lease_aware: bool = True
    """False: an older client that neither checks its lease nor stops at once."""
    announced: set[TopicPartition] = field(default_factory=set)
    """What the hooks told the application it reads."""
    hooks: list[tuple[str, tuple[TopicPartition, ...]]] = field(default_factory=list)
    queue: list[MemberActions] = field(default_factory=list)
    """Heartbeat outcomes the application has not carried out yet (the client's
    queue between its heartbeat thread and the application's thread)."""


@dataclass(frozen=True)
class SeedResult:
    seed: int
    violations: list[str]
    entries: int
    commits: int
    fenced_zombie_commits: int
    failovers: int
    lapsed_leases: int = 0
    snapshots_complete: int = 0
    snapshots_torn: int = 0
    rebuilt_from_snapshot: int = 0


class GroupSim:
    """One seeded run (see the module docstring)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ms = 0
        self.catalogue = {"a": self.rng.randint(1, 8), "b": self.rng.randint(1, 6)}
        self.log: list[bytes] = []
        self.state = GroupState()
        self.coordinator = Coordinator(self.state, self.now_ms)
        self.members: list[SimMember] = []
        self.violations: list[str] = []
        self.member_counter = 0
        self.commits_applied = 0
        self.fenced_zombie_commits = 0
        self.failovers = 0
        self.committed_this_step: set[TopicPartition] = set()
        self.last_commits: dict[TopicPartition, int] = {}
        self.delayed: list[tuple[int, list[GroupEntry]]] = []
        self.removed: dict[tuple[str, int, TopicPartition], str] = {}
        """(member id, member epoch, partition) ownerships that ended, and why."""
        self.lapsed_leases = 0
        # log compaction (see the module docstring)
        self.follower = GroupReplay(0)
        self.log_start = 0
        self.capturing: tuple[SnapshotBuilder, int, GroupState] | None = None
        self.unwritten_chunks: list[bytes] = []
        self.snapshots_complete = 0
        self.snapshots_torn = 0
        self.rebuilt_from_snapshot = 0

    # -- plumbing -------------------------------------------------------------

    def violation(self, text: str) -> None:
        self.violations.append(f"t={self.now_ms} {text}")

    def group(self) -> Group | None:
        return self.state.group(GROUP_ID)

    def append(self, entries: list[GroupEntry], *, stale: bool = False) -> list[ApplyResult]:
        """Append and apply ``entries``; ``stale``: a delayed or retried proposal."""
        results = []
        for entry in entries:
            data = encode_entry(entry)
            if decode_entry(data) != entry:
                self.violation(f"entry does not survive encoding: {entry}")
            self._log_append(data)
            results.append(self._apply_checked(entry, stale))
        return results

    def _apply_checked(self, entry: GroupEntry, stale: bool) -> ApplyResult:
        group = self.group()
        owner = None
        committed = None
        member = None
        if group is not None and isinstance(entry, Commit):
            tp = (entry.topic, entry.partition)
            owner = group.owners.get(tp)
            committed = group.commits.get(tp)
            member = group.members.get(entry.member_id)
        was_owned = (
            group is not None
            and hasattr(entry, "topic")
            and (entry.topic, entry.partition) in group.owners  # type: ignore[union-attr]
        )
        owners_before = {} if group is None else dict(group.owners)
        epochs_before = (
            {} if group is None else {m: i.member_epoch for m, i in group.members.items()}
        )
        result = self.state.apply(entry)
        self._note_removals(entry, result, owners_before, epochs_before, stale)
        if type(entry).__name__ == "Own" and result.applied and was_owned:
            self.violation(f"own applied to an owned partition: {entry}")
        if isinstance(entry, Commit):
            self._check_commit(entry, result, owner, committed, member)
        return result

    def _note_removals(
        self,
        entry: GroupEntry,
        result: ApplyResult,
        owners_before: Mapping[TopicPartition, object],
        epochs_before: Mapping[str, int],
        stale: bool,
    ) -> None:
        """Record why each ownership the entry ended ended (for the zombie check)."""
        group = self.group()
        owners_after = {} if group is None else group.owners
        for tp, owner in owners_before.items():
            member_id = owner.member_id  # type: ignore[attr-defined]
            after = owners_after.get(tp)
            if after is not None and after.member_id == member_id:
                continue
            if stale:
                # Only this simulator delays or retries proposals so (the real
                # coordinator appends under the partition's lock, in order): the
                # member learns at its next heartbeat.
                reason = "stale"
            elif isinstance(entry, Leave):
                reason = str(entry.reason)
            elif result.replaced == member_id:
                reason = "replaced"  # a static member's new incarnation took over
            else:
                reason = type(entry).__name__.lower()
            self.removed[(member_id, epochs_before.get(member_id, -1), tp)] = reason

    def _check_commit(self, entry, result, owner, committed, member) -> None:  # type: ignore[no-untyped-def]
        tp = (entry.topic, entry.partition)
        group = self.group()
        after = None if group is None else group.commits.get(tp)
        if not result.applied:
            if after != committed:
                self.violation(f"refused commit changed the offset: {entry} {result}")
            return
        self.commits_applied += 1
        self.committed_this_step.add(tp)
        if owner is None or (owner.member_id, owner.assignment_epoch) != (
            entry.member_id,
            entry.assignment_epoch,
        ):
            self.violation(f"commit applied from a non-owner: {entry} owner={owner}")
        if member is None or member.member_epoch != entry.member_epoch:
            self.violation(f"commit applied from a stale member epoch: {entry}")
        if committed is not None and entry.next_offset < committed.next_offset:
            self.violation(f"commit moved backwards: {committed} -> {entry}")

    # -- members --------------------------------------------------------------

    def new_member(self, instance_id: str | None = None) -> SimMember:
        self.member_counter += 1
        lease_aware = self.rng.random() < 0.8
        core = GroupMember(
            group_id=GROUP_ID,
            member_id=f"m{self.member_counter}",
            subscription=SUBSCRIPTION,
            instance_id=instance_id,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
        )
        member = SimMember(core, next_heartbeat_ms=self.now_ms, lease_aware=lease_aware)
        self.members.append(member)
        return member

    def heartbeat(self, member: SimMember, *, leave: bool = False) -> None:
        request = member.core.request(leave=leave)
        for _ in range(PREPARE_ROUNDS_MAX):
            entries = self.coordinator.prepare(request, self.now_ms, self.catalogue)
            if not entries:
                break
            self.append(entries)
        else:
            self.violation("prepare did not settle within PREPARE_ROUNDS_MAX rounds")
        answer = self.coordinator.answer(request)
        member.next_heartbeat_ms = self.now_ms + HEARTBEAT_INTERVAL_MS
        if leave:
            return
        actions = member.core.on_answer(answer, sent_ms=self.now_ms)
        group = self.group()
        for tp, _epoch, committed in actions.start:
            stored = None if group is None else group.commits.get(tp)
            expected = None if stored is None else stored.next_offset
            if committed != expected:  # a new owner resumes at the committed offset
                self.violation(f"{member.core.member_id} starts {tp} at {committed} != {expected}")
        if actions.start or actions.revoke or actions.lost or actions.rejoin:
            member.queue.append(actions)  # for the application's next poll
        if actions.rejoin:
            member.next_heartbeat_ms = self.now_ms + STEP_MS  # join again at once

    def poll(self, member: SimMember) -> bool:
        """The application's poll before it reads: check the lease, then carry out
        what the heartbeats queued. False when the lease lapsed (nothing to read)."""
        lapsed = member.lease_aware and member.core.lease_lapsed(self.now_ms)
        if lapsed:
            # The client drops the queue: the rejoin loses whatever is read.
            self.lapsed_leases += 1
            member.queue = [member.core.lose()]
            member.next_heartbeat_ms = self.now_ms
        while member.queue:
            self.carry_out(member, member.queue.pop(0))
        reading = set(member.positions)
        if reading != set(member.core.holds()):
            self.violation(
                f"{member.core.member_id} reads {sorted(reading)}, holds {member.core.holds()}"
            )
        return not lapsed

    def carry_out(self, member: SimMember, actions: MemberActions) -> None:
        """The application's side of ``actions``, as the client runs it, checked."""
        name = member.core.member_id
        for step in handover_steps(actions, set(member.positions), auto_commit=True):
            match step:
                case Read(offsets):
                    self.read(member, offsets)
                case CommitNow():
                    # Auto-commit before a revocation: what is read and still held
                    # (a fence queued behind may have taken some already).
                    for tp in sorted(member.positions.keys() & member.core.holds()):
                        self.commit(member, tp)
                case Notify(hook, partitions):
                    self.announce(member, hook, partitions)
                case Released(partitions):
                    for tp in partitions:
                        member.core.revoked(tp)
        reading = set(member.positions)
        if member.announced != reading:
            self.violation(f"{name} reads {sorted(reading)}, hooks said {member.announced}")

    def read(self, member: SimMember, offsets: Mapping[TopicPartition, int | None]) -> None:
        for tp in [tp for tp in member.positions if tp not in offsets]:
            del member.positions[tp]
        for tp, committed in offsets.items():
            if tp not in member.positions:
                # The committed offset as the answer gave it (checked then: an
                # outcome queued behind may already have superseded it).
                member.positions[tp] = committed or 0

    def announce(
        self, member: SimMember, hook: str, partitions: tuple[TopicPartition, ...]
    ) -> None:
        name = member.core.member_id
        member.hooks.append((hook, partitions))
        reading = set(member.positions)
        for tp in partitions:
            if hook == "assigned":
                if tp in member.announced or tp not in reading:
                    self.violation(f"{name}: assigned {tp} twice or before it is read")
                member.announced.add(tp)
            else:
                if tp not in member.announced:
                    self.violation(f"{name}: {hook} {tp} never announced (or twice)")
                if (hook == "revoked") != (tp in reading):
                    self.violation(f"{name}: {hook} {tp} while read={tp in reading}")
                member.announced.discard(tp)

    def commit(self, member: SimMember, tp: TopicPartition) -> ApplyResult | None:
        if tp not in member.positions:
            return None
        entry = member.core.commit(tp, member.positions[tp], metadata=f"by {member.core.member_id}")
        return self.append([entry])[0]

    def work(self, member: SimMember) -> None:
        """The application polls, then reads (and sometimes commits) what it reads."""
        if not self.poll(member):
            return
        group = self.group()
        name, epoch = member.core.member_id, member.core.member_epoch
        for tp in sorted(member.positions):
            owner = None if group is None else group.owners.get(tp)
            confirmed = owner is not None and owner.member_id == name
            reason = self.removed.get((name, epoch, tp))
            if member.lease_aware and not confirmed and reason not in LEARNT_AT_HEARTBEAT:
                self.violation(f"zombie: {name} reads {tp}, owner {owner}, removed: {reason}")
            member.positions[tp] += self.rng.randint(0, 3)
            if self.rng.random() < 0.3:
                result = self.commit(member, tp)
                if result is not None and result.outcome is Outcome.FENCED:
                    pass  # learns at its next heartbeat

    def resume(self, member: SimMember) -> None:
        """A paused member wakes up and reads and commits before it heartbeats (its
        application thread runs first): a lease-aware one finds its lease lapsed if
        it was paused past its session, and gives everything up (``on_lost``); an
        unaware one is a zombie whose commits must be refused."""
        member.status = "alive"
        member.next_heartbeat_ms = self.now_ms + STEP_MS
        if member.lease_aware:
            self.work(member)
            return
        group = self.group()
        present = group is not None and (
            (info := group.members.get(member.core.member_id)) is not None
            and info.member_epoch == member.core.member_epoch
        )
        for tp in sorted(member.positions):
            result = self.commit(member, tp)
            if result is not None and not present:
                if result.outcome is not Outcome.FENCED:
                    self.violation(f"zombie commit of expired {member.core.member_id}: {result}")
                else:
                    self.fenced_zombie_commits += 1

    # -- faults ---------------------------------------------------------------

    def alive(self) -> list[SimMember]:
        return [m for m in self.members if m.status == "alive"]

    def fault(self) -> None:
        rng = self.rng
        roll = rng.random()
        alive = self.alive()
        running = [m for m in self.members if m.status in ("alive", "paused")]
        if roll < 0.03 and len(running) < MEMBERS_MAX:
            static = rng.random() < 0.5
            self.new_member(instance_id=f"static-{self.member_counter + 1}" if static else None)
        elif roll < 0.045 and alive:
            member = rng.choice(alive)
            if self.poll(member):  # close(): what is queued, then revoke everything
                self.carry_out(member, member.core.revoke_all())
            self.heartbeat(member, leave=True)
            member.status = "left"
        elif roll < 0.06 and alive:
            member = rng.choice(alive)
            member.status = "crashed"
            if member.core.instance_id is not None and rng.random() < 0.6:
                self.new_member(instance_id=member.core.instance_id)
        elif roll < 0.075 and alive:
            member = rng.choice(alive)
            member.status = "paused"
            member.paused_until_ms = self.now_ms + rng.randint(500, 2 * SESSION_TIMEOUT_MS)
        elif roll < 0.085:
            self.failover()
        elif roll < 0.09 and sum(self.catalogue.values()) < PARTITIONS_MAX:
            topic = rng.choice(sorted(self.catalogue))
            self.catalogue[topic] += 1

    def failover(self) -> None:
        """A new leader: rebuild the state from the log; it must equal the old one."""
        self.failovers += 1
        self.abandon_snapshot()  # the old leader's snapshot in progress is torn
        live = self.state.snapshot()
        if self.rebuild(0).snapshot() != live:
            self.violation("state rebuilt from the log differs from the live state")
        if GroupState.restore(live).snapshot() != live:
            self.violation("snapshot/restore is not the identity")
        rebuilt = self.rebuild(self.log_start)
        if rebuilt.snapshot() != live:
            self.violation(f"state rebuilt from the snapshot at {self.log_start} differs")
        self.state = rebuilt
        self.coordinator = Coordinator(self.state, self.now_ms)

    # -- log compaction (snapshots; see the module docstring) ---------------------

    def _log_append(self, data: bytes) -> None:
        """Append one record; the follower applies it (each record is its own batch)."""
        offset = len(self.log)
        self.log.append(data)
        out = self.follower.apply_batch(offset, offset + 1, [(offset, data)])
        for error in out.errors:
            self.violation(f"follower: {error}")
        for snapshot in out.snapshots:
            self.snapshots_complete += 1
            self.log_start = max(self.log_start, snapshot.as_of_offset)  # prefix deleted

    def random_logged_entry(self) -> list[GroupEntry]:
        """An entry (not a snapshot chunk) from the log, for a retried request (none
        while the log holds only chunks)."""
        for _ in range(len(self.log)):
            record = decode_record(self.rng.choice(self.log))
            if not isinstance(record, SnapshotChunk):
                return [record]
        return []

    def rebuild(self, start: int) -> GroupState:
        """The state a replica whose log starts at ``start`` rebuilds (seek + tail)."""
        replay = GroupReplay(start)
        offset = start
        while offset < len(self.log):
            out = replay.apply_batch(offset, offset + 1, [(offset, self.log[offset])])
            for error in out.errors:
                self.violation(f"rebuild from {start}: {error}")
            offset = replay.read_offset  # back to the snapshot's A once found
        if replay.seeking:
            self.violation(f"no complete snapshot after the log start {start}")
        if replay.restored_from is not None:
            self.rebuilt_from_snapshot += 1
        return replay.state

    def compaction_step(self) -> None:
        """Start a snapshot, capture some of it, or append some of its chunks."""
        rng = self.rng
        if rng.random() < 0.04:  # bystander groups: more for a snapshot to capture
            name = f"bystander-{rng.randint(1, 5)}"
            if rng.random() < 0.7:
                self.append([Reset(name, (("a", 0, rng.randint(0, 1000)),))])
            else:
                self.append([Delete(name)])
        if self.capturing is None and not self.unwritten_chunks:
            if rng.random() < 0.08:
                self.capturing = (self.state.begin_snapshot(), len(self.log), self.state)
            return
        if self.capturing is not None:
            builder, as_of, state = self.capturing
            if not builder.step(rng.randint(0, 2)):
                return
            state.end_snapshot(builder)
            self.capturing = None
            chunks = split_snapshot(
                builder.payload(),
                snapshot_id=f"{self.seed}-{len(self.log)}",
                as_of_offset=as_of,
                applied_count=builder.applied_count,
                chunk_bytes=rng.choice([64, 200, 4096]),
            )
            self.unwritten_chunks = [encode_snapshot_chunk(chunk) for chunk in chunks]
            return
        if rng.random() < 0.05:
            self.abandon_snapshot()
            return
        for _ in range(rng.randint(1, 3)):
            if self.unwritten_chunks:
                self._log_append(self.unwritten_chunks.pop(0))

    def abandon_snapshot(self) -> None:
        if self.capturing is not None:
            builder, _, state = self.capturing
            state.end_snapshot(builder)
            self.capturing = None
        if self.unwritten_chunks:
            self.snapshots_torn += 1
            self.unwritten_chunks = []

    def check_compaction(self) -> None:
        """At the end: the follower equals the live state, and so does a rebuild from
        the log start; torn snapshots were ignored (the follower counts them)."""
        live = self.state.snapshot()
        if self.follower.state.snapshot() != live:
            self.violation("the follower's state differs from the live state")
        if self.rebuild(self.log_start).snapshot() != live:
            self.violation(f"state rebuilt from the log start {self.log_start} differs")

    # -- the run --------------------------------------------------------------

    def step(self, *, faults: bool) -> None:
        self.now_ms += STEP_MS
        self.committed_this_step = set()
        if faults:
            self.fault()
        for member in self.members:
            if member.status == "paused" and (not faults or self.now_ms >= member.paused_until_ms):
                self.resume(member)
        for member in self.alive():
            if self.now_ms >= member.next_heartbeat_ms:
                self.heartbeat(member)
            if not faults or self.rng.random() < 0.7:
                self.work(member)  # else its application is busy with a chunk
        ticked = self.coordinator.tick(self.now_ms, self.catalogue)
        if faults and ticked and self.rng.random() < 0.05:
            # A proposal delayed in the log pipeline: applied later, on a newer state.
            self.delayed.append((self.now_ms + self.rng.randint(1, 8) * STEP_MS, ticked))
        else:
            self.append(ticked)
        if faults and self.log and self.rng.random() < 0.03:
            # A retried request: an old entry appended again.
            self.append(self.random_logged_entry(), stale=True)
        due = [entries for at_ms, entries in self.delayed if at_ms <= self.now_ms or not faults]
        self.delayed = [item for item in self.delayed if item[0] > self.now_ms and faults]
        for entries in due:
            self.append(entries, stale=True)
        if faults:
            self.compaction_step()
        self.check_step()

    def check_step(self) -> None:
        group = self.group()
        if group is None:
            return
        for tp, committed in group.commits.items():
            previous = self.last_commits.get(tp)
            if previous is not None and committed.next_offset < previous:
                self.violation(f"{tp} committed offset moved back {previous}->{committed}")
            if committed.next_offset != previous and tp not in self.committed_this_step:
                self.violation(f"{tp} committed offset changed without a commit")
            self.last_commits[tp] = committed.next_offset
        for tp, owner in group.owners.items():
            if owner.member_id not in group.members:
                self.violation(f"{tp} owned by absent member {owner.member_id}")
            readers = [
                m.core.member_id
                for m in self.members
                if m.status in ("alive", "paused")
                and m.core.active.get(tp) == owner.assignment_epoch
                and m.core.member_id == owner.member_id
            ]
            if len(readers) > 1:
                self.violation(f"{tp} read at its confirmed epoch by {readers}")
        loads: dict[str, int] = {m.key: 0 for m in group.members.values()}
        for key in group.target().values():
            loads[key] += 1
        if loads and max(loads.values()) - min(loads.values()) > 1:
            self.violation(f"target skew > 1: {loads}")

    def check_settled(self) -> None:
        group = self.group()
        assert group is not None
        target = group.target()
        by_id = {m.core.member_id: m for m in self.members}
        for tp in group.partitions():
            owner = group.owners.get(tp)
            if owner is None:
                self.violation(f"{tp} has no owner after faults stopped")
                continue
            member = by_id[owner.member_id]
            if member.status != "alive":
                self.violation(f"{tp} owned by {member.status} {owner.member_id}")
            if target[tp] != group.members[owner.member_id].key:
                self.violation(f"{tp} owned by {owner.member_id}, target {target[tp]}")
            if member.core.active.get(tp) != owner.assignment_epoch:
                self.violation(f"{tp} owner {owner.member_id} does not read it")
        loads: dict[str, int] = {m: 0 for m in group.members}
        for owner in group.owners.values():
            loads[owner.member_id] += 1
        if loads and max(loads.values()) - min(loads.values()) > 1:
            self.violation(f"ownership skew > 1 after settling: {loads}")

    def run(self) -> SeedResult:
        for _ in range(self.rng.randint(1, 4)):
            self.new_member(instance_id=None)
        for _ in range(FAULT_STEPS):
            self.step(faults=True)
        if not self.alive() and not any(m.status == "paused" for m in self.members):
            self.new_member()
        settle_ms = SESSION_TIMEOUT_MS + REBALANCE_TIMEOUT_MS + 2 * HEARTBEAT_INTERVAL_MS
        for _ in range(settle_ms // STEP_MS + 1):
            self.step(faults=False)
        self.check_settled()
        self.check_compaction()
        return SeedResult(
            self.seed,
            self.violations,
            len(self.log),
            self.commits_applied,
            self.fenced_zombie_commits,
            self.failovers,
            self.lapsed_leases,
            self.snapshots_complete,
            self.snapshots_torn,
            self.rebuilt_from_snapshot,
        )


def run_seed(seed: int) -> SeedResult:
    return GroupSim(seed).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.groups.group_sim", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=500, help="how many seeds (default 500)")
    parser.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--replay", type=int, help="run only this seed and print its violations")
    args = parser.parse_args(argv)
    if args.replay is not None:
        result = run_seed(args.replay)
        print(result)
        return 1 if result.violations else 0
    failed = 0
    snapshots = torn = rebuilt = 0
    started = time.perf_counter()
    for seed in range(args.start, args.start + args.seeds):
        result = run_seed(seed)
        snapshots += result.snapshots_complete
        torn += result.snapshots_torn
        rebuilt += result.rebuilt_from_snapshot
        if result.violations:
            failed += 1
            print(f"seed {seed} FAILED: {result.violations[:3]}", flush=True)
    elapsed = time.perf_counter() - started
    print(f"{args.seeds} seeds from {args.start}: {failed} failed, {elapsed:.1f} s")
    print(f"snapshots: {snapshots} complete, {torn} torn; {rebuilt} rebuilds from a snapshot")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

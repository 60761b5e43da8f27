"""What `laminar-cluster status` shows, read from the store and never written (issue 7 "the
views"; upstream_context §1.3, §1.7-§1.10; spec_leader_lease §4.1.4; spec_rebalance §2.11).

`StatusReader.read` gathers five sections, each on its own so one bad object hides only its
own section (the problem names the object):

* leader: the authority head as `laminar-cluster lease` reads it (no pointer repair): owner,
  fencing token, sequence;
* members: one `Discovery` poll. A one-shot status sees each node's announced state; the
  reader keeps its `Discovery`, so `--watch` also sees `suspected` and `dead` once a node's
  liveness identity stays unchanged for half or all of its ttl on this clock (ML-4);
* assignment: the head version of the snapshot store (the §2.11 overlay of `load_effective`),
  draining or committed, vnodes per node;
* last committed cluster checkpoint: the head's Commit link (or the floor's committed anchor
  when compacted), its age by the admitting record's last-modified time, and its recovery
  capsule (checkpoint `DecisionStore.load_recovery_capsule`);
* source lag: per event-log partition, the log's end offset minus the committed offset in that
  capsule's `source_offsets` (0 when the capsule has none); unknown without an event log.

Read-only by construction: every request goes through `ReadOnlyStore`, which refuses writes
(`NotSupported`), so no path below (a head repair, a deployment identity create) can write.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.rendezvous import vnodes_per_node
from laminar_cluster.assignment.snapshot_io import inventory, load_effective
from laminar_cluster.authority.outcome_audit import read_linked_outcome
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.limits import MAX_IDENTITY_BYTES
from laminar_cluster.checkpoint.paths import IDENTITY_PATH
from laminar_cluster.checkpoint.reader import read_bytes
from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    ClusterRecoveryCapsule,
    DeploymentIdentity,
)
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.codec import decode
from laminar_cluster.errors import (
    CorruptRecord,
    LaminarError,
    NotSupported,
    StoreError,
)
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import DEFAULT_TTL_S
from laminar_cluster.lease.log import read_record
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import LeaderAuthorityRecord
from laminar_cluster.membership.discovery import Discovery, Member
from laminar_cluster.runtime.eventlog import EventLog
from laminar_cluster.runtime.eventlog_batches import (
    EVENT_LOG_PARTITIONS_MAX,
    EVENTS_PREFIX,
    partition_prefix,
)
from laminar_cluster.store import GetResult, ObjectMeta, ObjectStore, PutMode, PutResult
from laminar_cluster.views.lease import view_lease

STATUS_TIMEOUT_S: Final = 30.0
LAG_UNKNOWN_NOTE: Final = "source lag unknown: this reader has no event log"
T = TypeVar("T")
PARTITIONS_PREFIX: Final = f"{EVENTS_PREFIX}partition="  # the start of every `partition_prefix`
PAST_PARTITION_KEYS: Final = "~"  # sorts after every `offset=...` name inside a partition
LAG_PARTITIONS_LISTED_MAX: Final = 4_096
MEMBERS_NOTE: Final = (
    "states as announced; suspected and dead need a node watched unchanged for a ttl (--watch)"
)


class EndOffsets(Protocol):
    """The event log as the lag needs it (runtime.eventlog.EventLog satisfies it):
    `partitions` is the declared partition count (None when undeclared)."""

    async def partitions(self, *, deadline: float) -> int | None: ...

    async def end_offset(self, partition: int, *, deadline: float) -> int: ...


EventLogOpener = Callable[[ObjectStore], EndOffsets]


class ReadOnlyStore(ObjectStore):
    """`inner` for reads; every write is refused before it reaches the store."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    @property
    def url(self) -> str:
        return self.inner.url

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        return await self.inner.get(key, end=end)

    async def head(self, key: str) -> ObjectMeta:
        return await self.inner.head(key)

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        return await self.inner.list(prefix, offset=offset, limit=limit)

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        raise NotSupported(f"{key}: status is read-only; refused a put", key=key)

    async def delete(self, key: str) -> None:
        raise NotSupported(f"{key}: status is read-only; refused a delete", key=key)

    async def close(self) -> None:
        await self.inner.close()


@dataclass
class StatusView:
    store: str
    observed_at_ms: int
    leader: dict[str, Any] | None = None
    members: list[dict[str, Any]] = field(default_factory=list)
    assignment: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    lag: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[dict[str, str | None]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "store": self.store,
            "observed_at_ms": self.observed_at_ms,
            "leader": self.leader,
            "members": self.members,
            "assignment": self.assignment,
            "checkpoint": self.checkpoint,
            "lag": self.lag,
            "notes": self.notes,
            "problems": self.problems,
        }


class StatusReader:
    """Reads `StatusView`s of one store; keep one per watch (its `Discovery` remembers)."""

    def __init__(
        self, store: ObjectStore, clock: Clock, event_log: EventLogOpener | None = None
    ) -> None:
        self.store: ObjectStore = ReadOnlyStore(store)
        self.clock = clock
        self.discovery = Discovery(self.store, clock)
        self.event_log = None if event_log is None else event_log(self.store)
        # What the last `read` found, for views built on top (views.console_feed).
        self.last_head: LeaderAuthorityRecord | None = None
        self.last_snapshot: AssignmentSnapshot | None = None
        self.last_members: tuple[Member, ...] = ()

    async def read(self, *, timeout_s: float) -> StatusView:
        """Every section, each within its own `timeout_s`."""
        view = StatusView(store=self.store.url, observed_at_ms=self.clock.wall_ms())
        head = await self._guarded(view, "leader", timeout_s, lambda _: self._leader(view))
        self.last_head, self.last_snapshot = head, None
        await self._guarded(view, "members", timeout_s, lambda d: self._members(view, d))
        await self._guarded(view, "assignment", timeout_s, lambda _: self._assignment(view))
        capsule = None
        if head is not None:
            capsule = await self._guarded(
                view, "checkpoint", timeout_s, lambda _: self._checkpoint(view, head)
            )
        await self._guarded(view, "lag", timeout_s, lambda d: self._lag(view, capsule, d))
        _join_vnodes(view)
        return view

    async def _guarded(
        self,
        view: StatusView,
        section: str,
        timeout_s: float,
        work: Callable[[float], Awaitable[T]],
    ) -> T | None:
        """`work(deadline)` within `timeout_s`; a LaminarError becomes a problem naming the
        section (and the object when known), and the other sections still run."""
        deadline = self.clock.monotonic() + timeout_s
        try:
            async with within_deadline(self.clock, deadline, f"status {section}"):
                return await work(deadline)
        except LaminarError as error:
            key = error.key if isinstance(error, CorruptRecord | StoreError) else None
            view.problems.append(
                {"section": section, "object": key, "error": f"{type(error).__name__}: {error}"}
            )
            return None

    async def _leader(self, view: StatusView) -> LeaderAuthorityRecord | None:
        lease = await view_lease(self.store, self.clock)
        view.notes.extend(lease.notes)
        view.problems.extend(
            {"section": "leader", "object": p.object, "error": p.error} for p in lease.problems
        )
        row = lease.head
        if row is None:
            return None
        owner = row["owner"]
        view.leader = {
            "node": owner["node"],
            "boot": owner["boot"],
            "process_term": owner["process_term"],
            "token": row["token"],
            "sequence": row["sequence"],
            "renewal_sequence": row["renewal_sequence"],
            "record_age_ms": row["record_age_ms"],
        }
        return await read_record(self.store, row["sequence"])

    async def _members(self, view: StatusView, deadline: float) -> None:
        polled = await self.discovery.poll(deadline=deadline)
        self.last_members = polled.members
        view.problems.extend(
            {"section": "members", "object": None, "error": problem} for problem in polled.problems
        )
        view.members = [
            {
                "node": member.node,
                "state": member.state.value,
                "announced": member.record.state.value,
                "term": member.term,
                "boot": member.boot,
                "failure_domain": member.record.failure_domain,
                "unchanged_s": round(member.unchanged_s, 3),
            }
            for member in polled.members
        ]

    async def _assignment(self, view: StatusView) -> None:
        versions = await inventory(self.store)
        if not versions:
            return
        head = versions[-1]
        snapshot = await load_effective(self.store, head)
        if snapshot is None:
            raise CorruptRecord(f"assignment version {head} is listed but absent")
        self.last_snapshot = snapshot
        transition = snapshot.drain_transition if snapshot.draining else None
        view.assignment = {
            "head_version": head,
            "draining": snapshot.draining,
            "drain": None
            if transition is None
            else {
                "from_version": transition.predecessor.assignment_version,
                "to_version": transition.target.assignment_version,
            },
            "vnode_count": len(snapshot.owners),
            "vnodes_per_node": {str(n): c for n, c in vnodes_per_node(snapshot.owners).items()},
        }

    async def _checkpoint(
        self, view: StatusView, head: LeaderAuthorityRecord
    ) -> ClusterRecoveryCapsule | None:
        """The greatest live Commit (the head's Commit chain head, else the floor's committed
        anchor) and its capsule."""
        authority = LeaderLeaseStore(self.store, clock=self.clock, ttl_s=DEFAULT_TTL_S)
        link = head.commit_head
        age_ms: int | None = None
        if link is not None:
            records = {head.lease.seq: head}
            _, outcome = await read_linked_outcome(authority, records, link, commit_chain=True)
            meta = await self.store.head(record_path(link.sequence))
            age_ms = view.observed_at_ms - meta.last_modified_ms
        elif head.outcome_floor is not None and head.outcome_floor.committed_anchor is not None:
            outcome = head.outcome_floor.committed_anchor
            view.notes.append("the last commit is the compacted anchor of the outcome floor")
        else:
            return None
        capsule = await self._capsule(outcome)
        view.checkpoint = _checkpoint_row(outcome, capsule, age_ms)
        return capsule

    async def capsule_of(self, outcome: CheckpointOutcome) -> ClusterRecoveryCapsule:
        """The recovery capsule of a Commit, checked against it (CorruptRecord otherwise)."""
        return await self._capsule(outcome)

    async def _capsule(self, outcome: CheckpointOutcome) -> ClusterRecoveryCapsule:
        ref = outcome.recovery_capsule
        where = f"cluster Commit epoch {outcome.epoch}"
        if ref is None:
            raise CorruptRecord(f"{where} has no recovery capsule")
        read = await read_bytes(
            self.store, IDENTITY_PATH, what="deployment identity", max_bytes=MAX_IDENTITY_BYTES
        )
        if read is None:
            raise CorruptRecord(f"{IDENTITY_PATH}: absent, yet {where} exists", key=IDENTITY_PATH)
        identity = decode(
            read[0], DeploymentIdentity, key=IDENTITY_PATH, max_bytes=MAX_IDENTITY_BYTES
        )
        decisions = DecisionStore(self.store, clock=self.clock, mode=identity.allocator_mode)
        capsule = await decisions.load_recovery_capsule(ref)
        if capsule.attempt != outcome.attempt or capsule.assignment_fence != (
            outcome.assignment_fence
        ):
            raise CorruptRecord(f"{where} does not match its recovery capsule")
        return capsule

    async def _lag(
        self, view: StatusView, capsule: ClusterRecoveryCapsule | None, deadline: float
    ) -> None:
        log = self.event_log
        if log is None:
            view.lag = {"known": False, "total": None, "partitions": [], "note": LAG_UNKNOWN_NOTE}
            return
        committed = {} if capsule is None else capsule.source_offsets
        rows = []
        for partition in await self._partitions(log, view, deadline):
            end = await log.end_offset(partition, deadline=deadline)
            done = committed.get(str(partition), 0)
            rows.append(
                {
                    "partition": partition,
                    "end_offset": end,
                    "committed_offset": done,
                    "lag": max(0, end - done),
                }
            )
        view.lag = {
            "known": True,
            "total": sum(row["lag"] for row in rows),
            "partitions": rows,
            "note": "end offset minus the last committed checkpoint's offset, per partition",
        }

    async def _partitions(self, log: EndOffsets, view: StatusView, deadline: float) -> list[int]:
        """The declared partitions, else those with a batch under `events/`."""
        declared = await log.partitions(deadline=deadline)
        if declared is not None:
            return list(range(declared))
        listed = await listed_partitions(self.store, limit=LAG_PARTITIONS_LISTED_MAX)
        if len(listed) > LAG_PARTITIONS_LISTED_MAX:
            view.notes.append(
                f"source lag covers the first {LAG_PARTITIONS_LISTED_MAX} partitions listed"
            )
        return listed[:LAG_PARTITIONS_LISTED_MAX]


async def listed_partitions(store: ObjectStore, *, limit: int) -> list[int]:
    """The partitions holding at least one batch, ascending, at most `limit` + 1 of them: one
    single-key LIST per partition, each starting after the previous partition's keys."""
    found: list[int] = []
    after: str | None = None
    for _ in range(limit + 1):
        metas = await store.list(PARTITIONS_PREFIX, offset=after, limit=1)
        if not metas:
            break
        key = metas[0].key
        digits = key[len(PARTITIONS_PREFIX) :].split("/", 1)[0]
        partition = int(digits) if digits.isdigit() else -1
        canonical = 0 <= partition < EVENT_LOG_PARTITIONS_MAX  # then the prefix re-formats
        if not canonical or not key.startswith(partition_prefix(partition)):
            raise CorruptRecord(f"{key}: not under an event log partition", key=key)
        found.append(partition)
        after = partition_prefix(partition) + PAST_PARTITION_KEYS
    return found


def _checkpoint_row(
    outcome: CheckpointOutcome, capsule: ClusterRecoveryCapsule, age_ms: int | None
) -> dict[str, Any]:
    fence = outcome.assignment_fence
    return {
        "epoch": outcome.epoch,
        "checkpoint_id": outcome.checkpoint_id,
        "assignment_version": None if fence is None else fence.assignment_version,
        "age_ms": age_ms,
        "participants": [p.node_id for p in capsule.participants],
        "source_partitions": len(capsule.source_offsets),
        "committed_events": sum(capsule.source_offsets.values()),
    }


def _join_vnodes(view: StatusView) -> None:
    """Each member's vnodes in the assignment head (0 when it owns none)."""
    per_node = {} if view.assignment is None else view.assignment["vnodes_per_node"]
    for member in view.members:
        member["vnodes"] = per_node.get(str(member["node"]), 0)


def event_log_opener(clock: Clock) -> EventLogOpener:
    """The event log behind the lag column (runtime.eventlog), on the status clock."""

    def open_log(store: ObjectStore) -> EndOffsets:
        return EventLog(store, clock=clock)

    return open_log


async def status_once(
    store: ObjectStore, clock: Clock, *, timeout_s: float = STATUS_TIMEOUT_S
) -> StatusView:
    """One status view of `store` (tests call it on a store they built)."""
    view = await StatusReader(store, clock, event_log_opener(clock)).read(timeout_s=timeout_s)
    view.notes.append(MEMBERS_NOTE)
    return view

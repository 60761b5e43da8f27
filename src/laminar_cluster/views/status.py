"""What `laminar-cluster status` shows, read from the store and never written (issue 7 "the
views", issue 17 "Truthful views"; ML §1.3, DC §1.7-§1.10, LA §4.1.4, AS §2.11).

`StatusReader.read` gathers five sections, each on its own so one bad object hides only its
own section (the problem names the object):

* leader: the authority head as `laminar-cluster lease` reads it (no pointer repair): owner,
  fencing token, sequence, and whether it is live (`views.lease.leader_liveness`: a head
  record older than the lease ttl, or a leader whose node is dead or left, is no live leader);
* members: every process lease with its state judged from the age of its last renewal
  (`views.members`: a record older than its ttl that never left is `dead`, as is one a leader
  took over). The reader also keeps a `Discovery`, so `--watch` sees `suspected` and `dead`
  once a node's liveness identity stays unchanged for half or all of its ttl on this clock
  (ML-4) even when the store's clock disagrees with this one. A node running a job reports
  its late events and dead letters in the same record (ML-12, `views.members.job_figures`);
* assignment: the head version of the snapshot store (the AS §2.11 overlay of `load_effective`),
  draining or committed, vnodes per node;
* last committed cluster checkpoint: the head's Commit link (or the floor's committed anchor
  when compacted), its age by the admitting record's last-modified time, and its references
  checked once per Commit (`views.references`: deployment, recovery capsule; a one-shot
  `status` also the participant manifests, a watch or the console only the capsule: they
  refresh every second or two and each request counts);
* source lag (`views.status_lag`);
* store requests per second by kind, per node and in total (`views.request_rates`), from the
  cumulative counters each node's lease record carries (ML-12): over the interval between two
  reports of one incarnation once the reader saw two (a watch; a one-shot `status` reads the
  members a second time a renewal later, `read_rates_again`), else the average since the
  process began counting.

`check()` is `status --check`: None when a live leader holds a cluster without problems, else
why not. Read-only by construction: every request goes through `ReadOnlyStore`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.rendezvous import vnodes_per_node
from laminar_cluster.assignment.snapshot_io import inventory, load_effective
from laminar_cluster.authority.outcome_audit import read_linked_outcome
from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    ClusterRecoveryCapsule,
    DeploymentIdentity,
)
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.codec import encode
from laminar_cluster.errors import CorruptRecord, LaminarError, StoreError
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import DEFAULT_TTL_S
from laminar_cluster.lease.log import read_record
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import LeaderAuthorityRecord
from laminar_cluster.membership.discovery import Discovery, Member, ObservedState
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.lease import leader_liveness, view_lease
from laminar_cluster.views.members import member_row
from laminar_cluster.views.read_only import ReadOnlyStore
from laminar_cluster.views.references import ReferenceCheck
from laminar_cluster.views.request_rates import RequestRates, second_read_wait_s
from laminar_cluster.views.status_lag import (
    LAG_UNKNOWN_NOTE,
    EndOffsets,
    EventLogOpener,
    event_log_opener,
    indexed_partitions,
    log_events,
    source_lag,
)

__all__ = [
    "LAG_UNKNOWN_NOTE",
    "STATUS_TIMEOUT_S",
    "EndOffsets",
    "EventLogOpener",
    "ReadOnlyStore",
    "StatusReader",
    "StatusView",
    "event_log_opener",
    "indexed_partitions",
    "status_once",
]

STATUS_TIMEOUT_S: Final = 30.0
T = TypeVar("T")
MEMBERS_NOTE: Final = (
    "dead and suspected come from each lease's renewal age by this machine's clock; a watch "
    "(--watch) also sees them on its own clock, as peers do"
)
_OBSERVED_WORSE: Final = frozenset({ObservedState.SUSPECTED.value, ObservedState.DEAD.value})


@dataclass
class StatusView:
    store: str
    observed_at_ms: int
    leader: dict[str, Any] | None = None
    members: list[dict[str, Any]] = field(default_factory=list)
    assignment: dict[str, Any] | None = None
    checkpoint: dict[str, Any] | None = None
    lag: dict[str, Any] = field(default_factory=dict)
    requests: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    problems: list[dict[str, str | None]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def live_leader(self) -> bool:
        return self.leader is not None and bool(self.leader.get("live"))

    def check(self) -> str | None:
        """`status --check`: why the cluster is not held by a live leader without problems
        (one line), or None."""
        if self.problems:
            first = self.problems[0]
            return f"{len(self.problems)} problem(s); first: {first['object'] or first['section']}"
        if self.leader is None:
            return "no leader: nothing holds the leader authority of this store"
        if not self.live_leader:
            return leader_text(self.leader)
        return None

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "store": self.store,
            "observed_at_ms": self.observed_at_ms,
            "live_leader": self.live_leader,
            "leader": self.leader,
            "members": self.members,
            "assignment": self.assignment,
            "checkpoint": self.checkpoint,
            "lag": self.lag,
            "requests": self.requests,
            "notes": self.notes,
            "problems": self.problems,
        }


def leader_text(leader: dict[str, Any]) -> str:
    """`node 1  token 3  (renewed 0.4 s ago)`, or `no live leader (last: node 2, token 2,
    renewed 40 s ago)` with why."""
    age_s = leader["record_age_ms"] / 1000
    if leader.get("live"):
        return f"node {leader['node']}  token {leader['token']}  (renewed {age_s:.1f} s ago)"
    return (
        f"no live leader (last: node {leader['node']}, token {leader['token']}, renewed "
        f"{age_s:.0f} s ago; {leader['why']})"
    )


class StatusReader:
    """Reads `StatusView`s of one store; keep one per watch (its `Discovery` remembers)."""

    def __init__(
        self,
        store: ObjectStore,
        clock: Clock,
        event_log: EventLogOpener | None = None,
        *,
        deep: bool = False,
    ) -> None:
        self.store: ObjectStore = ReadOnlyStore(store)
        self.deep = deep  # also check the newest Commit's participant manifests
        # Commits whose references checked out (immutable: each is checked once), and the
        # deployment identity's id and mode (they never change once created).
        self._checked: dict[str, ClusterRecoveryCapsule] = {}
        self._identity: DeploymentIdentity | None = None
        self.clock = clock
        self.discovery = Discovery(self.store, clock)
        self.rates = RequestRates()
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
        if view.leader is not None:
            view.leader.update(leader_liveness(view.leader, view.members))
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
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            view.problems.append(
                {"section": section, "object": key, "error": f"{type(error).__name__}: {first}"}
            )
            return None

    async def _leader(self, view: StatusView) -> LeaderAuthorityRecord | None:
        lease = await view_lease(self.store, self.clock, judge=False)  # judged after members
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
        """The members by their records' ages (`views.members`, from the listing's
        last-modified times: no request beyond the poll); this observer's own view wins when
        it saw a node suspected or dead that the ages do not show (clocks that disagree)."""
        polled = await self.discovery.poll(deadline=deadline)
        self.last_members = polled.members
        view.problems.extend(
            {"section": "members", "object": None, "error": problem} for problem in polled.problems
        )
        rows = []
        for member in polled.members:
            age_ms = view.observed_at_ms - member.modified_ms
            row = member_row(member.node, member.record, age_ms)
            if member.state.value in _OBSERVED_WORSE and row["state"] not in ("dead", "left"):
                row["state"] = member.state.value
                row["why"] = f"unchanged for {member.unchanged_s:.1f} s on this observer's clock"
            row["unchanged_s"] = round(member.unchanged_s, 3)
            rows.append(row)
        view.members = rows
        view.requests = self.rates.observe(polled.members)

    async def read_rates_again(self, view: StatusView, *, timeout_s: float) -> None:
        """Read the members a second time a renewal later (`second_read_wait_s`), so each
        node's request rate covers the interval between two of its reports."""
        wait_s = second_read_wait_s(self.last_members)
        if wait_s is None:
            return
        await self.clock.sleep(wait_s)

        async def again(deadline: float) -> None:
            polled = await self.discovery.poll(deadline=deadline)
            view.requests = self.rates.observe(polled.members)

        await self._guarded(view, "requests", timeout_s, again)

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
        anchor) with its references checked, and its capsule."""
        authority = LeaderLeaseStore(self.store, clock=self.clock, ttl_s=DEFAULT_TTL_S)
        link = head.commit_head
        age_ms: int | None = None
        if link is not None:
            records = {head.lease.seq: head}
            _, outcome = await read_linked_outcome(authority, records, link, commit_chain=True)
            meta = await self.store.head(record_path(link.sequence))
            age_ms = view.observed_at_ms - meta.last_modified_ms
            where = record_path(link.sequence)
        elif head.outcome_floor is not None and head.outcome_floor.committed_anchor is not None:
            outcome = head.outcome_floor.committed_anchor
            view.notes.append("the last commit is the compacted anchor of the outcome floor")
            where = record_path(head.lease.seq)
        else:
            return None
        capsule = await self._checked_capsule(view, outcome, where)
        if capsule is not None:
            view.checkpoint = _checkpoint_row(outcome, capsule, age_ms)
        return capsule

    async def _checked_capsule(
        self, view: StatusView, outcome: CheckpointOutcome, where: str
    ) -> ClusterRecoveryCapsule | None:
        """The Commit's capsule with its references checked (`views.references`), once per
        Commit for this reader."""
        key = f"{where} {encode(outcome).hex()}"
        capsule = self._checked.get(key)
        if capsule is not None:
            return capsule
        check = await ReferenceCheck.open(self.store, self.clock, identity=self._identity)
        capsule = await check.outcome(outcome, where, manifests=self.deep)
        view.problems.extend(
            {"section": "checkpoint", "object": p.object, "error": p.error} for p in check.problems
        )
        if capsule is not None:
            self._identity = check.identity
            self._checked = {key: capsule}  # only the newest is asked for again
        return capsule

    async def capsule_of(self, outcome: CheckpointOutcome) -> ClusterRecoveryCapsule:
        """The recovery capsule of a Commit, its references checked (`views.references`);
        CorruptRecord naming the first wrong object otherwise."""
        check = await ReferenceCheck.open(self.store, self.clock, identity=self._identity)
        where = f"cluster Commit epoch {outcome.epoch}"
        capsule = await check.outcome(outcome, where)
        if capsule is None:
            first = check.problems[0] if check.problems else None
            key = None if first is None else first.object
            error = f"{where}: no recovery capsule" if first is None else first.error
            raise CorruptRecord(f"{key}: {error}" if key else error, key=key)
        return capsule

    async def _lag(
        self, view: StatusView, capsule: ClusterRecoveryCapsule | None, deadline: float
    ) -> None:
        view.lag = await source_lag(self.store, self.event_log, capsule, view.notes, deadline)
        rows = view.lag["partitions"]
        if view.checkpoint is not None and capsule is not None and rows:
            # the log's partitions, as the lag found them (declared, else indexed)
            partitions = max(row["partition"] for row in rows) + 1
            view.checkpoint["committed_events"] = log_events(capsule.source_offsets, partitions)


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


async def status_once(
    store: ObjectStore, clock: Clock, *, timeout_s: float = STATUS_TIMEOUT_S
) -> StatusView:
    """One status view of `store` (tests call it on a store they built)."""
    reader = StatusReader(store, clock, event_log_opener(clock), deep=True)
    view = await reader.read(timeout_s=timeout_s)
    await reader.read_rates_again(view, timeout_s=timeout_s)
    view.notes.append(MEMBERS_NOTE)
    return view

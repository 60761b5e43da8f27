"""Invariant checkers, run by the simulation after every step (RB §5).

They read the durable state straight from the shared objects (`SimStore.direct()`: no fault
wrapper, no yield, so no node runs while they look) and keep what they saw across steps,
because pruning removes old versions and old authority records:

1. every committed assignment ever seen maps each vnode to exactly one owner that is in its
   exact participant roster (RB-2, RB-3), and a committed version never changes once seen (RB-19);
2. every retained committed version >= 2 is backed by a matching authority decision
   (`assignment.audit.audit_authority_backing`, RB-10);
3. no decision was admitted under a deposed term: every assignment decision (and every cluster
   checkpoint outcome) in the authority log carries exactly the lease proof of the record it
   was appended in, and a drain Commit carries the proof of the term that opened the drain (RB-8);
4. each process's engine registry only moves v -> v+1 after its first adoption (RB-11;
   recorded by `SimEngine` at the moment it applies);
5. liveness, at the end only: the committed head equals rendezvous over the live assignable
   nodes, with their exact current boots.

A violation is collected as a message; the simulation raises one AssertionError that starts
with the seed and the replay command.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from laminar_cluster.assignment.audit import AuthorityDecisions, audit_authority_backing
from laminar_cluster.assignment.paths import FINALIZATIONS_PREFIX, SNAPSHOTS_PREFIX
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.rendezvous import rendezvous_assignment
from laminar_cluster.assignment.snapshot_io import (
    inventory,
    load_effective,
    load_materialization,
)
from laminar_cluster.clock import Clock
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.log import read_record
from laminar_cluster.lease.paths import RECORDS_PREFIX, parse_record_path
from laminar_cluster.lease.records import (
    AssignmentDrainDecision,
    AssignmentVerdict,
    LeaderAuthorityRecord,
)
from tests.sim.node import Jump
from tests.sim.store import SimStore

_ASSIGNMENT_NAMESPACES = (
    SNAPSHOTS_PREFIX.rstrip("/"),
    FINALIZATIONS_PREFIX.rstrip("/"),
)
_AUTHORITY_NAMESPACE = RECORDS_PREFIX.rstrip("/")


@dataclass
class CheckerStats:
    committed_versions: int = 0
    drain_commits: int = 0
    drain_aborts: int = 0
    recoveries: int = 0
    checkpoints: int = 0
    records_walked: int = 0
    ownerless_jumps: int = 0  # allowed: nothing owned over the skipped edges
    recovery_jumps: int = 0  # allowed: the target restores cold from its recovery checkpoint


@dataclass
class Checkers:
    store: SimStore  # the direct (non-yielding, unfaulted) view
    clock: Clock
    vnode_count: int
    origin_s: float = 0.0  # the run's start on the clock: messages show time since then
    # The fence of the latest committed cluster checkpoint seen in the authority log.
    last_commit_fence: CheckpointAssignmentFence | None = None
    violations: list[str] = field(default_factory=list)
    committed: dict[int, AssignmentSnapshot] = field(default_factory=dict)
    # Committed versions that are recovery generations (materialized through a recovery
    # decision): adopting one restores every owned vnode cold from its recovery checkpoint.
    recovery_versions: set[int] = field(default_factory=set)
    stats: CheckerStats = field(default_factory=CheckerStats)
    _seen_mutations: dict[str, int] = field(default_factory=dict)
    _reported: set[tuple[int, str]] = field(default_factory=set)
    _next_record: int = 1

    def _changed(self, namespaces: Sequence[str]) -> bool:
        mutations = self.store.objects.mutations
        changed = False
        for namespace in namespaces:
            count = mutations[namespace]
            if self._seen_mutations.get(namespace) != count:
                self._seen_mutations[namespace] = count
                changed = True
        return changed

    async def after_step(self) -> None:
        """Checkers 1-3 over whatever changed since the last step."""
        if self._changed(_ASSIGNMENT_NAMESPACES):
            await self.check_history()
            await self.check_backing()
        if self._changed((_AUTHORITY_NAMESPACE,)):
            await self.check_authority_log()

    # -- 1: committed assignments ----------------------------------------------------------------
    async def check_history(self) -> None:
        for version in await inventory(self.store):
            snapshot = await load_effective(self.store, version)
            if snapshot is None or snapshot.draining:
                continue
            seen = self.committed.get(version)
            if seen is None:
                self._check_shape(snapshot)
                self.committed[version] = snapshot
                self.stats.committed_versions += 1
                if await load_materialization(self.store, version) is not None:
                    self.recovery_versions.add(version)
            elif seen != snapshot:
                self.fail(1, f"committed assignment v{version} changed after it was seen")

    def _check_shape(self, snapshot: AssignmentSnapshot) -> None:
        version = snapshot.assignment_version
        owners = snapshot.owners
        roster = [p.node_id for p in snapshot.participants]
        if len(owners) != self.vnode_count:
            self.fail(1, f"v{version} has {len(owners)} owners for {self.vnode_count} vnodes")
        if len(set(roster)) != len(roster):
            self.fail(1, f"v{version} names a node twice in its roster {roster}")
        strangers = sorted(set(owners) - set(roster))
        if strangers:
            self.fail(1, f"v{version} gives vnodes to nodes outside its roster: {strangers}")
        idle = sorted(set(roster) - set(owners))
        if idle:
            self.fail(1, f"v{version} has roster members that own nothing: {idle}")

    # -- 2: authority backing --------------------------------------------------------------------
    async def check_backing(self) -> None:
        authority = LeaderLeaseStore(self.store, clock=self.clock, ttl_s=1.0)
        for problem in await audit_authority_backing(self.store, AuthorityDecisions(authority)):
            self.fail(2, f"v{problem.version}: {problem.reason}")

    # -- 3: decisions under the current term -----------------------------------------------------
    async def check_authority_log(self) -> None:
        metas = await self.store.list(RECORDS_PREFIX)
        sequences = sorted(parse_record_path(meta.key) for meta in metas)
        for seq in sequences:
            if seq < self._next_record:
                continue
            record = await read_record(self.store, seq)
            if record is None:
                continue
            self._check_record(record)
            self._next_record = seq + 1
            self.stats.records_walked += 1

    def _check_record(self, record: LeaderAuthorityRecord) -> None:
        lease_proof = record.lease.proof()
        seq = record.lease.seq
        decision = record.assignment_decision
        if decision is not None:
            if decision.leader_proof != lease_proof:
                self.fail(
                    3,
                    f"authority record {seq}: decision for v{decision.target_version} carries "
                    f"token {decision.leader_proof.fencing_token} but the lease there is token "
                    f"{record.lease.token}",
                )
            if isinstance(decision, AssignmentDrainDecision):
                if decision.verdict is AssignmentVerdict.COMMIT:
                    self.stats.drain_commits += 1
                    if decision.leader_proof != decision.transition.leader:
                        self.fail(
                            3,
                            f"authority record {seq}: Commit of v{decision.target_version} by "
                            "a term that did not open the drain",
                        )
                else:
                    self.stats.drain_aborts += 1
            else:
                self.stats.recoveries += 1
        outcome = record.checkpoint_outcome
        if outcome is not None:
            self.stats.checkpoints += 1
            if outcome.is_commit():
                self.last_commit_fence = outcome.assignment_fence
            if outcome.leader_proof is not None and outcome.leader_proof != lease_proof:
                self.fail(
                    3,
                    f"authority record {seq}: checkpoint outcome {outcome.epoch} carries token "
                    f"{outcome.leader_proof.fencing_token}; the lease there is token "
                    f"{record.lease.token}",
                )

    # -- 4: exact adoption edges ---------------------------------------------------------------
    def check_jumps(self, jumps: Sequence[Jump]) -> None:
        """A registry that skips versions is a failure unless nothing could be carried over the
        skipped edges (RB §4.11 B adopts the head itself): the process owned no
        vnode in the versions it left or skipped (it follows the topology only), or the version
        it moved to is a recovery generation, which restores every owned vnode cold from its
        recovery checkpoint. Every other jump (owned state moving without its exact edge) fails."""
        for jump in jumps:
            skipped = range(jump.before, jump.after)
            owned = [v for v in skipped if jump.node_id in self._owners(v)]
            if not owned:
                self.stats.ownerless_jumps += 1
                continue
            if jump.after in self.recovery_versions:
                self.stats.recovery_jumps += 1
                continue
            self.violations.append(
                f"checker 4 at t={jump.at_s:.3f}: node {jump.node_id} boot {jump.boot[:8]} moved "
                f"its registry v{jump.before} -> v{jump.after}; it owned vnodes in "
                f"v{', v'.join(map(str, owned))} and v{jump.after} is not a recovery generation"
            )

    def _owners(self, version: int) -> tuple[int, ...]:
        snapshot = self.committed.get(version)
        return () if snapshot is None else snapshot.owners

    # -- 5: liveness -----------------------------------------------------------------------------
    async def check_converged(self, live: Sequence[FenceParticipant]) -> None:
        versions = await inventory(self.store)
        if not versions:
            self.fail(5, "no assignment was ever seeded")
            return
        head = await load_effective(self.store, versions[-1])
        assert head is not None
        ids = sorted(p.node_id for p in live)
        if not ids:
            return
        expected = tuple(rendezvous_assignment(self.vnode_count, ids))
        roster = tuple(p for p in sorted(live, key=lambda p: p.node_id) if p.node_id in expected)
        if head.draining:
            self.fail(5, f"head v{head.assignment_version} is still draining at the end")
        elif head.owners != expected:
            owners = sorted(set(head.owners))
            self.fail(
                5,
                f"head v{head.assignment_version} is owned by {owners}, not rendezvous over the "
                f"live assignable nodes {ids}",
            )
        elif head.participants != roster:
            self.fail(
                5,
                f"head v{head.assignment_version} roster is not the live boots of its owners",
            )

    def fail(self, checker: int, message: str) -> None:
        """Record a violation once (a lasting one is seen again at every later step)."""
        if (checker, message) in self._reported:
            return
        self._reported.add((checker, message))
        now = self.clock.monotonic() - self.origin_s
        self.violations.append(f"checker {checker} at t={now:.3f}: {message}")

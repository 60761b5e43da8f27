"""Builders shared by the cluster-outcome tests (LA §4.4; no tests here).

Each "process" is a `LeaderLeaseStore` with its own SimulatedClock and DecisionStore over the
same store. Wall clocks start in 2096 so that the history prune's grace (local wall time vs the
store's last_modified) treats every record as old: prunes in these tests delete at once.
Commits get real recovery capsules (`tests.checkpoint.test_capsule.make_capsule`, fence FENCE,
whose participants are node 1 = owner A and node 2 = owner B).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import msgspec

from laminar_cluster.authority.cluster_outcomes import record_cluster_outcome
from laminar_cluster.authority.prune import prune_history
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    CheckpointVerdict,
    Conflict,
    Created,
    RecordOutcomeResult,
    RecoveryCapsuleRef,
    Unchanged,
)
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import StoreUnavailable
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.log import read_record
from laminar_cluster.lease.paths import RECORDS_PREFIX, parse_record_path, record_path
from laminar_cluster.lease.records import LeaderAuthorityRecord, LeaderLeaseOwner
from laminar_cluster.lease.validate import encode_record
from laminar_cluster.store import OVERWRITE, GetResult, ObjectStore
from tests.checkpoint.test_capsule import FENCE, make_capsule
from tests.lease.pausing_store import (
    TTL_S,
    A,
    B,
    PausingStore,
    acquired,
    begin,
    far_deadline,
    held,
    takeover,
)

FAR_WALL_MS = 4_000_000_000_000  # 2096: older than every store timestamp, never younger

__all__ = ["FENCE", "A", "B", "PausingStore"]


def open_leader(store: ObjectStore, seed: int) -> LeaderLeaseStore:
    """A fresh process on `store`: its own clock, decision store and (empty) audit cache."""
    clock = SimulatedClock(seed=seed, wall_start_ms=FAR_WALL_MS)
    decisions = DecisionStore.shared(store, clock=clock)
    return LeaderLeaseStore(store, clock=clock, ttl_s=TTL_S, decisions=decisions)


def sim_clock(leader: LeaderLeaseStore) -> SimulatedClock:
    assert isinstance(leader.clock, SimulatedClock)
    return leader.clock


def deadline(leader: LeaderLeaseStore) -> float:
    return far_deadline(leader.clock)


async def elect(leader: LeaderLeaseStore, who: LeaderLeaseOwner = A) -> LeaderProof:
    """Acquire (or rotate) a term for `who` and return its proof."""
    return acquired(await begin(leader, who)).proof()


async def take_over(rival: LeaderLeaseStore, who: LeaderLeaseOwner = B) -> LeaderProof:
    """`who` observes the current holder for a full ttl (simulated) and takes over."""
    observation = rival.observe_rival(who, held(await begin(rival, who)))
    sim_clock(rival).advance(TTL_S + 0.001)
    return acquired(await takeover(rival, observation, who)).proof()


async def capsule_for(leader: LeaderLeaseStore, epoch: int) -> RecoveryCapsuleRef:
    decisions = leader.require_decisions()
    deployment_id = await decisions.load_or_create_deployment_id()
    return await decisions.create_recovery_capsule(make_capsule(deployment_id, epoch))


async def record(
    leader: LeaderLeaseStore, proof: LeaderProof, epoch: int, *, commit: bool = False
) -> RecordOutcomeResult:
    """Record the cluster outcome of canonical attempt `epoch` (a Commit gets its capsule)."""
    ref = await capsule_for(leader, epoch) if commit else None
    return await record_cluster_outcome(
        leader,
        proof,
        epoch=epoch,
        checkpoint_id=epoch,
        assignment_fence=FENCE,
        verdict=CheckpointVerdict.COMMIT if commit else CheckpointVerdict.ABORT,
        recovery_capsule=ref,
        deadline=deadline(leader),
    )


async def record_all(
    leader: LeaderLeaseStore, proof: LeaderProof, epochs: Iterable[int], commits: Iterable[int] = ()
) -> None:
    """Record each epoch in order (Commits where listed), each one newly Created."""
    commit_set = set(commits)
    for epoch in epochs:
        created(await record(leader, proof, epoch, commit=epoch in commit_set))


def created(result: RecordOutcomeResult) -> CheckpointOutcome:
    assert isinstance(result, Created), result
    return result.outcome


def unchanged(result: RecordOutcomeResult) -> CheckpointOutcome:
    assert isinstance(result, Unchanged), result
    return result.outcome


def conflict(result: RecordOutcomeResult) -> CheckpointOutcome:
    assert isinstance(result, Conflict), result
    return result.winner


async def head(leader: LeaderLeaseStore) -> LeaderAuthorityRecord:
    record_ = await leader.load_record()
    assert record_ is not None
    return record_


async def record_seqs(store: ObjectStore) -> list[int]:
    return sorted(parse_record_path(meta.key) for meta in await store.list(RECORDS_PREFIX))


async def read_seq(store: ObjectStore, seq: int) -> LeaderAuthorityRecord:
    found = await read_record(store, seq)
    assert found is not None, seq
    return found


async def rewrite(store: ObjectStore, edited: LeaderAuthorityRecord) -> None:
    """Hand-edit a durable record in place (valid on its own, but no longer what was appended):
    bypasses the create-only rule on purpose."""
    await store.put(record_path(edited.lease.seq), encode_record(edited), OVERWRITE)


replace = msgspec.structs.replace


async def prune_now(leader: LeaderLeaseStore) -> tuple[int, ...]:
    """Run the history prune (LA §4.8.2) with no grace; the deleted sequences."""
    report = await prune_history(leader, 0)
    return report.deleted_records


def record_gets(store: PausingStore) -> set[int]:
    """Sequences of the authority records GET since the log was last reset."""
    return {
        parse_record_path(key)
        for op, key in store.log
        if op == "get" and key.startswith(RECORDS_PREFIX)
    }


class TrackingStore(PausingStore):
    """A PausingStore that also fails chosen deletes once and tracks the peak number of GETs in
    flight under one prefix (each such GET is slowed by `get_delay_s` of real time)."""

    def __init__(self, inner: ObjectStore, *, prefix: str = "", get_delay_s: float = 0.0) -> None:
        super().__init__(inner)
        self.prefix, self.get_delay_s = prefix, get_delay_s
        self.in_flight = self.peak_in_flight = 0
        self.failing_deletes: set[str] = set()
        self.failing_gets: set[str] = set()

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        if key in self.failing_gets:
            self.failing_gets.discard(key)
            raise StoreUnavailable(f"{key}: scripted GET failure")
        if not self.prefix or not key.startswith(self.prefix):
            return await super().get(key, end=end)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.get_delay_s)
            return await super().get(key, end=end)
        finally:
            self.in_flight -= 1

    async def delete(self, key: str) -> None:
        if key in self.failing_deletes:
            self.failing_deletes.discard(key)
            raise StoreUnavailable(f"{key}: scripted delete failure")
        await super().delete(key)

"""Support for the history-prune tests (LA §4.8): a store wrapper whose object
ages follow a SimulatedClock, and builders of lease, release and outcome histories.

`StampingStore` stamps every object's last_modified with the simulated wall clock at its PUT,
so a test moves objects past the grace exactly; it also counts LISTs by prefix, runs hooks
before a LIST or GET, and can fail deletes of chosen keys.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest

from laminar_cluster.authority.cluster_outcomes import (
    prune_cluster_outcomes_before,
    record_cluster_outcome,
)
from laminar_cluster.authority.prune import grace_ms_for, prune_history
from laminar_cluster.authority.recovery_faults import (
    RecoveryFaultInventory,
    record_recovery_fault,
    recovery_fault_inventory,
)
from laminar_cluster.authority.recovery_release import (
    ReleaseCreated,
    record_recovery_release_commit,
    stage_recovery_release_terminal,
    terminal_path,
)
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import CheckpointOutcome, CheckpointVerdict, Created
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import StoreUnavailable
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.paths import RELEASE_TERMINALS_PREFIX
from laminar_cluster.lease.records import LeaderLease, RecoveryFault, RecoveryReleaseTerminalRef
from laminar_cluster.store import GetResult, ObjectMeta, ObjectStore, PutMode, PutResult
from tests.authority.recovery_support import publisher, round_of, terminal_of
from tests.checkpoint.test_capsule import FENCE, make_capsule
from tests.lease.pausing_store import acquired, begin, far_deadline, renew

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])
HOUR_S = 3600.0


class StampingStore(ObjectStore):
    """Wraps `inner`: object ages follow `clock` (each PUT stamps last_modified with the
    simulated wall clock), LISTs are counted by prefix, `before_list` runs before each LIST,
    and `fail_deletes` makes deletes of those keys fail."""

    def __init__(self, inner: ObjectStore, clock: SimulatedClock) -> None:
        self.inner = inner
        self.clock = clock
        self.stamps: dict[str, int] = {}
        self.lists: Counter[str] = Counter()
        self.deleted: list[str] = []
        self.fail_deletes: set[str] = set()
        self.before_list: Callable[[str], Awaitable[None]] | None = None
        self.before_get: Callable[[str], Awaitable[None]] | None = None

    @property
    def url(self) -> str:
        return self.inner.url

    def _stamped(self, meta: ObjectMeta) -> ObjectMeta:
        stamp = self.stamps.get(meta.key, meta.last_modified_ms)
        return dataclasses.replace(meta, last_modified_ms=stamp)

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        if self.before_get is not None:
            await self.before_get(key)
        got = await self.inner.get(key, end=end)
        return GetResult(meta=self._stamped(got.meta), body=got.body)

    async def head(self, key: str) -> ObjectMeta:
        return self._stamped(await self.inner.head(key))

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        result = await self.inner.put(key, body, mode)
        self.stamps[key] = self.clock.wall_ms()
        return result

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        self.lists[prefix] += 1
        if self.before_list is not None:
            await self.before_list(prefix)
        return [self._stamped(m) for m in await self.inner.list(prefix, offset=offset, limit=limit)]

    async def delete(self, key: str) -> None:
        if key in self.fail_deletes:
            raise StoreUnavailable(f"{key}: delete failed (scripted)")
        self.deleted.append(key)
        await self.inner.delete(key)

    async def close(self) -> None:
        await self.inner.close()


def stamped(make_store: Callable[[], ObjectStore], *, seed: int = 1) -> StampingStore:
    return StampingStore(make_store(), SimulatedClock(seed=seed))


def leader_of(
    store: StampingStore, *, ttl_s: float = 5.0, decisions: bool = False
) -> LeaderLeaseStore:
    """One process's authority on the store's simulated clock (with a decision store if asked)."""
    clock = store.clock
    shared = DecisionStore.shared(store, clock=clock) if decisions else None
    return LeaderLeaseStore(store, clock=clock, ttl_s=ttl_s, decisions=shared)


async def lease_history(leader: LeaderLeaseStore, records: int) -> LeaderLease:
    """Acquire (seq 1) and renew until the head is `records`."""
    lease = acquired(await begin(leader))
    while lease.seq < records:
        lease = acquired(await renew(leader, lease.token))
    return lease


async def prune(leader: LeaderLeaseStore, grace_ms: int | None = None) -> tuple[int, ...]:
    grace = grace_ms_for(leader.ttl_s) if grace_ms is None else grace_ms
    report = await prune_history(leader, grace, deadline=far_deadline(leader.clock))
    return report.deleted_records


def counters_of(lease: LeaderLease | None) -> tuple[int, int, int]:
    assert lease is not None
    return (lease.seq, lease.renewal_sequence, lease.token)


async def release_cycle(
    leader: LeaderLeaseStore, lease: LeaderLease, node: int, generation: int
) -> RecoveryReleaseTerminalRef:
    """`node` reports a fault, then the leader releases it in a round of `generation`."""
    deadline = far_deadline(leader.clock)
    await record_recovery_fault(leader, publisher(node), generation, deadline=deadline)
    inventory = await recovery_fault_inventory(leader)
    frozen = round_of(lease.proof(), inventory, generation=generation, owners=(node,))
    ref = await stage_recovery_release_terminal(leader, terminal_of(frozen))
    result = await record_recovery_release_commit(leader, lease.proof(), ref, deadline=deadline)
    assert result == ReleaseCreated(ref=ref)
    return ref


async def orphan_terminal(
    leader: LeaderLeaseStore, lease: LeaderLease, generation: int, epoch: int
) -> str:
    """A staged terminal that no release commit names (an abandoned or future round)."""
    inventory = RecoveryFaultInventory(2, (RecoveryFault(reporter=5, sequence=2),))
    frozen = round_of(lease.proof(), inventory, generation=generation, owners=(5,))
    ref = await stage_recovery_release_terminal(leader, terminal_of(frozen, epoch=epoch))
    return terminal_path(ref)


async def terminal_paths(store: ObjectStore) -> set[str]:
    return {meta.key for meta in await store.list(RELEASE_TERMINALS_PREFIX)}


async def outcome(
    leader: LeaderLeaseStore, lease: LeaderLease, epoch: int, commit: bool
) -> CheckpointOutcome:
    decisions = leader.require_decisions()
    capsule = None
    if commit:
        deployment = await decisions.load_or_create_deployment_id()
        capsule = await decisions.create_recovery_capsule(make_capsule(deployment, epoch))
    result = await record_cluster_outcome(
        leader,
        lease.proof(),
        epoch=epoch,
        checkpoint_id=epoch,
        assignment_fence=FENCE,
        verdict=CheckpointVerdict.COMMIT if commit else CheckpointVerdict.ABORT,
        recovery_capsule=capsule,
        deadline=far_deadline(leader.clock),
    )
    assert isinstance(result, Created), result
    return result.outcome


async def compacted_history(store: StampingStore) -> tuple[LeaderLeaseStore, LeaderLease]:
    """seq 1 acquire, 2 Commit e1, 3 Abort e2, 4 renew, 5 Commit e3, 6 Abort e4, 7 floor at
    epoch 3 (anchors: terminal e2 @3, committed e1 @2), 8 renew, 9 Abort e5, 10 renew."""
    leader = leader_of(store, decisions=True)
    lease = acquired(await begin(leader))
    await outcome(leader, lease, 1, True)
    await outcome(leader, lease, 2, False)
    lease = acquired(await renew(leader, lease.token))
    await outcome(leader, lease, 3, True)
    await outcome(leader, lease, 4, False)

    async def artifacts_ok(cut: CheckpointOutcome) -> None:
        assert cut.epoch == 3

    deadline = far_deadline(leader.clock)
    assert (
        await prune_cluster_outcomes_before(
            leader, lease.proof(), 3, artifacts_ok, deadline=deadline
        )
        == 3
    )
    lease = acquired(await renew(leader, lease.token))
    await outcome(leader, lease, 5, False)
    lease = acquired(await renew(leader, lease.token))
    assert lease.seq == 10
    return leader, lease

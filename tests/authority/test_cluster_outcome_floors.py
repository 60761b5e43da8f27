"""The artifact floor, its recovery-cut preflight and capsule maintenance
(LA §4.4.4, LA §4.4.5, LA §4.4.7 to LA §4.4.9; LA-T58 to LA-T62; invariants LA-14).

All on memory and file. The caller's artifact preflight is a recording callback; races during
it (a renewal, an outcome, a takeover) run inside the callback itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from laminar_cluster.authority.cluster_outcomes import (
    audited_cluster_outcome_retention_boundary,
    cluster_outcome_retention_boundary,
    cluster_outcomes,
    maintain_cluster_recovery_capsules,
    prune_cluster_outcomes_before,
    validated_cluster_outcome_inventory,
)
from laminar_cluster.checkpoint.capsule import reference_path
from laminar_cluster.checkpoint.capsule_gc import RecoveryCapsuleGcStep
from laminar_cluster.checkpoint.paths import CAPSULES_PREFIX, QUARANTINE_PREFIX
from laminar_cluster.checkpoint.records import CheckpointOutcome
from laminar_cluster.errors import CorruptRecord, Fenced, Refused
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.store import OVERWRITE, ObjectStore
from tests.authority.test_cluster_outcome_helpers import (
    A,
    PausingStore,
    TrackingStore,
    capsule_for,
    deadline,
    elect,
    head,
    open_leader,
    record,
    record_all,
    record_seqs,
    take_over,
)

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])


class Preflight:
    """The caller's artifact check: records each cut it is asked about, then runs `during`
    (once per call) and raises `error` if set."""

    def __init__(self) -> None:
        self.cuts: list[int] = []
        self.error: Exception | None = None
        self.during: Callable[[int], Awaitable[None]] | None = None

    async def __call__(self, cut: CheckpointOutcome) -> None:
        self.cuts.append(cut.epoch)
        if self.during is not None:
            await self.during(len(self.cuts))
        if self.error is not None:
            raise self.error


async def prune(leader: LeaderLeaseStore, proof: LeaderProof, before: int, check: Preflight) -> int:
    return await prune_cluster_outcomes_before(
        leader, proof, before, check, deadline=deadline(leader)
    )


async def three_commits(store: ObjectStore) -> tuple[LeaderLeaseStore, LeaderProof]:
    leader = open_leader(store, 1)
    proof = await elect(leader)
    await record_all(leader, proof, [1, 2, 3], commits=[1, 2, 3])
    return leader, proof


@LOCAL
@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_la_t58_floor_requires_live_cut(make_store: Callable[[], ObjectStore], damage: str) -> None:
    async def main() -> None:
        store = make_store()
        leader, proof = await three_commits(store)
        check = Preflight()
        with pytest.raises(Refused, match="no live commit recovery cut would remain"):
            await prune(leader, proof, 4, check)
        cut = (await head(leader)).checkpoint_outcome
        assert cut is not None and cut.recovery_capsule is not None
        path = reference_path(cut.recovery_capsule)
        if damage == "missing":
            await store.delete(path)
        else:
            await store.put(path, b"{}", OVERWRITE)
        before = await record_seqs(store)
        with pytest.raises(Refused, match="failed durable recovery metadata preflight") as caught:
            await prune(leader, proof, 3, check)
        assert isinstance(caught.value.__cause__, CorruptRecord)
        assert check.cuts == []  # the capsule is checked before the caller's artifacts
        assert await record_seqs(store) == before  # LA-14: the floor is unchanged
        assert (await head(leader)).outcome_floor is None
        # No floor, so no capsule GC: the older capsules are all still there.
        step = await maintain_cluster_recovery_capsules(leader)
        assert step == RecoveryCapsuleGcStep(examined=0, deleted=0, quarantined=0, pending=False)
        assert len(await store.list(CAPSULES_PREFIX)) == (3 if damage == "corrupt" else 2)

    asyncio.run(main())


@LOCAL
def test_la_t59_preflight_failure_blocks_floor(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader, proof = await three_commits(store)
        check = Preflight()
        check.error = RuntimeError("state artifacts of epoch 3 are missing")
        store.reset_log()
        with pytest.raises(Refused, match="state artifacts of epoch 3 are missing"):
            await prune(leader, proof, 2, check)
        assert check.cuts == [3]  # the greatest live Commit, asked exactly once
        assert store.count("put") == 0
        assert (await head(leader)).outcome_floor is None
        # Without a floor there is no recovery cut to check: the inventory needs no preflight.
        inventory = await validated_cluster_outcome_inventory(
            leader, check, deadline=deadline(leader)
        )
        assert [o.epoch for o in inventory.outcomes] == [1, 2, 3] and check.cuts == [3]

    asyncio.run(main())


@LOCAL
def test_la_t60_covered_horizon_no_preflight(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader, proof = await three_commits(store)
        check = Preflight()
        assert await prune(leader, proof, 3, check) == 3
        assert check.cuts == [3]
        floor = (await head(leader)).outcome_floor
        assert floor is not None and floor.artifact_before_epoch == 3
        assert floor.committed_anchor is not None and floor.committed_anchor.epoch == 2
        assert floor.terminal_anchor == floor.committed_anchor
        store.reset_log()
        assert await prune(leader, proof, 2, check) == 3
        assert await prune(leader, proof, 3, check) == 3
        assert check.cuts == [3]  # covered: no preflight again
        assert store.count("put") == 0  # and nothing written
        boundary = await cluster_outcome_retention_boundary(leader)
        assert boundary.artifact_before_epoch == 3 and boundary.terminal_before_epoch == 3
        assert (
            await audited_cluster_outcome_retention_boundary(leader, deadline=deadline(leader))
            == boundary
        )
        assert await prune_cluster_outcomes_before(leader, proof, 0, check, deadline=0) == 3
        inventory = await validated_cluster_outcome_inventory(
            leader, check, deadline=deadline(leader)
        )
        assert [o.epoch for o in inventory.outcomes] == [3]
        assert check.cuts == [3, 3]
        check.error = RuntimeError("manifest of node 2 is gone")
        with pytest.raises(Refused, match="failed durable recovery metadata preflight"):
            await validated_cluster_outcome_inventory(leader, check, deadline=deadline(leader))

    asyncio.run(main())


@LOCAL
@pytest.mark.parametrize("during", ["renewal", "outcome", "takeover"])
def test_la_t61_races_during_preflight(make_store: Callable[[], ObjectStore], during: str) -> None:
    async def main() -> None:
        store = make_store()
        leader, proof = await three_commits(store)
        rival = open_leader(store, 2)
        check = Preflight()

        async def race(call: int) -> None:
            if call > 1:
                return
            if during == "renewal":
                await leader.renew_exact(A, proof.fencing_token, deadline=deadline(leader))
            elif during == "outcome":
                await record(leader, proof, 4)
            else:
                await take_over(rival)

        check.during = race
        if during == "takeover":
            with pytest.raises(Fenced):
                await prune(leader, proof, 3, check)
            assert check.cuts == [3]
            assert (await head(rival)).outcome_floor is None
            return
        assert await prune(leader, proof, 3, check) == 3
        # A renewal is harmless (one preflight); a new outcome restarts the loop (two).
        assert check.cuts == ([3] if during == "renewal" else [3, 3])
        current = await head(leader)
        assert current.lease.seq == 6
        assert current.outcome_floor is not None
        assert current.outcome_floor.artifact_before_epoch == 3
        assert current.lease.renewal_sequence == (2 if during == "renewal" else 1)
        epochs = [o.epoch for o in await cluster_outcomes(leader)]
        assert epochs == ([3] if during == "renewal" else [3, 4])

    asyncio.run(main())


@LOCAL
def test_la_t62_capsule_gc_bounded_and_retryable(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = TrackingStore(make_store(), prefix=CAPSULES_PREFIX, get_delay_s=0.002)
        leader = open_leader(store, 1)
        proof = await elect(leader)
        await record_all(leader, proof, [*range(1, 11), 12], commits=[*range(1, 11), 12])
        unpublished = await capsule_for(leader, 14)  # staged, never published: above the floor
        assert await maintain_cluster_recovery_capsules(leader) == RecoveryCapsuleGcStep(
            0, 0, 0, False
        )
        paths = {}
        for outcome in await cluster_outcomes(leader):
            assert outcome.recovery_capsule is not None
            paths[outcome.epoch] = reference_path(outcome.recovery_capsule)
        assert await prune(leader, proof, 11, Preflight()) == 11
        assert [o.epoch for o in await cluster_outcomes(leader)] == [12]
        refs = [paths[epoch] for epoch in range(1, 11)]
        await store.put(refs[2], b"{}", OVERWRITE)  # epoch 3: corrupt
        await store.put(f"{CAPSULES_PREFIX}garbage", b"junk", OVERWRITE)  # malformed name
        store.failing_deletes.add(refs[4])  # epoch 5: the first delete fails
        store.peak_in_flight = 0
        first = await maintain_cluster_recovery_capsules(leader)
        assert first == RecoveryCapsuleGcStep(examined=13, deleted=8, quarantined=2, pending=True)
        assert 1 < store.peak_in_flight <= 4  # at most 4 capsule GETs at once
        remaining = {meta.key for meta in await store.list(CAPSULES_PREFIX)}
        assert remaining == {refs[4], paths[12], reference_path(unpublished)}
        assert len(await store.list(QUARANTINE_PREFIX)) == 2
        second = await maintain_cluster_recovery_capsules(leader)
        assert second == RecoveryCapsuleGcStep(examined=3, deleted=1, quarantined=0, pending=True)
        remaining = {meta.key for meta in await store.list(CAPSULES_PREFIX)}
        assert remaining == {paths[12], reference_path(unpublished)}

    asyncio.run(main())

"""The decision store's invariants under randomly injected store faults (FaultyStore).

Every fault kind: errors before the write, lost responses after it, conflicts reported for writes
that landed (obstore's retries), and S3's 409 that writes nothing. Callers retry what is
retryable, as the coordinator does; the invariants must hold whatever the faults.
"""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.checkpoint import (
    CheckpointScope,
    CheckpointVerdict,
    Conflict,
    Created,
    DecisionStore,
    Unchanged,
)
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import StoreUnavailable
from laminar_cluster.store.faulty import FaultConfig, FaultKind, FaultyStore
from laminar_cluster.store.obstore_backend import ObstoreStore

FAULTS = FaultConfig(
    error_before_rate=0.1,
    error_after_rate=0.1,
    conflict_after_rate=0.05,
    phantom_conflict_rate=0.05,
)
RETRIES = 50


async def retried(operation, what: str):  # type: ignore[no-untyped-def]
    """Retry StoreUnavailable, as a caller with a deadline does; anything else propagates."""
    for _ in range(RETRIES):
        try:
            return await operation()
        except StoreUnavailable:
            continue
    raise AssertionError(f"{what}: still unavailable after {RETRIES} attempts")


def faulty_decisions(seed: int) -> tuple[DecisionStore, ObstoreStore, SimulatedClock]:
    clock = SimulatedClock(seed=seed)
    inner = ObstoreStore.memory()
    store = FaultyStore(inner, clock=clock, seed=seed, config=FAULTS)
    return DecisionStore.shared(store, clock=clock), inner, clock


@pytest.mark.parametrize("seed", range(8))
def test_cd1_ids_are_never_reused_under_random_faults(seed: int) -> None:
    """CD-1, CD-2: two instances allocating through faults get distinct, per-instance
    increasing IDs."""

    async def body() -> None:
        first, inner, clock = faulty_decisions(seed)
        second = DecisionStore.shared(
            FaultyStore(inner, clock=clock, seed=seed + 1000, config=FAULTS), clock=clock
        )
        deadline = clock.monotonic() + 3600
        seen: dict[str, list[int]] = {"first": [], "second": []}
        for index in range(60):
            name, instance = ("first", first) if index % 3 else ("second", second)
            checkpoint_id = await retried(
                lambda instance=instance: instance.allocate_checkpoint_id(deadline=deadline),
                "allocate",
            )
            seen[name].append(checkpoint_id)
        every = seen["first"] + seen["second"]
        assert len(every) == len(set(every)), "an ID was returned twice"
        for ids in seen.values():
            assert ids == sorted(ids) and len(set(ids)) == len(ids)

    asyncio.run(body())


@pytest.mark.parametrize("seed", range(8))
def test_cd4_one_verdict_per_epoch_under_random_faults(seed: int) -> None:
    """CD-4, CD-14: racing commit and abort through faults end with one durable verdict per epoch,
    and every caller is told that verdict."""

    async def body() -> None:
        decisions, inner, clock = faulty_decisions(seed)
        other = DecisionStore.shared(
            FaultyStore(inner, clock=clock, seed=seed + 7, config=FAULTS), clock=clock
        )
        for epoch in range(1, 21):
            results = []
            for instance, verdict in (
                (decisions, CheckpointVerdict.COMMIT),
                (other, CheckpointVerdict.ABORT),
            ):
                result = await retried(
                    lambda instance=instance, verdict=verdict, epoch=epoch: instance.record_outcome(
                        epoch=epoch,
                        checkpoint_id=epoch,
                        scope=CheckpointScope.LOCAL,
                        verdict=verdict,
                    ),
                    "record_outcome",
                )
                results.append(result)
            durable = await retried(lambda epoch=epoch: decisions.outcome(epoch), "outcome")
            assert durable is not None
            for result in results:
                told = result.winner if isinstance(result, Conflict) else result.outcome
                assert told == durable
            assert sum(isinstance(r, Created) for r in results) <= 1
            assert all(isinstance(r, Created | Unchanged | Conflict) for r in results)

    asyncio.run(body())


def test_phantom_create_conflicts_are_retryable_not_corrupt() -> None:
    """S3 answers 409 without writing; obstore calls it "already exists". The identity create and
    an outcome create under it raise StoreUnavailable, and a retry succeeds."""

    async def body() -> None:
        clock = SimulatedClock()
        store = FaultyStore(ObstoreStore.memory(), clock=clock, seed=1)
        decisions = DecisionStore.shared(store, clock=clock)
        store.fail_next(FaultKind.PHANTOM_CONFLICT, op="put", key_prefix="checkpoint-deployment/")
        with pytest.raises(StoreUnavailable, match="disappeared after create conflict"):
            await decisions.load_or_create_deployment_id()
        deployment = await decisions.load_or_create_deployment_id()
        store.fail_next(FaultKind.PHANTOM_CONFLICT, op="put", key_prefix="checkpoint-outcomes/")
        with pytest.raises(StoreUnavailable, match="disappeared after create conflict"):
            await decisions.record_outcome(
                epoch=1,
                checkpoint_id=1,
                scope=CheckpointScope.LOCAL,
                verdict=CheckpointVerdict.COMMIT,
            )
        result = await decisions.record_outcome(
            epoch=1,
            checkpoint_id=1,
            scope=CheckpointScope.LOCAL,
            verdict=CheckpointVerdict.COMMIT,
        )
        assert isinstance(result, Created)
        assert result.outcome.deployment_id == deployment

    asyncio.run(body())

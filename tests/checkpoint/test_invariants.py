"""The decision store's invariants, one test each (docs/protocols/checkpoint-decisions.md CD-2,
CD-3, CD-5, CD-6, CD-7, CD-9 .. CD-11, CD-13, CD-14; CD-1, CD-4, CD-8 and CD-12 are tested beside
their features).

The real DecisionStore on memory:// (and a local directory where the mode matters); every
`open_()` is a fresh instance with empty caches, as another process would be; races are
concurrent calls in one event loop.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.limits import MAX_IDENTITY_BYTES
from laminar_cluster.checkpoint.paths import IDENTITY_PATH, outcome_path
from laminar_cluster.checkpoint.records import (
    CheckpointScope,
    CheckpointSinkOpenWitness,
    CheckpointVerdict,
    Conflict,
    Created,
    Unchanged,
)
from laminar_cluster.clock import Clock, SimulatedClock
from laminar_cluster.codec import encode
from laminar_cluster.errors import CorruptRecord, Refused
from laminar_cluster.store import OVERWRITE, ObjectStore, open_store
from tests.checkpoint.conftest import deadline
from tests.checkpoint.test_capsule import make_capsule
from tests.checkpoint.test_outcome import local_outcome
from tests.checkpoint.test_witness import open_witness
from tests.support.scripted_store import ScriptedStore

COMMIT, ABORT = CheckpointVerdict.COMMIT, CheckpointVerdict.ABORT


def opener(store: ObjectStore, clock: Clock) -> Callable[[], DecisionStore]:
    return lambda: DecisionStore.shared(store, clock=clock)


async def record(ds: DecisionStore, epoch: int, verdict: CheckpointVerdict) -> object:
    return await ds.record_outcome(
        epoch=epoch, checkpoint_id=epoch, scope=CheckpointScope.LOCAL, verdict=verdict
    )


def test_cd2_allocation_never_goes_below_the_head() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=2)
        open_ = opener(open_store("memory://"), clock)
        instances = [open_() for _ in range(3)]
        rng = random.Random(2)
        given: list[int] = []
        for _ in range(30):
            minimum = rng.choice((1, 1, 1, (given[-1] if given else 0) + rng.randint(1, 40)))
            got = await rng.choice(instances).allocate_checkpoint_id_at_least(
                minimum, deadline=deadline(clock)
            )
            assert got >= minimum
            given.append(got)
        assert given == sorted(set(given))  # every instance continues above the last head
        assert given[-1] == (await open_().allocate_checkpoint_id(deadline=deadline(clock))) - 1

    asyncio.run(main())


def test_cd3_ids_restart_only_under_a_new_deployment() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=3)
        store = open_store("memory://")
        open_ = opener(store, clock)
        first = open_()
        old_id = await first.load_or_create_deployment_id()
        for _ in range(3):
            await first.allocate_checkpoint_id(deadline=deadline(clock))
        assert await record(first, 3, COMMIT) == Created(local_outcome(old_id, 3, COMMIT))
        await store.delete(IDENTITY_PATH)
        with pytest.raises(CorruptRecord, match="disappeared"):  # never recreated by allocation
            await first.allocate_checkpoint_id(deadline=deadline(clock))
        assert await store.list(IDENTITY_PATH) == []  # and it stays absent
        restarted = open_()
        new_id = await restarted.load_or_create_deployment_id()
        assert new_id != old_id
        assert await restarted.allocate_checkpoint_id(deadline=deadline(clock)) == 1
        with pytest.raises(CorruptRecord, match="belongs to deployment"):  # old records fail
            await restarted.outcome(3)

    asyncio.run(main())


def test_cd5_a_missing_outcome_is_unresolved_never_aborted() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=5)
        open_ = opener(open_store("memory://"), clock)
        writer = open_()
        assert isinstance(await record(writer, 4, COMMIT), Created)
        assert await open_().outcome(5) is None  # unresolved ...
        assert isinstance(await record(open_(), 5, COMMIT), Created)  # ... so still decidable
        outcome = await open_().outcome(5)
        assert outcome is not None and outcome.verdict is COMMIT
        assert [o.epoch for o in await open_().outcomes() if o.is_commit()] == [4, 5]

    asyncio.run(main())


def test_cd6_the_outcome_history_is_strictly_ordered() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=6)
        store = open_store("memory://")
        open_ = opener(store, clock)
        writer = open_()
        deployment = await writer.load_or_create_deployment_id()
        for epoch in (2, 5):
            assert isinstance(await record(writer, epoch, COMMIT), Created)
        assert [o.epoch for o in await open_().outcomes()] == [2, 5]
        # An epoch out of order (written behind the store's back, valid on its own) whose
        # checkpoint does not advance breaks the order: the inventory refuses it.
        forged = local_outcome(deployment, 7, ABORT, checkpoint_id=5)
        await store.put(outcome_path(7), encode(forged), OVERWRITE)
        with pytest.raises(CorruptRecord):
            await open_().outcomes()

    asyncio.run(main())


def test_cd7_racing_prunes_never_lower_the_floor() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=7)
        open_ = opener(open_store("memory://"), clock)
        writer = open_()
        for epoch in range(1, 13):
            assert isinstance(await record(writer, epoch, COMMIT), Created)
        requests = [3, 9, 5, 12, 7, 2, 10]
        results = await asyncio.gather(
            *(open_().prune_outcomes_before(r, deadline=deadline(clock)) for r in requests)
        )
        assert all(got >= asked for got, asked in zip(results, requests, strict=True))
        reader = open_()
        assert await reader.outcome_gc_floor_horizon() == 12
        assert [o.epoch for o in await reader.outcomes()] == [12]  # the live cut remains
        with pytest.raises(Refused, match="no live commit recovery cut"):
            await reader.prune_outcomes_before(13, deadline=deadline(clock))
        assert await reader.prune_outcomes_before(4, deadline=deadline(clock)) == 12

    asyncio.run(main())


def test_cd9_a_tampered_capsule_never_loads() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=9)
        store = open_store("memory://")
        open_ = opener(store, clock)
        writer = open_()
        capsule = make_capsule(await writer.load_or_create_deployment_id(), 4)
        ref = await writer.create_recovery_capsule(capsule)
        assert await open_().load_recovery_capsule(ref) == capsule
        assert await writer.create_recovery_capsule(capsule) == ref  # immutable: same address
        key = next(meta.key for meta in await store.list("checkpoint-recovery-capsules/"))
        body = (await store.get(key)).body
        tampered = body.replace(b'"epoch":4', b'"epoch":5', 1)
        assert tampered != body and len(tampered) == len(body)
        await store.put(key, tampered, OVERWRITE)
        with pytest.raises(CorruptRecord, match=key):
            await open_().load_recovery_capsule(ref)

    asyncio.run(main())


def test_cd10_racing_opens_leave_one_open_witness() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=10)
        open_ = opener(open_store("memory://"), clock)
        await open_().load_or_create_deployment_id()
        results = await asyncio.gather(
            *(open_witness(open_(), 20 + n) for n in range(5)), return_exceptions=True
        )
        opened = [r for r in results if isinstance(r, CheckpointSinkOpenWitness)]
        assert len(opened) == 1
        assert all(isinstance(r, Refused) for r in results if r not in opened)
        assert await open_().sink_open_witness() == opened[0]
        await open_().clear_sink_open_witness(opened[0])
        later = await open_witness(open_(), 30)  # closed (a tombstone): the next may open
        with pytest.raises(Refused):
            await open_witness(open_(), 31)
        assert await open_().sink_open_witness() == later

    asyncio.run(main())


def test_cd11_oversized_metadata_is_refused_before_decoding() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=11)
        scripted = ScriptedStore(open_store("memory://"))
        await scripted.put(IDENTITY_PATH, b"{" + b" " * MAX_IDENTITY_BYTES, OVERWRITE)
        with pytest.raises(CorruptRecord, match=f"maximum is {MAX_IDENTITY_BYTES}"):
            await DecisionStore.shared(scripted, clock=clock).load_or_create_deployment_id()
        assert scripted.get_ends == [MAX_IDENTITY_BYTES + 1]  # never an unbounded read

    asyncio.run(main())


def test_cd13_a_namespace_keeps_its_allocator_mode(tmp_path: Path) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=13)
        root = tmp_path / "decisions"
        local = DecisionStore.local_filesystem(root, clock=clock, fsync=False)
        assert await local.allocate_checkpoint_id(deadline=deadline(clock)) == 1
        shared = DecisionStore.shared(local.store, clock=clock)
        with pytest.raises(CorruptRecord, match="allocator mode"):
            await shared.allocate_checkpoint_id(deadline=deadline(clock))
        again = DecisionStore.local_filesystem(root, clock=clock, fsync=False)
        assert await again.allocate_checkpoint_id(deadline=deadline(clock)) > 1

    asyncio.run(main())


def test_cd14_an_identical_retry_is_harmless() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=14)
        scripted = ScriptedStore(open_store("memory://"))
        open_ = opener(scripted, clock)
        writer = open_()
        deployment = await writer.load_or_create_deployment_id()
        outcome = local_outcome(deployment, 3, COMMIT)
        scripted.fail_next_put_after_apply(outcome_path(3))  # applied, answer lost
        assert await record(writer, 3, COMMIT) == Unchanged(outcome)
        assert await record(open_(), 3, COMMIT) == Unchanged(outcome)  # a later retry too
        assert await record(open_(), 3, ABORT) == Conflict(outcome)  # only a different one fails
        witness = await open_witness(writer, 4)
        with pytest.raises(Refused):  # a retry is a new proposal: never adopts a slot ...
            await open_witness(open_(), 4)
        await writer.clear_sink_open_witness(witness)
        await open_().clear_sink_open_witness(witness)  # ... but a retried clear is harmless
        capsule = make_capsule(deployment, 3)
        ref = await writer.create_recovery_capsule(capsule)
        assert await open_().create_recovery_capsule(capsule) == ref
        assert [o.epoch for o in await open_().outcomes()] == [3]

    asyncio.run(main())

"""Retention: the outcome GC floor, its boundary and pruning (CD §3.7, CD §4.7,
CD §4.8; CD-T39 to CD-T51).

Shared-mode tests run on memory, file and the S3 test server; local-mode tests on a directory
through `open_local` or `DecisionStore.local_single_writer` over a FileStore. Faults go through
ScriptedStore. CD-T49 crashes the sweep through a ScriptedStore whose deletes raise (no test hook in
the production code).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.paths import FLOOR_PREFIX, OUTCOMES_PREFIX, floor_path
from laminar_cluster.checkpoint.records import CheckpointOutcome, OutcomeGcFloor
from laminar_cluster.checkpoint.retention import OutcomeRetentionBoundary
from laminar_cluster.clock import Clock
from laminar_cluster.codec import encode
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    InvalidArgument,
    InventoryChanged,
    Refused,
    StoreUnavailable,
)
from laminar_cluster.store import OVERWRITE, ObjectStore
from laminar_cluster.store.file_backend import FileStore
from tests.checkpoint.conftest import deadline
from tests.checkpoint.test_outcome import (
    ABORT,
    COMMIT,
    commit_all,
    epochs_of,
    local_outcome,
    record,
)
from tests.support.scripted_store import ScriptedStore


async def raw_epochs(store: ObjectStore) -> list[str]:
    return [meta.key.split("/")[1] for meta in await store.list(OUTCOMES_PREFIX)]


def test_cd_t39_floor_rejects_late_create_survives_restart(
    open_shared: Callable[[], DecisionStore], clock: Clock
) -> None:
    async def main() -> None:
        ds = open_shared()
        await record(ds, 1, COMMIT)
        await record(ds, 2, ABORT)
        await record(ds, 5, COMMIT)
        assert await ds.prune_outcomes_before(4, deadline=deadline(clock)) == 4
        with pytest.raises(Refused, match="below durable outcome GC horizon 4"):
            await record(ds, 3, ABORT)
        assert await raw_epochs(ds.store) == ["epoch=5"]  # nothing admitted, 1 and 2 swept
        restarted = open_shared()
        assert await restarted.outcome(3) is None
        assert await restarted.outcome(1) is None  # compacted, not "abort"
        assert await restarted.outcome_gc_floor_horizon() == 4
        assert epochs_of(await restarted.outcomes()) == [(5, 5)]
        audited = await restarted.audited_outcomes()
        assert epochs_of(audited) == [(1, 1), (2, 2), (5, 5)]
        assert [outcome.verdict for outcome in audited] == [COMMIT, ABORT, COMMIT]
        highest = await restarted.highest_terminal_outcome()
        assert highest is not None and highest.epoch == 5

    asyncio.run(main())


def test_cd_t40_concurrent_prune_monotonic(
    open_shared: Callable[[], DecisionStore], clock: Clock, backend: str
) -> None:
    # The spec's 32 outcomes and 31 pruners on memory and file (about 2,100 requests); 16 and 15
    # on the S3 test server (about 300 requests per second, and more lost CASes under latency).
    count = 16 if backend == "s3" else 32

    async def main() -> None:
        ds = open_shared()
        await commit_all(ds, range(1, count + 1))
        requests = list(range(2, count + 1))  # one pruner per request, each on its own instance
        results = await asyncio.gather(
            *(
                open_shared().prune_outcomes_before(before, deadline=deadline(clock, 60))
                for before in requests
            )
        )
        assert all(result >= before for result, before in zip(results, requests, strict=True))
        restarted = open_shared()
        assert await restarted.outcome_gc_floor_horizon() == count
        assert await restarted.outcome_retention_boundary() == OutcomeRetentionBoundary(
            count, count - 1, count - 1
        )
        assert epochs_of(await restarted.outcomes()) == [(count, count)]
        assert await raw_epochs(ds.store) == [f"epoch={count}"]

    asyncio.run(main())


def test_cd_t41_local_fs_floor_repeated_and_restart(
    open_local: Callable[[], DecisionStore], clock: Clock
) -> None:
    async def main() -> None:
        ds = open_local()
        await commit_all(ds, range(1, 25))
        for before in range(2, 25):
            assert await ds.prune_outcomes_before(before, deadline=deadline(clock)) == before
        assert epochs_of(await ds.outcomes()) == [(24, 24)]
        assert len(await ds.store.list(FLOOR_PREFIX)) == 1
        restarted = open_local()
        assert await restarted.outcome_gc_floor_horizon() == 24
        assert epochs_of(await restarted.outcomes()) == [(24, 24)]
        assert await restarted.outcome_retention_boundary() == OutcomeRetentionBoundary(24, 23, 23)
        assert await restarted.prune_outcomes_before(24, deadline=deadline(clock)) == 24

    asyncio.run(main())


def test_cd_t42_local_namespace_lock_shared(tmp_path: Path, clock: Clock) -> None:
    first = DecisionStore.local_filesystem(tmp_path / "ns", clock=clock, fsync=False)
    second = DecisionStore.local_filesystem(tmp_path / "ns", clock=clock, fsync=False)
    other = DecisionStore.local_filesystem(tmp_path / "other", clock=clock, fsync=False)
    assert first.ctx.namespace_lock is not None
    assert first.ctx.namespace_lock is second.ctx.namespace_lock
    assert other.ctx.namespace_lock is not first.ctx.namespace_lock


def test_cd_t43_local_floor_rmw_ordered(tmp_path: Path, clock: Clock) -> None:
    """Local mode over a store without conditional update: the floor's read-compare-overwrite
    runs under the namespace lock, so a second pruner waits and then rebuilds from the winner."""

    async def main() -> None:
        scripted = ScriptedStore(FileStore(str(tmp_path / "fs"), fsync=False))
        scripted.reject_updates = True
        a = DecisionStore.local_single_writer(scripted, clock=clock, namespace="t43")
        b = DecisionStore.local_single_writer(scripted, clock=clock, namespace="t43")
        lock = a.ctx.namespace_lock
        assert lock is not None and lock is b.ctx.namespace_lock
        await commit_all(a, range(1, 5))
        assert await a.prune_outcomes_before(2, deadline=deadline(clock)) == 2  # a create
        blocked = scripted.block_next_overwrite(FLOOR_PREFIX)
        async with asyncio.TaskGroup() as group:
            pruning_a = group.create_task(a.prune_outcomes_before(3, deadline=deadline(clock)))
            await asyncio.wait_for(blocked.reached.wait(), timeout=10)
            assert lock.locked()  # A holds the lock across its overwrite
            pruning_b = group.create_task(b.prune_outcomes_before(4, deadline=deadline(clock)))
            for _ in range(50):
                await asyncio.sleep(0.001)
            assert lock.locked() and not pruning_a.done() and not pruning_b.done()
            assert await b.outcome_gc_floor_horizon() == 2  # A's overwrite has not happened
            blocked.release.set()
        assert pruning_a.result() >= 3
        assert pruning_b.result() == 4
        assert await a.outcome_gc_floor_horizon() == 4
        assert epochs_of(await b.outcomes()) == [(4, 4)]

    asyncio.run(main())


def test_cd_t44_native_cas_on_local_fs_fails_update(tmp_path: Path, clock: Clock) -> None:
    async def main() -> None:
        scripted = ScriptedStore(FileStore(str(tmp_path / "fs"), fsync=False))
        scripted.reject_updates = True  # a plain local filesystem: no PutMode::Update
        ds = DecisionStore.shared(scripted, clock=clock)
        await commit_all(ds, range(1, 5))
        assert await ds.prune_outcomes_before(2, deadline=deadline(clock)) == 2
        with pytest.raises(StoreUnavailable, match="PutMode::Update"):
            await ds.prune_outcomes_before(3, deadline=deadline(clock))
        assert await ds.outcome_gc_floor_horizon() == 2
        assert epochs_of(await ds.outcomes()) == [(2, 2), (3, 3), (4, 4)]

    asyncio.run(main())


def test_cd_t45_floor_object_count_bounded(
    open_shared: Callable[[], DecisionStore], clock: Clock, backend: str
) -> None:
    # 64 outcomes (the spec's count) on memory and file; 24 on the S3 test server, which serves
    # about 300 requests per second (each prune audits every live outcome).
    count = 24 if backend == "s3" else 64

    async def main() -> None:
        ds = open_shared()
        await commit_all(ds, range(1, count + 1))
        for before in range(2, count + 1):
            assert await ds.prune_outcomes_before(before, deadline=deadline(clock)) == before
        assert len(await ds.store.list(FLOOR_PREFIX)) == 1
        assert await raw_epochs(ds.store) == [f"epoch={count}"]

    asyncio.run(main())


def test_cd_t46_retention_boundary_anchors(
    open_shared: Callable[[], DecisionStore], clock: Clock
) -> None:
    async def main() -> None:
        ds = open_shared()
        assert await ds.outcome_retention_boundary() == OutcomeRetentionBoundary(0, None, None)
        await record(ds, 1, COMMIT)
        await record(ds, 2, ABORT)
        await record(ds, 3, COMMIT)
        assert await ds.prune_outcomes_before(3, deadline=deadline(clock)) == 3
        restarted = open_shared()
        assert await restarted.outcome_retention_boundary() == OutcomeRetentionBoundary(3, 1, 2)
        assert epochs_of(await restarted.outcomes()) == [(3, 3)]

    asyncio.run(main())


def test_cd_t47_prune_keeps_last_commit(
    open_shared: Callable[[], DecisionStore], clock: Clock
) -> None:
    async def main() -> None:
        ds = open_shared()
        await record(ds, 4, COMMIT)
        await record(ds, 5, ABORT)
        with pytest.raises(Refused, match="no live commit recovery cut"):
            await ds.prune_outcomes_before(5, deadline=deadline(clock))
        assert await ds.outcome_gc_floor_horizon() == 0
        assert await ds.store.list(FLOOR_PREFIX) == []
        assert epochs_of(await ds.outcomes()) == [(4, 4), (5, 5)]
        assert await ds.prune_outcomes_before(4, deadline=deadline(clock)) == 4

    asyncio.run(main())


def test_cd_t48_prune_zero_is_read_only(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        scripted = ScriptedStore(make_store())
        ds = DecisionStore.shared(scripted, clock=clock)
        await commit_all(ds, [1, 2])
        puts = scripted.requests["put"]
        assert await ds.prune_outcomes_before(0, deadline=deadline(clock)) == 0
        assert scripted.requests["put"] == puts and scripted.requests["delete"] == 0
        assert await scripted.list(FLOOR_PREFIX) == []
        assert await ds.prune_outcomes_before(2, deadline=deadline(clock)) == 2
        puts, deletes = scripted.requests["put"], scripted.requests["delete"]
        assert await ds.prune_outcomes_before(0, deadline=deadline(clock)) == 2
        assert (scripted.requests["put"], scripted.requests["delete"]) == (puts, deletes)

    asyncio.run(main())


class SimulatedCrash(Exception):
    """The pruning process dies here."""


class CrashingDeletes(ScriptedStore):
    crash = True

    async def delete(self, key: str) -> None:
        if self.crash:
            raise SimulatedCrash(key)
        await super().delete(key)


def test_cd_t49_prune_repairs_after_crash(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        crashing = CrashingDeletes(make_store())
        ds = DecisionStore.shared(crashing, clock=clock)
        await commit_all(ds, range(1, 5))
        with pytest.raises(SimulatedCrash):
            await ds.prune_outcomes_before(3, deadline=deadline(clock))
        # The floor is durable, the sweep never ran: the raw objects below it are inert.
        survivor = DecisionStore.shared(make_store(), clock=clock)
        assert await survivor.outcome_gc_floor_horizon() == 3
        assert await raw_epochs(survivor.store) == ["epoch=1", "epoch=2", "epoch=3", "epoch=4"]
        assert await survivor.outcome(1) is None
        assert epochs_of(await survivor.outcomes()) == [(3, 3), (4, 4)]
        # A retry of the same prune re-enters the sweep.
        assert await survivor.prune_outcomes_before(3, deadline=deadline(clock)) == 3
        assert await raw_epochs(survivor.store) == ["epoch=3", "epoch=4"]
        crashing.crash = False
        assert await ds.prune_outcomes_before(2, deadline=deadline(clock)) == 3

    asyncio.run(main())


def test_cd_t50_floor_invalid_anchors(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        ds = open_shared()
        dep = await ds.load_or_create_deployment_id()

        def out(epoch: int, verdict: object, deployment: str = dep) -> CheckpointOutcome:
            return local_outcome(deployment, epoch, verdict)  # type: ignore[arg-type]

        def floor(
            before: int, terminal: CheckpointOutcome | None, committed: CheckpointOutcome | None
        ) -> bytes:
            return encode(
                OutcomeGcFloor(
                    version=4,
                    deployment_id=dep,
                    before_epoch=before,
                    terminal_anchor=terminal,
                    committed_anchor=committed,
                )
            )

        valid = floor(5, out(3, COMMIT), out(3, COMMIT))
        cases = [
            (floor(3, out(3, COMMIT), out(3, COMMIT)), "anchor epoch 3 is not below 3"),
            (
                floor(5, out(2, ABORT), out(3, COMMIT)),
                "committed anchor is newer than its terminal",
            ),
            (floor(5, out(3, COMMIT), out(2, COMMIT)), "does not retain its terminal commit"),
            (floor(5, out(3, COMMIT), None), "does not retain its terminal commit"),
            (floor(5, None, out(2, COMMIT)), "committed anchor without a terminal anchor"),
            (floor(5, out(2, ABORT), out(2, ABORT)), "committed anchor is not a commit"),
            (floor(5, out(4, ABORT), out(2, ABORT)), "committed anchor is not a commit"),
            (floor(5, out(3, ABORT, str(uuid.uuid4())), None), "is not below 5 in deployment"),
            (floor(0, None, None), "canonical path, deployment, and version"),
            (valid.replace(b'"version":4', b'"version":3'), "canonical path, deployment, and ver"),
            (valid.replace(dep.encode(), str(uuid.uuid4()).encode(), 1), "canonical path"),
            (json.dumps(json.loads(valid), indent=1).encode(), "does not use its canonical body"),
        ]
        for body, message in cases:
            await ds.store.put(floor_path(dep), body, OVERWRITE)
            with pytest.raises(CorruptRecord, match=message) as caught:
                await ds.outcome_gc_floor_horizon()
            assert caught.value.key == floor_path(dep)
        await ds.store.put(floor_path(dep), valid, OVERWRITE)
        assert await ds.outcome_retention_boundary() == OutcomeRetentionBoundary(5, 3, 3)

    asyncio.run(main())


def test_cd_t51_floor_keeps_advancing(make_store: Callable[[], ObjectStore], clock: Clock) -> None:
    async def main() -> None:
        scripted = ScriptedStore(make_store())
        ds = DecisionStore.shared(scripted, clock=clock)
        await commit_all(ds, [100])
        dep = await ds.load_or_create_deployment_id()
        key = floor_path(dep)
        floor_reads = 0

        async def advance_floor(read_key: str) -> None:
            nonlocal floor_reads
            if read_key == key:
                floor_reads += 1
                floor = OutcomeGcFloor(
                    version=4,
                    deployment_id=dep,
                    before_epoch=floor_reads,
                    terminal_anchor=None,
                    committed_anchor=None,
                )
                await scripted.inner.put(key, encode(floor), OVERWRITE)

        scripted.before_get = advance_floor
        with pytest.raises(InventoryChanged, match="kept advancing during exact lookup"):
            await ds.outcome(100)
        assert floor_reads == 6  # 3 attempts, each reading the floor before and after
        with pytest.raises(InventoryChanged):
            await ds.outcomes()
        with pytest.raises(InventoryChanged, match="advanced during outcome inventory"):
            await ds.audited_outcomes()
        scripted.before_get = None
        assert epochs_of(await ds.outcomes()) == [(100, 100)]

    asyncio.run(main())


def test_prune_deadline_and_input(open_shared: Callable[[], DecisionStore], clock: Clock) -> None:
    async def main() -> None:
        ds = open_shared()
        await commit_all(ds, [1, 2])
        with pytest.raises(DeadlineExceeded):
            await ds.prune_outcomes_before(2, deadline=clock.monotonic() - 1)
        assert await ds.outcome_gc_floor_horizon() == 0
        with pytest.raises(InvalidArgument, match="must be an int"):
            await ds.prune_outcomes_before(-1, deadline=deadline(clock))
        with pytest.raises(Refused, match="no live commit"):
            await ds.prune_outcomes_before(3, deadline=deadline(clock))

    asyncio.run(main())

"""History prune failure paths and the background scheduler (LA §4.8.1 to LA §4.8.4, LA §6
"Background prune", LA §11.6 to LA §11.7; invariants LA-11, LA-21): nothing is deleted when the
retained set cannot be proven, the delete budget is bounded, failed deletes and a wall clock before
1970 fail closed, and the scheduler runs one prune at a time, logs errors and honours its timeout.
Memory and file.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

import pytest

from laminar_cluster.authority.prune import PruneScheduler, grace_ms_for, prune_history
from laminar_cluster.authority.recovery_release import terminal_path
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    InvalidArgument,
    StoreUnavailable,
)
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import (
    LEADER_LEASE_MAX_PRUNE_BATCHES,
    LEADER_LEASE_PRUNE_BATCH_RECORDS,
)
from laminar_cluster.lease.paths import RECORDS_PREFIX, RELEASE_TERMINALS_PREFIX, record_path
from laminar_cluster.store import CREATE, ObjectStore, open_store
from tests.authority.prune_support import (
    HOUR_S,
    LOCAL,
    leader_of,
    lease_history,
    orphan_terminal,
    prune,
    release_cycle,
    stamped,
)
from tests.lease.pausing_store import (
    acquired,
    begin,
    put_record,
    record_at,
    record_seqs,
    renew,
    set_pointer,
)


@LOCAL
def test_release_admission_must_load_or_nothing_is_deleted(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = stamped(make_store)
        leader = leader_of(store)
        lease = acquired(await begin(leader))
        ref = await release_cycle(leader, lease, 5, 1)
        while lease.seq < 6:
            lease = acquired(await renew(leader, lease.token))
        store.clock.advance(HOUR_S)
        await store.inner.delete(terminal_path(ref))
        with pytest.raises(CorruptRecord, match="is missing"):
            await prune(leader)
        await store.inner.put(f"{RELEASE_TERMINALS_PREFIX}stray.json", b"x", CREATE)
        assert store.deleted == []
        assert await record_seqs(store) == [1, 2, 3, 4, 5, 6]

    asyncio.run(main())


@LOCAL
def test_stray_release_terminal_fails_the_terminal_gc_closed(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = stamped(make_store)
        leader = leader_of(store)
        lease = acquired(await begin(leader))
        await release_cycle(leader, lease, 5, 1)
        await orphan_terminal(leader, lease, 1, 91)
        stray = f"{RELEASE_TERMINALS_PREFIX}generation=1/sha256=00.json"
        await store.put(stray, b"x", CREATE)
        store.clock.advance(HOUR_S)
        with pytest.raises(CorruptRecord) as caught:
            await prune(leader)
        assert caught.value.key == stray
        assert not any(key.startswith(RELEASE_TERMINALS_PREFIX) for key in store.deleted)

    asyncio.run(main())


@LOCAL
def test_la21_delete_budget_is_bounded(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = stamped(make_store)
        budget = LEADER_LEASE_MAX_PRUNE_BATCHES * LEADER_LEASE_PRUNE_BATCH_RECORDS
        total = budget + 40
        for seq in range(1, total + 1):
            await put_record(store, record_at(seq))
        await set_pointer(store, total)
        store.clock.advance(HOUR_S)
        leader = leader_of(store)
        store.lists.clear()
        with pytest.raises(StoreUnavailable, match="still exceeds the bounded prune budget"):
            await prune(leader)
        assert len(store.deleted) == budget  # 4 batches of 256, then it stops
        assert store.lists[RECORDS_PREFIX] == LEADER_LEASE_MAX_PRUNE_BATCHES
        report = await prune_history(leader, grace_ms_for(leader.ttl_s))
        assert report.deleted_records == tuple(range(budget + 1, total - 1))
        assert report.record_batches == 1
        assert await record_seqs(store) == [total - 1, total]

    asyncio.run(main())


@LOCAL
def test_failed_delete_is_store_unavailable(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = stamped(make_store)
        leader = leader_of(store)
        await lease_history(leader, 5)
        store.clock.advance(HOUR_S)
        store.fail_deletes.add(record_path(2))
        with pytest.raises(StoreUnavailable, match="history prune delete failed"):
            await prune(leader)
        assert record_path(2) not in store.deleted
        store.fail_deletes.clear()
        assert await prune(leader) == (2,)  # the next run finishes the job
        assert await record_seqs(store) == [4, 5]

    asyncio.run(main())


@LOCAL
def test_wall_clock_before_1970_fails_closed(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = stamped(make_store)
        await lease_history(leader_of(store), 4)
        clock = SimulatedClock(seed=2, wall_start_ms=-1)
        behind = LeaderLeaseStore(store, clock=clock, ttl_s=5.0)
        store.lists.clear()
        with pytest.raises(InvalidArgument, match="before 1970"):
            await prune_history(behind, 0)
        assert store.lists == Counter() and store.deleted == []

    asyncio.run(main())


def test_prune_history_rejects_bad_arguments_and_passed_deadlines() -> None:
    async def main() -> None:
        store = stamped(lambda: open_store("memory://"))
        leader = leader_of(store)
        with pytest.raises(InvalidArgument):
            await prune_history(leader, -1)
        with pytest.raises(DeadlineExceeded):
            await prune_history(leader, 0, deadline=leader.clock.monotonic())
        with pytest.raises(InvalidArgument):
            grace_ms_for(0.0)
        assert grace_ms_for(0.001) == 2 and grace_ms_for(5.0) == 10_000
        with pytest.raises(InvalidArgument):
            PruneScheduler(leader, timeout_s=0)
        empty = await prune_history(leader, 0)
        assert empty.head_seq is None and empty.deleted_records == ()

    asyncio.run(main())


@LOCAL
def test_scheduler_runs_one_prune_at_a_time_and_drops_the_rest(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = stamped(make_store)
        leader = leader_of(store)
        scheduler = PruneScheduler(leader)
        scheduler.request()  # not running: dropped
        assert (scheduler.started, scheduler.dropped) == (0, 1)
        lease = await lease_history(leader, 4)
        store.clock.advance(HOUR_S)
        entered, release = asyncio.Event(), asyncio.Event()

        async def hold(prefix: str) -> None:
            entered.set()
            await release.wait()

        store.before_list = hold
        async with scheduler.running():
            scheduler.request()
            await asyncio.wait_for(entered.wait(), 10)
            acquired(await renew(leader, lease.token))  # its hook call is dropped: one at a time
            scheduler.request()
            assert (scheduler.started, scheduler.dropped) == (1, 3)
            release.set()
            await scheduler.wait_idle()
            assert scheduler.failed == 0 and scheduler.last_report is not None
            assert scheduler.last_report.deleted_records == (1, 2)  # its snapshot head was 4
            with pytest.raises(InvalidArgument, match="already running"):
                async with scheduler.running():
                    pass
        assert await record_seqs(store) == [3, 4, 5]

    asyncio.run(main())


@LOCAL
def test_scheduler_logs_errors_and_times_out(
    make_store: Callable[[], ObjectStore], caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        store = stamped(make_store)
        leader = leader_of(store)
        await lease_history(leader, 3)
        await store.put(f"{RECORDS_PREFIX}garbage.txt", b"x", CREATE)
        scheduler = PruneScheduler(leader, timeout_s=30.0)
        async with scheduler.running():
            scheduler.request()
            await scheduler.wait_idle()
            assert scheduler.failed == 1 and isinstance(scheduler.last_error, CorruptRecord)
            await store.delete(f"{RECORDS_PREFIX}garbage.txt")
            entered = asyncio.Event()

            async def hang(prefix: str) -> None:
                entered.set()
                await asyncio.Event().wait()  # a LIST that never answers

            store.before_list = hang
            scheduler.request()
            await asyncio.wait_for(entered.wait(), 10)
            await store.clock.step(30.0)  # the prune's own timeout
            await scheduler.wait_idle()
            assert scheduler.failed == 2 and isinstance(scheduler.last_error, DeadlineExceeded)
            # A prune still running when the block is left is cancelled, not awaited forever.
            entered.clear()
            scheduler.request()
            await asyncio.wait_for(entered.wait(), 10)
        assert scheduler.failed == 2 and leader.prune_hook is None
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(messages) == 2 and all("history prune failed" in m for m in messages)

    with caplog.at_level(logging.WARNING, logger="laminar_cluster.authority.prune"):
        asyncio.run(main())


def test_scheduler_lets_the_body_exception_through_and_restores_the_hook() -> None:
    async def main() -> None:
        store = stamped(lambda: open_store("memory://"))
        leader = leader_of(store)

        def earlier() -> None:
            pass

        leader.prune_hook = earlier
        scheduler = PruneScheduler(leader)
        with pytest.raises(ValueError, match="the body failed"):  # not an ExceptionGroup
            async with scheduler.running():
                await lease_history(leader, 2)
                await scheduler.wait_idle()
                raise ValueError("the body failed")
        assert leader.prune_hook is earlier
        assert scheduler.started + scheduler.dropped == 2 and scheduler.failed == 0
        async with scheduler.running():  # it can run again
            assert leader.prune_hook == scheduler.request

    asyncio.run(main())

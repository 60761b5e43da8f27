"""Process lease: start terms, renewal, fencing of an older start, states, leave
(docs/protocols/membership.md ML-1..ML-7; ML §8.2)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    InvalidArgument,
    StoreUnavailable,
)
from laminar_cluster.lease.validate_decisions import process_fence_is_canonical
from laminar_cluster.membership import (
    NodeState,
    ProcessFenced,
    ProcessLeaseHolder,
    activate,
    keep_renewed,
    leave,
    node_lease_path,
    read_node_record,
    wait_until_drained,
)
from laminar_cluster.membership.process_lease import PROCESS_LEASE_ATTEMPTS_MAX
from laminar_cluster.store import OVERWRITE, ObjectStore, open_store
from laminar_cluster.store.faulty import FaultKind, FaultyStore

TTL_S = 2.0
FAR = 1e9  # a caller deadline that never binds in these tests


async def run_for(clock: SimulatedClock, seconds: float, *, tick_s: float = 0.05) -> None:
    """Advance simulated time in ticks, letting real store I/O finish between ticks."""
    for _ in range(round(seconds / tick_s)):
        await asyncio.sleep(0.002)
        await clock.step(tick_s)


def _holder(store: ObjectStore, clock: SimulatedClock, node: int = 7) -> ProcessLeaseHolder:
    return ProcessLeaseHolder(store, clock, node, ttl_s=TTL_S, failure_domain="rack-a")


def test_ml1_each_start_takes_the_next_term(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        first = await _holder(make_store(), clock).acquire(deadline=FAR)
        second = await _holder(make_store(), clock).acquire(deadline=FAR)
        assert (first.record.lease.term, first.record.lease.seq) == (1, 1)
        assert first.record.state is NodeState.JOINING and first.fence is None
        assert (second.record.lease.term, second.record.lease.seq) == (2, 2)
        assert second.record.lease.owner != first.record.lease.owner
        assert second.predecessor == first.record
        fence = second.fence
        assert fence is not None and process_fence_is_canonical(fence)  # ML §8.2: seq+1, term+1

    asyncio.run(main())


def test_ml2_older_start_is_fenced_on_renewal(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=2)
        old = _holder(make_store(), clock)
        await old.acquire(deadline=FAR)
        await activate(old, deadline=FAR)
        newer = _holder(make_store(), clock)
        acquired = await newer.acquire(deadline=FAR)
        with pytest.raises(ProcessFenced, match="process term 1 was superseded by term 2") as info:
            await old.renew(deadline=FAR)
        assert info.value.successor == acquired.record.lease
        assert not old.is_live()
        stored = await read_node_record(make_store(), 7)
        assert stored is not None and stored.record.lease.term == 2  # never two live owners

    asyncio.run(main())


def test_ml3_renewal_keeps_term_and_anchors_validity_at_attempt_start() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=3)
        holder = _holder(open_store("memory://"), clock)
        await holder.acquire(deadline=FAR)
        started = clock.monotonic()
        assert holder.valid_until_s == started + TTL_S
        clock.advance(0.5)
        record = await holder.renew(deadline=FAR, state=NodeState.ACTIVE)
        assert (record.lease.term, record.lease.seq, record.state) == (1, 2, NodeState.ACTIVE)
        assert holder.valid_until_s == started + 0.5 + TTL_S
        again = await holder.renew(deadline=FAR)
        assert again.nonce != record.nonce and again.lease.seq == 3

    asyncio.run(main())


def test_ml5_missed_renewal_deadline_is_terminal() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=4)
        holder = _holder(open_store("memory://"), clock)
        await holder.acquire(deadline=FAR)
        clock.advance(TTL_S)
        assert not holder.is_live()
        with pytest.raises(ProcessFenced, match="missed its renewal deadline"):
            await holder.renew(deadline=FAR)

    asyncio.run(main())


def test_ml6_state_never_moves_backwards() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=5)
        holder = _holder(open_store("memory://"), clock)
        await holder.acquire(deadline=FAR)
        await holder.renew(deadline=FAR, state=NodeState.DRAINING)
        with pytest.raises(InvalidArgument, match="cannot go to active"):
            await holder.renew(deadline=FAR, state=NodeState.ACTIVE)

    asyncio.run(main())


def test_ml7_leave_drains_then_marks_left_and_stops_renewing() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=6)
        store = open_store("memory://")
        holder = _holder(store, clock)
        await holder.acquire(deadline=FAR)
        await activate(holder, deadline=FAR)
        seen: list[NodeState] = []
        owned = iter([True, True, False])

        async def owns_vnodes() -> bool:
            stored = await read_node_record(store, 7)
            assert stored is not None
            seen.append(stored.record.state)
            return next(owned)

        async def drive() -> None:
            await leave(holder, owns_vnodes, clock=clock, deadline=clock.monotonic() + 10)

        async with asyncio.TaskGroup() as group:
            group.create_task(keep_renewed(holder, clock, interval_s=0.5))
            group.create_task(drive())
            await run_for(clock, 2.0)
        assert seen == [NodeState.DRAINING] * 3
        stored = await read_node_record(store, 7)
        assert stored is not None and stored.record.state is NodeState.LEFT
        assert holder.released and not holder.is_live()

    asyncio.run(main())


def test_ml2_keep_renewed_stops_with_fenced_when_a_duplicate_starts() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=7)
        store = open_store("memory://")
        old = _holder(store, clock)
        await old.acquire(deadline=FAR)

        async def duplicate() -> None:
            await clock.sleep(1.0)
            await _holder(store, clock).acquire(deadline=FAR)

        with pytest.raises(ExceptionGroup) as info:
            async with asyncio.TaskGroup() as group:
                group.create_task(keep_renewed(old, clock, interval_s=0.5))
                group.create_task(duplicate())
                await run_for(clock, 3.0)
        assert isinstance(info.value.exceptions[0], ProcessFenced)

    asyncio.run(main())


@pytest.mark.parametrize("kind", [FaultKind.AFTER, FaultKind.AFTER_AS_CONFLICT, FaultKind.BEFORE])
def test_lost_renewal_response_is_read_back(kind: FaultKind) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=8)
        store = FaultyStore(open_store("memory://"), clock=clock, seed=8)
        holder = _holder(store, clock)
        await holder.acquire(deadline=FAR)
        store.fail_next(kind, op="put")
        record = await holder.renew(deadline=FAR, state=NodeState.ACTIVE)
        stored = await read_node_record(store.inner, 7)
        assert stored is not None and stored.record == record
        assert (await holder.renew(deadline=FAR)).lease.seq == record.lease.seq + 1

    asyncio.run(main())


@pytest.mark.parametrize("kind", [FaultKind.AFTER, FaultKind.BEFORE, FaultKind.AFTER_AS_CONFLICT])
def test_lost_start_response_is_read_back(kind: FaultKind) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=9)
        store = FaultyStore(open_store("memory://"), clock=clock, seed=9)
        store.fail_next(kind, op="put")
        acquired = await _holder(store, clock).acquire(deadline=FAR)
        stored = await read_node_record(store.inner, 7)
        assert stored is not None and stored.record == acquired.record

    asyncio.run(main())


def test_ml10_corrupt_record_is_never_overwritten() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=10)
        store = open_store("memory://")
        await store.put(node_lease_path(7), b'{"version":1}', OVERWRITE)
        with pytest.raises(CorruptRecord):
            await _holder(store, clock).acquire(deadline=FAR)
        assert (await store.get(node_lease_path(7))).body == b'{"version":1}'

    asyncio.run(main())


def test_wait_until_drained_is_bounded_by_the_deadline() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=11)
        calls = 0

        async def owns_vnodes() -> bool:
            nonlocal calls
            calls += 1
            return True

        async def drive() -> None:
            deadline = clock.monotonic() + 1.0
            await wait_until_drained(owns_vnodes, clock=clock, deadline=deadline, poll_s=0.25)

        with pytest.raises(ExceptionGroup) as info:
            async with asyncio.TaskGroup() as group:
                group.create_task(drive())
                await run_for(clock, 2.0)
        assert isinstance(info.value.exceptions[0], DeadlineExceeded)
        assert calls == 5  # at 0, 0.25, 0.5, 0.75 and 1.0 s: never past the deadline

    asyncio.run(main())


def test_a_renewal_applied_unseen_is_adopted_by_the_next_one() -> None:
    """A renewal's write applies, its response is lost and every read back fails: the call
    fails. The next renewal finds that record (our nonce) and renews on top of it, instead of
    taking it for a foreign write to our own term (CorruptRecord, which crashed the node)."""

    async def main() -> None:
        clock = SimulatedClock(seed=12)
        store = FaultyStore(open_store("memory://"), clock=clock, seed=12)
        holder = _holder(store, clock)
        acquired = await holder.acquire(deadline=FAR)
        store.fail_next(FaultKind.AFTER, op="put")
        for _ in range(PROCESS_LEASE_ATTEMPTS_MAX):
            store.fail_next(FaultKind.BEFORE, op="get")
        with pytest.raises(StoreUnavailable):
            await holder.renew(deadline=FAR, state=NodeState.ACTIVE)
        unseen = await read_node_record(store.inner, 7)
        assert unseen is not None and unseen.record.state is NodeState.ACTIVE  # it applied

        record = await holder.renew(deadline=FAR)
        stored = await read_node_record(store.inner, 7)
        assert stored is not None and stored.record == record
        assert record.lease.seq == acquired.record.lease.seq + 2
        assert record.state is NodeState.ACTIVE  # the adopted state, never moved back
        assert holder.record == record

    asyncio.run(main())

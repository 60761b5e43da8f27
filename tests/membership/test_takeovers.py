"""The durable takeovers of a node's lease record (docs/protocols/membership.md ML-11;
ML §8.2; AS §2.6 `removed_process_fences`): every new start keeps its
exact `ProcessLeaseFence`, newest first, at most 8; renewals carry them unchanged; a record whose
list is malformed is refused on read and never written."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
import pytest

from laminar_cluster.clock import SimulatedClock
from laminar_cluster.codec import encode
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.lease.records import ProcessLease, ProcessLeaseFence
from laminar_cluster.lease.validate_decisions import process_fence_is_canonical
from laminar_cluster.membership import (
    NodeLeaseRecord,
    NodeState,
    ProcessLeaseHolder,
    activate,
    node_lease_path,
    read_node_record,
)
from laminar_cluster.membership.records import (
    MAX_NODE_LEASE_RECORD_BYTES,
    NODE_TAKEOVERS_MAX,
    encode_node_record,
)
from laminar_cluster.store import OVERWRITE, ObjectStore, open_store

TTL_S = 2.0
FAR = 1e9
NODE = 7
replace = msgspec.structs.replace


def _holder(store: ObjectStore, clock: SimulatedClock) -> ProcessLeaseHolder:
    return ProcessLeaseHolder(store, clock, NODE, ttl_s=TTL_S, failure_domain="rack-a")


async def _starts(store: ObjectStore, clock: SimulatedClock, count: int) -> list[NodeLeaseRecord]:
    """`count` starts of node 7, each activated and renewed once; the last record of each."""
    records = []
    for _ in range(count):
        holder = _holder(store, clock)
        await holder.acquire(deadline=FAR)
        await activate(holder, deadline=FAR)
        records.append(await holder.renew(deadline=FAR))
    return records


def test_ml11_each_start_records_its_exact_takeover(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        first = await _holder(make_store(), clock).acquire(deadline=FAR)
        assert first.record.takeovers == ()
        holder = _holder(make_store(), clock)
        second = await holder.acquire(deadline=FAR)
        assert second.fence is not None and process_fence_is_canonical(second.fence)
        assert second.record.takeovers == (second.fence,)
        # Renewals and state changes carry the takeovers unchanged.
        await activate(holder, deadline=FAR)
        renewed = await holder.renew(deadline=FAR)
        assert renewed.lease.seq == second.record.lease.seq + 2
        assert renewed.takeovers == (second.fence,)
        stored = await read_node_record(make_store(), NODE)
        assert stored is not None and stored.record == renewed

    asyncio.run(main())


def test_ml11_keeps_the_newest_eight_newest_first() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=2)
        store = open_store("memory://")
        records = await _starts(store, clock, NODE_TAKEOVERS_MAX + 3)
        last = records[-1]
        assert len(last.takeovers) == NODE_TAKEOVERS_MAX
        # Newest first: takeover i is the start of records[-1 - i] over the last lease of the
        # boot before it (renewed twice since its own start: not the start lease).
        for index, fence in enumerate(last.takeovers):
            assert fence.predecessor == records[-2 - index].lease
            assert fence.successor.owner == records[-1 - index].lease.owner
            assert process_fence_is_canonical(fence)
        # The oldest boots fell off; the record stays well inside its byte limit.
        assert records[1].lease.owner not in {f.predecessor.owner for f in last.takeovers}
        body = encode_node_record(last, key=node_lease_path(NODE), node=NODE)
        assert len(body) < MAX_NODE_LEASE_RECORD_BYTES

    asyncio.run(main())


def _fence(predecessor: ProcessLease, owner: str, *, node: int = NODE) -> ProcessLeaseFence:
    successor = replace(
        predecessor, node=node, owner=owner, term=predecessor.term + 1, seq=predecessor.seq + 1
    )
    return ProcessLeaseFence(predecessor=predecessor, successor=successor)


def _malformed(record: NodeLeaseRecord) -> dict[str, NodeLeaseRecord]:
    """Records of node 7 whose takeovers break exactly one ML-11 rule each."""
    newest, older = record.takeovers[0], record.takeovers[1]
    lease = record.lease
    stranger = "00000000-0000-4000-8000-00000000abcd"
    foreign = replace(
        newest,
        predecessor=replace(newest.predecessor, node=8),
        successor=replace(newest.successor, node=8),
    )
    not_plus_one = replace(
        newest, successor=replace(newest.successor, seq=newest.successor.seq + 1)
    )
    ahead = _fence(lease, stranger)  # a takeover of the record's own lease: term + 1
    same_term_other_owner = replace(newest, successor=replace(newest.successor, owner=stranger))
    return {
        "of node 8, not node 7": replace(record, takeovers=(foreign, older)),
        "not \\+1 each": replace(record, takeovers=(not_plus_one, older)),
        "not older than the one before it": replace(record, takeovers=(older, newest)),
        "newer than the lease": replace(record, takeovers=(ahead, *record.takeovers[:7])),
        "another owner": replace(record, takeovers=(same_term_other_owner, older)),
        "at most 8": replace(record, takeovers=record.takeovers * 5),
        "one owner on both sides": replace(
            record,
            takeovers=(
                replace(newest, predecessor=replace(newest.predecessor, owner=lease.owner)),
                older,
            ),
        ),
    }


def test_ml11_malformed_takeovers_are_refused_on_read_and_write() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=3)
        store = open_store("memory://")
        record = (await _starts(store, clock, 3))[-1]
        assert len(record.takeovers) == 2
        key = node_lease_path(NODE)
        good = (await store.get(key)).body
        for why, bad in _malformed(record).items():
            with pytest.raises(InvalidArgument, match=why):
                encode_node_record(bad, key=key, node=NODE)
            await store.put(key, encode(bad), OVERWRITE)
            with pytest.raises(CorruptRecord, match=why):
                await read_node_record(store, NODE)
            # Never trusted, never overwritten: a start on it refuses too.
            with pytest.raises(CorruptRecord):
                await _holder(store, clock).acquire(deadline=FAR)
            assert (await store.get(key)).body == encode(bad)
            await store.put(key, good, OVERWRITE)
        stored = await read_node_record(store, NODE)
        assert stored is not None and stored.record == record
        assert stored.record.state is NodeState.ACTIVE

    asyncio.run(main())

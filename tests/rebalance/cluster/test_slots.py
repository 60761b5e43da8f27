"""Durable per-process slots (RB §2.7, RB §4.6): own-slot OVERWRITE with exact
read-back, one bounded listing for reads, fail closed on anything malformed or foreign."""

from __future__ import annotations

import asyncio
import uuid

import msgspec
import pytest

from laminar_cluster.assignment.digest import fence_from_owner_map, owner_map_digest
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.codec import digest32, encode
from laminar_cluster.errors import CorruptRecord, Fenced, InvalidArgument, StoreUnavailable
from laminar_cluster.fencing import FenceParticipant, LeaderOwner, LeaderProof
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.cluster.slots import (
    PROCESSES_PREFIX,
    SlotKind,
    parse_process_slot_path,
    process_slot_path,
    read_adopted_assignments,
    read_drain_acks,
    write_process_slot,
)
from laminar_cluster.rebalance.records import CheckpointAssignmentAdoption, DrainAck
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.store import OVERWRITE, ObjectStore, PutMode, PutResult
from laminar_cluster.store.faulty import FaultKind, FaultyStore
from tests.rebalance.refusal_support import raises_because

pytestmark = pytest.mark.parametrize("backend", ["memory", "file"])
replace = msgspec.structs.replace
FAR = 1e9


def participant(node: int, boot: int | None = None) -> FenceParticipant:
    return FenceParticipant(node_id=node, boot_incarnation=str(uuid.UUID(int=boot or node * 11)))


def adoption(node: int, version: int = 1, *, ready: bool = True) -> CheckpointAssignmentAdoption:
    owners = (1, 2)
    return CheckpointAssignmentAdoption(
        version=1,
        participant=participant(node),
        assignment_version=version,
        vnode_count=2,
        assignment_digest=digest32(owner_map_digest(2, owners)),
        vnode_state_ready=ready,
    )


def transition() -> AssignmentDrainTransition:
    leader = LeaderProof(
        owner=LeaderOwner(node_id=1, boot_id=participant(1).boot_incarnation, process_term=1),
        fencing_token=1,
    )
    return AssignmentDrainTransition(
        predecessor=fence_from_owner_map(1, (1, 1), (participant(1),)),
        target=fence_from_owner_map(2, (1, 2), (participant(1), participant(2))),
        leader=leader,
    )


def test_paths_parse_only_canonical_keys(store: ObjectStore) -> None:
    key = process_slot_path(7, SlotKind.DRAIN_ACK)
    assert key == "control/processes/node=00000000000000000007/drain-ack.json"
    assert parse_process_slot_path(key) == (7, SlotKind.DRAIN_ACK)
    for bad in ("control/processes/node=7/drain-ack.json", f"{key}.tmp", "control/processes/x"):
        with pytest.raises(CorruptRecord):
            parse_process_slot_path(bad)
    with pytest.raises(InvalidArgument):
        process_slot_path(0, SlotKind.DRAIN_ACK)


def test_own_slot_overwrite_and_read_back(store: ObjectStore) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        await write_process_slot(store, clock, adoption(1), deadline=FAR)
        await write_process_slot(store, clock, adoption(2, ready=False), deadline=FAR)
        assert await read_adopted_assignments(store, clock, deadline=FAR) == (
            adoption(1),
            adoption(2, ready=False),
        )
        # The next report of the same node replaces its slot.
        await write_process_slot(store, clock, adoption(1, version=2), deadline=FAR)
        reports = await read_adopted_assignments(store, clock, deadline=FAR)
        assert reports == (adoption(1, version=2), adoption(2, ready=False))
        # The two kinds live side by side and are read separately.
        ack = DrainAck(version=1, participant=participant(1), transition=transition())
        await write_process_slot(store, clock, ack, deadline=FAR)
        assert await read_drain_acks(store, clock, deadline=FAR) == (ack,)
        assert len(await read_adopted_assignments(store, clock, deadline=FAR)) == 2

    asyncio.run(main())


def test_write_refuses_a_non_canonical_record(store: ObjectStore) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        with pytest.raises(InvalidArgument, match="assignment version is 0"):
            await write_process_slot(store, clock, adoption(1, version=0), deadline=FAR)
        bad = replace(transition(), leader=replace(transition().leader, fencing_token=0))
        with pytest.raises(InvalidArgument, match="not canonical"):
            ack = DrainAck(version=1, participant=participant(1), transition=bad)
            await write_process_slot(store, clock, ack, deadline=FAR)
        assert await store.list(PROCESSES_PREFIX) == []

    asyncio.run(main())


def test_lost_write_response_is_settled_by_the_read_back(store: ObjectStore) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        faulty = FaultyStore(store, clock=clock, seed=1)
        faulty.fail_next(FaultKind.AFTER, op="put", key_prefix=PROCESSES_PREFIX)
        await write_process_slot(faulty, clock, adoption(1), deadline=FAR)
        assert await read_adopted_assignments(store, clock, deadline=FAR) == (adoption(1),)
        faulty.fail_next(FaultKind.BEFORE, op="put", key_prefix=PROCESSES_PREFIX)
        with pytest.raises(StoreUnavailable):
            await write_process_slot(faulty, clock, adoption(1, version=2), deadline=FAR)

    asyncio.run(main())


class ClobberingStore(FaultyStore):
    """After each put, another process of the same node overwrites the object."""

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        result = await self.inner.put(key, body, mode)
        await self.inner.put(key, encode(adoption(1, version=9)), OVERWRITE)
        return result


def test_a_read_back_mismatch_is_an_error(store: ObjectStore) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        clobbering = ClobberingStore(store, clock=clock, seed=1)
        with raises_because(Fenced, Refusal.SLOT_WRITTEN_BY_ANOTHER_PROCESS):
            await write_process_slot(clobbering, clock, adoption(1), deadline=FAR)

    asyncio.run(main())


class VanishingStore(FaultyStore):
    """Each put is lost: the object is gone when it is read back."""

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        result = await self.inner.put(key, body, mode)
        await self.inner.delete(key)
        return result


def test_a_write_that_did_not_land_is_retryable(store: ObjectStore) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        vanishing = VanishingStore(store, clock=clock, seed=1)
        with pytest.raises(StoreUnavailable):
            await write_process_slot(vanishing, clock, adoption(1), deadline=FAR)

    asyncio.run(main())


def test_reads_fail_closed(store: ObjectStore) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        await write_process_slot(store, clock, adoption(1), deadline=FAR)
        # Node 2's report at node 3's path: the publisher differs from the path.
        key3 = process_slot_path(3, SlotKind.ADOPTED_ASSIGNMENT)
        await store.put(key3, encode(adoption(2)), OVERWRITE)
        with pytest.raises(CorruptRecord, match="published by node 2, not by node 3"):
            await read_adopted_assignments(store, clock, deadline=FAR)
        # Malformed bytes.
        await store.put(key3, b'{"version":1}', OVERWRITE)
        with pytest.raises(CorruptRecord):
            await read_adopted_assignments(store, clock, deadline=FAR)
        # A non-canonical record (version 0) written by someone bypassing the writer.
        await store.put(key3, encode(replace(adoption(3), assignment_version=0)), OVERWRITE)
        with pytest.raises(CorruptRecord, match="assignment version is 0"):
            await read_adopted_assignments(store, clock, deadline=FAR)
        await store.delete(key3)
        assert await read_adopted_assignments(store, clock, deadline=FAR) == (adoption(1),)
        # A stray key under the prefix.
        await store.put(f"{PROCESSES_PREFIX}notes.txt", b"x", OVERWRITE)
        with pytest.raises(CorruptRecord, match="not a canonical process slot path"):
            await read_drain_acks(store, clock, deadline=FAR)

    asyncio.run(main())

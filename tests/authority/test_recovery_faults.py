"""Recovery faults and recovery release (LA §3.7, LA §3.8, LA §4.6; LA-T70 to LA-T81;
invariants LA-16).

LA-T70 and LA-T72 run on memory, file and the S3 test server; the others on memory and file.
Each "process" has its own SimulatedClock; takeovers advance simulated monotonic time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
import pytest

from laminar_cluster.authority.recovery_faults import (
    Active,
    AlreadyCleared,
    CoveredByNewerRequest,
    RecoveryFaultInventory,
    Superseded,
    record_recovery_fault,
    recovery_fault_inventory,
)
from laminar_cluster.authority.recovery_release import (
    FaultsChanged,
    ReleaseConflict,
    ReleaseCreated,
    ReleaseUnchanged,
    authorize_recovery_release,
    latest_recovery_release_terminal,
    record_recovery_release_commit,
    recovery_admission_is_current,
    recovery_admission_snapshot,
    stage_recovery_release_terminal,
    terminal_path,
    terminal_ref,
)
from laminar_cluster.errors import DeadlineExceeded, Fenced, InvalidArgument, StoreUnavailable
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import (
    LeaderLease,
    RecoveryAnnouncement,
    RecoveryFault,
    RecoveryReleaseLink,
    RecoveryReleaseTerminalRef,
)
from laminar_cluster.store import ObjectStore, open_store
from tests.authority.recovery_support import deadline, publisher, round_of, settle, terminal_of
from tests.lease.pausing_store import (
    TTL_S,
    B,
    PausingStore,
    acquired,
    authority,
    begin,
    counters,
    record_seqs,
    sim,
    takeover,
)
from tests.support.scripted_store import ScriptedStore

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])


async def fault(leader: LeaderLeaseStore, node: int, request: int = 1, **kw: int) -> object:
    return await record_recovery_fault(
        leader, publisher(node, **kw), request, deadline=deadline(leader)
    )


async def commit(
    leader: LeaderLeaseStore, lease: LeaderLease, ref: RecoveryReleaseTerminalRef
) -> object:
    return await record_recovery_release_commit(
        leader, lease.proof(), ref, deadline=deadline(leader)
    )


async def released(
    store: ObjectStore,
) -> tuple[LeaderLeaseStore, LeaderLease, RecoveryAnnouncement, RecoveryReleaseTerminalRef]:
    """A acquires (seq 1), node 5 (an owner) reports (seq 2), A releases it (seq 3)."""
    leader = authority(store, 1)
    lease = acquired(await begin(leader))
    assert isinstance(await fault(leader, 5), Active)
    terminal = terminal_of(
        round_of(lease.proof(), await recovery_fault_inventory(leader), owners=(5,))
    )
    ref = await stage_recovery_release_terminal(leader, terminal)
    assert await commit(leader, lease, ref) == ReleaseCreated(ref=ref)
    return leader, lease, terminal, ref


def test_la_t70_fault_idempotent(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        assert isinstance(await fault(leader, 5), Active)
        assert isinstance(await fault(leader, 5), Active)
        assert await record_seqs(store) == [1, 2]  # no second record
        head = await leader.load_record()
        assert head is not None
        (slot,) = head.recovery_fault_slots
        assert (slot.fault_sequence, slot.active, head.recovery_fault_revision) == (2, True, 2)
        # LA §3.3: a fault append moves only seq; the liveness identity is untouched.
        assert counters(head.lease) == (2, 1, 1)
        assert head.lease.liveness_identity() == lease.liveness_identity()
        inventory = await recovery_fault_inventory(leader)
        assert inventory == RecoveryFaultInventory(2, (RecoveryFault(reporter=5, sequence=2),))

    asyncio.run(main())


@LOCAL
def test_la_t71_fault_rules(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        with pytest.raises(Fenced):  # faults need an existing authority
            await fault(leader, 5)
        acquired(await begin(leader))
        assert isinstance(await fault(leader, 5, 3, term=2), Active)  # seq 2
        assert isinstance(await fault(leader, 5, 2, term=2), CoveredByNewerRequest)
        assert isinstance(await fault(leader, 5, 9, term=1), Superseded)
        with pytest.raises(InvalidArgument, match="two recovery fault publishers for process term"):
            await fault(leader, 5, 4, term=2, boot_n=77)
        assert await record_seqs(store) == [1, 2]  # none of those wrote
        assert isinstance(await fault(leader, 5, 1, term=3, boot_n=77), Active)  # seq 3
        assert isinstance(await fault(leader, 3, 1), Active)  # seq 4, sorted before node 5
        head = await leader.load_record()
        assert head is not None
        first, second = head.recovery_fault_slots
        assert (first.publisher, first.fault_sequence) == (publisher(3), 4)
        # The higher term replaced the slot with a new fault sequence (LA-16).
        assert (second.publisher, second.fault_sequence) == (publisher(5, 77, 3), 3)
        assert isinstance(await fault(leader, 5, 2, term=3, boot_n=77), Active)  # newer request
        inventory = await recovery_fault_inventory(leader)
        assert inventory == RecoveryFaultInventory(
            5, (RecoveryFault(reporter=3, sequence=4), RecoveryFault(reporter=5, sequence=5))
        )
        with pytest.raises(InvalidArgument, match="must be nonzero"):
            await fault(leader, 0)
        with pytest.raises(InvalidArgument, match="request sequence must be nonzero"):
            await fault(leader, 5, 0)

    asyncio.run(main())


def test_la_t72_release_commit_happy_path(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader, lease, terminal, ref = await released(store)
        head = await leader.load_record()
        assert head is not None and head.recovery_release_commit is not None
        assert head.recovery_release_commit.leader_proof == lease.proof()
        assert head.recovery_release_head == RecoveryReleaseLink(sequence=3, terminal=ref)
        assert counters(head.lease) == (3, 1, 1)
        (slot,) = head.recovery_fault_slots  # a tombstone of the exact cleared request
        assert (slot.publisher, slot.fault_sequence, slot.active) == (publisher(5), 2, False)
        assert head.recovery_fault_revision == 3
        # LA-16: only the exact publisher of the covered fault may resume.
        assert await authorize_recovery_release(leader, publisher(5), terminal)
        assert not await authorize_recovery_release(leader, publisher(5, term=2), terminal)
        assert not await authorize_recovery_release(leader, publisher(5, boot_n=55), terminal)
        assert await authorize_recovery_release(leader, publisher(6), terminal)  # covers none
        assert isinstance(await fault(leader, 5), AlreadyCleared)
        assert await record_seqs(store) == [1, 2, 3]
        assert await latest_recovery_release_terminal(leader) == terminal
        snapshot = await recovery_admission_snapshot(leader)
        assert snapshot.committed_release == terminal
        assert snapshot.fault_inventory == RecoveryFaultInventory(3, ())
        assert (snapshot.authority_sequence, snapshot.release_head) == (
            3,
            head.recovery_release_head,
        )
        assert await recovery_admission_is_current(leader, snapshot, lease.proof())

    asyncio.run(main())


@LOCAL
def test_la_t73_fault_after_freeze(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        await fault(leader, 5)
        frozen = round_of(lease.proof(), await recovery_fault_inventory(leader), owners=(5,))
        ref = await stage_recovery_release_terminal(leader, terminal_of(frozen))
        await fault(leader, 6)  # reported after the round was frozen
        assert await commit(leader, lease, ref) == FaultsChanged()  # LA-16
        head = await leader.load_record()
        assert head is not None and head.recovery_release_head is None
        assert await record_seqs(store) == [1, 2, 3]
        assert await latest_recovery_release_terminal(leader) is None

    asyncio.run(main())


@LOCAL
def test_la_t74_release_then_new_fault(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader, lease, terminal, ref = await released(store)
        assert isinstance(await fault(leader, 6), Active)  # seq 4
        head = await leader.load_record()
        assert head is not None
        assert head.recovery_release_head == RecoveryReleaseLink(sequence=3, terminal=ref)
        assert [(s.publisher.participant.node_id, s.active) for s in head.recovery_fault_slots] == [
            (5, False),
            (6, True),
        ]
        assert not await authorize_recovery_release(leader, publisher(5), terminal)
        # The winner check precedes the inventory check: the retry learns it is durable.
        assert await commit(leader, lease, ref) == ReleaseUnchanged(ref=ref)
        assert await record_seqs(store) == [1, 2, 3, 4]
        snapshot = await recovery_admission_snapshot(leader)
        assert snapshot.committed_release == terminal
        assert snapshot.fault_inventory.faults == (RecoveryFault(reporter=6, sequence=4),)
        assert not await recovery_admission_is_current(leader, snapshot, lease.proof())

    asyncio.run(main())


@LOCAL
def test_la_t75_release_generation_winner(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader, lease, terminal, ref = await released(store)
        divergent = terminal_of(terminal.round, epoch=5)  # same generation 1, other content
        divergent_ref = await stage_recovery_release_terminal(leader, divergent)
        assert divergent_ref != ref
        assert await commit(leader, lease, divergent_ref) == ReleaseConflict(winner=ref)
        await fault(leader, 6)  # seq 4
        inventory = await recovery_fault_inventory(leader)
        second = terminal_of(round_of(lease.proof(), inventory, generation=2, evidence=(6,)))
        second_ref = await stage_recovery_release_terminal(leader, second)
        assert await commit(leader, lease, second_ref) == ReleaseCreated(ref=second_ref)
        # LA-16: generations are monotone; the older release now loses to the newer one.
        assert await commit(leader, lease, ref) == ReleaseConflict(winner=second_ref)
        head = await leader.load_record()
        assert head is not None
        assert head.recovery_release_head == RecoveryReleaseLink(sequence=5, terminal=second_ref)
        # Node 6 was stopped as an evidence participant: its slot is a tombstone; node 5's old
        # tombstone is dropped.
        assert [(s.publisher, s.fault_sequence, s.active) for s in head.recovery_fault_slots] == [
            (publisher(6), 4, False)
        ]
        assert await authorize_recovery_release(leader, publisher(6), second)
        assert await latest_recovery_release_terminal(leader) == second

    asyncio.run(main())


@LOCAL
def test_la_t76_release_survives_takeover(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader, lease, terminal, ref = await released(store)
        rival = authority(store, 2)
        current = await rival.load()
        assert current is not None
        observation = rival.observe_rival(B, current)
        sim(rival).advance(TTL_S + 0.001)
        taken = acquired(await takeover(rival, observation))
        assert counters(taken) == (4, 2, 2)
        assert await latest_recovery_release_terminal(rival) == terminal
        # LA §11.13: the deposed term's retry still learns that its release is durable.
        assert await commit(leader, lease, ref) == ReleaseUnchanged(ref=ref)
        snapshot = await recovery_admission_snapshot(rival)
        assert snapshot.committed_release == terminal and snapshot.authority_sequence == 4
        assert not await recovery_admission_is_current(leader, snapshot, lease.proof())
        assert await recovery_admission_is_current(rival, snapshot, taken.proof())

    asyncio.run(main())


@LOCAL
def test_la_t77_takeover_fences_release_commit(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        await fault(leader, 5)  # seq 2
        frozen = round_of(lease.proof(), await recovery_fault_inventory(leader), owners=(5,))
        ref = await stage_recovery_release_terminal(leader, terminal_of(frozen))
        rival = authority(store, 2)
        current = await rival.load()
        assert current is not None
        observation = rival.observe_rival(B, current)
        gate = store.pause_put(record_path(3))
        async with asyncio.TaskGroup() as group:
            paused = group.create_task(settle(commit(leader, lease, ref)))
            await gate.wait_reached()
            sim(rival).advance(TTL_S + 0.001)
            assert counters(acquired(await takeover(rival, observation))) == (3, 2, 2)
            gate.release.set()
        assert isinstance(paused.result(), Fenced)
        head = await rival.load_record()
        assert head is not None and head.lease.owner == B
        assert head.recovery_release_head is None
        assert await record_seqs(store) == [1, 2, 3]

    asyncio.run(main())


@LOCAL
def test_ambiguous_writes_settle_by_reading_back(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = ScriptedStore(make_store())
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        store.fail_next_put_after_apply(record_path(2))  # the fault append lands, reply lost
        assert isinstance(await fault(leader, 5), Active)
        frozen = round_of(lease.proof(), await recovery_fault_inventory(leader), owners=(5,))
        terminal = terminal_of(frozen)
        store.fail_next_put_after_apply(terminal_path(terminal_ref(terminal)))
        ref = await stage_recovery_release_terminal(leader, terminal)  # settled by read-back
        store.fail_next_put_after_apply(record_path(3))
        # Spec LA §4.6.5: an identical (ambiguous) append still reports Created.
        assert await commit(leader, lease, ref) == ReleaseCreated(ref=ref)
        assert await record_seqs(store) == [1, 2, 3]

        other = terminal_of(frozen, epoch=6)
        store.defer_next_put(terminal_path(terminal_ref(other)))  # lost before visibility
        with pytest.raises(StoreUnavailable, match=r"reconciliation failed .*is missing"):
            await stage_recovery_release_terminal(leader, other)

    asyncio.run(main())


@LOCAL
def test_release_commit_fencing_and_deadline(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        await fault(leader, 5)
        frozen = round_of(lease.proof(), await recovery_fault_inventory(leader), owners=(5,))
        ref = await stage_recovery_release_terminal(leader, terminal_of(frozen))
        stale = msgspec.structs.replace(lease.proof(), fencing_token=2)
        with pytest.raises(Fenced, match="not the recovery round's leader proof"):
            await record_recovery_release_commit(leader, stale, ref, deadline=deadline(leader))
        rotated = acquired(await begin(leader))  # token 2: the round's term is deposed
        with pytest.raises(Fenced, match="no longer names the durable leader term"):
            await commit(leader, lease, ref)
        with pytest.raises(DeadlineExceeded):
            await record_recovery_release_commit(
                leader, rotated.proof(), ref, deadline=leader.clock.monotonic()
            )
        with pytest.raises(DeadlineExceeded):
            await record_recovery_fault(
                leader, publisher(6), 1, deadline=leader.clock.monotonic() - 1
            )
        assert await record_seqs(store) == [1, 2, 3]
        with pytest.raises(Fenced):  # no head at all
            await recovery_admission_snapshot(authority(open_store("memory://"), 9))

    asyncio.run(main())

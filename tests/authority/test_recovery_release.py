"""Recovery release terminals, admission snapshots and fault-inventory bounds (LA §3.8, LA §4.6.3 to
LA §4.6.7, LA §8.7; LA-T78 to LA-T81; invariants LA-16, LA-11), plus the round and release-id
rules this port defines. Split from test_recovery.py by size. Memory and file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from laminar_cluster.authority.recovery_faults import (
    Active,
    RecoveryFaultInventory,
    record_recovery_fault,
    recovery_fault_inventory,
)
from laminar_cluster.authority.recovery_release import (
    ReleaseCreated,
    load_recovery_release_terminal,
    record_recovery_release_commit,
    recovery_admission_is_current,
    recovery_admission_snapshot,
    release_id_for,
    stage_recovery_release_terminal,
    terminal_path,
    terminal_ref,
)
from laminar_cluster.codec import encode
from laminar_cluster.codec.types import U64_MAX
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.fencing import FenceParticipant, LeaderProof
from laminar_cluster.lease.limits import MAX_AUTHORITY_RECORD_BYTES, MAX_RECOVERY_FAULT_SLOTS
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import (
    AuthorityRecoveryFaultSlot,
    PhasePrepare,
    PhaseRelease,
    RecoveryAnnouncement,
    RecoveryFault,
    RecoveryFaultPublisher,
    RecoveryRound,
)
from laminar_cluster.lease.validate import encode_record
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore
from tests.authority.recovery_support import deadline, publisher, round_of, settle, terminal_of
from tests.lease.pausing_store import (
    A,
    PausingStore,
    acquired,
    authority,
    begin,
    put_record,
    record_at,
    record_seqs,
    set_pointer,
)

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])
PROOF = LeaderProof(owner=A.proof_owner(), fencing_token=1)
INVENTORY = RecoveryFaultInventory(4, (RecoveryFault(reporter=5, sequence=2),))
replace = msgspec.structs.replace


@LOCAL
def test_la_t78_tombstone_compaction_no_sequence_reuse(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        sequences = []
        for cycle in range(MAX_RECOVERY_FAULT_SLOTS + 1):  # 517 release cycles
            reporter = publisher(1000 + cycle)
            assert isinstance(
                await record_recovery_fault(leader, reporter, 1, deadline=deadline(leader)), Active
            )
            inventory = await recovery_fault_inventory(leader)
            sequences.append(inventory.faults[0].sequence)
            # The reporter is covered but not stopped (no owner, no evidence): dropped.
            frozen = round_of(lease.proof(), inventory, generation=cycle + 1)
            ref = await stage_recovery_release_terminal(leader, terminal_of(frozen))
            outcome = await record_recovery_release_commit(
                leader, lease.proof(), ref, deadline=deadline(leader)
            )
            assert outcome == ReleaseCreated(ref=ref)
            head = await leader.load_record()
            assert head is not None and head.recovery_fault_slots == ()
        # The first reporter's request was dropped, not remembered: a re-report is a fresh fault
        # with a larger fault sequence, never a reused one (LA-16).
        again = await record_recovery_fault(leader, publisher(1000), 1, deadline=deadline(leader))
        assert isinstance(again, Active)
        (fault,) = (await recovery_fault_inventory(leader)).faults
        assert fault.sequence > max(sequences) and len(set(sequences)) == len(sequences)

    asyncio.run(main())


def max_slots(count: int) -> tuple[AuthorityRecoveryFaultSlot, ...]:
    """`count` active slots with the largest values each field can hold."""
    return tuple(
        AuthorityRecoveryFaultSlot(
            publisher=RecoveryFaultPublisher(
                participant=FenceParticipant(
                    node_id=U64_MAX - count + i,
                    boot_incarnation=f"ffffffff-ffff-4fff-bfff-{i:012x}",
                ),
                process_term=U64_MAX,
            ),
            request_sequence=U64_MAX,
            fault_sequence=U64_MAX - count + i,
            active=True,
        )
        for i in range(1, count + 1)
    )


@LOCAL
def test_la_t79_headroom(make_store: Callable[[], ObjectStore]) -> None:
    base = record_at(1)
    top = replace(base.lease, seq=U64_MAX, renewal_sequence=U64_MAX, token=U64_MAX)
    for count in (129, MAX_RECOVERY_FAULT_SLOTS):
        record = replace(
            base, lease=top, recovery_fault_revision=U64_MAX, recovery_fault_slots=max_slots(count)
        )
        # LA §2.2: active faults leave 32 KiB of authority headroom.
        assert len(encode_record(record)) + 32_768 <= MAX_AUTHORITY_RECORD_BYTES
    too_many = replace(
        base, lease=top, recovery_fault_revision=U64_MAX, recovery_fault_slots=max_slots(517)
    )
    with pytest.raises(InvalidArgument, match="517 slots; maximum is 516"):
        encode_record(too_many)

    async def main() -> None:
        store = make_store()
        full = replace(
            record_at(600),
            recovery_fault_revision=516,
            recovery_fault_slots=tuple(
                AuthorityRecoveryFaultSlot(
                    publisher=publisher(node), request_sequence=1, fault_sequence=node, active=True
                )
                for node in range(1, 517)
            ),
        )
        await put_record(store, full)
        await set_pointer(store, 600)
        leader = authority(store, 1)
        with pytest.raises(InvalidArgument, match="maximum is 516"):
            await record_recovery_fault(leader, publisher(517), 1, deadline=deadline(leader))
        assert await record_seqs(store) == [600]

    asyncio.run(main())


async def staged(store: ObjectStore) -> tuple[Any, Any, RecoveryAnnouncement, Any]:
    leader = authority(store, 1)
    lease = acquired(await begin(leader))
    await record_recovery_fault(leader, publisher(5), 1, deadline=deadline(leader))
    frozen = round_of(lease.proof(), await recovery_fault_inventory(leader), owners=(5,))
    terminal = terminal_of(frozen)
    return leader, lease, terminal, await stage_recovery_release_terminal(leader, terminal)


@LOCAL
def test_la_t80_terminal_blob_revalidated(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = make_store()
        leader, lease, terminal, ref = await staged(store)
        key = terminal_path(ref)
        good = (await store.get(key)).body
        await store.delete(key)
        with pytest.raises(CorruptRecord, match="is missing"):
            await load_recovery_release_terminal(leader, ref)
        assert await stage_recovery_release_terminal(leader, terminal) == ref  # restored
        assert await load_recovery_release_terminal(leader, ref) == terminal
        await store.put(key, good + b" ", OVERWRITE)
        with pytest.raises(CorruptRecord, match=f"is {len(good) + 1} bytes, expected {len(good)}"):
            await load_recovery_release_terminal(leader, ref)
        forged = good.replace(b'"epoch":4}', b'"epoch":5}')  # same length, valid, other content
        assert forged != good and len(forged) == len(good)
        await store.put(key, forged, OVERWRITE)
        with pytest.raises(CorruptRecord, match="does not match its content-addressed reference"):
            await load_recovery_release_terminal(leader, ref)
        with pytest.raises(CorruptRecord):  # LA-11: never acted upon
            await record_recovery_release_commit(
                leader, lease.proof(), ref, deadline=deadline(leader)
            )
        assert await record_seqs(store) == [1, 2]
        # A different object already at a new terminal's content address: stage refuses it.
        other = terminal_of(terminal.round, epoch=9)
        await store.put(terminal_path(terminal_ref(other)), good, CREATE)
        with pytest.raises(CorruptRecord):
            await stage_recovery_release_terminal(leader, other)

    asyncio.run(main())


@LOCAL
def test_la_t81_admission_snapshot_retries_on_change(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        store = PausingStore(make_store())
        leader, lease, terminal, ref = await staged(store)
        assert (await recovery_admission_snapshot(leader)).committed_release is None
        await record_recovery_release_commit(leader, lease.proof(), ref, deadline=deadline(leader))
        before = await recovery_admission_snapshot(leader)
        assert await recovery_admission_is_current(leader, before, lease.proof())
        store.reset_log()
        leader.store.records.clear()  # cold: the walk's record reads show in the store log
        gate = store.pause_get(terminal_path(ref))
        async with asyncio.TaskGroup() as group:
            task = group.create_task(settle(recovery_admission_snapshot(leader)))
            await gate.wait_reached()
            await record_recovery_fault(leader, publisher(6), 1, deadline=deadline(leader))
            gate.release.set()
        snapshot = task.result()
        assert not isinstance(snapshot, Exception)
        assert snapshot.committed_release == terminal
        assert snapshot.fault_inventory == RecoveryFaultInventory(
            4, (RecoveryFault(reporter=6, sequence=4),)
        )
        assert snapshot.authority_sequence == 4 and snapshot.release_head == before.release_head
        assert store.count("get", terminal_path(ref)) == 2  # the first fetch was retried
        assert store.count("get", record_path(3)) >= 1  # the admission read through history
        assert not await recovery_admission_is_current(leader, snapshot, lease.proof())
        assert not await recovery_admission_is_current(leader, before, lease.proof())

    asyncio.run(main())


def bad_round(**changes: Any) -> RecoveryRound:
    round_ = round_of(PROOF, INVENTORY, owners=(5,))
    return replace(round_, **changes)


ROUND = "recovery round is not canonical"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"id": replace(bad_round().id, generation=0)}, "generation 0 and driver"),
        ({"id": replace(bad_round().id, driver=5)}, "leader node 1 is not the driver 5"),
        ({"id": replace(bad_round().id, nonce="x")}, "nonce 'x'"),
        (
            {"leader_proof": replace(PROOF, fencing_token=0)},
            "leader proof is not canonical",
        ),
        (
            {"assignment_fence": replace(bad_round().assignment_fence, participants=())},
            "assignment fence is not canonical",
        ),
        ({"fault_revision": 0}, "fault_revision is 0"),
        ({"faults": ()}, "it covers no fault"),
        (
            {"faults": (RecoveryFault(reporter=5, sequence=5),)},
            "fault of reporter 5 has sequence 5 outside 1..=4",
        ),
        (
            {
                "faults": (
                    RecoveryFault(reporter=6, sequence=2),
                    RecoveryFault(reporter=5, sequence=3),
                )
            },
            "faults are not strictly sorted by reporter",
        ),
        (
            {"evidence_participants": (FenceParticipant(node_id=6, boot_incarnation=A.boot),)},
            "evidence participant 6 reported no fault",
        ),
        (
            {"evidence_participants": (FenceParticipant(node_id=5, boot_incarnation=A.boot),)},
            "evidence participant 5 is an assignment owner",
        ),
    ],
)
def test_round_rules(changes: dict[str, Any], message: str) -> None:
    terminal_ref(terminal_of(bad_round()))  # the unchanged builder is valid
    terminal = terminal_of(bad_round(**changes))
    with pytest.raises(InvalidArgument, match=f"{ROUND}: {message}"):
        terminal_ref(terminal)


def test_round_driver_must_own_the_fence_with_its_boot() -> None:
    other_boot = replace(
        PROOF, owner=replace(PROOF.owner, boot_id=publisher(1, 9).participant.boot_incarnation)
    )
    with pytest.raises(InvalidArgument, match=f"{ROUND}: driver 1 boot .* is not an owner"):
        terminal_ref(terminal_of(round_of(other_boot, INVENTORY)))


def test_release_id_and_terminal_phase() -> None:
    round_ = bad_round()
    ref = terminal_ref(terminal_of(round_, epoch=4))
    pending = RecoveryAnnouncement(version=1, round=round_, phase=PhaseRelease(epoch=4))
    release = release_id_for(pending)
    assert release == ref.release  # the terminal's ref carries the pending announcement's id
    assert (release.protocol_version, release.generation, release.driver, release.epoch) == (
        1,
        1,
        1,
        4,
    )
    assert release.nonce == round_.id.nonce
    assert release_id_for(replace(pending, phase=PhaseRelease(epoch=5))) != release
    assert ref.sha256 != release.round_sha256 and len(ref.sha256) == 64
    assert ref.encoded_len == len(encode(terminal_of(round_, epoch=4)))
    with pytest.raises(InvalidArgument, match="must carry ReleaseCommitted"):
        terminal_ref(pending)
    with pytest.raises(InvalidArgument, match="derived from an announcement in Release"):
        release_id_for(replace(pending, phase=PhasePrepare()))
    huge = replace(
        round_, faults=tuple(RecoveryFault(reporter=n, sequence=1) for n in range(1, 9000))
    )
    with pytest.raises(InvalidArgument, match="largest terminal encoding is"):
        terminal_ref(terminal_of(replace(huge, fault_revision=1)))

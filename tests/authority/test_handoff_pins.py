"""The assignment handoff pin (RB §2.5, RB §2.6, RB §2.9; `lease/handoff_pins`), derived
from the durable decision chain and the cluster outcomes, and its enforcement: a cluster Commit
not fenced by the active pin's target is refused, the pinned checkpoint outlives outcome pruning,
and decisions without (or with a stray) checkpoint reference are refused on write and on read.

Every test runs on memory and file. Commits get real recovery capsules whose roster matches the
fence they are admitted under; fences always hold node 1 (the leader A, whose proof must be in
the fence of every outcome it admits) and node 2 (whose boot recovery replaces).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from laminar_cluster.authority.assignment_decisions import (
    DecisionCreated,
    assignment_drain_decision,
    assignment_recovery_decision,
    new_drain_decision,
    new_recovery_decision,
    record_assignment_drain_decision,
    record_assignment_recovery_decision,
)
from laminar_cluster.authority.cluster_outcomes import (
    cluster_outcome,
    cluster_outcome_with_recovery_capsule,
    highest_cluster_committed_outcome,
    prune_cluster_outcomes_before,
    record_cluster_outcome,
)
from laminar_cluster.authority.handoff_pins import (
    HandoffPin,
    assignment_handoff_checkpoint,
    assignment_handoff_pin,
    assignment_handoff_pin_on,
    rollback_fence,
)
from laminar_cluster.checkpoint.records import (
    CapsuleParticipant,
    CheckpointOutcome,
    CheckpointVerdict,
    RecordOutcomeResult,
    RecoveryCapsuleRef,
)
from laminar_cluster.codec import encode, sha256_digest32, sha256_hex
from laminar_cluster.errors import Contended, CorruptRecord, InvalidArgument, Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import (
    AssignmentDrainDecision,
    AssignmentDrainTransition,
    AssignmentRecoveryDecision,
    AssignmentSnapshotRef,
    AssignmentVerdict,
    ProcessLease,
    ProcessLeaseFence,
)
from laminar_cluster.store import OVERWRITE, ObjectStore
from tests.authority.assignment_support import FakeSnapshots, live_versions, replace
from tests.authority.assignment_support import prune as prune_decisions
from tests.authority.test_cluster_outcome_helpers import (
    created,
    deadline,
    elect,
    head,
    open_leader,
    unchanged,
)
from tests.checkpoint.test_capsule import make_capsule
from tests.lease.pausing_store import boot

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])
COMMIT, ABORT = AssignmentVerdict.COMMIT, AssignmentVerdict.ABORT
PIN = "assignment handoff pin"


def fence(version: int, *, node2_boot: int = 2, salt: int = 0) -> CheckpointAssignmentFence:
    """Nodes 1 (boot 1) and 2 (boot `node2_boot`), 8 vnodes; the digest names version and salt."""
    return CheckpointAssignmentFence(
        assignment_version=version,
        vnode_count=8,
        assignment_digest=sha256_digest32(b"assignment %d/%d" % (version, salt)),
        participants=(
            FenceParticipant(node_id=1, boot_incarnation=boot(1)),
            FenceParticipant(node_id=2, boot_incarnation=boot(node2_boot)),
        ),
    )


async def _outcome(
    leader: LeaderLeaseStore,
    proof: LeaderProof,
    epoch: int,
    under: CheckpointAssignmentFence,
    verdict: CheckpointVerdict,
) -> RecordOutcomeResult:
    ref = None
    if verdict is CheckpointVerdict.COMMIT:  # a capsule whose roster is exactly `under`'s
        decisions = leader.require_decisions()
        deployment_id = await decisions.load_or_create_deployment_id()
        participants = tuple(
            CapsuleParticipant(
                node_id=p.node_id,
                boot_incarnation=p.boot_incarnation,
                manifest_sha256=sha256_hex(b"manifest %d %d" % (p.node_id, epoch)),
                vnodes=(0, 1, 2, 3) if p.node_id == 1 else (4, 5, 6, 7),
            )
            for p in under.participants
        )
        capsule = make_capsule(
            deployment_id, epoch, assignment_fence=under, participants=participants
        )
        ref = await decisions.create_recovery_capsule(capsule)
    return await record_cluster_outcome(
        leader,
        proof,
        epoch=epoch,
        checkpoint_id=epoch,
        assignment_fence=under,
        verdict=verdict,
        recovery_capsule=ref,
        deadline=deadline(leader),
    )


async def commit(
    leader: LeaderLeaseStore, proof: LeaderProof, epoch: int, under: CheckpointAssignmentFence
) -> RecordOutcomeResult:
    return await _outcome(leader, proof, epoch, under, CheckpointVerdict.COMMIT)


async def abort(
    leader: LeaderLeaseStore, proof: LeaderProof, epoch: int, under: CheckpointAssignmentFence
) -> RecordOutcomeResult:
    return await _outcome(leader, proof, epoch, under, CheckpointVerdict.ABORT)


def ref_of(outcome: CheckpointOutcome) -> RecoveryCapsuleRef:
    assert outcome.recovery_capsule is not None
    return outcome.recovery_capsule


async def drain(
    leader: LeaderLeaseStore,
    proof: LeaderProof,
    predecessor: CheckpointAssignmentFence,
    target: CheckpointAssignmentFence,
    verdict: AssignmentVerdict,
    handoff: RecoveryCapsuleRef | None = None,
) -> AssignmentDrainDecision:
    """Record (Created) the drain decision predecessor -> target opened by `proof`."""
    transition = AssignmentDrainTransition(predecessor=predecessor, target=target, leader=proof)
    decision = new_drain_decision(transition, proof, verdict, handoff)
    result = await record_assignment_drain_decision(
        leader, proof, decision, deadline=deadline(leader)
    )
    assert result == DecisionCreated(decision)
    return decision


def node2_takeover(old_boot: int, new_boot: int) -> ProcessLeaseFence:
    """Node 2's process lease taken over from boot `old_boot` by boot `new_boot`."""
    return ProcessLeaseFence(
        predecessor=ProcessLease(node=2, owner=boot(old_boot), term=4, seq=10, expires_at_ms=0),
        successor=ProcessLease(node=2, owner=boot(new_boot), term=5, seq=11, expires_at_ms=0),
    )


async def recover(
    leader: LeaderLeaseStore,
    proof: LeaderProof,
    predecessor: CheckpointAssignmentFence,
    target: CheckpointAssignmentFence,
    checkpoint: RecoveryCapsuleRef | None,
) -> AssignmentRecoveryDecision:
    """Record (Created) a recovery predecessor -> target that replaces node 2's boot."""
    old_boot = predecessor.participants[1].boot_incarnation
    new_boot = target.participants[1].boot_incarnation
    version = target.assignment_version
    decision = new_recovery_decision(
        predecessor,
        target,
        AssignmentSnapshotRef(version=version, sha256=f"{version:02x}" * 32, encoded_len=100),
        [node2_takeover(int(old_boot[-12:]), int(new_boot[-12:]))],
        checkpoint,
        proof,
    )
    snapshots = FakeSnapshots(current=(predecessor, False))
    snapshots.stage(decision)
    result = await record_assignment_recovery_decision(
        leader, proof, decision, snapshots, deadline=deadline(leader)
    )
    assert result == DecisionCreated(decision)
    return decision


async def pin_of(leader: LeaderLeaseStore) -> HandoffPin | None:
    return await assignment_handoff_pin(leader)


async def no_check(_: CheckpointOutcome) -> None:
    return None


async def committed_drain(
    store: ObjectStore,
) -> tuple[LeaderLeaseStore, LeaderProof, CheckpointOutcome]:
    """A leader whose drain v1 -> v2 committed on the handoff checkpoint of epoch 1 (under v1):
    the pin is (fence(2), that checkpoint)."""
    leader = open_leader(store, 1)
    proof = await elect(leader)
    handoff = created(await commit(leader, proof, 1, fence(1)))
    await drain(leader, proof, fence(1), fence(2), COMMIT, ref_of(handoff))
    return leader, proof, handoff


@LOCAL
def test_commit_pin_on_target_consumed_by_a_commit_under_it(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        leader = open_leader(make_store(), 1)
        proof = await elect(leader)
        f1, f2 = fence(1), fence(2)
        assert await pin_of(leader) is None  # no decision, no pin
        handoff = created(await commit(leader, proof, 1, f1))
        await drain(leader, proof, f1, f2, COMMIT, ref_of(handoff))
        expected = HandoffPin(target=f2, checkpoint=ref_of(handoff))
        assert await pin_of(leader) == expected
        assert await assignment_handoff_checkpoint(leader, f2) == ref_of(handoff)
        assert await assignment_handoff_checkpoint(leader, f1) is None
        # A cold process derives the same pin from the same durable state.
        assert await pin_of(open_leader(make_store(), 2)) == expected
        # The pinned checkpoint reads back through the outcome reads, with its capsule.
        assert await cluster_outcome(leader, 1) == handoff
        found = await cluster_outcome_with_recovery_capsule(leader, 1)
        assert found is not None and found[0] == handoff and found[1] is not None
        assert found[1].assignment_fence == f1
        # While pinned: a Commit under the predecessor is refused, a retry of the already
        # durable handoff Commit is still Unchanged, and Aborts under any fence are admitted.
        with pytest.raises(Refused, match=PIN):
            await commit(leader, proof, 2, f1)
        assert unchanged(await commit(leader, proof, 1, f1)) == handoff
        created(await abort(leader, proof, 2, f1))
        assert await pin_of(leader) == expected
        # A Commit under the target after the pinned cut consumes the pin.
        consumed = created(await commit(leader, proof, 3, f2))
        assert await pin_of(leader) is None
        assert await assignment_handoff_checkpoint(leader, f2) is None
        assert await highest_cluster_committed_outcome(leader) == consumed
        created(await commit(leader, proof, 4, f1))  # no pin: no fence is refused

    asyncio.run(main())


@LOCAL
def test_la19_commit_under_another_fence_refused_while_pinned_then_accepted(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        leader, proof, _ = await committed_drain(make_store())
        f1, f2, other = fence(1), fence(2), fence(7, salt=9)
        for epoch, under in ((2, other), (3, f1)):
            with pytest.raises(Refused, match=PIN) as refused:
                await commit(leader, proof, epoch, under)
            assert "pin target (version 2, checkpoint epoch 1)" in str(refused.value)
        seq = (await head(leader)).lease.seq
        created(await commit(leader, proof, 4, f2))  # the pinned target itself is admitted
        assert (await head(leader)).lease.seq == seq + 1  # the refusals wrote nothing
        created(await commit(leader, proof, 5, other))  # accepted once the pin is consumed
        assert await pin_of(leader) is None

    asyncio.run(main())


@LOCAL
def test_abort_pins_predecessor_cut_to_rollback_fence(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        leader, proof, _ = await committed_drain(make_store())
        f2, f3 = fence(2), fence(3)
        created(await commit(leader, proof, 2, f2))  # consumes the Commit pin
        cut = created(await commit(leader, proof, 3, f2))  # the predecessor's latest cut
        assert await pin_of(leader) is None
        aborted = await drain(leader, proof, f2, f3, ABORT)
        rollback = rollback_fence(aborted)
        assert rollback == replace(f2, assignment_version=3)  # f2's map and roster, version 3
        assert await pin_of(leader) == HandoffPin(target=rollback, checkpoint=ref_of(cut))
        assert await assignment_handoff_checkpoint(leader, rollback) == ref_of(cut)
        assert await assignment_handoff_checkpoint(leader, f3) is None
        with pytest.raises(Refused, match=PIN):  # neither the old nor the abandoned target
            await commit(leader, proof, 4, f2)
        with pytest.raises(Refused, match=PIN):
            await commit(leader, proof, 4, f3)
        created(await commit(leader, proof, 4, rollback))  # the rollback's first cut
        assert await pin_of(leader) is None

    asyncio.run(main())


@LOCAL
def test_abort_retargets_an_unconsumed_commit_pin(make_store: Callable[[], ObjectStore]) -> None:
    """Upstream: "Abort must retarget the predecessor Commit pin to its rollback generation"."""

    async def main() -> None:
        leader, proof, handoff = await committed_drain(make_store())
        f1, f2, f3, f4 = fence(1), fence(2), fence(3), fence(4)
        # Nothing committed under f2 yet: its restore cut is the Commit pin it inherited.
        first = await drain(leader, proof, f2, f3, ABORT)
        rollback3 = rollback_fence(first)
        assert await pin_of(leader) == HandoffPin(target=rollback3, checkpoint=ref_of(handoff))
        # A second Abort on top of the rollback (still nothing committed) carries it on.
        second = await drain(leader, proof, rollback3, f4, ABORT)
        rollback4 = rollback_fence(second)
        assert rollback4 == replace(f2, assignment_version=4)
        assert await pin_of(leader) == HandoffPin(target=rollback4, checkpoint=ref_of(handoff))
        assert await pin_of(open_leader(make_store(), 2)) == HandoffPin(
            target=rollback4, checkpoint=ref_of(handoff)
        )
        for stale in (f1, f2, rollback3, f4):
            with pytest.raises(Refused, match=PIN):
                await commit(leader, proof, 2, stale)
        created(await commit(leader, proof, 2, rollback4))
        assert await pin_of(leader) is None

    asyncio.run(main())


@LOCAL
def test_abort_without_restore_cut(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        leader = open_leader(make_store(), 1)
        proof = await elect(leader)
        f1, f2, f5, f6 = fence(1), fence(2), fence(5), fence(6)
        created(await abort(leader, proof, 1, f1))
        aborted = await drain(leader, proof, f1, f2, ABORT)  # nothing committed, nothing below
        assert await pin_of(leader) is None
        # The rule is a function of durable state: the predecessor's first cut, even one
        # committed after the Abort (nothing refused it), is pinned to the rollback.
        late_cut = created(await commit(leader, proof, 2, f1))
        rollback = rollback_fence(aborted)
        assert await pin_of(leader) == HandoffPin(target=rollback, checkpoint=ref_of(late_cut))
        created(await commit(leader, proof, 3, rollback))
        assert await pin_of(leader) is None
        # A version gap below an Abort: no pin below can target its predecessor f5.
        await drain(leader, proof, f5, f6, ABORT)
        assert await pin_of(leader) is None
        created(await commit(leader, proof, 4, f2))

    asyncio.run(main())


@LOCAL
def test_abort_of_another_predecessor_inherits_no_pin(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        leader, proof, _ = await committed_drain(make_store())
        f1, other2, f3 = fence(1), fence(2, salt=5), fence(3)
        # Same version as the pinned target, another map: the Commit pin is not its cut.
        await drain(leader, proof, other2, f3, ABORT)
        assert await pin_of(leader) is None
        created(await commit(leader, proof, 2, f1))

    asyncio.run(main())


@LOCAL
def test_pin_derives_through_the_decision_floor_anchor(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        leader, proof, handoff = await committed_drain(make_store())
        f2, f3 = fence(2), fence(3)
        assert await prune_decisions(leader, proof, 3) == 3  # D2 is now the floor's anchor
        assert await live_versions(leader) == []
        assert await pin_of(leader) == HandoffPin(target=f2, checkpoint=ref_of(handoff))
        aborted = await drain(leader, proof, f2, f3, ABORT)  # inherits from the anchor
        expected = HandoffPin(target=rollback_fence(aborted), checkpoint=ref_of(handoff))
        assert await pin_of(leader) == expected
        with pytest.raises(Refused, match=PIN):
            await commit(leader, proof, 2, f2)

    asyncio.run(main())


@LOCAL
def test_la19_the_decision_floor_keeps_the_decision_a_pin_is_derived_from(
    make_store: Callable[[], ObjectStore],
) -> None:
    """A run of Aborts without a Commit (every rotation attempt failing) takes its pin from the
    last decision with a checkpoint: the floor stops above that decision, so the pin stays
    derivable and a recovery from the rollback head still has its cut (RB-14). Before this
    rule, pruning after the third Abort compacted the Commit away: no pin, no Commit under the
    head's fence, every recovery refused for good (the sim's long fault phase, seed 798)."""

    async def main() -> None:
        leader, proof, handoff = await committed_drain(make_store())  # D2: Commit, pin on e1
        first = await drain(leader, proof, fence(2), fence(3), ABORT)
        second = await drain(leader, proof, rollback_fence(first), fence(4), ABORT)
        third = await drain(leader, proof, rollback_fence(second), fence(5), ABORT)
        held = HandoffPin(target=rollback_fence(third), checkpoint=ref_of(handoff))
        assert await pin_of(leader) == held
        # `prune_after(5)` asks for floor 4 (keep the snapshot pair [4, 5]); it stops at 3,
        # where D2 is the anchor, and again on a second call.
        assert await prune_decisions(leader, proof, 4) == 3
        assert await prune_decisions(leader, proof, 4) == 3
        assert [version for _, version in await live_versions(leader)] == [3, 4, 5]
        assert await pin_of(leader) == held
        assert await pin_of(open_leader(make_store(), 2)) == held
        # The first Commit under the rollback consumes the pin; then the floor moves on.
        created(await commit(leader, proof, 2, rollback_fence(third)))
        assert await pin_of(leader) is None
        assert await prune_decisions(leader, proof, 4) == 4

    asyncio.run(main())


@LOCAL
def test_recovery_pin_and_propagation(make_store: Callable[[], ObjectStore]) -> None:
    async def main() -> None:
        leader = open_leader(make_store(), 1)
        proof = await elect(leader)
        f1 = fence(1)
        t2, t3 = fence(2, node2_boot=102), fence(3, node2_boot=202)
        head_cut = created(await commit(leader, proof, 1, f1))
        first = await recover(leader, proof, f1, t2, ref_of(head_cut))
        assert first.recovery_checkpoint == ref_of(head_cut)
        assert await assignment_recovery_decision(leader, 2) == first
        assert await pin_of(leader) == HandoffPin(target=t2, checkpoint=ref_of(head_cut))
        assert await assignment_handoff_checkpoint(leader, t2) == ref_of(head_cut)
        with pytest.raises(Refused, match=PIN):
            await commit(leader, proof, 2, f1)
        # D(n+1) while D(n)'s pin is unresolved: the same cut, pinned to target(n+1).
        await recover(leader, proof, t2, t3, ref_of(head_cut))
        assert await pin_of(leader) == HandoffPin(target=t3, checkpoint=ref_of(head_cut))
        assert await assignment_handoff_checkpoint(leader, t2) is None
        assert await assignment_handoff_checkpoint(leader, t3) == ref_of(head_cut)
        with pytest.raises(Refused, match=PIN):
            await commit(leader, proof, 2, t2)
        created(await abort(leader, proof, 2, t2))  # Aborts are never refused by the pin
        created(await commit(leader, proof, 3, t3))
        assert await pin_of(leader) is None

    asyncio.run(main())


@LOCAL
def test_la20_initial_state_recovery_pins_its_target(make_store: Callable[[], ObjectStore]) -> None:
    """LA-20: before any cluster checkpoint committed, a recovery names the initial state; its
    pin (target, None) refuses every Commit outside the target until one under it consumes it."""

    async def main() -> None:
        leader = open_leader(make_store(), 1)
        proof = await elect(leader)
        f1, t2 = fence(1), fence(2, node2_boot=102)
        created(await abort(leader, proof, 1, f1))  # an Abort commits nothing
        decision = await recover(leader, proof, f1, t2, None)
        assert decision.recovery_checkpoint is None
        assert await pin_of(leader) == HandoffPin(target=t2, checkpoint=None)
        assert await assignment_handoff_pin_on(leader, t2) == HandoffPin(target=t2, checkpoint=None)
        assert await assignment_handoff_pin_on(leader, f1) is None
        with pytest.raises(Refused, match=PIN):
            await commit(leader, proof, 2, f1)  # the predecessor can never commit now
        created(await abort(leader, proof, 2, f1))
        assert await highest_cluster_committed_outcome(leader) is None
        created(await commit(leader, proof, 3, t2))  # the target's first Commit consumes it
        assert await pin_of(leader) is None

    asyncio.run(main())


@LOCAL
def test_la20_initial_state_refused_once_a_checkpoint_committed(
    make_store: Callable[[], ObjectStore],
) -> None:
    """LA-20: the authority admits a recovery to the initial state only while its head has no
    Commit; a Commit that landed after the leader chose (a race) makes the record Contended."""

    async def main() -> None:
        leader = open_leader(make_store(), 1)
        proof = await elect(leader)
        f1, t2 = fence(1), fence(2, node2_boot=102)
        created(await commit(leader, proof, 1, f1))
        seq = (await head(leader)).lease.seq
        with pytest.raises(Contended, match="recovery to the initial state is refused"):
            await recover(leader, proof, f1, t2, None)
        assert (await head(leader)).lease.seq == seq  # nothing was written
        assert await assignment_recovery_decision(leader, 2) is None

    asyncio.run(main())


@LOCAL
def test_la19_pinned_checkpoint_outlives_outcome_pruning(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        leader = open_leader(make_store(), 1)
        proof = await elect(leader)
        f1, t2 = fence(1), fence(2, node2_boot=102)
        pinned = created(await commit(leader, proof, 1, f1))
        newer = created(await commit(leader, proof, 2, f1))  # a newer cut, not the pinned one
        await recover(leader, proof, f1, t2, ref_of(pinned))

        async def prune(before: int) -> int:
            return await prune_cluster_outcomes_before(
                leader, proof, before, no_check, deadline=deadline(leader)
            )

        with pytest.raises(Refused, match=PIN):
            await prune(2)  # would compact the pinned recovery checkpoint (epoch 1)
        assert await prune(1) == 1  # at the pinned epoch: it stays live
        assert await cluster_outcome(leader, 1) == pinned
        found = await cluster_outcome_with_recovery_capsule(leader, 1)
        assert found is not None and found[0] == pinned
        assert await highest_cluster_committed_outcome(leader) == newer
        created(await commit(leader, proof, 3, t2))  # consumes the pin
        assert await prune(3) == 3
        assert await cluster_outcome(leader, 1) is None  # compacted once unpinned

    asyncio.run(main())


@LOCAL
def test_decisions_with_missing_or_extra_checkpoint_refs_are_rejected(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = make_store()
        leader = open_leader(store, 1)
        proof = await elect(leader)
        f1, f2 = fence(1), fence(2)
        ref = ref_of(created(await commit(leader, proof, 1, f1)))
        transition = AssignmentDrainTransition(predecessor=f1, target=f2, leader=proof)
        # On write: the constructor, and the record path for a hand-built decision.
        with pytest.raises(InvalidArgument, match="a Commit requires a handoff checkpoint"):
            new_drain_decision(transition, proof, COMMIT)
        with pytest.raises(InvalidArgument, match="an Abort carries no handoff checkpoint"):
            new_drain_decision(transition, proof, ABORT, ref)
        with pytest.raises(InvalidArgument, match="handoff checkpoint: recovery capsule"):
            new_drain_decision(transition, proof, COMMIT, replace(ref, checkpoint_id=9))
        seq = (await head(leader)).lease.seq
        for verdict, handoff in ((COMMIT, None), (ABORT, ref)):
            forged = AssignmentDrainDecision(
                transition=transition,
                leader_proof=proof,
                verdict=verdict,
                handoff_checkpoint=handoff,
            )
            with pytest.raises(InvalidArgument, match="assignment drain decision is not canonical"):
                await record_assignment_drain_decision(
                    leader, proof, forged, deadline=deadline(leader)
                )
        with pytest.raises(InvalidArgument, match="recovery checkpoint: recovery capsule"):
            new_recovery_decision(
                f1,
                fence(2, node2_boot=102),
                AssignmentSnapshotRef(version=2, sha256="02" * 32, encoded_len=100),
                [node2_takeover(2, 102)],
                replace(ref, sha256="AB" * 32),
                proof,
            )
        assert (await head(leader)).lease.seq == seq  # nothing was written
        # On read: a durable Commit decision whose handoff was stripped is corrupt.
        good = await drain(leader, proof, f1, f2, COMMIT, ref)
        admitted = await head(leader)
        assert admitted.assignment_decision == good
        stripped = replace(admitted, assignment_decision=replace(good, handoff_checkpoint=None))
        await store.put(record_path(admitted.lease.seq), encode(stripped), OVERWRITE)
        cold = open_leader(make_store(), 2)
        with pytest.raises(CorruptRecord, match="a Commit requires a handoff checkpoint"):
            await assignment_drain_decision(cold, 2)
        with pytest.raises(CorruptRecord):
            await assignment_handoff_pin(cold)

    asyncio.run(main())

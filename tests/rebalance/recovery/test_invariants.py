"""Rebalance invariants of recovery (docs/protocols/rebalance.md): RB-13 (only removed processes
are fenced, before the decision), RB-14 (the cut is the latest portable Commit compatible with
the predecessor, or the initial state) and RB-20 (the predecessor's in-flight attempt can only
end as Abort). Real controllers, authority, snapshot store and BaseEngines on memory://, a
simulated clock."""

from __future__ import annotations

import msgspec
import pytest

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.authority.assignment_decisions import assignment_recovery_decision
from laminar_cluster.authority.cluster_outcome_reads import cluster_outcome
from laminar_cluster.authority.cluster_outcomes import record_cluster_outcome
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointVerdict,
    ClusterRecoveryCapsule,
    Conflict,
    RecoveryCapsuleRef,
)
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import LaminarError, Refused
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.membership.process_lease import read_node_record
from laminar_cluster.rebalance.engine.handoff_checkpoint import EMPTY_PIPELINE, capsule_participants
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.rebalance.rotation.planner import try_rebalance
from laminar_cluster.store import ObjectStore
from tests.rebalance.recovery_support import RecoveryCluster, run
from tests.rebalance.refusal_support import raises_because

replace = msgspec.structs.replace


async def attempt(
    rc: RecoveryCluster,
    fence: CheckpointAssignmentFence,
    *,
    portable: bool = True,
    commit: bool = False,
) -> RecoveryCapsuleRef:
    """Node 1 allocates a checkpoint ID and writes its capsule under `fence` (an attempt in
    flight), and with `commit` records its cluster Commit too."""
    authority = rc.proc(1).node.authority
    decisions = authority.require_decisions()
    checkpoint_id = await decisions.allocate_checkpoint_id_at_least(1, deadline=rc.deadline())
    v1 = await rc.cluster.snapshots.load_version(1)
    assert v1 is not None
    ref = await decisions.create_recovery_capsule(
        ClusterRecoveryCapsule(
            version=5,
            attempt=CheckpointAttempt.canonical(checkpoint_id),
            deployment_id=await decisions.load_or_create_deployment_id(),
            pipeline_identity=EMPTY_PIPELINE,
            assignment_fence=fence,
            participants=capsule_participants(fence, v1.owners),
            source_offsets={},
            portable=portable,
            predecessor=None,
        )
    )
    if commit:
        await record(rc, ref, fence, CheckpointVerdict.COMMIT)
    return ref


async def record(
    rc: RecoveryCluster,
    ref: RecoveryCapsuleRef,
    fence: CheckpointAssignmentFence,
    verdict: CheckpointVerdict,
) -> object:
    """Node 1 records `verdict` for the attempt of `ref` under `fence`; the authority's answer."""
    proc = rc.proc(1)
    proof = proc.controller.capture_leader_proof()
    assert proof is not None
    return await record_cluster_outcome(
        proc.node.authority,
        proof,
        epoch=ref.epoch,
        checkpoint_id=ref.checkpoint_id,
        assignment_fence=fence,
        verdict=verdict,
        recovery_capsule=ref if verdict is CheckpointVerdict.COMMIT else None,
        deadline=rc.deadline(),
    )


def test_rb13_recovery_fences_only_removed_processes_first() -> None:
    """Owners [3, 9], 5 and 7 joining, 9 lost, 5 leading. While 9 still renews its lease,
    fencing it fails and nothing is decided or taken over; once it is dead, the decision removes
    exactly node 9's boot, whose lease was taken over first, and the healthy predecessor 3
    keeps its vnodes and its lease."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (3, 5, 7, 9), (3, 9), leader=3)
        await rc.checkpoint(3)
        await rc.cluster.elect(5)
        leader, three, nine = rc.proc(5), rc.proc(3).me, rc.proc(9).me

        async def takeovers() -> dict[int, tuple[object, ...]]:
            """Each node's recorded lease takeovers."""
            found = {}
            for node in (3, 5, 7, 9):
                stored = await read_node_record(store, node)
                assert stored is not None
                found[node] = stored.record.takeovers
            return found

        untouched = await takeovers()
        leader.controller.note_unresponsive(9)  # quarantined, but still renewing
        with raises_because(Refused, Refusal.PROCESS_RENEWED):
            await try_rebalance(leader.ctx, [3, 5, 7])
        assert await assignment_recovery_decision(leader.node.authority, 2) is None
        assert await takeovers() == untouched

        await rc.die(9)
        await rc.cluster.elect(5)
        assert await try_rebalance(leader.ctx, [3, 5, 7]) == 2
        decision = await assignment_recovery_decision(leader.node.authority, 2)
        assert decision is not None
        (removed,) = decision.removed_process_fences
        assert (removed.predecessor.node, removed.predecessor.owner) == (9, nine.boot_incarnation)
        after = await takeovers()
        assert removed in after[9]  # the lease takeover the decision carries
        assert {n: after[n] for n in (3, 5, 7)} == {n: untouched[n] for n in (3, 5, 7)}
        v2 = await rc.head()
        assert three in v2.participants and 3 in v2.owners

    run(body)


async def recover(rc: RecoveryCluster) -> int | LaminarError:
    """Node 2 leaves; node 1's next attempt (a recovery): its version, or the error it raised."""
    await rc.leave(2)
    try:
        return await try_rebalance(rc.proc(1).ctx, [1, 2]) or 0
    except LaminarError as error:
        return error


@pytest.mark.parametrize(
    "latest", ["portable", "not portable", "under another generation", "nothing committed"]
)
def test_rb14_recovery_cut_is_the_latest_portable_commit(latest: str) -> None:
    """After a first Commit e1 under v1, a second one e2 (`latest`): recovery restores e2 when
    it is portable and fenced by v1, and otherwise refuses and decides nothing rather than
    fall back to e1; with no Commit at all it restores the initial state."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        v1 = snapshot_fence(await rc.head())
        e2: RecoveryCapsuleRef | None = None
        if latest != "nothing committed":
            await rc.checkpoint(1)
            if latest == "portable":
                e2 = await rc.checkpoint(1)
            elif latest == "not portable":
                e2 = await attempt(rc, v1, portable=False, commit=True)
            else:
                e2 = await attempt(rc, replace(v1, assignment_version=7), commit=True)

        result = await recover(rc)
        decision = await assignment_recovery_decision(rc.proc(1).node.authority, 2)
        if latest in ("portable", "nothing committed"):
            assert result == 2 and decision is not None
            assert decision.recovery_checkpoint == e2
            return
        expected = (
            Refusal.CUT_NOT_PORTABLE
            if latest == "not portable"
            else (Refusal.NO_COMMITTED_CHECKPOINT)
        )
        assert isinstance(result, Refused) and result.reason is expected, result
        assert decision is None
        assert (await rc.head()).assignment_version == 1

    run(body)


def test_rb20_predecessor_attempt_ends_as_abort() -> None:
    """Attempt N+1 under v1 has written its capsule when recovery to v2 is decided: the leader
    records its exact Abort under v1, its Commit gets that Abort back, and no other attempt
    under v1 can commit any more."""

    async def body(clock: SimulatedClock, store: ObjectStore) -> None:
        rc = await RecoveryCluster.start(clock, store, (1, 2), (1, 2), leader=1)
        v1 = snapshot_fence(await rc.head())
        await rc.checkpoint(1)
        in_flight = await attempt(rc, v1)
        assert await recover(rc) == 2
        authority = rc.proc(1).node.authority
        aborted = await cluster_outcome(authority, in_flight.epoch)
        assert aborted is not None and aborted.verdict is CheckpointVerdict.ABORT
        assert aborted.assignment_fence == v1 and aborted.recovery_capsule is None

        late = await record(rc, in_flight, v1, CheckpointVerdict.COMMIT)
        assert isinstance(late, Conflict) and late.winner == aborted
        another = await attempt(rc, v1)
        with pytest.raises(Refused):  # the recovery pin refuses a Commit outside v2
            await record(rc, another, v1, CheckpointVerdict.COMMIT)
        assert await cluster_outcome(authority, another.epoch) is None

    run(body)

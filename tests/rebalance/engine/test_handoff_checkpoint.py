"""`LeaderCheckpointer` behind `BaseEngine.checkpoint_until` (spec_rebalance §4.7): a real
leader authority (`LeaderLeaseStore` on memory://, a term begun with `begin_new_term`) records a
cluster Commit whose fence is the installed fence and whose recovery capsule loads and covers the
fence, each participant with its vnodes. Expected failures come back as success=False.

Node 1 (boot UUID(int=11)) is the local process and the leader; V1 gives it vnodes 0 and 1.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.authority.cluster_outcomes import cluster_outcome, record_cluster_outcome
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    CheckpointVerdict,
    ClusterRecoveryCapsule,
)
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import DeadlineExceeded, Fenced, InvalidArgument, Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, LeaderOwner, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.outcomes import Acquired
from laminar_cluster.lease.records import LeaderLeaseOwner
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.engine.handoff_checkpoint import (
    EMPTY_MANIFEST_SHA256,
    LeaderCheckpointer,
)
from laminar_cluster.rebalance.interfaces import CheckpointResult
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.store import open_store
from tests.assignment.snapshot_support import draining, participant, snapshot

TTL_S = 5.0
ME = participant(1)
V1 = snapshot(1, [1, 1, 2, 2])
LEADER = LeaderLeaseOwner(node=1, boot=ME.boot_incarnation, process_term=1)


@dataclass
class Cluster:
    clock: SimulatedClock
    decisions: DecisionStore
    authority: LeaderLeaseStore
    proof: LeaderProof
    engine: BaseEngine
    checkpointer: LeaderCheckpointer

    def deadline(self) -> float:
        return self.clock.monotonic() + 30.0

    async def activate(self, current: AssignmentSnapshot = V1, *, drain: bool = False) -> None:
        """Adopt `current` and install its fence (with a drain transition out of it)."""
        await self.engine.adopt_assignment(current, deadline=self.deadline())
        transition = draining(current, [1, 2, 2, 2]).drain_transition if drain else None
        activation = await self.engine.activate_authority(
            snapshot_fence(current),
            transition,
            self.engine.authority_revision(),
            deadline=self.deadline(),
        )
        assert activation.installed

    async def committed(self, result: CheckpointResult) -> CheckpointOutcome:
        assert result.success, result.error
        outcome = await cluster_outcome(self.authority, result.epoch)
        assert outcome is not None
        return outcome

    async def capsule(self, outcome: CheckpointOutcome) -> ClusterRecoveryCapsule:
        assert outcome.recovery_capsule is not None
        return await self.decisions.load_recovery_capsule(outcome.recovery_capsule)


def run(body: Callable[[Cluster], Awaitable[None]], *, leader: bool = True) -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=11)
        store = open_store("memory://")
        decisions = DecisionStore.shared(store, clock=clock)
        authority = LeaderLeaseStore(store, clock=clock, ttl_s=TTL_S, decisions=decisions)
        began = await authority.begin_new_term(LEADER, deadline=clock.monotonic() + 30.0)
        assert isinstance(began, Acquired)
        proof = began.lease.proof()
        holder: list[BaseEngine] = []
        checkpointer = LeaderCheckpointer(
            decisions,
            authority,
            proof=lambda: proof if leader else None,
            owners_of=lambda fence: holder[0].registry().owners,
        )
        engine = BaseEngine(clock=clock, participant=ME, checkpointer=checkpointer)
        holder.append(engine)
        await body(Cluster(clock, decisions, authority, proof, engine, checkpointer))

    asyncio.run(main())


def test_handoff_checkpoint_commits_under_the_installed_fence() -> None:
    async def body(cluster: Cluster) -> None:
        await cluster.activate()
        result = await cluster.engine.checkpoint_until(deadline=cluster.deadline())
        assert result.epoch == result.checkpoint_id and result.epoch >= 1
        outcome = await cluster.committed(result)
        assert outcome.verdict is CheckpointVerdict.COMMIT
        assert outcome.assignment_fence == cluster.engine.installed_fence() == snapshot_fence(V1)
        assert outcome.leader_proof == cluster.proof
        await cluster.decisions.validate_recovery_capsule_for_outcome(outcome)
        capsule = await cluster.capsule(outcome)
        assert capsule.assignment_fence == snapshot_fence(V1) and capsule.portable
        assert [(p.node_id, p.vnodes) for p in capsule.participants] == [(1, (0, 1)), (2, (2, 3))]
        assert {p.manifest_sha256 for p in capsule.participants} == {EMPTY_MANIFEST_SHA256}
        assert capsule.predecessor is None

    run(body)


def test_handoff_checkpoint_binds_the_drain_predecessor() -> None:
    async def body(cluster: Cluster) -> None:
        await cluster.activate(drain=True)
        transition = cluster.engine.installed_drain_transition()
        assert transition is not None
        result = await cluster.engine.checkpoint_until(deadline=cluster.deadline())
        outcome = await cluster.committed(result)
        # §4.7 step 3: the Commit binds the predecessor cut.
        assert outcome.assignment_fence == transition.predecessor

    run(body)


def test_successive_checkpoints_advance_and_chain_their_capsules() -> None:
    async def body(cluster: Cluster) -> None:
        await cluster.activate()
        first = await cluster.committed(
            await cluster.engine.checkpoint_until(deadline=cluster.deadline())
        )
        second = await cluster.committed(
            await cluster.engine.checkpoint_until(deadline=cluster.deadline())
        )
        assert second.epoch > first.epoch
        assert (await cluster.capsule(second)).predecessor == first.recovery_capsule

    run(body)


def test_checkpoint_ids_advance_past_outcomes_already_in_the_authority() -> None:
    async def body(cluster: Cluster) -> None:
        await cluster.activate()
        await record_cluster_outcome(
            cluster.authority,
            cluster.proof,
            epoch=40,
            checkpoint_id=40,
            assignment_fence=snapshot_fence(V1),
            verdict=CheckpointVerdict.ABORT,
            recovery_capsule=None,
            deadline=cluster.deadline(),
        )
        result = await cluster.engine.checkpoint_until(deadline=cluster.deadline())
        assert (await cluster.committed(result)).epoch > 40

    run(body)


def test_checkpoint_without_a_leader_proof_fails() -> None:
    async def body(cluster: Cluster) -> None:
        await cluster.activate()
        result = await cluster.engine.checkpoint_until(deadline=cluster.deadline())
        assert not result.success and isinstance(result.error, Fenced)

    run(body, leader=False)


def test_checkpoint_with_a_stale_proof_fails_and_records_nothing() -> None:
    async def body(cluster: Cluster) -> None:
        await cluster.activate()
        stale = LeaderProof(
            owner=cluster.proof.owner, fencing_token=cluster.proof.fencing_token + 7
        )
        checkpointer = LeaderCheckpointer(
            cluster.decisions,
            cluster.authority,
            proof=lambda: stale,
            owners_of=lambda fence: V1.owners,
        )
        result = await checkpointer(snapshot_fence(V1), None, deadline=cluster.deadline())
        assert not result.success and isinstance(result.error, Fenced)
        assert await cluster_outcome(cluster.authority, 1) is None

    run(body)


def test_checkpoint_by_a_foreign_proof_fails() -> None:
    async def body(cluster: Cluster) -> None:
        outsider = LeaderProof(
            owner=LeaderOwner(node_id=9, boot_id=str(uuid.UUID(int=99)), process_term=1),
            fencing_token=cluster.proof.fencing_token,
        )
        checkpointer = LeaderCheckpointer(
            cluster.decisions,
            cluster.authority,
            proof=lambda: outsider,
            owners_of=lambda fence: V1.owners,
        )
        result = await checkpointer(snapshot_fence(V1), None, deadline=cluster.deadline())
        assert not result.success and isinstance(result.error, Refused)
        assert result.error.reason is Refusal.LEADER_NOT_A_PARTICIPANT
        assert await cluster_outcome(cluster.authority, 1) is None

    run(body)


def test_checkpoint_under_a_fence_without_the_leader_fails() -> None:
    async def body(cluster: Cluster) -> None:
        # The authority admits a cluster outcome only from a leader inside its fence, so a
        # leader that is only a drain target cannot take the handoff checkpoint itself.
        others = snapshot(1, [2, 2, 3, 3])
        checkpointer = LeaderCheckpointer(
            cluster.decisions,
            cluster.authority,
            proof=lambda: cluster.proof,
            owners_of=lambda fence: others.owners,
        )
        result = await checkpointer(snapshot_fence(others), None, deadline=cluster.deadline())
        assert not result.success and isinstance(result.error, Refused)
        assert result.error.reason is Refusal.LEADER_NOT_A_PARTICIPANT
        assert await cluster_outcome(cluster.authority, 1) is None

    run(body)


def test_checkpoint_needs_the_owner_map_of_the_fence() -> None:
    async def body(cluster: Cluster) -> None:
        checkpointer = LeaderCheckpointer(
            cluster.decisions,
            cluster.authority,
            proof=lambda: cluster.proof,
            owners_of=lambda fence: (1, 2, 1, 2),
        )
        result = await checkpointer(snapshot_fence(V1), None, deadline=cluster.deadline())
        assert not result.success and isinstance(result.error, Refused)
        assert result.error.reason is Refusal.OWNERS_UNKNOWN

    run(body)


def test_checkpoint_refuses_a_transition_not_starting_at_the_fence() -> None:
    async def body(cluster: Cluster) -> None:
        v2 = snapshot(2, [1, 1, 1, 2])
        foreign = draining(v2, [1, 2, 2, 2]).drain_transition
        result = await cluster.checkpointer(
            snapshot_fence(V1), foreign, deadline=cluster.deadline()
        )
        assert not result.success and isinstance(result.error, InvalidArgument)

    run(body)


def test_checkpoint_past_its_deadline_fails_without_raising() -> None:
    async def body(cluster: Cluster) -> None:
        fence: CheckpointAssignmentFence = snapshot_fence(V1)
        result = await cluster.checkpointer(fence, None, deadline=cluster.clock.monotonic())
        assert not result.success and isinstance(result.error, DeadlineExceeded)
        assert await cluster_outcome(cluster.authority, 1) is None

    run(body)

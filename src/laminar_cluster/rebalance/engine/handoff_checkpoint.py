"""The pre-rotation (handoff) checkpoint of a process without a data plane (RB §4.7).

`Checkpointer` is what `BaseEngine.checkpoint_until` delegates to: one complete cluster
checkpoint under the installed fence (and drain transition), decided in the leader authority.
`LeaderCheckpointer` is the reference one for the control plane's tests. It has no operator
state to capture, so every participant's manifest is the SHA-256 of no bytes; what it does make
real is everything the control plane verifies afterwards:

1. a fresh checkpoint ID above every outcome the authority holds (outcomes strictly increase);
2. a `ClusterRecoveryCapsule` covering the fence exactly, each participant with the vnodes the
   owner map gives it, `portable=True`, chained to the previous committed capsule;
3. a cluster Commit outcome recorded under the fence with the leader proof
   (`authority.cluster_outcomes.record_cluster_outcome`), which the rotation then reads back and
   checks against `transition.predecessor` (RB §4.7 steps 2-3).

Expected failures never raise: they come back as `CheckpointResult(success=False, error=...)`,
the deadline passing included, with the error of the kind that says what to do next: no live
leader proof is Fenced (and a Fenced from the authority keeps its type), a transition that does
not start at the fence is InvalidArgument, a leader outside the fence or an unknown owner map is
Refused (LEADER_NOT_A_PARTICIPANT, OWNERS_UNKNOWN), an epoch another writer decided is
Contended. Cancellation propagates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Protocol

from laminar_cluster.assignment.digest import fence_matches_owner_map
from laminar_cluster.authority.cluster_outcomes import (
    highest_cluster_committed_outcome,
    highest_cluster_terminal_outcome,
    record_cluster_outcome,
)
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.limits import PIPELINE_IDENTITY_VERSION
from laminar_cluster.checkpoint.records import (
    CapsuleParticipant,
    CheckpointAttempt,
    CheckpointVerdict,
    ClusterRecoveryCapsule,
    Conflict,
    PipelineIdentity,
    RecoveryCapsuleRef,
)
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec import sha256_hex
from laminar_cluster.errors import (
    Contended,
    Fenced,
    InvalidArgument,
    LaminarError,
    Refused,
    restated,
)
from laminar_cluster.fencing import CheckpointAssignmentFence, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.interfaces import CheckpointResult
from laminar_cluster.rebalance.refusals import Refusal

EMPTY_MANIFEST_SHA256: Final = sha256_hex(b"")
EMPTY_PIPELINE: Final = PipelineIdentity(
    canonical_version=PIPELINE_IDENTITY_VERSION, sha256=EMPTY_MANIFEST_SHA256
)

# The owner map a fence certifies (the fence carries only its digest); None when unknown.
OwnersOf = Callable[[CheckpointAssignmentFence], Sequence[int] | None]


class Checkpointer(Protocol):
    """One complete cluster checkpoint under `fence` (and `transition`), decided in the leader
    authority (RB §4.7). Returns success=False with the error for every expected failure."""

    async def __call__(
        self,
        fence: CheckpointAssignmentFence,
        transition: AssignmentDrainTransition | None,
        *,
        deadline: float,
    ) -> CheckpointResult: ...


class LeaderCheckpointer:
    """Commits an empty-state cluster checkpoint under the fence, as the leader (RB §4.7).

    `proof()` is the current leader proof (None when this process is not the leader);
    `owners_of(fence)` the owner map the fence certifies, e.g. the engine's registry owners.
    """

    def __init__(
        self,
        decisions: DecisionStore,
        authority: LeaderLeaseStore,
        proof: Callable[[], LeaderProof | None],
        owners_of: OwnersOf,
        *,
        pipeline_identity: PipelineIdentity = EMPTY_PIPELINE,
        source_offsets: dict[str, int] | None = None,
    ) -> None:
        self.decisions = decisions
        self.authority = authority
        self.proof = proof
        self.owners_of = owners_of
        self.pipeline_identity = pipeline_identity
        self.source_offsets = dict(source_offsets or {})

    async def __call__(
        self,
        fence: CheckpointAssignmentFence,
        transition: AssignmentDrainTransition | None,
        *,
        deadline: float,
    ) -> CheckpointResult:
        try:
            async with within_deadline(self.authority.clock, deadline, "handoff checkpoint"):
                return await self._checkpoint(fence, transition, deadline=deadline)
        except LaminarError as error:
            return CheckpointResult(
                success=False, error=restated(error, f"handoff checkpoint failed: {error}")
            )

    async def _checkpoint(
        self,
        fence: CheckpointAssignmentFence,
        transition: AssignmentDrainTransition | None,
        *,
        deadline: float,
    ) -> CheckpointResult:
        proof, owners = self.proof(), self.owners_of(fence)
        refusal = checkpoint_refusal(fence, transition, proof, owners)
        if refusal is not None:
            return _failed(refusal)
        assert proof is not None and owners is not None  # refused otherwise
        checkpoint_id = await self._allocate(deadline=deadline)
        ref = await self._create_capsule(fence, owners, checkpoint_id)
        recorded = await record_cluster_outcome(
            self.authority,
            proof,
            epoch=checkpoint_id,
            checkpoint_id=checkpoint_id,
            assignment_fence=fence,
            verdict=CheckpointVerdict.COMMIT,
            recovery_capsule=ref,
            deadline=deadline,
        )
        if isinstance(recorded, Conflict):
            return _failed(
                Contended(
                    f"epoch {checkpoint_id} was already decided as "
                    f"{recorded.winner.verdict.value} under fence "
                    f"v{_version(recorded.winner.assignment_fence)}"
                )
            )
        return CheckpointResult(success=True, epoch=checkpoint_id, checkpoint_id=checkpoint_id)

    async def _allocate(self, *, deadline: float) -> int:
        """A never-used ID above every outcome in the authority (cluster outcomes must advance)."""
        latest = await highest_cluster_terminal_outcome(self.authority)
        minimum = 1 if latest is None else latest.checkpoint_id + 1
        return await self.decisions.allocate_checkpoint_id_at_least(minimum, deadline=deadline)

    async def _create_capsule(
        self, fence: CheckpointAssignmentFence, owners: Sequence[int], checkpoint_id: int
    ) -> RecoveryCapsuleRef:
        previous = await highest_cluster_committed_outcome(self.authority)
        capsule = ClusterRecoveryCapsule(
            version=5,
            attempt=CheckpointAttempt.canonical(checkpoint_id),
            deployment_id=await self.decisions.load_or_create_deployment_id(),
            pipeline_identity=self.pipeline_identity,
            assignment_fence=fence,
            participants=capsule_participants(fence, owners),
            source_offsets=dict(self.source_offsets),
            portable=True,
            predecessor=None if previous is None else previous.recovery_capsule,
        )
        return await self.decisions.create_recovery_capsule(capsule)


def capsule_participants(
    fence: CheckpointAssignmentFence, owners: Sequence[int]
) -> tuple[CapsuleParticipant, ...]:
    """Every fence participant, in fence order, with the vnodes `owners` gives it."""
    return tuple(
        CapsuleParticipant(
            node_id=participant.node_id,
            boot_incarnation=participant.boot_incarnation,
            manifest_sha256=EMPTY_MANIFEST_SHA256,
            vnodes=tuple(v for v, owner in enumerate(owners) if owner == participant.node_id),
        )
        for participant in fence.participants
    )


def _failed(error: LaminarError) -> CheckpointResult:
    """`error`, its message prefixed, as a failed result."""
    return CheckpointResult(
        success=False, error=restated(error, f"handoff checkpoint failed: {error}")
    )


def _version(fence: CheckpointAssignmentFence | None) -> int:
    return 0 if fence is None else fence.assignment_version


def checkpoint_refusal(
    fence: CheckpointAssignmentFence,
    transition: AssignmentDrainTransition | None,
    proof: LeaderProof | None,
    owners: Sequence[int] | None,
) -> LaminarError | None:
    """Why this process may not take a checkpoint under `fence` now, or None: no leader proof,
    a drain transition that does not start at the fence, a leader outside the fence, or no
    owner map matching the fence (also the distributed checkpoint's step L1)."""
    if proof is None:
        return Fenced("no live leader proof: this process is not the leader")
    if transition is not None and transition.predecessor != fence:
        return InvalidArgument(
            f"drain transition {transition.predecessor.assignment_version}->"
            f"{transition.target.assignment_version} does not start at the installed fence "
            f"v{fence.assignment_version}"
        )
    leader = proof.owner
    if fence.participant_incarnation(leader.node_id) != leader.boot_id:
        # The authority admits a cluster outcome only from a leader inside its fence.
        return Refused(
            f"leader node {leader.node_id} is not a participant of fence "
            f"v{fence.assignment_version}",
            reason=Refusal.LEADER_NOT_A_PARTICIPANT,
        )
    if owners is None or not fence_matches_owner_map(fence, owners):
        return Refused(
            f"no owner map matching fence v{fence.assignment_version} is known locally",
            reason=Refusal.OWNERS_UNKNOWN,
        )
    return None

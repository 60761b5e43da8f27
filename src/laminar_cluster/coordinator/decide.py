"""The leader's pure decision of step L6 (docs/protocols/distributed-checkpoint.md, DC-2): the
recovery capsule a Commit records. No I/O: `leader.ClusterCheckpointer` does the reads and writes
around it. (Step L1's checks are `rebalance.engine.handoff_checkpoint.checkpoint_refusal`, shared
with the handoff checkpointer.)
"""

from __future__ import annotations

from laminar_cluster.checkpoint.records import (
    CapsuleParticipant,
    CheckpointOutcome,
    ClusterRecoveryCapsule,
    PipelineIdentity,
)
from laminar_cluster.coordinator.collect import Sealed, union_offsets
from laminar_cluster.coordinator.records import CheckpointPrepare


def capsule_of(
    prepare: CheckpointPrepare,
    sealed: dict[int, Sealed],
    previous: CheckpointOutcome | None,
    deployment_id: str,
    pipeline_identity: PipelineIdentity,
) -> ClusterRecoveryCapsule:
    """L6, DC-2: every participant in fence order with the SHA-256 of exactly its manifest and
    its vnodes, the union of the slices' source offsets (CorruptRecord if one partition is cut
    at two offsets), portable, chained to the previous committed capsule."""
    ordered = [sealed[p.node_id] for p in prepare.fence.participants]
    return ClusterRecoveryCapsule(
        version=5,
        attempt=prepare.attempt,
        deployment_id=deployment_id,
        pipeline_identity=pipeline_identity,
        assignment_fence=prepare.fence,
        participants=tuple(
            CapsuleParticipant(
                node_id=s.participant.node_id,
                boot_incarnation=s.participant.boot_incarnation,
                manifest_sha256=s.manifest_sha256,
                vnodes=s.vnodes,
            )
            for s in ordered
        ),
        source_offsets=union_offsets(
            [s.offsets for s in ordered], what=f"checkpoint {prepare.attempt.epoch}"
        ),
        portable=True,
        predecessor=None if previous is None else previous.recovery_capsule,
    )

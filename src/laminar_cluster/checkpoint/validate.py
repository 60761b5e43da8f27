"""Validation rules of every checkpoint record (CD §3), run on encode and
decode.

Each rule raises `codec.shape.ShapeViolation` with the spec's message substring; `reading` and
`writing` there turn it into `CorruptRecord` or `InvalidArgument`.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from typing import Final

from laminar_cluster.checkpoint.limits import (
    CAPSULE_GC_CURSOR_VERSION,
    MAX_RECOVERY_CAPSULE_BYTES,
    MAX_WITNESS_SINKS,
    PIPELINE_IDENTITY_VERSION,
)
from laminar_cluster.checkpoint.paths import CAPSULES_PREFIX
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointScope,
    CheckpointSinkOpenWitness,
    CheckpointSinkOpenWitnessSlot,
    ClusterRecoveryCapsule,
    DeploymentIdentity,
    OutcomeGcFloor,
    PipelineIdentity,
    RecoveryCapsuleGcCursor,
    RecoveryCapsuleRef,
    WitnessClosed,
)
from laminar_cluster.codec import is_sha256_hex
from laminar_cluster.codec.shape import (
    ShapeViolation,
    canonical_uuid,
)
from laminar_cluster.fencing import (
    fence_is_canonical,
    proof_is_canonical,
)

_HEX64: Final = re.compile(r"[0-9a-f]{64}")


def validate_identity(identity: DeploymentIdentity) -> None:
    canonical_uuid(identity.id, "deployment identity id")
    canonical_uuid(identity.allocation_id, "deployment identity allocation_id")


def validate_outcome_shape(outcome: CheckpointOutcome, path_epoch: int) -> None:
    """CD §3.3, in the spec's order."""
    if outcome.epoch == 0 or outcome.epoch != path_epoch:
        raise ShapeViolation(
            f"outcome path epoch {path_epoch} does not match non-zero payload epoch {outcome.epoch}"
        )
    if outcome.checkpoint_id == 0:
        raise ShapeViolation(f"outcome epoch {outcome.epoch} has checkpoint ID 0")
    if outcome.epoch != outcome.checkpoint_id:
        raise ShapeViolation(
            f"non-canonical checkpoint ID {outcome.checkpoint_id}; runtime outcomes require "
            "epoch == checkpoint ID"
        )
    canonical_uuid(outcome.deployment_id, "outcome deployment id")
    _validate_outcome_authority(outcome)
    _validate_outcome_capsule(outcome)


def _validate_outcome_authority(outcome: CheckpointOutcome) -> None:
    fence, proof = outcome.assignment_fence, outcome.leader_proof
    if outcome.scope is CheckpointScope.LOCAL:
        if fence is not None or proof is not None:
            raise ShapeViolation(
                f"local outcome epoch {outcome.epoch} cannot carry an assignment fence or "
                "leader proof"
            )
        return
    if fence is None or proof is None:
        raise ShapeViolation(
            f"cluster outcome epoch {outcome.epoch} requires an assignment fence and leader proof"
        )
    if not fence_is_canonical(fence) or not proof_is_canonical(proof):
        raise ShapeViolation(
            f"cluster outcome epoch {outcome.epoch} has a non-canonical assignment fence or "
            "leader proof"
        )
    owner = proof.owner
    if fence.participant_incarnation(owner.node_id) != owner.boot_id:
        raise ShapeViolation(
            f"leader node {owner.node_id} boot {owner.boot_id} is absent from the assignment fence"
        )


def _validate_outcome_capsule(outcome: CheckpointOutcome) -> None:
    capsule = outcome.recovery_capsule
    if outcome.scope is CheckpointScope.LOCAL:
        if capsule is not None:
            raise ShapeViolation(
                f"local outcome epoch {outcome.epoch} cannot carry a recovery capsule"
            )
        return
    if not outcome.is_commit():
        if capsule is not None:
            raise ShapeViolation(
                f"abort outcome epoch {outcome.epoch} cannot carry a recovery capsule"
            )
        return
    if capsule is None:
        raise ShapeViolation(f"cluster commit epoch {outcome.epoch} requires a recovery capsule")
    try:
        validate_capsule_ref(capsule)
    except ShapeViolation as violation:
        raise ShapeViolation(f"invalid recovery capsule reference: {violation}") from None


def validate_capsule_ref(ref: RecoveryCapsuleRef) -> None:
    attempt = CheckpointAttempt(epoch=ref.epoch, checkpoint_id=ref.checkpoint_id)
    if not attempt.is_canonical():
        raise ShapeViolation(
            f"recovery capsule reference epoch {ref.epoch} checkpoint {ref.checkpoint_id} "
            "is not a canonical attempt"
        )
    if not _HEX64.fullmatch(ref.sha256):
        raise ShapeViolation(f"recovery capsule digest {ref.sha256[:80]!r} is not 64 lowercase hex")
    if not 1 <= ref.len <= MAX_RECOVERY_CAPSULE_BYTES:
        raise ShapeViolation(
            f"recovery capsule length {ref.len} is outside 1..={MAX_RECOVERY_CAPSULE_BYTES}"
        )


def validate_floor(floor: OutcomeGcFloor, deployment_id: str) -> None:
    """CD §3.7: version, horizon and deployment; each anchor's rules; the anchors' relation."""
    if floor.before_epoch == 0 or floor.deployment_id != deployment_id:
        raise ShapeViolation(
            "outcome GC floor does not match its canonical path, deployment, and version"
        )
    terminal, committed = floor.terminal_anchor, floor.committed_anchor
    for anchor, kind in ((terminal, "terminal"), (committed, "committed")):
        if anchor is None:
            continue
        validate_outcome_shape(anchor, anchor.epoch)
        if anchor.epoch >= floor.before_epoch or anchor.deployment_id != deployment_id:
            raise ShapeViolation(
                f"outcome GC floor {kind} anchor epoch {anchor.epoch} is not below "
                f"{floor.before_epoch} in deployment {deployment_id}"
            )
    if committed is not None:
        if not committed.is_commit():
            raise ShapeViolation("outcome GC floor committed anchor is not a commit")
        if terminal is None:
            raise ShapeViolation(
                "outcome GC floor has a committed anchor without a terminal anchor"
            )
        same_epoch = committed.epoch == terminal.epoch
        if same_epoch and committed != terminal:
            raise ShapeViolation("outcome GC floor anchors of one epoch differ")
        if not same_epoch and not (
            committed.epoch < terminal.epoch and committed.checkpoint_id < terminal.checkpoint_id
        ):
            raise ShapeViolation("outcome GC floor committed anchor is newer than its terminal")
    if terminal is not None and terminal.is_commit() and committed != terminal:
        raise ShapeViolation("outcome GC floor does not retain its terminal commit")


def validate_pipeline_identity(identity: PipelineIdentity) -> None:
    if identity.canonical_version != PIPELINE_IDENTITY_VERSION or not _HEX64.fullmatch(
        identity.sha256
    ):
        raise ShapeViolation(
            f"pipeline identity version {identity.canonical_version} digest "
            f"{identity.sha256[:80]!r} is invalid (expected version {PIPELINE_IDENTITY_VERSION} "
            "and 64 lowercase hex)"
        )


def validate_witness(witness: CheckpointSinkOpenWitness) -> None:
    canonical_uuid(witness.deployment_id, "sink-open witness deployment id")
    validate_pipeline_identity(witness.pipeline_identity)
    if not witness.attempt.is_canonical():
        raise ShapeViolation(
            f"sink-open witness attempt epoch {witness.attempt.epoch} checkpoint "
            f"{witness.attempt.checkpoint_id} is not canonical"
        )
    sinks = witness.committable_sinks
    if not 1 <= len(sinks) <= MAX_WITNESS_SINKS:
        raise ShapeViolation(f"sink-open witness names {len(sinks)} sinks; 1..={MAX_WITNESS_SINKS}")
    for name in sinks:
        if not name or _is_white_space(name[0]) or _is_white_space(name[-1]):
            raise ShapeViolation(f"sink-open witness has a non-canonical sink name {name[:80]!r}")
    if any(earlier >= later for earlier, later in itertools.pairwise(sinks)):
        raise ShapeViolation("sink-open witness sink names must be strictly sorted and unique")
    canonical_uuid(witness.create_token, "sink-open witness create_token")


def validate_slot(slot: CheckpointSinkOpenWitnessSlot) -> None:
    validate_witness(slot.state.witness)
    if isinstance(slot.state, WitnessClosed):
        canonical_uuid(slot.state.close_token, "sink-open witness close_token")


def validate_capsule(capsule: ClusterRecoveryCapsule) -> None:
    """The capsule's own rules: canonical attempt, fence, participants covering it exactly."""
    if not capsule.attempt.is_canonical():
        raise ShapeViolation("recovery capsule attempt is not canonical")
    canonical_uuid(capsule.deployment_id, "recovery capsule deployment id")
    validate_pipeline_identity(capsule.pipeline_identity)
    fence = capsule.assignment_fence
    if not fence_is_canonical(fence):
        raise ShapeViolation("recovery capsule has a non-canonical assignment fence")
    covered = [(p.node_id, p.boot_incarnation) for p in capsule.participants]
    expected = [(p.node_id, p.boot_incarnation) for p in fence.participants]
    if covered != expected:
        raise ShapeViolation(
            "recovery capsule participants must be sorted, unique, and cover the assignment "
            "fence exactly"
        )
    for participant in capsule.participants:
        if not is_sha256_hex(participant.manifest_sha256):
            raise ShapeViolation(
                f"recovery capsule participant {participant.node_id} has an invalid manifest digest"
            )
        if list(participant.vnodes) != sorted(set(participant.vnodes)) or any(
            vnode >= fence.vnode_count for vnode in participant.vnodes
        ):
            raise ShapeViolation(
                f"recovery capsule participant {participant.node_id} vnodes are not sorted, "
                f"unique and below {fence.vnode_count}"
            )
    for name in capsule.source_offsets:
        if not name or name != name.strip():
            raise ShapeViolation(f"recovery capsule has a non-canonical source name {name!r}")
    predecessor = capsule.predecessor
    if predecessor is not None:
        validate_capsule_ref(predecessor)
        if predecessor.epoch >= capsule.attempt.epoch:
            raise ShapeViolation("recovery capsule predecessor is not older than the capsule")


def validate_cursor(cursor: RecoveryCapsuleGcCursor, deployment_id: str) -> None:
    if cursor.version != CAPSULE_GC_CURSOR_VERSION or cursor.deployment_id != deployment_id:
        raise ShapeViolation("capsule GC cursor does not match its path, deployment, or progress")
    offset = cursor.offset
    if offset is None:
        return
    segments = offset.split("/")
    if not offset.startswith(CAPSULES_PREFIX) or any(s in ("", ".", "..") for s in segments):
        raise ShapeViolation(
            f"capsule GC cursor offset {offset[:120]!r} does not match its path, deployment, "
            "or progress"
        )


def _is_white_space(character: str) -> bool:
    """Unicode White_Space (what Rust's trim removes)."""
    return character.isspace() or unicodedata.category(character) == "Zs"

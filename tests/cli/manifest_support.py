"""Capsules whose participant manifests exist: `make_capsule`'s participants with real
`ParticipantManifest` objects written and their digests in the capsule, so a history built
with them passes the views' reference checks (`views.references`)."""

from __future__ import annotations

import msgspec

from laminar_cluster.checkpoint.records import CapsuleParticipant, ClusterRecoveryCapsule
from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.objects import EMPTY_PARTIAL_SHA256, encode_record
from laminar_cluster.coordinator.paths import manifest_path
from laminar_cluster.coordinator.records import ParticipantManifest
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.store import CREATE, ObjectStore
from tests.checkpoint.test_capsule import make_capsule


async def capsule_with_manifests(
    store: ObjectStore, deployment: str, epoch: int
) -> ClusterRecoveryCapsule:
    """`make_capsule(deployment, epoch)` with each participant's manifest written (every vnode
    cut empty) and its digest named."""
    capsule = make_capsule(deployment, epoch)
    participants = []
    for participant in capsule.participants:
        manifest = ParticipantManifest(
            version=1,
            attempt=capsule.attempt,
            participant=FenceParticipant(
                node_id=participant.node_id, boot_incarnation=participant.boot_incarnation
            ),
            vnodes=participant.vnodes,
            partial_sha256=tuple(EMPTY_PARTIAL_SHA256 for _ in participant.vnodes),
            output_sha256=sha256_hex(b""),
        )
        key = manifest_path(capsule.attempt.checkpoint_id, participant.node_id)
        body = encode_record(manifest, key=key)
        await store.put(key, body, CREATE)
        participants.append(msgspec.structs.replace(participant, manifest_sha256=sha256_hex(body)))
    named: tuple[CapsuleParticipant, ...] = tuple(participants)
    return msgspec.structs.replace(capsule, participants=named)

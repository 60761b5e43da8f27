"""Reading a committed distributed checkpoint back (docs/protocols/distributed-checkpoint.md,
"Restore"; DC-10, DC-11).

The recovery capsule a cluster Commit names is the index: for each participant its exact
incarnation, its vnodes and the SHA-256 of its manifest. A vnode is restored only from the
partial of the participant the capsule lists for it, at the capsule's attempt, whose bytes hash
to the digest that participant's manifest holds for it, the manifest itself hashing to the
capsule's digest. Anything else is CorruptRecord: report it, never restore from it.

`load_cuts` restores vnodes (handoff, recovery); `load_outputs` reads the committed sink output
of every participant (the exactly-once sink's reader); `capsule_manifests` gives every
participant's verified manifest (the leader's sink commit markers, DC-12). All take a capsule of
a Commit outcome: a capsule alone does not prove its attempt committed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import (
    CapsuleParticipant,
    ClusterRecoveryCapsule,
    RecoveryCapsuleRef,
)
from laminar_cluster.clock import within_deadline
from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.host import VnodeCut
from laminar_cluster.coordinator.objects import (
    EMPTY_PARTIAL_SHA256,
    gather_bounded,
    read_manifest,
    read_output,
    read_partial,
    vnode_cut,
)
from laminar_cluster.coordinator.paths import manifest_path, partial_path
from laminar_cluster.coordinator.records import ParticipantManifest
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.store import ObjectStore


async def load_cuts(
    store: ObjectStore,
    decisions: DecisionStore,
    capsule_ref: RecoveryCapsuleRef,
    vnodes: Iterable[int],
    *,
    deadline: float,
) -> dict[int, VnodeCut]:
    """The state and source offsets of each of `vnodes` at the capsule's attempt (DC-10)."""
    clock = decisions.ctx.clock
    what = f"restore from checkpoint {capsule_ref.checkpoint_id}"
    async with within_deadline(clock, deadline, what):
        capsule = await decisions.load_recovery_capsule(capsule_ref)
        owners = _owners(capsule)
        count = capsule.assignment_fence.vnode_count
        wanted: dict[int, list[int]] = {}
        for vnode in sorted(set(vnodes)):
            if type(vnode) is not int or not 0 <= vnode < count:
                raise InvalidArgument(f"{what}: vnode {vnode!r} is outside 0..{count - 1}")
            owner = owners.get(vnode)
            if owner is None:
                raise CorruptRecord(f"{what}: the capsule lists no participant for vnode {vnode}")
            wanted.setdefault(owner.node_id, []).append(vnode)
        by_node = {p.node_id: p for p in capsule.participants}
        cuts: dict[int, VnodeCut] = {}
        for node_id, node_vnodes in wanted.items():
            cuts.update(await _participant_cuts(store, capsule, by_node[node_id], node_vnodes))
        return cuts


async def load_outputs(
    store: ObjectStore,
    decisions: DecisionStore,
    capsule_ref: RecoveryCapsuleRef,
    *,
    deadline: float,
) -> dict[int, bytes]:
    """Every participant's sink records of the capsule's attempt, by node id (DC-11)."""
    clock = decisions.ctx.clock
    async with within_deadline(clock, deadline, f"output of checkpoint {capsule_ref.epoch}"):
        capsule = await decisions.load_recovery_capsule(capsule_ref)
        outputs: dict[int, bytes] = {}
        for participant in capsule.participants:
            manifest = await verified_manifest(store, capsule, participant)
            outputs[participant.node_id] = await read_output(
                store, capsule.attempt, _fence_participant(participant), manifest.output_sha256
            )
        return outputs


async def capsule_manifests(
    store: ObjectStore, capsule: ClusterRecoveryCapsule
) -> list[ParticipantManifest]:
    """Each capsule participant's manifest, in capsule (node) order, each checked against the
    capsule's digest, participant and vnodes (CorruptRecord otherwise)."""

    def reader(participant: CapsuleParticipant) -> Callable[[], Awaitable[ParticipantManifest]]:
        async def read() -> ParticipantManifest:
            return await verified_manifest(store, capsule, participant)

        return read

    return await gather_bounded([reader(p) for p in capsule.participants])


async def _participant_cuts(
    store: ObjectStore,
    capsule: ClusterRecoveryCapsule,
    participant: CapsuleParticipant,
    vnodes: list[int],
) -> dict[int, VnodeCut]:
    manifest = await verified_manifest(store, capsule, participant)
    digest_of = dict(zip(manifest.vnodes, manifest.partial_sha256, strict=True))
    identity = _fence_participant(participant)

    def reader(vnode: int) -> Callable[[], Awaitable[VnodeCut]]:
        async def read() -> VnodeCut:
            if digest_of[vnode] == EMPTY_PARTIAL_SHA256:  # DC-15: cut empty, restores empty
                return VnodeCut(state=None, offsets={})
            partial = await read_partial(store, capsule.attempt, vnode, identity, digest_of[vnode])
            return vnode_cut(partial, key=partial_path(capsule.attempt.checkpoint_id, vnode))

        return read

    cuts = await gather_bounded([reader(vnode) for vnode in vnodes])
    return dict(zip(vnodes, cuts, strict=True))


async def verified_manifest(
    store: ObjectStore, capsule: ClusterRecoveryCapsule, participant: CapsuleParticipant
) -> ParticipantManifest:
    """The participant's manifest, which must hash to the capsule's digest and name exactly the
    capsule's participant and vnodes."""
    key = manifest_path(capsule.attempt.checkpoint_id, participant.node_id)
    read = await read_manifest(store, capsule.attempt, participant.node_id)
    if read is None:
        raise CorruptRecord(f"{key}: the manifest a committed capsule names is missing", key=key)
    manifest, body = read
    if sha256_hex(body) != participant.manifest_sha256:
        raise CorruptRecord(f"{key}: manifest does not match the capsule's digest", key=key)
    if manifest.participant != _fence_participant(participant):
        raise CorruptRecord(f"{key}: manifest names another boot than the capsule", key=key)
    if manifest.vnodes != participant.vnodes:
        raise CorruptRecord(f"{key}: manifest vnodes differ from the capsule's", key=key)
    return manifest


def _owners(capsule: ClusterRecoveryCapsule) -> dict[int, CapsuleParticipant]:
    return {vnode: p for p in capsule.participants for vnode in p.vnodes}


def _fence_participant(participant: CapsuleParticipant) -> FenceParticipant:
    return FenceParticipant(
        node_id=participant.node_id, boot_incarnation=participant.boot_incarnation
    )

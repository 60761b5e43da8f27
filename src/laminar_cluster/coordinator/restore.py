"""Reading a committed distributed checkpoint back (docs/protocols/distributed-checkpoint.md,
"Restore"; DC-10, DC-11, DC-16).

The recovery capsule a cluster Commit names is the index: for each participant its exact
incarnation, its vnodes and the SHA-256 of its manifest. A vnode is restored only from the
slice its participant's manifest names (a range of that attempt's state object, or of the
earlier committed attempt's object a reference names), whose bytes hash to the manifest's
digest, the manifest itself hashing to the capsule's digest. Anything else is CorruptRecord:
report it, never restore from it.

`load_cuts` restores vnodes (handoff, recovery: one ranged GET per state object read);
`load_outputs` reads the committed sink output of every participant (the exactly-once sink's
reader); `capsule_manifests` gives every participant's verified manifest (the leader's sink
commit markers, DC-12); `committed_slices` the slices of a committed cut (the leader's
reference check and retention, DC-16). All take a capsule of a Commit outcome: a capsule alone
does not prove its attempt committed.
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
    gather_bounded,
    manifest_output,
    read_manifest,
    slice_offsets,
)
from laminar_cluster.coordinator.paths import manifest_path
from laminar_cluster.coordinator.records import ParticipantManifest, VnodeSlice
from laminar_cluster.coordinator.slices import CommittedSlices, read_slices
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
        owners = {vnode: p for p in capsule.participants for vnode in p.vnodes}
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
        manifests = await gather_bounded(
            _manifest_reader(store, capsule, by_node[node_id]) for node_id in wanted
        )
        slices: list[VnodeSlice] = []
        for manifest in manifests:
            of_node = set(wanted[manifest.participant.node_id])
            slices.extend(s for s in manifest.slices if s.vnode in of_node)
        return await _cuts(store, slices, key=what)


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
        manifests = await capsule_manifests(store, capsule)
        return {
            m.participant.node_id: manifest_output(
                m, key=manifest_path(capsule.attempt.checkpoint_id, m.participant.node_id)
            )
            for m in manifests
        }


async def capsule_manifests(
    store: ObjectStore, capsule: ClusterRecoveryCapsule
) -> list[ParticipantManifest]:
    """Each capsule participant's manifest, in capsule (node) order, each checked against the
    capsule's digest, participant and vnodes (CorruptRecord otherwise)."""
    return await gather_bounded(_manifest_reader(store, capsule, p) for p in capsule.participants)


async def committed_slices(
    store: ObjectStore, decisions: DecisionStore, capsule_ref: RecoveryCapsuleRef
) -> CommittedSlices:
    """The slices of the committed cut a Commit's capsule names, by vnode (DC-16)."""
    capsule = await decisions.load_recovery_capsule(capsule_ref)
    manifests = await capsule_manifests(store, capsule)
    return CommittedSlices.of(capsule.attempt.checkpoint_id, capsule.assignment_fence, manifests)


async def _cuts(store: ObjectStore, slices: list[VnodeSlice], *, key: str) -> dict[int, VnodeCut]:
    """Each slice's state (read and checked, DC-10) and offsets; a vnode cut empty restores
    empty at offset 0 (DC-15)."""
    states = await read_slices(store, [s for s in slices if s.holder is not None])
    return {
        s.vnode: VnodeCut(state=states.get(s.vnode), offsets=slice_offsets(s, key=key))
        for s in slices
    }


def _manifest_reader(
    store: ObjectStore, capsule: ClusterRecoveryCapsule, participant: CapsuleParticipant
) -> Callable[[], Awaitable[ParticipantManifest]]:
    async def read() -> ParticipantManifest:
        return await verified_manifest(store, capsule, participant)

    return read


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
    if manifest.participant != fence_participant(participant):
        raise CorruptRecord(f"{key}: manifest names another boot than the capsule", key=key)
    if tuple(s.vnode for s in manifest.slices) != participant.vnodes:
        raise CorruptRecord(f"{key}: manifest vnodes differ from the capsule's", key=key)
    return manifest


def fence_participant(participant: CapsuleParticipant) -> FenceParticipant:
    """A capsule participant as the fence names it."""
    return FenceParticipant(
        node_id=participant.node_id, boot_incarnation=participant.boot_incarnation
    )

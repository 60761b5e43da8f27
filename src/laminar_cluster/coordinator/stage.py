"""A participant's cut as layout 2 objects (docs/protocols/distributed-checkpoint.md,
participant steps P4-P5; DC-4, DC-15, DC-16).

`staged_manifest` is pure: it checks the cut (vnodes of the fence, the output within its
limit), stages it (`slices.stage_cut`: the state object's body and every vnode's slice, an
unchanged one a reference) and encodes the manifest that will name it, within its limit, before
anything is written. `create_ours` writes one object create-only; an identical object already
there is ours (a retried write that landed), other bytes are CorruptRecord (the cut is refused),
StoreUnavailable is retried `PUT_ATTEMPTS_MAX` times within the deadline.
"""

from __future__ import annotations

from typing import Final

from laminar_cluster.clock import Clock, retry_until
from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.host import Cut
from laminar_cluster.coordinator.objects import (
    MANIFEST_VERSION,
    MAX_OUTPUT_BYTES,
    b64encode,
    encode_record,
)
from laminar_cluster.coordinator.records import CheckpointPrepare, ParticipantManifest
from laminar_cluster.coordinator.slices import CommittedSlices, StagedCut, stage_cut
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.store import CREATE, ObjectStore, put_resolved

PUT_ATTEMPTS_MAX: Final = 3


def staged_manifest(
    prepare: CheckpointPrepare,
    me: FenceParticipant,
    cut: Cut,
    baseline: CommittedSlices | None,
) -> tuple[StagedCut, ParticipantManifest, bytes]:
    """The staged cut, its manifest and the manifest's bytes (InvalidArgument for a cut the
    protocol cannot hold)."""
    attempt, count = prepare.attempt, prepare.fence.vnode_count
    if any(type(v) is not int or not 0 <= v < count for v in cut.vnodes):
        raise InvalidArgument(f"the cut names vnodes outside 0..{count - 1}")
    if len(cut.output) > MAX_OUTPUT_BYTES:
        raise InvalidArgument(f"the cut's output is {len(cut.output)} bytes")
    staged = stage_cut(attempt.checkpoint_id, me, prepare.fence, cut.vnodes, baseline)
    manifest = ParticipantManifest(
        version=MANIFEST_VERSION,
        attempt=attempt,
        participant=me,
        prepare_sha256=sha256_hex(encode_record(prepare, key="checkpoint prepare")),
        slices=staged.slices,
        state_bytes=len(staged.state),
        output_b64=b64encode(cut.output),
    )
    return staged, manifest, encode_record(manifest, key="participant manifest")


async def create_ours(
    store: ObjectStore, clock: Clock, key: str, body: bytes, *, deadline: float
) -> None:
    """Create-only; an identical object already there is success (idempotent retries)."""

    async def once() -> None:
        resolution = await put_resolved(store, key, body, CREATE)
        if not resolution.ours:
            raise CorruptRecord(f"{key}: holds other bytes ({resolution.state.value})", key=key)

    await retry_until(once, what=key, clock=clock, deadline=deadline, attempts_max=PUT_ATTEMPTS_MAX)

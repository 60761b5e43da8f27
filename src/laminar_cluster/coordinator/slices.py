"""Vnode slices: how a cut becomes one state object and its manifest's slices, how a reference
to an unchanged vnode is checked, and how slices are read back
(docs/protocols/distributed-checkpoint.md, DC-10, DC-15, DC-16).

* `stage_cut` (participant, P4): each vnode with state gets a `VnodeSlice`. If its state bytes
  and source offsets are exactly those of the participant's last committed cut under the same
  fence, the slice is that cut's slice as it stands (a reference to the object that holds the
  bytes: never to another reference, because the committed slice already names the holder);
  otherwise its bytes are appended to this attempt's state object. A vnode cut empty has no
  bytes (DC-15).
* `check_references` (leader, L5): every reference of a manifest must be exactly the slice the
  last committed checkpoint holds for that vnode under the same fence; retention keeps the
  objects that checkpoint's slices name (DC-13), so a verified reference always resolves.
* `read_slices` (restore, DC-10): one ranged GET per holder object, covering the wanted slices
  of that object; each slice's bytes must hash to its digest.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.host import VnodeCut
from laminar_cluster.coordinator.objects import (
    EMPTY_STATE_SHA256,
    MAX_SLICE_BYTES,
    MAX_STATE_BYTES,
    gather_bounded,
    is_empty_cut,
    offsets_of,
)
from laminar_cluster.coordinator.paths import state_path
from laminar_cluster.coordinator.records import ParticipantManifest, SliceHolder, VnodeSlice
from laminar_cluster.errors import CorruptRecord, InvalidArgument, ObjectNotFound
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.store import ObjectStore


@dataclass(frozen=True, slots=True)
class CommittedSlices:
    """The slices of a committed cut by vnode (each naming the object that holds its bytes),
    and the fence it was taken under."""

    checkpoint_id: int
    fence: CheckpointAssignmentFence
    slices: Mapping[int, VnodeSlice]

    @staticmethod
    def of(
        checkpoint_id: int,
        fence: CheckpointAssignmentFence,
        manifests: Sequence[ParticipantManifest],
    ) -> CommittedSlices:
        return CommittedSlices(
            checkpoint_id, fence, {s.vnode: s for m in manifests for s in m.slices}
        )

    def holders(self) -> frozenset[str]:
        """The state objects its slices read from."""
        return holder_keys(self.slices.values())


@dataclass(frozen=True, slots=True)
class StagedCut:
    """One participant's cut as it is written: its state object's body and its slices."""

    state: bytes
    slices: tuple[VnodeSlice, ...]


def stage_cut(
    checkpoint_id: int,
    me: FenceParticipant,
    fence: CheckpointAssignmentFence,
    vnodes: Mapping[int, VnodeCut],
    baseline: CommittedSlices | None,
) -> StagedCut:
    """The state object and slices of a cut (module docstring); InvalidArgument for a cut the
    protocol cannot hold (an empty cut with an offset, a slice or an object over its limit)."""
    usable = baseline.slices if baseline is not None and baseline.fence == fence else {}
    parts: list[bytes] = []
    slices: list[VnodeSlice] = []
    start = 0
    for vnode in sorted(vnodes):
        cut = vnodes[vnode]
        if is_empty_cut(vnode, cut):
            slices.append(
                VnodeSlice(vnode=vnode, state_sha256=EMPTY_STATE_SHA256, offsets={}, holder=None)
            )
            continue
        state = cut.state
        assert state is not None  # not empty
        if len(state) > MAX_SLICE_BYTES:
            raise InvalidArgument(f"vnode {vnode}: state is {len(state)} bytes")
        digest, offsets = sha256_hex(state), offsets_of(vnode, cut)
        previous = usable.get(vnode)
        if (
            previous is not None
            and previous.holder is not None
            and (previous.state_sha256, previous.offsets) == (digest, offsets)
        ):
            slices.append(previous)  # DC-16: unchanged since the last committed cut
            continue
        holder = SliceHolder(
            checkpoint_id=checkpoint_id, participant=me, start=start, length=len(state)
        )
        slices.append(VnodeSlice(vnode=vnode, state_sha256=digest, offsets=offsets, holder=holder))
        parts.append(state)
        start += len(state)
    if start > MAX_STATE_BYTES:
        raise InvalidArgument(f"the state object of attempt {checkpoint_id} is {start} bytes")
    return StagedCut(b"".join(parts), tuple(slices))


def check_references(
    manifest: ParticipantManifest,
    fence: CheckpointAssignmentFence,
    baseline: CommittedSlices | None,
    *,
    key: str,
) -> None:
    """DC-16: every slice of an earlier attempt is exactly the last committed cut's slice of
    that vnode, under the same fence (CorruptRecord otherwise)."""
    checkpoint_id = manifest.attempt.checkpoint_id
    for piece in manifest.slices:
        holder = piece.holder
        if holder is None or holder.checkpoint_id == checkpoint_id:
            continue
        if baseline is None or baseline.fence != fence:
            raise CorruptRecord(
                f"{key}: vnode {piece.vnode} references attempt {holder.checkpoint_id}, but no "
                "committed checkpoint of this fence holds it",
                key=key,
            )
        if baseline.slices.get(piece.vnode) != piece:
            raise CorruptRecord(
                f"{key}: vnode {piece.vnode} references a slice that the last committed "
                f"checkpoint {baseline.checkpoint_id} does not hold",
                key=key,
            )


def holder_keys(slices: Iterable[VnodeSlice]) -> frozenset[str]:
    """The state objects that hold the bytes of `slices`."""
    return frozenset(
        state_path(s.holder.checkpoint_id, s.holder.participant.node_id)
        for s in slices
        if s.holder is not None
    )


async def read_slices(store: ObjectStore, slices: Sequence[VnodeSlice]) -> dict[int, bytes]:
    """The state bytes of each slice with a holder, by vnode (module docstring)."""
    by_object: dict[str, list[VnodeSlice]] = {}
    for piece in slices:
        holder = piece.holder
        if holder is None:
            raise InvalidArgument(f"vnode {piece.vnode} was cut empty: it has no bytes to read")
        key = state_path(holder.checkpoint_id, holder.participant.node_id)
        by_object.setdefault(key, []).append(piece)
    found = await gather_bounded(
        functools.partial(_read_object, store, key, group) for key, group in by_object.items()
    )
    return {vnode: data for part in found for vnode, data in part.items()}


async def _read_object(store: ObjectStore, key: str, slices: list[VnodeSlice]) -> dict[int, bytes]:
    holders = [(s, s.holder) for s in slices if s.holder is not None]
    start = min(h.start for _, h in holders)
    end = max(h.start + h.length for _, h in holders)
    body = b""
    if end > start:
        try:
            got = await store.get_range(key, start, end)
        except ObjectNotFound:
            raise CorruptRecord(
                f"{key}: the state object a manifest names is missing", key=key
            ) from None
        if got.meta.size < end or len(got.body) != end - start:
            raise CorruptRecord(
                f"{key}: state object is {got.meta.size} bytes; its slices end at {end}", key=key
            )
        body = got.body
    states: dict[int, bytes] = {}
    for piece, holder in holders:
        data = body[holder.start - start : holder.start - start + holder.length]
        if sha256_hex(data) != piece.state_sha256:
            raise CorruptRecord(
                f"{key}: the slice of vnode {piece.vnode} does not match its manifest digest",
                key=key,
            )
        states[piece.vnode] = data
    return states

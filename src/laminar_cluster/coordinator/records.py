"""Durable records of one distributed checkpoint attempt (docs/protocols/distributed-checkpoint.md,
"Objects"; layout 2: one state object per participant per attempt).

Under `checkpoints/attempt={id:020}/`:

* `prepare.json` (`CheckpointPrepare`): the leader's announcement: the attempt, the fence every
  participant must run, the leader proof and the drain transition (pre-rotation checkpoints).
* `state/node={id:020}.bin`: one participant's vnode state bytes of the attempt, the slices
  of the vnodes whose state changed since its last committed cut, back to back in vnode order.
  Raw bytes, no record: the manifest names each slice by (offset, length, SHA-256).
* `manifest/node={id:020}.json` (`ParticipantManifest`): the participant's ack, written last:
  each vnode's `VnodeSlice` (digest, source offsets and where its bytes are: a range of this
  attempt's state object, or a reference to the range of an earlier committed attempt that
  holds them), the SHA-256 of the prepare it answered, and its sink output (the records since
  its last committed checkpoint, visible only when the attempt's cluster outcome is Commit).
  Its SHA-256 is the participant's `manifest_sha256` in the recovery capsule.
* `committed.json` (`SinkCommit`): the sink's own durable commit marker, written by the leader
  once the attempt's cluster Commit is recorded: the capsule, the fence and each participant's
  committed output digest. The committed-output reader lists these, so committed output stays
  visible after the authority compacts its outcome history (DC-12).

And one object outside the attempts: `checkpoints/pointer.json` (`CheckpointPointer`), the hint
participants poll with a conditional GET instead of listing: a copy of the newest prepare and,
once recorded, its verdict. The create-only prepare and the authority's outcome stay the truth.

Layout 1 (a `vnode={v:05}.json` partial per vnode, `output/node={n}.json` beside a version 1
manifest) is refused, never misread (`layout.py`).
"""

from __future__ import annotations

from typing import Literal

from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointVerdict,
    RecoveryCapsuleRef,
)
from laminar_cluster.codec import U16, U64, Record
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.records import AssignmentDrainTransition


class CheckpointPrepare(Record):
    """The leader's announcement of one attempt (create-only)."""

    version: Literal[1]
    attempt: CheckpointAttempt
    fence: CheckpointAssignmentFence
    leader_proof: LeaderProof
    drain_transition: AssignmentDrainTransition | None


class SliceHolder(Record):
    """Where one vnode's state bytes are: `[start, start + length)` of the state object that
    `participant` wrote for attempt `checkpoint_id` (this manifest's attempt: written by this
    cut; an earlier committed attempt: a reference, never to another reference)."""

    checkpoint_id: U64
    participant: FenceParticipant
    start: U64
    length: U64


class VnodeSlice(Record):
    """One vnode at the cut: the SHA-256 of its state bytes, the next offset of each of its
    source partitions, and where the bytes are. A vnode cut empty (DC-15) has no bytes:
    `EMPTY_STATE_SHA256`, no holder and no offsets."""

    vnode: U16
    state_sha256: str
    offsets: dict[str, U64]  # source partition (decimal) -> next offset to read
    holder: SliceHolder | None


class ParticipantManifest(Record):
    """A participant's ack of one attempt (create-only, written last)."""

    version: Literal[2]
    attempt: CheckpointAttempt
    participant: FenceParticipant
    prepare_sha256: str  # the prepare this cut answered
    slices: tuple[VnodeSlice, ...]  # vnode order, exactly the vnodes the fence gives it
    state_bytes: U64  # size of this attempt's state object of the participant (0: none)
    output_b64: str  # the sink records since its last committed checkpoint, base64


class SinkCommitOutput(Record):
    """One participant's committed output: the SHA-256 of the output its verified manifest
    holds."""

    participant: FenceParticipant
    output_sha256: str


class SinkCommit(Record):
    """The sink's durable commit marker of one attempt (DC-12)."""

    version: Literal[2]
    attempt: CheckpointAttempt
    capsule: RecoveryCapsuleRef  # the recovery capsule of the attempt's cluster Commit
    fence: CheckpointAssignmentFence
    outputs: tuple[SinkCommitOutput, ...]  # one per capsule participant, in node order


class CheckpointPointer(Record):
    """The participants' hint (overwritten by the leader): the newest prepare it wrote and, once
    recorded, that attempt's verdict."""

    version: Literal[1]
    prepare: CheckpointPrepare
    verdict: CheckpointVerdict | None
    # With the verdict: in how many milliseconds the leader's next periodic prepare is due (a
    # hint for the participants' poll schedule, DC-18; None: not known).
    next_in_ms: U64 | None = None

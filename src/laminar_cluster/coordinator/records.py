"""Durable records of one distributed checkpoint attempt (docs/protocols/distributed-checkpoint.md).

Under `checkpoints/attempt={id:020}/`:

* `prepare.json` (`CheckpointPrepare`): the leader's announcement: the attempt, the fence every
  participant must run, the leader proof and the drain transition (pre-rotation checkpoints).
* `vnode={v:05}.json` (`VnodePartial`): one vnode's state and the next offset of each of its
  source partitions at the cut, written by the vnode's owner.
* `output/node={id:020}.json` (`SinkOutput`): the sink records one participant produced since
  its last committed checkpoint; visible only when the attempt's cluster outcome is Commit.
* `manifest/node={id:020}.json` (`ParticipantManifest`): the participant's ack: its vnodes, the
  SHA-256 of each partial and of its output. Written last; its SHA-256 is the participant's
  `manifest_sha256` in the recovery capsule.
* `committed.json` (`SinkCommit`): the sink's own durable commit marker, written by the leader
  once the attempt's cluster Commit is recorded: the capsule, the fence and each participant's
  committed output digest. The committed-output reader lists these, so committed output stays
  visible after the authority compacts its outcome history (DC-12).
"""

from __future__ import annotations

from typing import Literal

from laminar_cluster.checkpoint.records import CheckpointAttempt, RecoveryCapsuleRef
from laminar_cluster.codec import U16, U64, Record
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.records import AssignmentDrainTransition


class CheckpointPrepare(Record):
    version: Literal[1]
    attempt: CheckpointAttempt
    fence: CheckpointAssignmentFence
    leader_proof: LeaderProof
    drain_transition: AssignmentDrainTransition | None


class VnodePartial(Record):
    version: Literal[1]
    attempt: CheckpointAttempt
    vnode: U16
    participant: FenceParticipant
    state_b64: str  # the processor's opaque vnode state, base64
    offsets: dict[str, U64]  # source partition (decimal) -> next offset to read


class SinkOutput(Record):
    version: Literal[1]
    attempt: CheckpointAttempt
    participant: FenceParticipant
    records_b64: str  # the processor's opaque output records, base64


class ParticipantManifest(Record):
    version: Literal[1]
    attempt: CheckpointAttempt
    participant: FenceParticipant
    vnodes: tuple[U16, ...]
    partial_sha256: tuple[str, ...]  # in `vnodes` order
    output_sha256: str


class SinkCommitOutput(Record):
    """One participant's committed output: the SHA-256 its verified manifest names."""

    participant: FenceParticipant
    output_sha256: str


class SinkCommit(Record):
    version: Literal[1]
    attempt: CheckpointAttempt
    capsule: RecoveryCapsuleRef  # the recovery capsule of the attempt's cluster Commit
    fence: CheckpointAssignmentFence
    outputs: tuple[SinkCommitOutput, ...]  # one per capsule participant, in node order

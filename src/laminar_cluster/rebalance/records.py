"""Per-process durable reports of the rebalance plane (RB §2.7, RB §4.6).

Each process owns two control slots and only ever writes its own:

* `CheckpointAssignmentAdoption` (`control:adopted-assignment`): which exact assignment this
  process runs and whether its vnode state for it is ready. The leader reads every slot to build
  the owner certificate (RB §4.12) and the graceful preflight (RB §4.4 step 4.4).
* `DrainAck` (`control:drain-ack`): this exact process stopped its sources at one cut for one
  drain transition (RB §4.6). The leader's ack quorum needs one from every predecessor process.
"""

from __future__ import annotations

from typing import Literal

from laminar_cluster.codec import U32, U64, Digest32, Record
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.lease.records import AssignmentDrainTransition


class CheckpointAssignmentAdoption(Record):
    """One process's adoption / vnode-state report (RB §2.7)."""

    version: Literal[1]
    participant: FenceParticipant
    assignment_version: U64
    vnode_count: U32
    assignment_digest: Digest32
    vnode_state_ready: bool

    def matches_fence(self, fence: CheckpointAssignmentFence) -> bool:
        """Same version, count and digest, and the fence certifies this exact boot."""
        return (
            self.assignment_version == fence.assignment_version
            and self.vnode_count == fence.vnode_count
            and self.assignment_digest == fence.assignment_digest
            and fence.participant_incarnation(self.participant.node_id)
            == self.participant.boot_incarnation
        )


class DrainAck(Record):
    """One process's durable acknowledgement of one drain transition (RB §4.6)."""

    version: Literal[1]
    participant: FenceParticipant
    transition: AssignmentDrainTransition

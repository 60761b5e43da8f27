"""Does an assignment bind this exact process? (RB §4.14; RB-3, RB-11)"""

from __future__ import annotations

import enum

from laminar_cluster.assignment.digest import fence_matches_owner_map
from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.codec.shape import reading
from laminar_cluster.errors import CorruptRecord, Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.rebalance.refusals import Refusal


class RecoveryScope(enum.Enum):
    PARTICIPANT = "participant"  # certified with this boot: fault and cold-restore
    OWNERLESS = "ownerless"  # owns nothing: follow the topology only


def durable_fence(snapshot: AssignmentSnapshot) -> CheckpointAssignmentFence:
    """The fence of `snapshot`, read from the store: CorruptRecord naming it when malformed."""
    with reading(snapshot_path(snapshot.assignment_version)):
        return snapshot_fence(snapshot)


def assignment_binds_local_process(snapshot: AssignmentSnapshot, me: FenceParticipant) -> bool:
    """False exactly when `snapshot` gives vnodes to (or certifies) another boot of this node."""
    certified = snapshot_fence(snapshot).participant_incarnation(me.node_id)
    if me.node_id in snapshot.owners:
        return certified == me.boot_incarnation
    return certified is None


def certifies_another_boot(snapshot: AssignmentSnapshot, me: FenceParticipant) -> bool:
    """Does `snapshot` certify another boot of this node (this process replaced it)?"""
    certified = snapshot_fence(snapshot).participant_incarnation(me.node_id)
    return certified is not None and certified != me.boot_incarnation


def local_recovery_assignment_scope(
    snapshot: AssignmentSnapshot, me: FenceParticipant
) -> RecoveryScope:
    """This process's part in the recovery generation `snapshot`: Refused (ANOTHER_BOOT) when
    it certifies another boot of this node; CorruptRecord when its fence or roster does not
    match its owners."""
    version = snapshot.assignment_version
    fence = snapshot_fence(snapshot)
    if not fence_matches_owner_map(fence, snapshot.owners):
        raise CorruptRecord(
            f"recovery assignment {version} fence does not match its owners",
            key=snapshot_path(version),
        )
    certified = fence.participant_incarnation(me.node_id)
    if certified == me.boot_incarnation:
        return RecoveryScope.PARTICIPANT
    if certified is not None:
        raise Refused(
            f"recovery assignment {version} certifies another boot of node-{me.node_id} "
            f"({certified})",
            reason=Refusal.ANOTHER_BOOT,
        )
    if me.node_id in snapshot.owners:
        raise CorruptRecord(
            f"recovery assignment {version} gives node-{me.node_id} vnodes without a "
            "participant entry",
            key=snapshot_path(version),
        )
    return RecoveryScope.OWNERLESS

"""Does an assignment bind this exact process? (spec_rebalance §4.14; S3, S12)"""

from __future__ import annotations

import enum

from laminar_cluster.assignment.digest import fence_matches_owner_map
from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.rebalance.interfaces import RebalanceError


class RecoveryScope(enum.Enum):
    PARTICIPANT = "participant"  # certified with this boot: fault and cold-restore
    OWNERLESS = "ownerless"  # owns nothing: follow the topology only


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
    fence = snapshot_fence(snapshot)
    if not fence_matches_owner_map(fence, snapshot.owners):
        raise RebalanceError(
            f"recovery assignment {snapshot.assignment_version} fence does not match its owners"
        )
    certified = fence.participant_incarnation(me.node_id)
    if certified == me.boot_incarnation:
        return RecoveryScope.PARTICIPANT
    if certified is not None:
        raise RebalanceError(
            f"recovery assignment {snapshot.assignment_version} certifies another boot of "
            f"node-{me.node_id} ({certified})"
        )
    if me.node_id in snapshot.owners:
        raise RebalanceError(
            f"recovery assignment {snapshot.assignment_version} gives node-{me.node_id} vnodes "
            "without a participant entry"
        )
    return RecoveryScope.OWNERLESS

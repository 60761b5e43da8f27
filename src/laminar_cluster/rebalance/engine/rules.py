"""The pure checks `BaseEngine` applies (spec_rebalance §6.2, §4.14): what may be adopted,
activated or drained against the local registry and this process, and short names for the
engine's call log and error messages. No state, no I/O.
"""

from __future__ import annotations

from laminar_cluster.assignment.digest import AssignmentDrainId, drain_id, fence_matches_owner_map
from laminar_cluster.assignment.model import validate_snapshot
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.codec.shape import writing
from laminar_cluster.errors import CorruptRecord, InvalidArgument, Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, fence_is_canonical
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.interfaces import Adoption, InitialState, RegistrySnapshot
from laminar_cluster.rebalance.refusals import Refusal


def require_committed(snapshot: AssignmentSnapshot) -> None:
    """A canonical committed snapshot; InvalidArgument for a malformed or draining one."""
    with writing(f"adoption of assignment {snapshot.assignment_version}"):
        validate_snapshot(snapshot)
    if snapshot.draining:
        raise InvalidArgument(
            f"assignment {snapshot.assignment_version} is draining; a draining assignment is "
            "never adopted"
        )


def require_draining(registry: RegistrySnapshot, draining: AssignmentSnapshot) -> None:
    """A canonical draining snapshot with the registry's vnode count (InvalidArgument)."""
    with writing(f"source drain of assignment {draining.assignment_version}"):
        validate_snapshot(draining)
    if not draining.draining:
        raise InvalidArgument(
            f"assignment {draining.assignment_version} is committed, not draining"
        )
    owners = registry.owners
    if owners and len(owners) != len(draining.owners):
        raise InvalidArgument(
            f"draining assignment {draining.assignment_version} has {len(draining.owners)} "
            f"vnodes; the local registry has {len(owners)}"
        )


def registry_runs(registry: RegistrySnapshot, fence: CheckpointAssignmentFence) -> bool:
    """The registry runs exactly `fence`'s version and owner map."""
    return registry.version == fence.assignment_version and fence_matches_owner_map(
        fence, registry.owners
    )


def unchanged_adoption(registry: RegistrySnapshot, snapshot: AssignmentSnapshot) -> Adoption | None:
    """The idempotent answer for a version at or below the registry's, else None; the same
    version with other owners is CorruptRecord (OWNERS_DIFFER): versions are created once."""
    version = snapshot.assignment_version
    if version > registry.version:
        return None
    if version == registry.version and snapshot.owners != registry.owners:
        raise CorruptRecord(
            f"assignment {version} has different owners than the local registry at the same "
            "version",
            key=snapshot_path(version),
            reason=Refusal.OWNERS_DIFFER,
        )
    return Adoption(registry.version, newly_acquired=(), recovery_required=False)


def acquired_vnodes(
    registry: RegistrySnapshot, snapshot: AssignmentSnapshot, me: FenceParticipant
) -> tuple[int, ...]:
    """The vnodes `snapshot` gives this process that the registry does not; refuses a snapshot
    of another vnode count (InvalidArgument) or one giving this node's vnodes to another boot
    (Refused, ANOTHER_BOOT; §4.14 `assignment_binds_local_process`)."""
    previous = registry.owners
    if previous and len(previous) != len(snapshot.owners):
        raise InvalidArgument(
            f"assignment {snapshot.assignment_version} has {len(snapshot.owners)} vnodes; the "
            f"local registry has {len(previous)}"
        )
    owned = tuple(v for v, owner in enumerate(snapshot.owners) if owner == me.node_id)
    if owned and me not in snapshot.participants:
        raise Refused(
            f"assignment {snapshot.assignment_version} gives node {me.node_id}'s vnodes to "
            "another boot",
            reason=Refusal.ANOTHER_BOOT,
        )
    return tuple(v for v in owned if not previous or previous[v] != me.node_id)


def check_activation(
    registry: RegistrySnapshot,
    me: FenceParticipant,
    fence: CheckpointAssignmentFence,
    transition: AssignmentDrainTransition | None,
) -> None:
    """The fence certifies the local registry and this boot, and the transition starts at it
    (Refused: FENCE_NOT_LOCAL_REGISTRY, ANOTHER_BOOT, TRANSITION_NOT_AT_FENCE)."""
    if not fence_is_canonical(fence):
        raise InvalidArgument(f"{fence_name(fence)} is not canonical")
    if not registry_runs(registry, fence):
        raise Refused(
            f"{fence_name(fence)} does not certify the local registry v{registry.version}",
            reason=Refusal.FENCE_NOT_LOCAL_REGISTRY,
        )
    if fence.participant_incarnation(me.node_id) not in (None, me.boot_incarnation):
        raise Refused(
            f"{fence_name(fence)} certifies another boot of node {me.node_id}",
            reason=Refusal.ANOTHER_BOOT,
        )
    if transition is not None and transition.predecessor != fence:
        raise Refused(
            f"drain transition {transition_name(transition)} does not start at {fence_name(fence)}",
            reason=Refusal.TRANSITION_NOT_AT_FENCE,
        )


def round_name(round_: AssignmentDrainId) -> str:
    return f"{round_.predecessor_version}->{round_.target_version}"


def fence_name(fence: CheckpointAssignmentFence | None) -> str:
    return "no fence" if fence is None else f"fence v{fence.assignment_version}"


def transition_name(transition: AssignmentDrainTransition | None) -> str:
    return "none" if transition is None else round_name(drain_id(transition))


def snapshot_name(snapshot: AssignmentSnapshot) -> str:
    kind = "draining" if snapshot.draining else "committed"
    return f"v{snapshot.assignment_version} {kind}"


def ref_name(ref: RecoveryCapsuleRef | InitialState | None) -> str:
    if ref is None:
        return "none"
    return "initial-state" if isinstance(ref, InitialState) else f"epoch {ref.epoch}"

"""The owner-complete assignment certificate (RB §4.12 steps 6 and the two pure
rules after it).

`certify_owner_map` certifies an owner map only when every participant process has
durably reported adopting exactly that map (same participant, version, vnode count and owner-map
digest). It does not need `vnode_state_ready`: transport activation only needs exact adoption.
`assignment_vnode_state_is_ready` is the stronger graceful-rotation test: every participant also
reports its vnode state ready for exactly this fence (RB §2.7).

`read_owner_certificate` is the async shell: it reads the current boots of the
expected participants and every adoption report through the controller, and returns None on any
doubt (a changed roster, a read error, a missed deadline), so the caller fails closed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final, Protocol

from laminar_cluster.assignment.digest import fence_from_owner_map, owner_map_digest
from laminar_cluster.assignment.vnode import MAX_VNODE_COUNT
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.codec import digest32_bytes
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import LaminarError
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.rebalance.interfaces import RegistrySnapshot
from laminar_cluster.rebalance.records import CheckpointAssignmentAdoption

logger: Final = logging.getLogger(__name__)


def certify_owner_map(
    version: int,
    owners: Sequence[int],
    participants: Sequence[FenceParticipant],
    reported: Sequence[CheckpointAssignmentAdoption],
) -> CheckpointAssignmentFence | None:
    """The fence of `owners` at `version`, or None unless every participant exactly reported it.

    None when: version is 0, owners or participants are empty, an owner is 0 or not a
    participant, or a participant lacks a report with its exact participant (node and boot),
    the version, the vnode count and the owner-map digest. `vnode_state_ready` is not needed.
    """
    if version == 0 or not owners or not participants:
        return None
    if not len(owners) <= MAX_VNODE_COUNT:
        return None
    roster = {participant.node_id for participant in participants}
    if any(owner == 0 or owner not in roster for owner in owners):
        return None
    digest = owner_map_digest(len(owners), owners)
    exact = {
        report.participant
        for report in reported
        if report.assignment_version == version
        and report.vnode_count == len(owners)
        and digest32_bytes(report.assignment_digest) == digest
    }
    if any(participant not in exact for participant in participants):
        return None
    try:
        return fence_from_owner_map(version, owners, participants)
    except ShapeViolation:
        return None


def assignment_vnode_state_is_ready(
    fence: CheckpointAssignmentFence, reported: Sequence[CheckpointAssignmentAdoption]
) -> bool:
    """Every participant of `fence` reports, as that exact participant, `vnode_state_ready`
    for exactly this fence (RB §2.7 `matches_fence`)."""
    ready = {
        report.participant
        for report in reported
        if report.vnode_state_ready and report.matches_fence(fence)
    }
    return bool(fence.participants) and all(p in ready for p in fence.participants)


class AdoptionReports(Protocol):
    """The two controller reads the fence needs (a subset of `ClusterController`, RB §6.3)."""

    clock: Clock

    async def recovery_participant_incarnations(
        self, ids: Sequence[int], *, deadline: float
    ) -> tuple[FenceParticipant, ...]: ...

    async def read_adopted_assignments(
        self, *, deadline: float
    ) -> tuple[CheckpointAssignmentAdoption, ...]: ...


async def read_owner_certificate(
    controller: AdoptionReports,
    registry: RegistrySnapshot,
    expected_participants: Sequence[FenceParticipant],
    deadline: float,
) -> CheckpointAssignmentFence | None:
    """RB §4.12 step 6: the owner certificate of the local registry, or None.

    The current boots of the expected participants' node ids must equal `expected_participants`
    exactly (a restart or a missing process yields None); then every adoption report is read and
    `certify_owner_map` decides. Any read error or the deadline yields None.
    """
    ids = [participant.node_id for participant in expected_participants]
    try:
        async with within_deadline(controller.clock, deadline, "owner certificate"):
            current = await controller.recovery_participant_incarnations(ids, deadline=deadline)
            if tuple(current) != tuple(expected_participants):
                logger.info(
                    "owner certificate of version %d: participants changed", registry.version
                )
                return None
            reported = await controller.read_adopted_assignments(deadline=deadline)
    except LaminarError as error:
        logger.info("owner certificate of version %d unavailable: %s", registry.version, error)
        return None
    return certify_owner_map(registry.version, registry.owners, current, reported)

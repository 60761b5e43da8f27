"""What a node checks around its checkpoints (docs/protocols/distributed-checkpoint.md, DC-17,
DC-19): the store's checkpoint layout before anything is written, and which participants of a
fence its membership view holds lost.
"""

from __future__ import annotations

from typing import Final

from laminar_cluster.clock import Clock, retry_until
from laminar_cluster.coordinator.layout import refuse_layout1
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.membership.discovery import MembershipView, ObservedState
from laminar_cluster.store import ObjectStore

LAYOUT_CHECK_S: Final = 30.0  # the start's layout check, retried while the store is unavailable
# What a membership view shows of a participant that will not ack (DC-19).
LOST_STATES: Final = frozenset({ObservedState.SUSPECTED, ObservedState.DEAD, ObservedState.LEFT})


async def check_checkpoint_layout(store: ObjectStore, clock: Clock) -> None:
    """InvalidArgument naming the object if `store` holds the old checkpoint layout (one
    listing, retried while the store is unavailable, within `LAYOUT_CHECK_S`)."""
    await retry_until(
        lambda: refuse_layout1(store),
        what=f"{store.url}: checkpoint layout check",
        clock=clock,
        deadline=clock.monotonic() + LAYOUT_CHECK_S,
    )


def lost_participants(
    view: MembershipView, fence: CheckpointAssignmentFence, local_node: int
) -> frozenset[int]:
    """DC-19: the participants of `fence` (other than `local_node`) that `view` shows
    suspected, dead or left, or running another boot than the fence names: none of them can
    ack. A participant the view does not list is not counted (the view may be catching up)."""
    lost = set()
    for participant in fence.participants:
        member = view.member(participant.node_id)
        if participant.node_id == local_node or member is None:
            continue
        if member.state in LOST_STATES or member.boot != participant.boot_incarnation:
            lost.add(participant.node_id)
    return frozenset(lost)

"""Drain acknowledgement checks and the ack quorum (RB §4.6).

Pure helpers plus the read-only quorum evaluation, kept out of the controller so each rule is
visible in one place. The controller supplies its local state through `AckContext`.

Quorum (every bullet of RB §4.6 `await_drain_quorum`): the local installed transition is the
transition; the durable leader lease matches `transition.leader`; the current boots of the
predecessor node ids are exactly the predecessor roster (a restart breaks quorum); the ack slots
hold exactly one matching ack from every predecessor participant (acks of other nodes are
ignored; stale or different acks do not count); the durable head is still this draining
snapshot; the roster and the leader are re-verified after those reads; no drain decision exists
yet for the target version; and the transition is still installed with a live process lease.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final, Protocol

from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore
from laminar_cluster.authority.assignment_decisions import assignment_drain_decision
from laminar_cluster.clock import Clock
from laminar_cluster.errors import CorruptRecord, Refused
from laminar_cluster.fencing import FenceParticipant, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.cluster.slots import read_drain_acks
from laminar_cluster.rebalance.records import DrainAck
from laminar_cluster.store import ObjectStore

logger: Final = logging.getLogger(__name__)


class AckContext(Protocol):
    """What the quorum reads from the controller."""

    store: ObjectStore
    clock: Clock

    def checkpoint_authority(self) -> LeaderLeaseStore: ...

    def snapshot_store(self) -> AssignmentSnapshotStore: ...

    def checkpoint_drain_transition(self) -> AssignmentDrainTransition | None: ...

    def process_lease_is_live(self) -> bool: ...

    async def verify_current_process_incarnation(
        self, participant: FenceParticipant, *, deadline: float
    ) -> bool: ...


async def leader_lease_matches(authority: LeaderLeaseStore, proof: LeaderProof) -> bool:
    """The durable lease's owner (node, boot, process term) and token equal `proof` (RB §2.1)."""
    lease = await authority.load()
    return lease is not None and lease.proof() == proof


def acked_participants(
    acks: Sequence[DrainAck], transition: AssignmentDrainTransition
) -> frozenset[FenceParticipant]:
    """The predecessor participants with an exact ack of `transition`; CorruptRecord when one
    participant has two (the slot layout allows one per node, so this is a store fault)."""
    required = set(transition.predecessor.participants)
    found: set[FenceParticipant] = set()
    for ack in acks:
        if ack.participant not in required or ack.transition != transition:
            continue  # another node's, a stale or a different ack: does not count
        if ack.participant in found:
            raise CorruptRecord(
                f"node-{ack.participant.node_id} has two drain acks for one transition"
            )
        found.add(ack.participant)
    return frozenset(found)


async def roster_is_current(
    context: AckContext, roster: Sequence[FenceParticipant], *, deadline: float
) -> bool:
    """Every participant is still the current, not-left owner of its node's process lease."""
    for participant in roster:
        if not await context.verify_current_process_incarnation(participant, deadline=deadline):
            logger.info(
                "drain quorum: node-%d boot %s is no longer current",
                participant.node_id,
                participant.boot_incarnation,
            )
            return False
    return True


async def _installed_and_led(
    context: AckContext, transition: AssignmentDrainTransition, deadline: float
) -> bool:
    if context.checkpoint_drain_transition() != transition or not context.process_lease_is_live():
        return False
    if not await leader_lease_matches(context.checkpoint_authority(), transition.leader):
        return False
    return await roster_is_current(context, transition.predecessor.participants, deadline=deadline)


async def _no_decision_yet(authority: LeaderLeaseStore, target_version: int) -> bool:
    try:
        decision = await assignment_drain_decision(authority, target_version)
    except Refused:
        return False  # a recovery decision settled this version
    return decision is None


async def quorum_reached(
    context: AckContext, transition: AssignmentDrainTransition, *, deadline: float
) -> bool:
    """RB §4.6: True only when every quorum condition holds (the caller bounds the deadline)."""
    if not await _installed_and_led(context, transition, deadline):
        return False
    acks = await read_drain_acks(context.store, context.clock, deadline=deadline)
    if acked_participants(acks, transition) != frozenset(transition.predecessor.participants):
        return False
    head = await context.snapshot_store().load()
    if head is None or not head.draining or head.drain_transition != transition:
        return False
    # Re-verified after the reads: a restart or a new leader term in between breaks quorum.
    if not await _installed_and_led(context, transition, deadline):
        return False
    authority = context.checkpoint_authority()
    if not await _no_decision_yet(authority, transition.target.assignment_version):
        return False
    return context.checkpoint_drain_transition() == transition and context.process_lease_is_live()

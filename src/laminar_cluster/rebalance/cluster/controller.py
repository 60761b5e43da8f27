"""`StoreClusterController`: the `ClusterController` of one process over the object store
(RB §6.3, RB §2.7, RB §4.6, RB §9 "Self in membership").

Its parts, each injected so tests and simulations drive it:

* identity: the node id and the boot of an acquired `ProcessLeaseHolder`;
* membership: one `Discovery`, polled by `refresh_members` (and `run`); the view includes this
  node itself, so a draining leader that still owns vnodes sees itself as a live owner (RB §9);
* leadership: a `Leadership` (the `LeaderLeaseManager`, or `FixedLeadership` in tests);
* the leader authority (`LeaderLeaseStore`) and the `AssignmentSnapshotStore`;
* durable per-process slots (`rebalance.cluster.slots`), process fencing
  (`rebalance.cluster.process_takeover`) and the ack quorum (`rebalance.cluster.drain_acks`).

In-memory state: the published checkpoint fence and drain transition (RB §6.3 slots), the recovery
flag, the unresponsive quarantine keyed by exact (node, boot), and the fault request counter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Final, Protocol

from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore
from laminar_cluster.authority.recovery_faults import Superseded, record_recovery_fault
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import Fenced, InvalidArgument, LaminarError, Refused
from laminar_cluster.fencing import (
    CheckpointAssignmentFence,
    FenceParticipant,
    LeaderProof,
    fence_is_canonical,
)
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.records import (
    AssignmentDrainTransition,
    ProcessLeaseFence,
    RecoveryFaultPublisher,
)
from laminar_cluster.lease.validate_decisions import drain_transition_problem
from laminar_cluster.membership.discovery import Discovery, MembershipView, ObservedState
from laminar_cluster.membership.process_lease import ProcessLeaseHolder, read_node_record
from laminar_cluster.membership.records import NodeState
from laminar_cluster.rebalance.cluster import slots
from laminar_cluster.rebalance.cluster.drain_acks import leader_lease_matches, quorum_reached
from laminar_cluster.rebalance.cluster.members import VersionedMembers
from laminar_cluster.rebalance.cluster.process_takeover import ObservedLeases, fence_process
from laminar_cluster.rebalance.records import CheckpointAssignmentAdoption, DrainAck
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.store import ObjectStore

logger: Final = logging.getLogger(__name__)

_LIVE: Final = frozenset({ObservedState.JOINING, ObservedState.ACTIVE, ObservedState.DRAINING})
# The least time one membership poll of `run` may take, whatever its interval.
MEMBERS_POLL_TIMEOUT_S_MIN: Final = 1.0
_CHECKPOINT_CAPABLE: Final = frozenset({ObservedState.ACTIVE, ObservedState.DRAINING})


class Leadership(Protocol):
    """Leadership as the controller needs it; `LeaderLeaseManager` satisfies it."""

    def proof(self) -> LeaderProof | None: ...

    def grants_leadership(self) -> bool: ...


class FixedLeadership:
    """A settable `Leadership` for tests and simulations: leader exactly while a proof is set."""

    def __init__(self, proof: LeaderProof | None = None) -> None:
        self._proof = proof

    def set(self, proof: LeaderProof | None) -> None:
        self._proof = proof

    def proof(self) -> LeaderProof | None:
        return self._proof

    def grants_leadership(self) -> bool:
        return self._proof is not None


class StoreClusterController:
    """This process's `ClusterController` (RB §6.3) over one object store."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        clock: Clock,
        node_id: int,
        holder: ProcessLeaseHolder,
        discovery: Discovery,
        authority: LeaderLeaseStore,
        snapshots: AssignmentSnapshotStore,
        leadership: Leadership,
    ) -> None:
        if holder.node != node_id:
            raise InvalidArgument(f"process lease holder is for node {holder.node}, not {node_id}")
        self.store = store
        self.clock = clock
        self.node_id = node_id
        self.boot = holder.record.lease.owner  # InvalidArgument unless acquired
        self.process_term = holder.record.lease.term
        self._holder = holder
        self._discovery = discovery
        self._authority = authority
        self._snapshots = snapshots
        self._leadership = leadership
        self._members = VersionedMembers()
        self._view: MembershipView | None = None
        self._observed = ObservedLeases()
        self._quarantine: set[tuple[int, str]] = set()
        self._recovering = False
        self._stopped_recovery: AssignmentDrainTransition | None = None
        self._fault_requests = 0
        self._fence: CheckpointAssignmentFence | None = None
        self._transition: AssignmentDrainTransition | None = None
        self._slot_lock = asyncio.Lock()  # our own slot writes never race each other

    # -- identity ----------------------------------------------------------------------------
    def local_participant(self) -> FenceParticipant:
        return FenceParticipant(node_id=self.node_id, boot_incarnation=self.boot)

    def checkpoint_authority(self) -> LeaderLeaseStore:
        return self._authority

    def snapshot_store(self) -> AssignmentSnapshotStore:
        return self._snapshots

    def process_lease_is_live(self) -> bool:
        return self._holder.is_live()

    async def recovery_participant_incarnations(
        self, ids: Sequence[int], *, deadline: float
    ) -> tuple[FenceParticipant, ...]:
        """The current boot of every id, by node id; Refused (NO_LIVE_INCARNATION) naming the
        ids without a live member in the latest view."""
        found = await self.available_recovery_participant_incarnations(ids, deadline=deadline)
        missing = sorted(set(ids) - {participant.node_id for participant in found})
        if missing:
            raise Refused(
                "no live process incarnation for node(s) "
                + ", ".join(f"node-{n}" for n in missing),
                reason=Refusal.NO_LIVE_INCARNATION,
            )
        return found

    async def available_recovery_participant_incarnations(
        self, ids: Sequence[int], *, deadline: float
    ) -> tuple[FenceParticipant, ...]:
        """The current boot (the lease record's owner in the latest view) of each id whose member
        is joining, active or draining; others are omitted."""
        view = self._view
        found: list[FenceParticipant] = []
        for node in sorted(set(ids)):
            member = None if view is None else view.member(node)
            if member is not None and member.state in _LIVE:
                found.append(FenceParticipant(node_id=node, boot_incarnation=member.boot))
        return tuple(found)

    async def verify_current_process_incarnation(
        self, participant: FenceParticipant, *, deadline: float
    ) -> bool:
        """A fresh read: the node's lease names exactly this boot and it has not left."""
        what = f"verify node-{participant.node_id} incarnation"
        async with within_deadline(self.clock, deadline, what):
            stored = await read_node_record(self.store, participant.node_id)
        if stored is None:
            return False
        self._observed.note(stored.record)
        record = stored.record
        return record.lease.owner == participant.boot_incarnation and record.state is not (
            NodeState.LEFT
        )

    async def fence_process_incarnation(
        self, participant: FenceParticipant, *, deadline: float
    ) -> ProcessLeaseFence:
        """Take over `participant`'s process lease (`rebalance.cluster.process_takeover`)."""
        return await fence_process(
            self.store, self.clock, participant, self._view, self._observed, deadline=deadline
        )

    def process_fencing_deadline(self, timeout_s: float) -> float:
        return self.clock.monotonic() + timeout_s

    # -- membership --------------------------------------------------------------------------
    def members_watch(self) -> VersionedMembers:
        return self._members

    def membership_view(self) -> MembershipView | None:
        """The latest discovery view (None before the first refresh)."""
        return self._view

    async def refresh_members(self, *, deadline: float) -> MembershipView:
        """One discovery poll; the watch's version moves only when the signature changes.
        Refused (SELF_NOT_A_MEMBER; nothing published) when the view lacks this node (RB §9)."""
        view = await self._discovery.poll(deadline=deadline)
        for problem in view.problems:
            logger.warning("membership: %s", problem)
        if view.member(self.node_id) is None:
            # RB §9: self must be a member, or a draining leader would treat itself as lost.
            raise Refused(
                f"membership view does not list this node (node-{self.node_id})",
                reason=Refusal.SELF_NOT_A_MEMBER,
            )
        for member in view.members:
            self._observed.note(member.record)
        self._view = view
        self._members.publish(view)
        return view

    async def run(self, shutdown: asyncio.Event, poll_s: float) -> None:
        """Refresh the members every `poll_s` until `shutdown`; a failed poll is only logged.
        One poll may take up to `max(poll_s, MEMBERS_POLL_TIMEOUT_S_MIN)`: a busy process whose
        polls all outlived a short `poll_s` kept a stale view for good."""
        if not poll_s > 0:
            raise InvalidArgument(f"members poll interval {poll_s} s must be > 0")
        try:
            while not shutdown.is_set():
                now_s = self.clock.monotonic()
                next_s = now_s + poll_s
                try:
                    await self.refresh_members(
                        deadline=now_s + max(poll_s, MEMBERS_POLL_TIMEOUT_S_MIN)
                    )
                except LaminarError as error:
                    logger.warning("node-%d: membership refresh failed: %s", self.node_id, error)
                if shutdown.is_set():
                    return
                try:
                    async with self.clock.timeout_at(next_s):
                        await shutdown.wait()
                except TimeoutError:
                    pass
        finally:
            self._members.close()

    def assignable_instances(self) -> tuple[int, ...]:
        """Active members (this node too, only while active), sorted and unique (RB §6.3)."""
        view = self._view
        if view is None:
            return ()
        return tuple(sorted({m.node for m in view.members if m.state is ObservedState.ACTIVE}))

    def checkpoint_instances(self) -> tuple[int, ...]:
        """Active or draining members plus this node (RB §6.3)."""
        view = self._view
        members = () if view is None else view.members
        capable = {m.node for m in members if m.state in _CHECKPOINT_CAPABLE}
        return tuple(sorted(capable | {self.node_id}))

    def _current_boot(self, node: int) -> str | None:
        member = None if self._view is None else self._view.member(node)
        return None if member is None else member.boot

    def note_unresponsive(self, node: int) -> None:
        """Quarantine `node`'s current boot (it missed a capture quorum); a new boot is clean."""
        boot = self._current_boot(node)
        if boot is None:
            logger.info("node-%d: unresponsive but not in membership; nothing to quarantine", node)
            return
        self._quarantine = {(n, b) for n, b in self._quarantine if n != node}
        self._quarantine.add((node, boot))

    def is_unresponsive(self, node: int) -> bool:
        boot = self._current_boot(node)
        return boot is not None and (node, boot) in self._quarantine

    def admit_successor_process(self, participant: FenceParticipant) -> bool:
        """False for a quarantined exact (node, boot); any other boot of the node clears it."""
        key = (participant.node_id, participant.boot_incarnation)
        if key in self._quarantine:
            return False
        self._quarantine = {(n, b) for n, b in self._quarantine if n != participant.node_id}
        return True

    # -- leadership --------------------------------------------------------------------------
    def is_leader(self) -> bool:
        return self._leadership.grants_leadership()

    def capture_leader_proof(self) -> LeaderProof | None:
        return self._leadership.proof() if self.is_leader() else None

    def proof_is_live(self, proof: LeaderProof) -> bool:
        return self.capture_leader_proof() == proof

    # -- recovery mode -----------------------------------------------------------------------
    def is_recovering(self) -> bool:
        return self._recovering or not self.process_lease_is_live()

    def set_recovering(self, recovering: bool) -> None:
        self._recovering = recovering
        if not recovering:
            self._stopped_recovery = None

    def request_stopped_recovery(self, transition: AssignmentDrainTransition) -> None:
        self._stopped_recovery = transition

    def stopped_recovery_request(self) -> AssignmentDrainTransition | None:
        return self._stopped_recovery

    async def publish_local_recovery_fault(self, *, deadline: float) -> None:
        """Report a fault of this exact process term (a new request sequence per call); Fenced
        (NEWER_PROCESS_TERM) when a newer process term of this node already reported."""
        self._fault_requests += 1
        publisher = RecoveryFaultPublisher(
            participant=self.local_participant(), process_term=self.process_term
        )
        result = await record_recovery_fault(
            self._authority, publisher, self._fault_requests, deadline=deadline
        )
        if isinstance(result, Superseded):
            raise Fenced(
                f"node-{self.node_id} process term {self.process_term}: a newer process term "
                "already reported a recovery fault",
                reason=Refusal.NEWER_PROCESS_TERM,
            )

    # -- local fence and transition slots (RB §6.3) ---------------------------------------------
    def publish_checkpoint_assignment_fence(self, fence: CheckpointAssignmentFence | None) -> None:
        self._fence = fence if self.process_lease_is_live() else None

    def certify_owner_map(self, version: int) -> CheckpointAssignmentFence | None:
        """The published fence only if canonical, at `version`, naming this boot if it names
        this node at all, and every participant checkpoint-capable (active or draining in the
        latest view, as that exact boot)."""
        fence = self._fence
        if fence is None or not self.process_lease_is_live():
            return None
        if fence.assignment_version != version or not fence_is_canonical(fence):
            return None
        if fence.participant_incarnation(self.node_id) not in (None, self.boot):
            return None
        if not all(self._checkpoint_capable(p) for p in fence.participants):
            return None
        return fence

    def _checkpoint_capable(self, participant: FenceParticipant) -> bool:
        if participant.node_id == self.node_id:
            return participant.boot_incarnation == self.boot
        member = None if self._view is None else self._view.member(participant.node_id)
        return (
            member is not None
            and member.state in _CHECKPOINT_CAPABLE
            and member.boot == participant.boot_incarnation
        )

    def publish_checkpoint_drain_transition(
        self, transition: AssignmentDrainTransition | None
    ) -> None:
        self._transition = transition

    def checkpoint_drain_transition(self) -> AssignmentDrainTransition | None:
        return self._transition

    def clear_checkpoint_drain_transition_if_matches(
        self, transition: AssignmentDrainTransition
    ) -> bool:
        if self._transition != transition:
            return False
        self._transition = None
        return True

    # -- durable per-process slots -----------------------------------------------------------
    async def announce_drain_ack(
        self, transition: AssignmentDrainTransition, *, deadline: float
    ) -> None:
        """RB §4.6 step 4: check, then write this process's drain ack with exact read-back.
        Refusals: a non-canonical transition is InvalidArgument; a boot that is no longer its
        node's current process is Fenced; the rest are Refused (NOT_A_PREDECESSOR_PARTICIPANT,
        TRANSITION_DIFFERS, PROCESS_LEASE_NOT_LIVE, DRAIN_LEADER_SUPERSEDED)."""
        async with within_deadline(self.clock, deadline, f"node-{self.node_id}: drain ack"):
            await self._check_drain_ack(transition, deadline)
            ack = DrainAck(version=1, participant=self.local_participant(), transition=transition)
            async with self._slot_lock:
                await slots.write_process_slot(self.store, self.clock, ack, deadline=deadline)

    async def _check_drain_ack(
        self, transition: AssignmentDrainTransition, deadline: float
    ) -> None:
        problem = drain_transition_problem(transition)
        if problem is not None:
            raise InvalidArgument(f"drain ack refused: the transition is not canonical: {problem}")
        if transition.predecessor.participant_incarnation(self.node_id) != self.boot:
            raise Refused(
                f"drain ack refused: node-{self.node_id} boot {self.boot} is not an exact "
                "predecessor participant",
                reason=Refusal.NOT_A_PREDECESSOR_PARTICIPANT,
            )
        if self._transition != transition:
            raise Refused(
                "drain ack refused: the locally installed transition differs",
                reason=Refusal.TRANSITION_DIFFERS,
            )
        if not self.process_lease_is_live():
            raise _lease_not_live("drain ack")
        if not await leader_lease_matches(self._authority, transition.leader):
            raise Refused(
                "drain ack refused: the durable leader lease no longer matches the transition's "
                "leader",
                reason=Refusal.DRAIN_LEADER_SUPERSEDED,
            )
        if not await self.verify_current_process_incarnation(
            self.local_participant(), deadline=deadline
        ):
            raise Fenced(
                f"drain ack refused: boot {self.boot} is no longer node-{self.node_id}'s current "
                "process"
            )

    async def drain_ack_quorum_reached(
        self, transition: AssignmentDrainTransition, *, deadline: float
    ) -> bool:
        """Every RB §4.6 quorum condition (`rebalance.cluster.drain_acks.quorum_reached`)."""
        async with within_deadline(self.clock, deadline, "drain ack quorum"):
            return await quorum_reached(self, transition, deadline=deadline)

    async def read_adopted_assignments(
        self, *, deadline: float
    ) -> tuple[CheckpointAssignmentAdoption, ...]:
        return await slots.read_adopted_assignments(self.store, self.clock, deadline=deadline)

    async def announce_adopted_assignment(
        self, adoption: CheckpointAssignmentAdoption, *, deadline: float
    ) -> None:
        """Write this process's adoption report (its own slot only) with exact read-back."""
        if adoption.participant != self.local_participant():
            raise InvalidArgument(
                f"adoption report of node-{adoption.participant.node_id} boot "
                f"{adoption.participant.boot_incarnation} is not this process's "
                f"(node-{self.node_id} boot {self.boot})"
            )
        if not self.process_lease_is_live():
            raise _lease_not_live("adoption report")
        async with (
            within_deadline(self.clock, deadline, f"node-{self.node_id}: adoption report"),
            self._slot_lock,
        ):
            await slots.write_process_slot(self.store, self.clock, adoption, deadline=deadline)


def _lease_not_live(what: str) -> Refused:
    """This process's lease is not live now (it may be again after a renewal)."""
    return Refused(
        f"{what} refused: the process lease is not live", reason=Refusal.PROCESS_LEASE_NOT_LIVE
    )

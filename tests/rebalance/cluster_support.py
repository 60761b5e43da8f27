"""An N-node cluster in one process for rebalance scenario tests (RB §7).

One object store and one `SimulatedClock` are shared by every node. Each node is one process
incarnation: an acquired and activated `ProcessLeaseHolder`, its own `Discovery`, its own
`LeaderLeaseStore` facade (with a `DecisionStore`) over the shared store, a `FixedLeadership`
and a `StoreClusterController`. Nothing here knows the engine: scenario tests add one per node.

Typical use::

    cluster = await Cluster.start(store, clock, (1, 2, 3))
    proof = await cluster.elect(1)
    await cluster.seed([1, 2, 1, 2])
    await cluster.refresh()
    controller = cluster.controller(1)

Time moves only through `advance`, which keeps every running node's process lease renewed (and
every view fresh) unless the node was `stop`ped, which is how a test kills a process.
`adoption_report` and `exists` are small builders and reads the scenario modules share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from laminar_cluster.assignment.model import validate_snapshot
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.errors import ObjectNotFound
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.outcomes import Acquired
from laminar_cluster.lease.records import LeaderLeaseOwner
from laminar_cluster.membership import Discovery, ProcessLeaseHolder, activate
from laminar_cluster.rebalance.cluster.controller import FixedLeadership, StoreClusterController
from laminar_cluster.rebalance.records import CheckpointAssignmentAdoption
from laminar_cluster.store import ObjectStore

PROCESS_TTL_S = 10.0
AUTHORITY_TTL_S = 5.0
FAR_S = 60.0


@dataclass
class ClusterNode:
    """One process incarnation of one node id."""

    node_id: int
    holder: ProcessLeaseHolder
    discovery: Discovery
    authority: LeaderLeaseStore
    leadership: FixedLeadership
    controller: StoreClusterController

    @property
    def boot(self) -> str:
        return self.controller.boot

    @property
    def process_term(self) -> int:
        return self.controller.process_term

    @property
    def participant(self) -> FenceParticipant:
        return self.controller.local_participant()

    @property
    def owner(self) -> LeaderLeaseOwner:
        """This incarnation as a leader lease owner."""
        return LeaderLeaseOwner(node=self.node_id, boot=self.boot, process_term=self.process_term)


class Cluster:
    """Nodes by id; `stopped` nodes are no longer renewed by `advance` (a killed process)."""

    def __init__(
        self,
        store: ObjectStore,
        clock: SimulatedClock,
        *,
        process_ttl_s: float = PROCESS_TTL_S,
        authority_ttl_s: float = AUTHORITY_TTL_S,
    ) -> None:
        self.store = store
        self.clock = clock
        self.process_ttl_s = process_ttl_s
        self.authority_ttl_s = authority_ttl_s
        self.snapshots = AssignmentSnapshotStore(store)
        self.nodes: dict[int, ClusterNode] = {}
        self.stopped: set[int] = set()
        # Earlier incarnations replaced by `restart`, oldest first (zombies for fencing tests).
        self.retired: list[ClusterNode] = []

    @classmethod
    async def start(
        cls, store: ObjectStore, clock: SimulatedClock, node_ids: Iterable[int], **kwargs: float
    ) -> Cluster:
        """Start every node (acquired and active), then refresh every view once."""
        cluster = cls(store, clock, **kwargs)
        for node_id in node_ids:
            await cluster.add(node_id)
        await cluster.refresh()
        return cluster

    def deadline(self, seconds: float = FAR_S) -> float:
        return self.clock.monotonic() + seconds

    def node(self, node_id: int) -> ClusterNode:
        return self.nodes[node_id]

    def controller(self, node_id: int) -> StoreClusterController:
        return self.nodes[node_id].controller

    async def add(self, node_id: int, *, active: bool = True) -> ClusterNode:
        """Start a new process of `node_id` (a new boot; the next process term)."""
        holder = ProcessLeaseHolder(self.store, self.clock, node_id, ttl_s=self.process_ttl_s)
        await holder.acquire(deadline=self.deadline())
        if active:
            await activate(holder, deadline=self.deadline())
        discovery = Discovery(self.store, self.clock)
        authority = LeaderLeaseStore(
            self.store,
            clock=self.clock,
            ttl_s=self.authority_ttl_s,
            decisions=DecisionStore(self.store, clock=self.clock),
        )
        leadership = FixedLeadership()
        controller = StoreClusterController(
            store=self.store,
            clock=self.clock,
            node_id=node_id,
            holder=holder,
            discovery=discovery,
            authority=authority,
            snapshots=self.snapshots,
            leadership=leadership,
        )
        node = ClusterNode(node_id, holder, discovery, authority, leadership, controller)
        previous = self.nodes.get(node_id)
        if previous is not None:
            self.retired.append(previous)
        self.nodes[node_id] = node
        self.stopped.discard(node_id)
        return node

    async def restart(self, node_id: int, *, active: bool = True) -> ClusterNode:
        """A new process of `node_id` takes over its lease (new boot); the old incarnation is
        moved to `retired`, is no longer renewed, and its next renewal is fenced."""
        return await self.add(node_id, active=active)

    def stop(self, node_id: int) -> None:
        """Kill `node_id`'s process: `advance` no longer renews its lease."""
        self.stopped.add(node_id)

    async def refresh(self) -> None:
        """One membership refresh on every running node's controller."""
        for node_id, node in sorted(self.nodes.items()):
            if node_id not in self.stopped:
                await node.controller.refresh_members(deadline=self.deadline())

    async def renew(self) -> None:
        """Renew every running node's process lease once."""
        for node_id, node in sorted(self.nodes.items()):
            if node_id not in self.stopped:
                await node.holder.renew(deadline=self.deadline())

    async def advance(self, seconds: float, *, step_s: float | None = None) -> None:
        """Move the clock by `seconds` in steps of at most a quarter process ttl; after each
        step, renew the running nodes' leases and refresh their views."""
        step_s = self.process_ttl_s / 4 if step_s is None else step_s
        remaining = seconds
        while remaining > 0:
            moved = min(step_s, remaining)
            await self.clock.step(moved)
            remaining -= moved
            await self.renew()
            await self.refresh()

    async def elect(self, node_id: int, *, driven: bool = False) -> LeaderProof:
        """Begin a real leader term in the authority for `node_id`'s current boot and give
        that node the proof; every other node loses leadership. A rival's term is taken over
        after observing it for a full authority ttl (`advance`; with `driven`, a sleep on the
        clock, for a caller inside `drive` whose own tasks renew the leases)."""
        node = self.nodes[node_id]
        outcome = await node.authority.begin_new_term(node.owner, deadline=self.deadline())
        if not isinstance(outcome, Acquired):
            observation = node.authority.observe_rival(node.owner, outcome.lease)
            if driven:
                await self.clock.sleep(self.authority_ttl_s + 0.5)
            else:
                await self.advance(self.authority_ttl_s + 0.5)
            outcome = await node.authority.try_takeover(
                node.owner, observation, deadline=self.deadline()
            )
        assert isinstance(outcome, Acquired), outcome
        proof = outcome.lease.proof()
        for other in self.nodes.values():
            other.leadership.set(proof if other is node else None)
        return proof

    def participants(self, node_ids: Iterable[int]) -> tuple[FenceParticipant, ...]:
        """The current participants of `node_ids`, by node id."""
        return tuple(self.nodes[n].participant for n in sorted(set(node_ids)))

    async def seed(self, owners: Sequence[int]) -> AssignmentSnapshot:
        """Save v1 with `owners` and participants = the owners' current boots."""
        snapshot = AssignmentSnapshot(
            version=1,
            assignment_version=1,
            owners=tuple(owners),
            participants=self.participants(owners),
            updated_at_ms=self.clock.wall_ms(),
            draining=False,
            drain_transition=None,
        )
        validate_snapshot(snapshot)
        saved = await self.snapshots.save_if_absent(snapshot)
        assert saved == snapshot, "a different v1 is already seeded"
        return snapshot


def adoption_report(
    fence: CheckpointAssignmentFence, participant: FenceParticipant, *, ready: bool
) -> CheckpointAssignmentAdoption:
    """`participant`'s report of having adopted exactly `fence`'s map (ready or not)."""
    return CheckpointAssignmentAdoption(
        version=1,
        participant=participant,
        assignment_version=fence.assignment_version,
        vnode_count=fence.vnode_count,
        assignment_digest=fence.assignment_digest,
        vnode_state_ready=ready,
    )


async def exists(store: ObjectStore, key: str) -> bool:
    """Whether `key` is in `store` (a HEAD)."""
    try:
        await store.head(key)
    except ObjectNotFound:
        return False
    return True

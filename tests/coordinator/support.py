"""A distributed checkpoint cluster in one process: a real leader authority (a term begun with
`begin_new_term`), a real DecisionStore, a `ClusterCheckpointer` for node 1 (the leader) and one
`CheckpointParticipant` per node over a fake `CheckpointHost` (below), on memory:// or file://.

Boots are UUID(int=node*11) (tests.assignment.snapshot_support); a restarted node gets another.
The fake host's cut is deterministic: vnode v of node n at attempt a holds the state
`n{n}v{v}a{a}` and offsets {v: 1000*a + v}; its output is `out-{n}-{a}`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.coordinator.artifact_floor import DEFAULT_FLOOR_POLICY, ArtifactFloorPolicy
from laminar_cluster.coordinator.host import Cut, VnodeCut
from laminar_cluster.coordinator.leader import ClusterCheckpointer
from laminar_cluster.coordinator.objects import RECORD_VERSION, encode_record
from laminar_cluster.coordinator.participant import CheckpointParticipant
from laminar_cluster.coordinator.paths import prepare_path
from laminar_cluster.coordinator.records import CheckpointPrepare
from laminar_cluster.errors import Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import MAX_LIVE_AUTHORITY_LINKS
from laminar_cluster.lease.outcomes import Acquired
from laminar_cluster.lease.records import LeaderLeaseOwner
from laminar_cluster.store import CREATE, ObjectStore, open_store
from tests.assignment.snapshot_support import participant, snapshot

TTL_S = 60.0
POLL_S = 0.005


@dataclass
class FakeHost:
    """A `CheckpointHost` that records its cuts and resolutions."""

    me: FenceParticipant
    fence: CheckpointAssignmentFence | None
    vnodes: tuple[int, ...]
    refuse: bool = False
    block_resolve: bool = False  # resolve never returns (a crash after the outcome)
    empty: dict[int, dict[int, int]] = field(default_factory=dict)  # vnode -> offsets: no state
    cuts: list[CheckpointAttempt] = field(default_factory=list)
    resolutions: list[tuple[CheckpointAttempt, bool]] = field(default_factory=list)

    def local_participant(self) -> FenceParticipant:
        return self.me

    def running_fence(self) -> CheckpointAssignmentFence | None:
        return self.fence

    async def cut(self, prepare: CheckpointPrepare, *, deadline: float) -> Cut:
        if self.refuse:
            raise Refused(f"node {self.me.node_id} refuses the cut")
        self.cuts.append(prepare.attempt)
        cut = expected_cut(self.me.node_id, self.vnodes, prepare.attempt.checkpoint_id)
        vnodes = dict(cut.vnodes)
        for vnode, offsets in self.empty.items():
            vnodes[vnode] = VnodeCut(state=None, offsets=offsets)
        return Cut(vnodes=vnodes, output=cut.output)

    async def resolve(
        self, attempt: CheckpointAttempt, committed: bool, *, deadline: float
    ) -> None:
        if self.block_resolve:
            await asyncio.Event().wait()
        self.resolutions.append((attempt, committed))


def expected_cut(node_id: int, vnodes: Sequence[int], checkpoint_id: int) -> Cut:
    return Cut(
        vnodes={
            v: VnodeCut(
                state=f"n{node_id}v{v}a{checkpoint_id}".encode(),
                offsets={v: 1000 * checkpoint_id + v},
            )
            for v in vnodes
        },
        output=f"out-{node_id}-{checkpoint_id}".encode(),
    )


@dataclass
class Cluster:
    url: str
    clock: Clock
    store: ObjectStore
    decisions: DecisionStore
    authority: LeaderLeaseStore
    proof: LeaderProof
    owners: tuple[int, ...]
    fence: CheckpointAssignmentFence
    leader: ClusterCheckpointer
    hosts: dict[int, FakeHost] = field(default_factory=dict)

    def deadline(self, seconds: float = 20.0) -> float:
        return self.clock.monotonic() + seconds

    def vnodes_of(self, node_id: int) -> tuple[int, ...]:
        return tuple(v for v, owner in enumerate(self.owners) if owner == node_id)

    def client(self) -> tuple[ObjectStore, DecisionStore, LeaderLeaseStore]:
        """Another process's view of the same store: its own store client and authority."""
        store = self.store if self.url == "memory://" else open_store(self.url)
        decisions = DecisionStore.shared(store, clock=self.clock)
        authority = LeaderLeaseStore(store, clock=self.clock, ttl_s=TTL_S, decisions=decisions)
        return store, decisions, authority

    def host(self, node_id: int, *, boot: int | None = None, **options: object) -> FakeHost:
        me = participant(node_id, boot)
        fence = self.fence if boot is None else None
        host = FakeHost(me, fence, self.vnodes_of(node_id), **options)  # type: ignore[arg-type]
        self.hosts[node_id] = host
        return host

    def participant(
        self, host: FakeHost, *, decision_timeout_s: float = 10.0
    ) -> CheckpointParticipant:
        store, _, authority = self.client()
        return CheckpointParticipant(
            store, self.clock, authority, host, POLL_S, decision_timeout_s=decision_timeout_s
        )

    @asynccontextmanager
    async def running(self, participants: Sequence[CheckpointParticipant]) -> AsyncIterator[None]:
        """The participants' `run` loops, stopped on exit."""
        shutdown = asyncio.Event()
        async with asyncio.TaskGroup() as group:
            for p in participants:
                group.create_task(p.run(shutdown))
            try:
                yield
            finally:
                shutdown.set()


async def make_cluster(
    url: str,
    owners: Sequence[int] = (1, 1, 1, 2, 2, 2, 3, 3),
    *,
    clock: Clock | None = None,
    live_commits_max: int = MAX_LIVE_AUTHORITY_LINKS,
    floor_policy: ArtifactFloorPolicy | None = DEFAULT_FLOOR_POLICY,
) -> Cluster:
    """`live_commits_max` lowers the leader authority's LA-21 bound (DC-14 tests reach it with a
    few checkpoints); `floor_policy` is the leader's (None: the artifact floor never moves)."""
    clock = clock or RealClock()
    store = open_store(url)
    decisions = DecisionStore.shared(store, clock=clock)
    authority = LeaderLeaseStore(
        store,
        clock=clock,
        ttl_s=TTL_S,
        decisions=decisions,
        live_commit_links_max=live_commits_max,
    )
    me = participant(1)
    owner = LeaderLeaseOwner(node=1, boot=me.boot_incarnation, process_term=1)
    began = await authority.begin_new_term(owner, deadline=clock.monotonic() + 30.0)
    assert isinstance(began, Acquired)
    proof = began.lease.proof()
    current = snapshot(1, list(owners))
    fence = snapshot_fence(current)
    holder: list[LeaderProof] = [proof]
    leader = ClusterCheckpointer(
        decisions,
        authority,
        proof=lambda: holder[0],
        owners_of=lambda f: current.owners if f == fence else None,
        poll_s=POLL_S,
        abort_reserve_s=0.5,
        floor_policy=floor_policy,
    )
    return Cluster(url, clock, store, decisions, authority, proof, tuple(owners), fence, leader)


async def write_prepare(cluster: Cluster, proof: LeaderProof | None = None) -> CheckpointAttempt:
    """A prepare of the cluster's fence, as a leader writes it (no leader waits for acks)."""
    checkpoint_id = await cluster.decisions.allocate_checkpoint_id(deadline=cluster.deadline())
    attempt = CheckpointAttempt.canonical(checkpoint_id)
    prepare = CheckpointPrepare(
        version=RECORD_VERSION,
        attempt=attempt,
        fence=cluster.fence,
        leader_proof=proof or cluster.proof,
        drain_transition=None,
    )
    key = prepare_path(checkpoint_id)
    await cluster.store.put(key, encode_record(prepare, key=key), CREATE)
    return attempt

"""`RebalanceContext`: what every rebalance procedure works with, for one process."""

from __future__ import annotations

from dataclasses import dataclass, field

from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore
from laminar_cluster.clock import Clock
from laminar_cluster.fencing import FenceParticipant
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.rebalance.config import RebalanceConfig
from laminar_cluster.rebalance.interfaces import ClusterController, RebalanceEngine


@dataclass(slots=True)
class AttemptMark:
    """Set by `try_rebalance` when an attempt found nothing to do that only a change of its
    inputs could undo (no live or admitted successor, or a plan equal to the head), as opposed
    to an attempt that deferred (waiting for reports, a drain, a recovery)."""

    idle: bool = False


@dataclass(frozen=True, slots=True)
class RebalanceContext:
    controller: ClusterController
    engine: RebalanceEngine
    snapshots: AssignmentSnapshotStore
    config: RebalanceConfig
    vnode_count: int
    attempt: AttemptMark = field(default_factory=AttemptMark)

    @property
    def clock(self) -> Clock:
        return self.controller.clock

    @property
    def authority(self) -> LeaderLeaseStore:
        return self.controller.checkpoint_authority()

    @property
    def me(self) -> FenceParticipant:
        return self.controller.local_participant()

    def deadline_in(self, seconds: float) -> float:
        return self.clock.monotonic() + seconds

    def head_deadline(self) -> float:
        """`now + checkpoint_timeout`: the budget of head loads, audits and lock waits."""
        return self.deadline_in(self.config.checkpoint_timeout_s)

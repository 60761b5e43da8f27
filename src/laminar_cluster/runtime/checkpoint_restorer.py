"""`CheckpointRestorer`: the store-backed `Restorer` of the `VnodeHost` (rebalance/engine/
restores.py for the rules; docs/protocols/distributed-checkpoint.md "Restore")."""

from __future__ import annotations

from laminar_cluster.authority.cluster_outcome_reads import highest_cluster_committed_outcome
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import RecoveryCapsuleRef
from laminar_cluster.clock import within_deadline
from laminar_cluster.coordinator.restore import load_cuts
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.rebalance.engine.restores import (
    InitialRestore,
    RecoveryRestore,
    RestoredCuts,
    RestoreSource,
)
from laminar_cluster.store import ObjectStore


class CheckpointRestorer:
    """Restores from the store: the capsule of the latest cluster Commit (handoff) or the
    recovery checkpoint, through `coordinator.restore.load_cuts` (every partial checked against
    the capsule and its participant's manifest; CorruptRecord otherwise)."""

    def __init__(
        self, store: ObjectStore, decisions: DecisionStore, authority: LeaderLeaseStore
    ) -> None:
        self.store = store
        self.decisions = decisions
        self.authority = authority
        self.last_checkpoint: RecoveryCapsuleRef | None = None  # the last one restored from

    async def __call__(
        self, source: RestoreSource, vnodes: tuple[int, ...], *, deadline: float
    ) -> RestoredCuts:
        if isinstance(source, InitialRestore):
            return dict.fromkeys(vnodes)  # the initial state: start empty at 0
        if isinstance(source, RecoveryRestore):
            ref = source.checkpoint
        else:
            what = "latest committed cluster checkpoint"
            async with within_deadline(self.authority.clock, deadline, what):
                outcome = await highest_cluster_committed_outcome(self.authority)
            if outcome is None:
                return dict.fromkeys(vnodes)  # nothing committed yet: start empty at 0
            if outcome.recovery_capsule is None:  # never passes outcome validation
                raise CorruptRecord(f"cluster Commit {outcome.checkpoint_id} has no capsule")
            ref = outcome.recovery_capsule
        cuts = await load_cuts(self.store, self.decisions, ref, vnodes, deadline=deadline)
        self.last_checkpoint = ref
        return cuts

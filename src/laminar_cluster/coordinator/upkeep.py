"""The leader's upkeep around a checkpoint call (docs/protocols/distributed-checkpoint.md,
leader steps L0, L8, L9, L10; DC-12, DC-13, DC-14): the sink commit markers (`sink_commits`),
the retention of attempt objects (`retention`) and the authority's artifact floor
(`artifact_floor`).

All of it is best effort: a failure is logged and never changes the call's result (the Commit
is durable; the next call repairs a missing marker, resumes the retention walk and retries the
floor).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from laminar_cluster.authority.cluster_outcome_reads import cluster_outcomes
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import CheckpointOutcome
from laminar_cluster.clock import within_deadline
from laminar_cluster.coordinator.artifact_floor import (
    ArtifactFloorKeeper,
    ArtifactFloorPolicy,
    FloorStep,
)
from laminar_cluster.coordinator.retention import AttemptRetention, RetentionStep, deletes_per_step
from laminar_cluster.coordinator.sink_commits import SinkCommitWriter
from laminar_cluster.errors import LaminarError
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.rebalance.node.stats import counted_as
from laminar_cluster.store import ObjectStore

logger = logging.getLogger(__name__)


class LeaderUpkeep:
    """One leader instance's markers and retention walk (module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        decisions: DecisionStore,
        authority: LeaderLeaseStore,
        floor_policy: ArtifactFloorPolicy | None = None,
    ) -> None:
        """`floor_policy` None: the artifact floor is never moved (Commits stop at LA-21's
        bound)."""
        self.authority = authority
        self.clock = authority.clock
        self.sink_commits = SinkCommitWriter(store, decisions)
        self.retention = AttemptRetention(store, authority)
        self.floor = (
            None
            if floor_policy is None
            else ArtifactFloorKeeper(
                store,
                decisions,
                authority,
                floor_policy,
                walked_below=lambda: self.retention.walked_below,
            )
        )

    async def repair_markers(self) -> int:
        """L0, DC-12: the markers of the live Commits above the newest one known marked; the
        number written."""
        try:
            written = await self.sink_commits.repair(await cluster_outcomes(self.authority))
        except LaminarError as error:
            logger.warning("sink commit marker repair failed: %s", error)
            return 0
        if written:
            logger.info("repaired the sink commit markers of checkpoints %s", written)
        return len(written)

    async def mark(
        self, outcome: CheckpointOutcome, outputs: Sequence[tuple[FenceParticipant, str]] | None
    ) -> None:
        """L8, DC-12: the marker of the Commit this call recorded."""
        try:
            await self.sink_commits.committed(outcome, outputs)
        except LaminarError as error:
            logger.warning(
                "checkpoint %d: sink commit marker not written: %s", outcome.checkpoint_id, error
            )

    async def retain(
        self,
        checkpoint_id: int,
        fence: CheckpointAssignmentFence,
        keep: frozenset[str],
        *,
        deadline: float,
    ) -> RetentionStep | None:
        """L9, DC-13: one retention step below our Commit, within half of the time left;
        `keep`: the state objects our Commit's slices name (DC-16)."""
        until = self.clock.monotonic() + (deadline - self.clock.monotonic()) / 2
        budget = deletes_per_step(len(fence.participants))
        try:
            async with within_deadline(self.clock, until, "attempt retention"):
                with counted_as("retention"):  # its requests are priced apart (bench cost)
                    return await self.retention.step(checkpoint_id, keep, max_deletes=budget)
        except LaminarError as error:
            logger.warning("attempt retention below checkpoint %d failed: %s", checkpoint_id, error)
            return None

    async def advance_floor(self, proof: LeaderProof, *, deadline: float) -> FloorStep | None:
        """L10, DC-14: one artifact floor step after our Commit, within half of the time left."""
        if self.floor is None:
            return None
        until = self.clock.monotonic() + (deadline - self.clock.monotonic()) / 2
        try:
            async with within_deadline(self.clock, until, "artifact floor step"):
                with counted_as("retention"):
                    step = await self.floor.step(proof, deadline=until)
        except LaminarError as error:
            logger.warning("artifact floor step failed: %s", error)
            return None
        if step.advanced and step.target is not None:
            logger.info(
                "artifact floor moved to epoch %d (held by %s)",
                step.artifact_before_epoch,
                step.target.held_by.value,
            )
        return step

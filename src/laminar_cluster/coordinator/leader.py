"""`ClusterCheckpointer`: the leader side of the distributed checkpoint
(docs/protocols/distributed-checkpoint.md, leader steps L1-L8; DC §1.7).

It implements `rebalance.engine.handoff_checkpoint.Checkpointer`, so it is what
`BaseEngine.checkpoint_until` runs, periodically and for the pre-rotation checkpoint:

1. checks: a leader proof, inside the fence; the drain transition starts at the fence; the
   owner map of the fence is known (as `LeaderCheckpointer`);
2. DC-7: settles the previous attempt of this instance that has no durable outcome (Abort), so
   that a newer prepare of the same term proves every older attempt closed;
3. DC-1: a fresh checkpoint ID above every outcome in the authority (decision-store allocation:
   never returned twice, so an aborted ID is never reused);
4. creates `prepare.json` (create-only), then overwrites the pointer participants poll
   (DC-18, best effort);
5. DC-3, DC-5, DC-16: waits until every fence participant's manifest is verified (`collect`: no
   state is read back), a participant is lost (DC-19), or the collection deadline (the
   caller's deadline less a reserve for recording the Abort);
6. all sealed: the `ClusterRecoveryCapsule` (each participant's manifest SHA-256 and vnodes, the
   union of the slices' source offsets, portable, chained to the previous committed capsule),
   then the cluster Commit outcome (DC-2: no Commit without every manifest verified);
7. a participant missing at the deadline or lost, or a manifest that cannot verify: the cluster
   Abort outcome (no capsule), success=False naming the nodes; either way the pointer then
   shows the verdict (best effort);
8. DC-12: after our Commit, the sink's `committed.json` marker; before step 2 of every call,
   the markers of live Commits a crashed leader left missing are repaired;
9. DC-13: after our Commit, one bounded retention step: the prepare and the state objects no
   longer referenced of older committed attempts, and every object of attempts that can never
   commit, deleted in batches;
10. DC-14: then one artifact floor step: with `floor_policy.trigger_commits` live Commits, the
   authority's artifact floor moves up to keep the newest `retained_commits`, never past the
   handoff pin, a Commit whose marker is not read back, or the retention walk.

Steps 8-10 are `upkeep.LeaderUpkeep`'s, best effort: they never change the call's result.
`quiet_basis` is the last call's periodic Commit (DC-21: what `quiet.QuietCheckpoints` needs to
skip the next periodic checkpoint of an idle cluster), None after any other call.

Calls are serialized. Expected failures come back as success=False, never raised; cancellation
propagates.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass

from laminar_cluster.authority.cluster_outcomes import (
    highest_cluster_committed_outcome,
    highest_cluster_terminal_outcome,
    record_cluster_outcome,
)
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointVerdict,
    Conflict,
    PipelineIdentity,
    RecoveryCapsuleRef,
)
from laminar_cluster.clock import within_deadline
from laminar_cluster.coordinator.artifact_floor import DEFAULT_FLOOR_POLICY, ArtifactFloorPolicy
from laminar_cluster.coordinator.collect import (
    AckCollector,
    Collection,
    LostParticipants,
    Sealed,
)
from laminar_cluster.coordinator.decide import capsule_of
from laminar_cluster.coordinator.objects import PREPARE_VERSION, encode_record
from laminar_cluster.coordinator.paths import prepare_path
from laminar_cluster.coordinator.pointer import WINDOW_FAST_POLLS_MAX, write_pointer
from laminar_cluster.coordinator.quiet import QuietBasis
from laminar_cluster.coordinator.records import CheckpointPrepare
from laminar_cluster.coordinator.slices import CommittedSlices
from laminar_cluster.coordinator.upkeep import LeaderUpkeep
from laminar_cluster.errors import (
    Contended,
    CorruptRecord,
    DeadlineExceeded,
    LaminarError,
    Refused,
    restated,
)
from laminar_cluster.fencing import CheckpointAssignmentFence, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.engine.handoff_checkpoint import (
    EMPTY_PIPELINE,
    OwnersOf,
    checkpoint_refusal,
)
from laminar_cluster.rebalance.interfaces import CheckpointResult
from laminar_cluster.store import CREATE, ObjectStore, put_resolved

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Unsettled:
    """An attempt of this instance whose outcome may still be missing (DC-7)."""

    attempt: CheckpointAttempt
    fence: CheckpointAssignmentFence
    proof: LeaderProof


@dataclass(frozen=True, slots=True)
class CheckpointStats:
    """What the last call did (metrics, benchmarks)."""

    checkpoint_id: int
    verdict: CheckpointVerdict | None  # None: no outcome recorded by this call
    duration_s: float
    polls: int
    missing: tuple[int, ...]
    markers_repaired: int = 0  # sink commit markers of earlier Commits written by this call
    deleted: int = 0  # attempt objects the retention step deleted
    retention_s: float = 0.0  # its duration (not in duration_s)
    artifact_floor: int | None = None  # the artifact floor after this call's step (DC-14)


class ClusterCheckpointer:
    """Drives one distributed checkpoint per call, as the leader (module docstring)."""

    def __init__(
        self,
        decisions: DecisionStore,
        authority: LeaderLeaseStore,
        proof: Callable[[], LeaderProof | None],
        owners_of: OwnersOf,
        *,
        poll_s: float = 0.05,
        store: ObjectStore | None = None,
        pipeline_identity: PipelineIdentity = EMPTY_PIPELINE,
        abort_reserve_s: float = 1.0,
        floor_policy: ArtifactFloorPolicy | None = DEFAULT_FLOOR_POLICY,
        lost: LostParticipants | None = None,
        pointed: Callable[[], None] | None = None,
        next_prepare: Callable[[], float | None] | None = None,
    ) -> None:
        """`lost`: the fence participants the node's membership view holds lost (DC-19: the
        collection aborts as soon as one of them has not acked); None never aborts early.
        `pointed`: called after each pointer write (the node wakes its own participant, DC-18).
        `next_prepare`: when (monotonic) the node's next periodic checkpoint is due, for the
        verdict pointer's hint (DC-18); None: no hint."""
        if poll_s <= 0 or abort_reserve_s <= 0:
            raise ValueError("poll_s and abort_reserve_s must be > 0")
        self.decisions = decisions
        self.authority = authority
        self.proof = proof
        self.owners_of = owners_of
        self.poll_s = poll_s
        self.store = store if store is not None else decisions.store
        self.pipeline_identity = pipeline_identity
        self.abort_reserve_s = abort_reserve_s
        self.clock = authority.clock
        self.last: CheckpointStats | None = None
        self._pointed = pointed
        self._next_prepare = next_prepare
        self._hinted_s: float | None = None  # the due the last verdict pointer named (DC-18)
        self.quiet_basis: QuietBasis | None = None  # DC-21: the last call's periodic Commit
        self._lock = asyncio.Lock()
        self._unsettled: _Unsettled | None = None
        self._recorded: CheckpointVerdict | None = None  # the outcome of the current attempt
        self.collector = AckCollector(self.store, decisions, poll_s, lost)
        self.upkeep = LeaderUpkeep(self.store, decisions, authority, floor_policy)

    async def __call__(
        self,
        fence: CheckpointAssignmentFence,
        transition: AssignmentDrainTransition | None,
        *,
        deadline: float,
    ) -> CheckpointResult:
        try:
            async with within_deadline(self.clock, deadline, "cluster checkpoint"), self._lock:
                self.quiet_basis, proof = None, self.proof()
                result = await self._checkpoint(fence, transition, deadline=deadline)
                if result.success and transition is None and proof is not None:
                    self.quiet_basis = QuietBasis(result.checkpoint_id, fence, proof.fencing_token)
                return result
        except LaminarError as error:
            return _failed(restated(error, f"cluster checkpoint failed: {error}"))

    async def _checkpoint(
        self,
        fence: CheckpointAssignmentFence,
        transition: AssignmentDrainTransition | None,
        *,
        deadline: float,
    ) -> CheckpointResult:
        proof, owners = self.proof(), self.owners_of(fence)
        refusal = checkpoint_refusal(fence, transition, proof, owners)
        if refusal is not None:
            return _failed(restated(refusal, f"cluster checkpoint failed: {refusal}"))
        assert proof is not None and owners is not None  # refused otherwise
        marks = [self.clock.monotonic()]  # the phases' ends, for the log (`_log_phases`)
        repaired = await self.upkeep.repair_markers()  # DC-12
        await self._settle_previous(proof, deadline=deadline)  # DC-7
        previous = await highest_cluster_committed_outcome(self.authority)
        marks.append(self.clock.monotonic())
        attempt = CheckpointAttempt.canonical(await self._allocate(deadline=deadline))  # DC-1
        marks.append(self.clock.monotonic())
        prepare = CheckpointPrepare(
            version=PREPARE_VERSION,
            attempt=attempt,
            fence=fence,
            leader_proof=proof,
            drain_transition=transition,
        )
        self._unsettled = _Unsettled(attempt, fence, proof)  # a failed create may still land
        body = await self._create_prepare(prepare)
        announced = self._announced(transition)
        await self._point(prepare, None)  # DC-18
        self._recorded = None
        marks.append(self.clock.monotonic())
        collection = await self.collector.collect(
            prepare,
            owners,
            body,
            previous,
            until=self._collection_deadline(deadline),
            learn=announced,
        )
        marks.append(self.clock.monotonic())
        result = await self._decide(prepare, collection, previous, deadline=deadline)
        if self._recorded is not None:
            await self._point(prepare, self._recorded)
        marks.append(self.clock.monotonic())
        _log_phases(attempt.checkpoint_id, collection.polls, marks)
        self.last = await self._after(
            result, prepare, collection, proof, repaired, marks[-1] - marks[1], deadline=deadline
        )
        return result

    async def _after(
        self,
        result: CheckpointResult,
        prepare: CheckpointPrepare,
        collection: Collection,
        proof: LeaderProof,
        repaired: int,
        duration_s: float,
        *,
        deadline: float,
    ) -> CheckpointStats:
        """After the verdict: a Commit's retention step and floor (DC-13, DC-14); the stats."""
        attempt, fence = prepare.attempt, prepare.fence
        retention_started_s = self.clock.monotonic()
        step = floor = None
        if result.success:
            committed = CommittedSlices(
                attempt.checkpoint_id,
                fence,
                {s.vnode: s for sealed in collection.sealed.values() for s in sealed.slices},
            )
            self.collector.committed = committed
            step = await self.upkeep.retain(
                attempt.checkpoint_id, fence, committed.holders(), deadline=deadline
            )
            floor = await self.upkeep.advance_floor(proof, deadline=deadline)  # DC-14
        return CheckpointStats(
            checkpoint_id=attempt.checkpoint_id,
            verdict=self._recorded,
            duration_s=duration_s,
            polls=collection.polls,
            missing=tuple(collection.missing(fence)),
            markers_repaired=repaired,
            deleted=0 if step is None else step.deleted,
            retention_s=self.clock.monotonic() - retention_started_s,
            artifact_floor=None if floor is None else floor.artifact_before_epoch,
        )

    def _announced(self, transition: AssignmentDrainTransition | None) -> bool:
        """Did the participants expect this prepare (DC-18)? A periodic one within a few polls
        of the time the last verdict pointer named; without hints (`next_prepare` None), every
        prepare counts as expected."""
        if self._next_prepare is None:
            return True
        hinted_s, self._hinted_s = self._hinted_s, None
        if transition is not None or hinted_s is None:
            return False
        # within the participants' widest fast window around the named time (DC-18)
        return abs(self.clock.monotonic() - hinted_s) <= WINDOW_FAST_POLLS_MAX * self.poll_s

    async def _point(self, prepare: CheckpointPrepare, verdict: CheckpointVerdict | None) -> None:
        """DC-18: the pointer shows the prepare (and its verdict); best effort, a hint."""
        next_in_ms = self._next_in_ms(verdict)
        try:
            await write_pointer(self.store, prepare, verdict, next_in_ms)
            if next_in_ms is not None:
                self._hinted_s = self.clock.monotonic() + next_in_ms / 1000
        except LaminarError as error:
            logger.warning(
                "checkpoint %d: the pointer was not written: %s", prepare.attempt.epoch, error
            )
        if self._pointed is not None:
            self._pointed()

    def _next_in_ms(self, verdict: CheckpointVerdict | None) -> int | None:
        """With a verdict: in how many ms the next periodic prepare is due (DC-18's hint)."""
        due_s = None if verdict is None or self._next_prepare is None else self._next_prepare()
        if due_s is None:
            return None
        return max(0, round((due_s - self.clock.monotonic()) * 1000))

    async def _decide(
        self,
        prepare: CheckpointPrepare,
        collection: Collection,
        previous: CheckpointOutcome | None,
        *,
        deadline: float,
    ) -> CheckpointResult:
        """Steps 6-7: Commit with every participant sealed, else Abort."""
        attempt, fence = prepare.attempt, prepare.fence
        name = f"cluster checkpoint {attempt.checkpoint_id}"
        if collection.rejected is not None:
            node_id, why = collection.rejected
            await self._record(prepare, CheckpointVerdict.ABORT, None, deadline=deadline)
            return _failed(Refused(f"{name} aborted: participant {node_id} acked wrongly: {why}"))
        if collection.lost:  # DC-19
            await self._record(prepare, CheckpointVerdict.ABORT, None, deadline=deadline)
            return _failed(
                Refused(
                    f"{name} aborted: participants {', '.join(map(str, collection.lost))} are "
                    "suspected, dead, left or rebooted in the membership view"
                )
            )
        missing = collection.missing(fence)
        if missing:
            await self._record(prepare, CheckpointVerdict.ABORT, None, deadline=deadline)
            return _failed(
                DeadlineExceeded(
                    f"{name} aborted: no valid manifest by the deadline from nodes "
                    f"{', '.join(map(str, missing))}"
                )
            )
        try:
            ref = await self._create_capsule(prepare, collection.sealed, previous)
        except CorruptRecord as error:  # two partials cut one partition at different offsets
            await self._record(prepare, CheckpointVerdict.ABORT, None, deadline=deadline)
            return _failed(restated(error, f"{name} aborted: {error}"))
        try:
            outcome = await self._record(prepare, CheckpointVerdict.COMMIT, ref, deadline=deadline)
        except Refused as error:
            await self._record(prepare, CheckpointVerdict.ABORT, None, deadline=deadline)
            return _failed(
                restated(error, f"{name} aborted: the authority refused its Commit: {error}")
            )
        if not outcome.is_commit():
            return _failed(Contended(f"{name} was already decided as {outcome.verdict.value}"))
        outputs = None
        if outcome.recovery_capsule == ref:
            sealed = collection.sealed
            outputs = [
                (sealed[p.node_id].participant, sealed[p.node_id].output_sha256)
                for p in fence.participants
            ]
        await self.upkeep.mark(outcome, outputs)  # DC-12
        return CheckpointResult(
            success=True, epoch=attempt.epoch, checkpoint_id=attempt.checkpoint_id
        )

    async def _settle_previous(self, proof: LeaderProof, *, deadline: float) -> None:
        """DC-7: the previous attempt of this instance gets its Abort before any newer prepare;
        a newer term (another token) already fences it (the authority appends under one term)."""
        previous = self._unsettled
        if previous is None:
            return
        if previous.proof.fencing_token != proof.fencing_token:
            self._unsettled = None
            return
        prepare = CheckpointPrepare(
            version=PREPARE_VERSION,
            attempt=previous.attempt,
            fence=previous.fence,
            leader_proof=previous.proof,
            drain_transition=None,
        )
        try:
            await self._record(prepare, CheckpointVerdict.ABORT, None, deadline=deadline)
        except Refused as error:  # a newer outcome is durable: the attempt can never be decided
            logger.info(
                "attempt %d is closed by a newer outcome: %s", previous.attempt.epoch, error
            )
            self._unsettled = None

    async def _record(
        self,
        prepare: CheckpointPrepare,
        verdict: CheckpointVerdict,
        ref: RecoveryCapsuleRef | None,
        *,
        deadline: float,
    ) -> CheckpointOutcome:
        """The durable outcome of the attempt after recording `verdict` (ours or the winner)."""
        attempt = prepare.attempt
        recorded = await record_cluster_outcome(
            self.authority,
            prepare.leader_proof,
            epoch=attempt.epoch,
            checkpoint_id=attempt.checkpoint_id,
            assignment_fence=prepare.fence,
            verdict=verdict,
            recovery_capsule=ref,
            deadline=deadline,
        )
        self._unsettled = None
        outcome = recorded.winner if isinstance(recorded, Conflict) else recorded.outcome
        self._recorded = outcome.verdict
        return outcome

    async def _allocate(self, *, deadline: float) -> int:
        """A never-used ID above every outcome in the authority (cluster outcomes advance)."""
        latest = await highest_cluster_terminal_outcome(self.authority)
        minimum = 1 if latest is None else latest.checkpoint_id + 1
        return await self.decisions.allocate_checkpoint_id_at_least(minimum, deadline=deadline)

    async def _create_prepare(self, prepare: CheckpointPrepare) -> bytes:
        """Create `prepare.json`; its bytes."""
        key = prepare_path(prepare.attempt.checkpoint_id)
        body = encode_record(prepare, key=key)
        resolution = await put_resolved(self.store, key, body, CREATE)
        if not resolution.ours:
            raise CorruptRecord(
                f"{key}: another prepare holds freshly allocated checkpoint "
                f"{prepare.attempt.checkpoint_id} ({resolution.state.value})",
                key=key,
            )
        return body

    async def _create_capsule(
        self,
        prepare: CheckpointPrepare,
        sealed: dict[int, Sealed],
        previous: CheckpointOutcome | None,
    ) -> RecoveryCapsuleRef:
        deployment_id = await self.decisions.load_or_create_deployment_id()
        capsule = capsule_of(prepare, sealed, previous, deployment_id, self.pipeline_identity)
        return await self.decisions.create_recovery_capsule(capsule)

    def _collection_deadline(self, deadline: float) -> float:
        """The caller's deadline less the reserve for recording the Abort (at most half of
        what is left)."""
        left_s = deadline - self.clock.monotonic()
        return deadline - min(self.abort_reserve_s, left_s / 2)


def _failed(error: LaminarError) -> CheckpointResult:
    return CheckpointResult(success=False, error=error)


def _log_phases(checkpoint_id: int, polls: int, marks: list[float]) -> None:
    """Where a checkpoint's time went (INFO: `LAMINAR_NODE_LOG_LEVEL=INFO` shows it)."""
    before, allocate, prepare, collect, decide = (b - a for a, b in itertools.pairwise(marks))
    logger.info(
        "checkpoint %d: %.3f s (settle the previous %.3f, allocate %.3f, prepare %.3f, collect "
        "%.3f in %d listings, decide %.3f)",
        checkpoint_id,
        marks[-1] - marks[0],
        before,
        allocate,
        prepare,
        collect,
        polls,
        decide,
    )

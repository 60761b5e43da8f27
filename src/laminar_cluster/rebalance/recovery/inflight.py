"""Settling the predecessor's in-flight checkpoint after recovery (RB §4.10; RB-20).

A recovery successor restores from the recovery checkpoint, so a checkpoint attempt the
predecessor generation had in flight must never commit afterwards. The handoff pin already
refuses any Commit not fenced by the recovery target, and cluster outcomes strictly increase;
this repair makes the attempt's end explicit and durable: an Abort under the predecessor fence.
It is a no-op on followers (no leader proof), idempotent, and re-run by `try_rebalance` on every
audit of a recovery head, because a leader can crash between materialization and settlement.

Our "artifact inventory" of an in-flight attempt (the Rust `cluster_checkpoint_artifacts()`):
the checkpoint layer has no durable in-flight attempt record, so an attempt is in flight when
its ID lies above the highest terminal cluster outcome and either

* a recovery capsule (our checkpoint index, written before the outcome is recorded) exists for
  it: the capsule names the fence, deployment and pipeline of the attempt; or
* it is the shared allocation head (`DeploymentIdentity.checkpoint_id`, NativeCas mode): an ID
  allocated but not decided, with no artifact, whose fence is unknown; it is settled as the
  predecessor's (a wrongly aborted target attempt only fails and is retried: safety holds).

Settling the highest such ID settles every lower one too (outcomes strictly increase). The
capsules are **not** deleted here (RB §4.10 step 9): cleanup stays behind the stop quorum.

Deviation: a capsule fenced by a generation older than the predecessor is settled too (the
seed errs on any fence but the predecessor's and the target's). Without a durable in-flight
record, the handoff attempt of a drain that recovery or a rollback superseded stays above the
terminal outcome under the drain's predecessor fence, and would fail every recovery attempt.
Such an attempt can never commit (the pin refuses any Commit outside the target), so aborting
it under the predecessor fence only makes its end durable.

Deviation: a cluster outcome must name its leader in its fence (CD §3.3), so a leader that
is not a participant of the predecessor fence (a replacement boot, RB-T48/RB-T53) cannot record
that Abort. It logs and leaves the attempt to the pin and the monotonic outcome order, which
already prevent it from ever committing.

Errors: an attempt not (yet) exactly settled as Abort is Refused (INFLIGHT_NOT_SETTLED), as is a
pin, head or decision that moved (RECOVERY_PIN_MOVED); artifacts of another deployment are
CorruptRecord (INFLIGHT_FOREIGN); no live leader proof is Fenced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.authority.cluster_outcome_reads import (
    cluster_attempt_settlement,
    cluster_outcome,
    highest_cluster_committed_outcome,
    highest_cluster_terminal_outcome,
)
from laminar_cluster.authority.cluster_outcomes import record_cluster_outcome
from laminar_cluster.authority.handoff_pins import assignment_handoff_pin_on
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.identity import read_identity
from laminar_cluster.checkpoint.paths import CAPSULES_PREFIX, parse_capsule_path
from laminar_cluster.checkpoint.records import (
    AllocatorMode,
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointScope,
    CheckpointVerdict,
    ClusterRecoveryCapsule,
    Conflict,
    RecoveryCapsuleRef,
)
from laminar_cluster.clock import within_deadline
from laminar_cluster.errors import CorruptRecord, Fenced, InvalidArgument, Refused
from laminar_cluster.fencing import CheckpointAssignmentFence, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.rebalance.audit.drain import audit_snapshot_authority_outcome
from laminar_cluster.rebalance.audit.recovery import load_portable_cut, recovery_decision
from laminar_cluster.rebalance.audit.results import (
    AuditedAssignmentAuthority,
    AuditedRecoveryCheckpoint,
    PinState,
)
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.refusals import Refusal
from laminar_cluster.store import ObjectMeta

logger: Final = logging.getLogger(__name__)
# At most this many capsules above the terminal outcome are examined (one listing page).
INFLIGHT_CAPSULES_MAX: Final = 64


@dataclass(frozen=True, slots=True)
class InFlightAttempt:
    """The newest undecided checkpoint ID and the capsules (artifacts) above the terminal."""

    checkpoint_id: int
    capsules: tuple[ClusterRecoveryCapsule, ...]


@dataclass(frozen=True, slots=True)
class _Recovery:
    """What the settlement of one recovery generation works with."""

    version: int
    predecessor: CheckpointAssignmentFence
    target: CheckpointAssignmentFence
    pin_target: CheckpointAssignmentFence
    state: AuditedRecoveryCheckpoint


async def abort_predecessor_checkpoint_for_recovery(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, *, deadline: float
) -> None:
    """RB §4.10: settle the predecessor's in-flight attempt as Abort (leader only; idempotent)."""
    if ctx.controller.capture_leader_proof() is None:
        return
    audited = await audit_snapshot_authority_outcome(ctx, snapshot, deadline=deadline)
    await settle_predecessor_checkpoint(ctx, snapshot, audited, deadline=deadline)


async def settle_predecessor_checkpoint(
    ctx: RebalanceContext,
    snapshot: AssignmentSnapshot,
    audited: AuditedAssignmentAuthority,
    *,
    deadline: float,
) -> None:
    """RB §4.10 steps 2-9 for an already audited recovery generation `snapshot`."""
    proof = ctx.controller.capture_leader_proof()
    if proof is None:
        return
    version = snapshot.assignment_version
    what = f"recovery assignment {version} predecessor checkpoint settlement"
    async with within_deadline(ctx.clock, deadline, what):
        recovery = await _checked_recovery(ctx, snapshot, audited)
        attempt = await in_flight_attempt(ctx, recovery)
        if attempt is None:
            return
        deployment_id = await _preflight(ctx, recovery, attempt)
        winner = await _settlement(ctx, recovery, attempt, proof, deadline=deadline)
        if winner is None:
            return
        _require_exact_abort(winner, attempt.checkpoint_id, deployment_id, recovery)
        if await cluster_outcome(ctx.authority, attempt.checkpoint_id) != winner:
            raise _unsettled(f"{what}: the Abort of attempt {attempt.checkpoint_id} moved")
        await _require_pin(ctx.authority, recovery)
        decisions = ctx.authority.require_decisions()
        remaining = await attempt_capsules(decisions, attempt.checkpoint_id)
        if any(capsule not in attempt.capsules for capsule in remaining):
            raise _unsettled(f"{what}: the artifacts of the aborted attempt changed")


async def _checked_recovery(
    ctx: RebalanceContext, snapshot: AssignmentSnapshot, audited: AuditedAssignmentAuthority
) -> _Recovery:
    """Steps 1-3: the audited recovery state, with the decision reloaded and unchanged."""
    version = snapshot.assignment_version
    state, predecessor = audited.recovery, audited.predecessor
    if state is None or predecessor is None or audited.target_version != version:
        raise InvalidArgument(f"assignment {version} is not an audited recovery generation")
    target = snapshot_fence(snapshot)
    pin_target = target
    if state.state is PinState.PROPAGATED and state.successor is not None:
        pin_target = state.successor
    decision = await recovery_decision(ctx.authority, version)
    if (
        decision is None
        or decision.predecessor != predecessor
        or decision.target != target
        or (
            state.state is not PinState.CONSUMED
            and decision.recovery_checkpoint != state.checkpoint
        )
    ):
        raise Refused(
            f"recovery assignment {version}: its authority decision changed during predecessor "
            "checkpoint settlement",
            reason=Refusal.RECOVERY_PIN_MOVED,
        )
    return _Recovery(version, predecessor, target, pin_target, state)


async def in_flight_attempt(ctx: RebalanceContext, recovery: _Recovery) -> InFlightAttempt | None:
    """Step 4: the predecessor's newest undecided attempt, or None when there is none (or the
    newest artifacts already belong to the target, so predecessor attempts are closed)."""
    authority = ctx.authority
    decisions = authority.require_decisions()
    terminal = await highest_cluster_terminal_outcome(authority)
    floor = 0 if terminal is None else terminal.checkpoint_id
    capsules = await in_flight_capsules(decisions, above=floor)
    fences = {capsule.assignment_fence for capsule in capsules}
    if fences & {recovery.target, recovery.pin_target}:
        return None
    # Fences older than the predecessor are superseded generations (the handoff attempt of a
    # drain that was rolled back): their attempts are settled like the predecessor's.
    predecessor_version = recovery.predecessor.assignment_version
    foreign = {
        f for f in fences - {recovery.predecessor} if f.assignment_version >= predecessor_version
    }
    if foreign:
        versions = sorted(fence.assignment_version for fence in foreign)
        raise Refused(
            f"recovery assignment {recovery.version}: an in-flight checkpoint is fenced by "
            f"assignment {versions}, neither the recovery predecessor nor its target",
            reason=Refusal.INFLIGHT_FOREIGN,
        )
    candidates = [capsule.attempt.checkpoint_id for capsule in capsules]
    allocated = await _allocation_head(decisions)
    if allocated is not None and allocated > floor:
        candidates.append(allocated)
    if not candidates:
        return None
    if recovery.state.state is PinState.CONSUMED:
        if capsules:
            raise _unsettled(
                f"recovery assignment {recovery.version}: a predecessor checkpoint is in flight "
                "after a checkpoint under the target consumed the recovery pin"
            )
        return None  # an allocation after the target's Commit is the target's own attempt
    newest = max(candidates)
    return InFlightAttempt(newest, tuple(c for c in capsules if c.attempt.checkpoint_id == newest))


async def in_flight_capsules(
    decisions: DecisionStore, *, above: int
) -> tuple[ClusterRecoveryCapsule, ...]:
    """The verified capsules of checkpoint IDs above `above` (at most INFLIGHT_CAPSULES_MAX)."""
    # Zero-padded epochs: every key of an epoch <= `above` sorts before this offset.
    offset = f"{CAPSULES_PREFIX}epoch={above:020d}0"
    listed = await decisions.store.list(CAPSULES_PREFIX, offset=offset, limit=INFLIGHT_CAPSULES_MAX)
    return await _load_listed(decisions, listed)


async def attempt_capsules(
    decisions: DecisionStore, checkpoint_id: int
) -> tuple[ClusterRecoveryCapsule, ...]:
    """The verified capsules of exactly `checkpoint_id`."""
    prefix = f"{CAPSULES_PREFIX}epoch={checkpoint_id:020d}/"
    listed = await decisions.store.list(prefix, limit=INFLIGHT_CAPSULES_MAX)
    return await _load_listed(decisions, listed)


async def _load_listed(
    decisions: DecisionStore, listed: list[ObjectMeta]
) -> tuple[ClusterRecoveryCapsule, ...]:
    """Load each listed capsule through its reference; paths that do not parse are capsule
    GC's to quarantine, not ours to judge."""
    found: list[ClusterRecoveryCapsule] = []
    for meta in listed:
        parsed = parse_capsule_path(meta.key)
        if parsed is None:
            continue
        epoch, checkpoint_id, sha256 = parsed
        ref = RecoveryCapsuleRef(
            epoch=epoch, checkpoint_id=checkpoint_id, sha256=sha256, len=meta.size
        )
        found.append(await decisions.load_recovery_capsule(ref))
    return tuple(found)


async def _allocation_head(decisions: DecisionStore) -> int | None:
    """The shared allocation head (the highest ID ever handed out), or None in local mode,
    where IDs come from claimed blocks and the head is not durable."""
    if decisions.mode is not AllocatorMode.NATIVE_CAS:
        return None
    loaded = await read_identity(decisions.ctx)
    return None if loaded is None else loaded.record.checkpoint_id


async def _preflight(ctx: RebalanceContext, recovery: _Recovery, attempt: InFlightAttempt) -> str:
    """Step 5: pin, committed head and portable cut unchanged; the artifacts belong to the same
    deployment and pipeline; the attempt is newer than the recovery checkpoint. Returns the
    deployment ID the Abort must carry."""
    state = recovery.state
    await _require_pin(ctx.authority, recovery)
    head = await highest_cluster_committed_outcome(ctx.authority)
    if (None if head is None else head.recovery_capsule) != state.checkpoint:
        raise Refused(
            f"recovery assignment {recovery.version}: the committed head is no longer the "
            "recovery checkpoint",
            reason=Refusal.RECOVERY_PIN_MOVED,
        )
    if head is None or state.checkpoint is None:
        # The initial state (LA-20): nothing committed, so every attempt is newer than it.
        deployment_id = await ctx.authority.require_decisions().load_or_create_deployment_id()
        if any(capsule.deployment_id != deployment_id for capsule in attempt.capsules):
            raise CorruptRecord(
                f"in-flight checkpoint {attempt.checkpoint_id} belongs to another deployment",
                reason=Refusal.INFLIGHT_FOREIGN,
            )
        return deployment_id
    index = await load_portable_cut(ctx.authority, head, state.checkpoint, recovery.predecessor)
    if index.assignment_fence != state.origin:
        raise Refused(
            f"recovery assignment {recovery.version}: the recovery checkpoint's origin changed",
            reason=Refusal.RECOVERY_CHECKPOINT_CHANGED,
        )
    for capsule in attempt.capsules:
        if (capsule.deployment_id, capsule.pipeline_identity) != (
            index.deployment_id,
            index.pipeline_identity,
        ):
            raise CorruptRecord(
                f"in-flight checkpoint {attempt.checkpoint_id} belongs to another deployment or "
                "pipeline than the recovery checkpoint",
                reason=Refusal.INFLIGHT_FOREIGN,
            )
    if attempt.checkpoint_id <= state.checkpoint.checkpoint_id:
        raise CorruptRecord(
            f"in-flight checkpoint {attempt.checkpoint_id} is not newer than recovery "
            f"checkpoint {state.checkpoint.checkpoint_id}",
            reason=Refusal.INFLIGHT_FOREIGN,
        )
    return index.deployment_id


async def _require_pin(authority: LeaderLeaseStore, recovery: _Recovery) -> None:
    pin = await assignment_handoff_pin_on(authority, recovery.pin_target)
    if pin is None or pin.checkpoint != recovery.state.checkpoint:
        raise Refused(
            f"recovery assignment {recovery.version}: the recovery checkpoint pin moved during "
            "predecessor checkpoint settlement",
            reason=Refusal.RECOVERY_PIN_MOVED,
        )


async def _settlement(
    ctx: RebalanceContext,
    recovery: _Recovery,
    attempt: InFlightAttempt,
    proof: LeaderProof,
    *,
    deadline: float,
) -> CheckpointOutcome | None:
    """Step 6: the existing settlement, else our Abort under the predecessor fence (the
    Created/Unchanged/Conflict winner); None when this leader cannot record it (see module)."""
    checkpoint_id = attempt.checkpoint_id
    authority = ctx.authority
    existing = await cluster_attempt_settlement(
        authority, CheckpointAttempt.canonical(checkpoint_id)
    )
    if existing is not None:
        return existing
    current = ctx.controller.capture_leader_proof()
    if current is None:
        raise Fenced("predecessor checkpoint settlement requires a live leader proof")
    owner = current.owner
    if recovery.predecessor.participant_incarnation(owner.node_id) != owner.boot_id:
        logger.warning(
            "recovery assignment %d: leader node-%d boot %s is not in predecessor fence %d; "
            "in-flight checkpoint %d is left to the handoff pin",
            recovery.version,
            owner.node_id,
            owner.boot_id,
            recovery.predecessor.assignment_version,
            checkpoint_id,
        )
        return None
    recorded = await record_cluster_outcome(
        authority,
        current,
        epoch=checkpoint_id,
        checkpoint_id=checkpoint_id,
        assignment_fence=recovery.predecessor,
        verdict=CheckpointVerdict.ABORT,
        recovery_capsule=None,
        deadline=deadline,
    )
    logger.info(
        "recovery assignment %d: predecessor checkpoint %d settled as Abort",
        recovery.version,
        checkpoint_id,
    )
    return recorded.winner if isinstance(recorded, Conflict) else recorded.outcome


def _require_exact_abort(
    outcome: CheckpointOutcome, checkpoint_id: int, deployment_id: str, recovery: _Recovery
) -> None:
    """Step 7: exactly an Abort of that attempt under the predecessor fence."""
    exact = (
        outcome.scope is CheckpointScope.CLUSTER
        and not outcome.is_commit()
        and outcome.epoch == checkpoint_id
        and outcome.checkpoint_id == checkpoint_id
        and outcome.deployment_id == deployment_id
        and outcome.assignment_fence == recovery.predecessor
        and outcome.recovery_capsule is None
        and outcome.leader_proof is not None
    )
    if not exact:
        raise _unsettled(
            f"recovery assignment {recovery.version}: in-flight checkpoint {checkpoint_id} was "
            f"settled as {outcome.verdict.value} (epoch {outcome.epoch}), not as an exact Abort "
            "under the predecessor fence"
        )


def _unsettled(message: str) -> Refused:
    """The predecessor's in-flight attempt is not (or no longer) exactly settled as Abort."""
    return Refused(message, reason=Refusal.INFLIGHT_NOT_SETTLED)

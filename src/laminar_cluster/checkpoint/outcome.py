"""Immutable terminal outcomes: admission and exact lookup (CD §3.3, CD §3.4, CD §4.4, CD §4.5;
invariants CD-4, CD-14, CD-8).

* `canonical_outcome`: a validated version-2 outcome of this deployment (the leader authority
  builds cluster outcomes with it and stores them in its own log).
* `record_outcome`: local outcomes only. Tombstone check, create-once, tombstone check again.
  The first writer wins: `Created`, `Unchanged` (an identical winner) or `Conflict(winner)`,
  which the caller must obey. An ambiguous create is settled by reading the object back.
* `outcome(epoch)`: the live outcome of one epoch between two equal floor reads; None means
  unresolved or compacted, never abort.

The inventory (listing, audit, `outcomes`, `highest_terminal_outcome`) lives in `inventory` and
is re-exported here, where the facade looks for it.
"""

from __future__ import annotations

from typing import Required, TypedDict, Unpack

from laminar_cluster.checkpoint import capsule
from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.floor import current_floor
from laminar_cluster.checkpoint.identity import load_or_create_deployment_id
from laminar_cluster.checkpoint.inventory import (
    audited_outcomes,
    check_epoch,
    highest_terminal_outcome,
    list_outcome_epochs,
    outcomes,
    read_outcome_record,
)
from laminar_cluster.checkpoint.limits import MAX_OUTCOME_BYTES, OUTCOME_READ_ATTEMPTS
from laminar_cluster.checkpoint.paths import outcome_path
from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    CheckpointScope,
    CheckpointVerdict,
    Conflict,
    Created,
    RecordOutcomeResult,
    RecoveryCapsuleRef,
    Unchanged,
)
from laminar_cluster.checkpoint.validate import validate_outcome_shape
from laminar_cluster.codec import encode_checked
from laminar_cluster.codec.shape import writing
from laminar_cluster.errors import (
    InvalidArgument,
    InventoryChanged,
    ObjectAlreadyExists,
    PreconditionFailed,
    Refused,
    StoreError,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.fencing import CheckpointAssignmentFence, LeaderProof
from laminar_cluster.store import CREATE

__all__ = [
    "OutcomeRequest",
    "audited_outcomes",
    "canonical_outcome",
    "highest_terminal_outcome",
    "list_outcome_epochs",
    "outcome",
    "outcomes",
    "read_outcome_record",
    "record_outcome",
]

OUTCOME_WHAT = "checkpoint outcome"


class OutcomeRequest(TypedDict, total=False):
    """The outcome a caller proposes (keyword arguments of `canonical_outcome` and
    `record_outcome`): the attempt, its scope and verdict, and for a cluster outcome the fence,
    the leader proof and (for a Commit) the recovery capsule."""

    epoch: Required[int]
    checkpoint_id: Required[int]
    scope: Required[CheckpointScope]
    verdict: Required[CheckpointVerdict]
    assignment_fence: CheckpointAssignmentFence | None
    leader_proof: LeaderProof | None
    recovery_capsule: RecoveryCapsuleRef | None


async def canonical_outcome(
    ctx: DecisionContext, **request: Unpack[OutcomeRequest]
) -> CheckpointOutcome:
    """A version-2 outcome of the current deployment, validated (CD §3.3); InvalidArgument if not.

    With a capsule reference the capsule is loaded and must match (CD §4.10); a local outcome
    carrying one fails the shape rules first, before any capsule I/O.
    """
    epoch = request["epoch"]
    check_epoch(epoch)
    check_epoch(request["checkpoint_id"], "checkpoint_id")
    recovery_capsule = request.get("recovery_capsule")
    candidate = CheckpointOutcome(
        version=2,
        scope=request["scope"],
        epoch=epoch,
        checkpoint_id=request["checkpoint_id"],
        deployment_id=await load_or_create_deployment_id(ctx),
        assignment_fence=request.get("assignment_fence"),
        leader_proof=request.get("leader_proof"),
        recovery_capsule=recovery_capsule,
        verdict=request["verdict"],
    )
    what = f"{outcome_path(epoch)}: {OUTCOME_WHAT}"
    # Types and size first: a value that does not survive its own encoding is never compared.
    encode_checked(candidate, what=what, max_bytes=MAX_OUTCOME_BYTES)
    with writing(what):
        validate_outcome_shape(candidate, epoch)
    if recovery_capsule is not None:
        await capsule.validate_recovery_capsule_for_outcome(ctx, candidate)
    return candidate


async def record_outcome(
    ctx: DecisionContext, **request: Unpack[OutcomeRequest]
) -> RecordOutcomeResult:
    """Create the one local outcome of `epoch`, or report the durable winner (CD §4.4)."""
    if request["scope"] is CheckpointScope.CLUSTER:
        raise InvalidArgument(
            "cluster outcomes must be admitted through the shared leader authority"
        )
    candidate = await canonical_outcome(ctx, **request)
    await _ensure_not_tombstoned(ctx, candidate)
    result = await _create_outcome(ctx, candidate)
    # CD-8: a floor published while the create was in flight wins; the raw object it may have left
    # is inert (readers ignore it below the floor) and a later sweep deletes it.
    await _ensure_not_tombstoned(ctx, candidate)
    return result


async def _ensure_not_tombstoned(ctx: DecisionContext, candidate: CheckpointOutcome) -> None:
    # CD-8: nothing is admitted below the durable GC floor.
    floor = await current_floor(ctx)
    if floor is not None and candidate.epoch < floor.before_epoch:
        raise Refused(
            f"{outcome_path(candidate.epoch)}: outcome epoch {candidate.epoch} checkpoint "
            f"{candidate.checkpoint_id} is below durable outcome GC horizon {floor.before_epoch}"
        )


async def _create_outcome(
    ctx: DecisionContext, candidate: CheckpointOutcome
) -> RecordOutcomeResult:
    key = outcome_path(candidate.epoch)
    body = encode_checked(candidate, what=f"{key}: {OUTCOME_WHAT}", max_bytes=MAX_OUTCOME_BYTES)
    try:
        # CD-4: outcome paths are only ever written by create; there is no overwrite path.
        await ctx.store.put(key, body, CREATE)
    except (StoreError, StoreUnavailable, WriteOutcomeUnknown) as error:
        failure = error
    else:
        return Created(candidate)
    # The answer may be ambiguous (a lost success, S3's 409 without a write): read the key.
    winner = await read_outcome_record(ctx, candidate.epoch)
    if winner is not None:
        # CD-4, CD-14: one verdict per epoch; an identical retry is harmless.
        return Unchanged(winner) if winner == candidate else Conflict(winner)
    if isinstance(failure, ObjectAlreadyExists | PreconditionFailed):
        # Retryable, not corrupt: S3 answers 409 ConditionalRequestConflict without writing, and
        # obstore reports it as "already exists" (see store/obstore_backend.py).
        raise StoreUnavailable(
            f"{key}: outcome for epoch {candidate.epoch} disappeared after create conflict "
            f"({failure}); nothing is stored, retry"
        ) from failure
    raise StoreUnavailable(
        f"{key}: outcome create for epoch {candidate.epoch} failed and nothing is stored: {failure}"
    ) from failure


async def outcome(ctx: DecisionContext, epoch: int) -> CheckpointOutcome | None:
    """The live outcome of `epoch`; None means unresolved or compacted, never abort (CD §4.5)."""
    check_epoch(epoch)
    for _ in range(OUTCOME_READ_ATTEMPTS):
        floor_before = await current_floor(ctx)
        if floor_before is not None and epoch < floor_before.before_epoch:
            # CD-8: tombstoned, even if the raw object still exists.
            if await current_floor(ctx) == floor_before:
                return None
        else:
            found = await read_outcome_record(ctx, epoch)
            floor_after = await current_floor(ctx)
            if floor_after == floor_before:
                horizon = 0 if floor_after is None else floor_after.before_epoch
                return found if found is not None and found.epoch >= horizon else None
        await ctx.clock.sleep(0)
    raise InventoryChanged("outcome GC floor kept advancing during exact lookup")

"""Retention: the outcome GC floor's horizon and boundary, and pruning (CD §3.7, CD §4.7, CD §4.8;
invariants CD-7, CD-8).

`prune_outcomes_before(before)` runs two phases:

1. **Publish** a floor `before` whose anchors (the newest terminal outcome and the newest commit
   below it) come from a fresh audit, by create or CAS. A lost CAS rebuilds the candidate from
   scratch (a stale one could drop outcomes admitted in between). A floor that would leave no
   live commit at or above it is refused. A floor already at least `before` skips to phase 2:
   that is how a retry repairs a sweep a crash interrupted.
2. **Sweep**: delete raw outcomes below the durable floor (best effort: a failed delete is
   logged and left for a later sweep), until the floor read after a sweep equals the one swept.
   A higher floor published concurrently is swept too.

Both loops are bounded by a count (`PRUNE_PUBLISH_ATTEMPTS_MAX`, `PRUNE_SWEEP_ROUNDS_MAX`; when
exhausted, `InventoryChanged`: concurrent pruners kept moving the floor) and by the caller's
deadline (`DeadlineExceeded`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.floor import (
    compare_and_swap_outcome_gc_floor,
    current_floor,
    read_floor,
)
from laminar_cluster.checkpoint.identity import load_or_create_deployment_id
from laminar_cluster.checkpoint.inventory import (
    audited_outcomes,
    check_epoch,
    in_batches,
    list_outcome_epochs,
)
from laminar_cluster.checkpoint.limits import (
    FLOOR_VERSION,
    PRUNE_PUBLISH_ATTEMPTS_MAX,
    PRUNE_SWEEP_ROUNDS_MAX,
)
from laminar_cluster.checkpoint.paths import floor_path, outcome_path
from laminar_cluster.checkpoint.records import OutcomeGcFloor
from laminar_cluster.errors import (
    DeadlineExceeded,
    InventoryChanged,
    ObjectNotFound,
    Refused,
    StoreError,
    StoreUnavailable,
    WriteOutcomeUnknown,
)

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OutcomeRetentionBoundary:
    """Not persisted: the floor's horizon and its anchors' coordinates (CD §3.7)."""

    before_epoch: int
    committed_checkpoint_id: int | None
    highest_closed_epoch: int | None


async def outcome_gc_floor_horizon(ctx: DecisionContext) -> int:
    """The durable floor's `before_epoch`, or 0 before the first prune."""
    floor = await current_floor(ctx)
    return 0 if floor is None else floor.before_epoch


async def outcome_retention_boundary(ctx: DecisionContext) -> OutcomeRetentionBoundary:
    """Continuity metadata of compacted outcomes: fences cursor rollback, never a recovery cut."""
    floor = await current_floor(ctx)
    if floor is None:
        return OutcomeRetentionBoundary(0, None, None)
    committed, terminal = floor.committed_anchor, floor.terminal_anchor
    return OutcomeRetentionBoundary(
        before_epoch=floor.before_epoch,
        committed_checkpoint_id=None if committed is None else committed.checkpoint_id,
        highest_closed_epoch=None if terminal is None else terminal.epoch,
    )


async def prune_outcomes_before(ctx: DecisionContext, before: int, *, deadline: float) -> int:
    """Tombstone every outcome below `before`; the effective horizon (>= `before`) (CD §4.8)."""
    check_epoch(before, "before")
    if before == 0:
        return await outcome_gc_floor_horizon(ctx)
    try:
        async with ctx.clock.timeout_at(deadline):
            await _publish(ctx, before, deadline=deadline)
            return await _sweep(ctx, before, deadline=deadline)
    except TimeoutError as error:
        raise DeadlineExceeded(
            f"outcome prune to {before}: the deadline passed before the floor was swept"
        ) from error


def _check_deadline(ctx: DecisionContext, deadline: float, before: int, phase: str) -> None:
    if ctx.clock.monotonic() >= deadline:
        raise DeadlineExceeded(f"outcome prune to {before}: the deadline passed during {phase}")


async def _publish(ctx: DecisionContext, before: int, *, deadline: float) -> None:
    """Phase 1: make a floor of at least `before` durable."""
    deployment_id = await load_or_create_deployment_id(ctx)
    for _ in range(PRUNE_PUBLISH_ATTEMPTS_MAX):
        _check_deadline(ctx, deadline, before, "publication")
        observed = await read_floor(ctx)
        if observed is not None and observed.record.before_epoch >= before:
            return  # CD-7: already durable (perhaps published by us before a crash): sweep again
        try:
            audited = await audited_outcomes(ctx)
        except InventoryChanged:
            await ctx.clock.sleep(0)
            continue
        # CD-7: the floor never strands recovery: a live commit at or above it must remain.
        if not any(outcome.epoch >= before and outcome.is_commit() for outcome in audited):
            raise Refused(
                f"{floor_path(deployment_id)}: cannot advance outcome GC floor to {before}: "
                "no live commit recovery cut would remain"
            )
        below = [outcome for outcome in audited if outcome.epoch < before]
        commits_below = [outcome for outcome in below if outcome.is_commit()]
        # The audit includes the old anchors, so they carry forward when nothing newer is below.
        candidate = OutcomeGcFloor(
            version=FLOOR_VERSION,
            deployment_id=deployment_id,
            before_epoch=before,
            terminal_anchor=below[-1] if below else None,
            committed_anchor=commits_below[-1] if commits_below else None,
        )
        if await compare_and_swap_outcome_gc_floor(ctx, candidate, observed):
            return
        # CD-7: lost the CAS: rebuild from the winner, never reuse this candidate.
        await ctx.clock.sleep(0)
    raise InventoryChanged(
        f"outcome prune to {before}: the floor or the inventory kept changing through "
        f"{PRUNE_PUBLISH_ATTEMPTS_MAX} publication attempts"
    )


async def _sweep(ctx: DecisionContext, before: int, *, deadline: float) -> int:
    """Phase 2: delete raw outcomes below the durable floor until the floor holds still."""
    swept = 0
    for _ in range(PRUNE_SWEEP_ROUNDS_MAX):
        _check_deadline(ctx, deadline, before, "the sweep")
        effective = await current_floor(ctx)
        if effective is None:
            raise InventoryChanged("outcome GC floor disappeared immediately after publication")
        if effective.before_epoch < before or effective.before_epoch < swept:
            # CD-7: the floor is monotone; a lower one is someone else's corruption or a reset.
            raise InventoryChanged(
                f"outcome GC floor regressed to {effective.before_epoch} after publishing "
                f"{max(before, swept)}"
            )
        if effective.before_epoch > swept:
            horizon = effective.before_epoch
            # CD-8: only below a durable floor; readers already ignore these objects.
            doomed = [epoch for epoch in await list_outcome_epochs(ctx) if epoch < horizon]
            await in_batches(doomed, lambda epoch: _delete_outcome(ctx, epoch))
            swept = horizon
        current = await current_floor(ctx)
        if current is None:
            raise InventoryChanged("outcome GC floor disappeared during best-effort sweep")
        if current.before_epoch == swept:
            return swept
        await ctx.clock.sleep(0)
    raise InventoryChanged(
        f"outcome prune to {before}: the floor kept advancing through {PRUNE_SWEEP_ROUNDS_MAX} "
        "sweep rounds"
    )


async def _delete_outcome(ctx: DecisionContext, epoch: int) -> None:
    """Best effort: a failure leaves an inert object that a later sweep deletes."""
    key = outcome_path(epoch)
    try:
        await ctx.store.delete(key)  # idempotent: a missing object is not an error
    except ObjectNotFound:
        pass
    except (StoreError, StoreUnavailable, WriteOutcomeUnknown) as error:
        _log.warning("outcome prune: delete of tombstoned %s failed: %s", key, error)

"""Reading outcomes: one raw record, the listing, and the audited inventory (CD §4.4 "Reading
one raw outcome", CD §4.6; invariants CD-6, CD-8).

* `read_outcome_record(epoch)`: the bounded read of one immutable outcome (no CAS token: it never
  changes), its shape rules, the refusal of a cluster outcome under this prefix, the canonical
  body, and the deployment.
* `list_outcome_epochs`: every object under `checkpoint-outcomes/` must be a canonical outcome
  path; anything else blocks the inventory (fail closed).
* `audited_outcomes`: the floor's anchors followed by the live outcomes, read between two equal
  floor reads, and audited for strictly increasing (epoch, checkpoint ID). Up to 3 passes.
* `outcomes`: the live part (at or above the floor); `highest_terminal_outcome`: the last
  audited entry (possibly an anchor: continuity only, never a recovery cut).

Outcome reads of one pass run a few at a time (`OUTCOME_READS_AT_ONCE`); results are used in
ascending epoch order, and the first failure in that order is the one raised.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeVar

from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.floor import current_floor, declared_version, decode_control_record
from laminar_cluster.checkpoint.identity import load_or_create_deployment_id
from laminar_cluster.checkpoint.limits import (
    MAX_OUTCOME_BYTES,
    OUTCOME_READ_ATTEMPTS,
    OUTCOME_VERSION,
    U64_MAX,
)
from laminar_cluster.checkpoint.paths import OUTCOMES_PREFIX, outcome_path, parse_outcome_path
from laminar_cluster.checkpoint.reader import read_bytes
from laminar_cluster.checkpoint.records import CheckpointOutcome, CheckpointScope
from laminar_cluster.checkpoint.validate import validate_outcome_shape
from laminar_cluster.codec.shape import reading
from laminar_cluster.errors import CorruptRecord, InvalidArgument, InventoryChanged

A = TypeVar("A")
T = TypeVar("T")

# How many outcome objects one audit pass (or one sweep) reads or deletes at once.
OUTCOME_READS_AT_ONCE: Final = 8


def check_epoch(epoch: int, what: str = "epoch") -> None:
    """InvalidArgument unless `epoch` is an int in the u64 range (no I/O happens first)."""
    if type(epoch) is not int or not 0 <= epoch <= U64_MAX:
        raise InvalidArgument(f"{what} must be an int in 0..={U64_MAX}, not {epoch!r}")


async def in_batches(items: Sequence[A], call: Callable[[A], Awaitable[T]]) -> list[T]:
    """`call(item)` for every item, at most OUTCOME_READS_AT_ONCE at a time; results in order.

    Every call of a batch finishes before the first failure (in order) is raised, so nothing is
    left running; cancellation propagates.
    """
    results: list[T] = []
    for start in range(0, len(items), OUTCOME_READS_AT_ONCE):
        batch = items[start : start + OUTCOME_READS_AT_ONCE]
        settled = await asyncio.gather(*(call(item) for item in batch), return_exceptions=True)
        for result in settled:
            if isinstance(result, BaseException):
                raise result
            results.append(result)
    return results


async def read_outcome_record(ctx: DecisionContext, epoch: int) -> CheckpointOutcome | None:
    """The raw outcome object of `epoch` (ignoring the floor), validated; None if absent."""
    check_epoch(epoch)
    deployment_id = await load_or_create_deployment_id(ctx)
    key = outcome_path(epoch)
    what = f"checkpoint outcome for epoch {epoch}"
    read = await read_bytes(ctx.store, key, what=what, max_bytes=MAX_OUTCOME_BYTES)
    if read is None:
        return None
    body, _meta = read
    version = declared_version(body)
    if type(version) is int and version != OUTCOME_VERSION:
        raise CorruptRecord(
            f"{key}: {what} has unsupported version {version} (expected {OUTCOME_VERSION})",
            key=key,
        )

    def rules(outcome: CheckpointOutcome) -> None:
        with reading(key):
            validate_outcome_shape(outcome, epoch)
        if outcome.scope is CheckpointScope.CLUSTER:
            raise CorruptRecord(
                f"{key}: cluster outcome epoch {epoch} is stored outside the shared leader "
                "authority",
                key=key,
            )

    outcome = decode_control_record(
        body,
        CheckpointOutcome,
        key=key,
        max_bytes=MAX_OUTCOME_BYTES,
        rules=rules,
        canonical_message=f"outcome for epoch {epoch} does not use the canonical body",
    )
    if outcome.deployment_id != deployment_id:
        raise CorruptRecord(
            f"{key}: outcome for epoch {epoch} belongs to deployment {outcome.deployment_id}, "
            f"current deployment is {deployment_id}",
            key=key,
        )
    return outcome


async def list_outcome_epochs(ctx: DecisionContext) -> list[int]:
    """Every epoch with an outcome object, ascending; CorruptRecord for any other object."""
    listed = await ctx.store.list(OUTCOMES_PREFIX)
    epochs = sorted(parse_outcome_path(meta.key) for meta in listed)
    if any(earlier == later for earlier, later in itertools.pairwise(epochs)):
        raise CorruptRecord(
            f"{OUTCOMES_PREFIX}: checkpoint outcome inventory contains a duplicate epoch",
            key=OUTCOMES_PREFIX,
        )
    return epochs


async def _read_listed(ctx: DecisionContext, epoch: int) -> CheckpointOutcome:
    outcome = await read_outcome_record(ctx, epoch)
    if outcome is None:
        raise InventoryChanged(f"checkpoint outcome for epoch {epoch} disappeared during inventory")
    return outcome


async def _audit_once(ctx: DecisionContext) -> list[CheckpointOutcome]:
    """One audit pass: anchors, then live outcomes, between two equal floor reads (CD §4.6)."""
    floor_before = await current_floor(ctx)
    min_epoch = 0 if floor_before is None else floor_before.before_epoch
    epochs = [epoch for epoch in await list_outcome_epochs(ctx) if epoch >= min_epoch]
    audited: list[CheckpointOutcome] = []
    if floor_before is not None:
        committed, terminal = floor_before.committed_anchor, floor_before.terminal_anchor
        if committed is not None:
            audited.append(committed)
        if terminal is not None and terminal != committed:
            audited.append(terminal)
    audited.extend(await in_batches(epochs, lambda epoch: _read_listed(ctx, epoch)))
    if await current_floor(ctx) != floor_before:
        raise InventoryChanged("outcome GC floor advanced during outcome inventory")
    # CD-6: the durable history (anchors, then live outcomes) is strictly ordered in both fields.
    for previous, current in itertools.pairwise(audited):
        if current.epoch <= previous.epoch or current.checkpoint_id <= previous.checkpoint_id:
            raise CorruptRecord(
                f"{OUTCOMES_PREFIX}: checkpoint outcomes regress from epoch {previous.epoch} "
                f"checkpoint {previous.checkpoint_id} to epoch {current.epoch} checkpoint "
                f"{current.checkpoint_id}",
                key=outcome_path(current.epoch),
            )
    return audited


async def audited_outcomes(ctx: DecisionContext) -> list[CheckpointOutcome]:
    """The floor's anchors followed by every live outcome, audited; up to 3 passes (CD §4.6)."""
    for attempt in range(1, OUTCOME_READ_ATTEMPTS + 1):
        try:
            return await _audit_once(ctx)
        except InventoryChanged:
            if attempt == OUTCOME_READ_ATTEMPTS:
                raise  # the last pass's own error (CD §10.4)
        await ctx.clock.sleep(0)
    raise AssertionError("unreachable: the last pass returns or raises")


async def outcomes(ctx: DecisionContext) -> list[CheckpointOutcome]:
    """Live outcomes (at or above the floor), ascending; recovery picks its cut from these."""
    for _ in range(OUTCOME_READ_ATTEMPTS):
        floor_before = await current_floor(ctx)
        audited = await audited_outcomes(ctx)
        if await current_floor(ctx) == floor_before:
            # Anchors are continuity metadata only: their artifacts may already be deleted.
            horizon = 0 if floor_before is None else floor_before.before_epoch
            return [outcome for outcome in audited if outcome.epoch >= horizon]
        await ctx.clock.sleep(0)
    raise InventoryChanged("outcome GC floor kept advancing while selecting live outcomes")


async def highest_terminal_outcome(ctx: DecisionContext) -> CheckpointOutcome | None:
    """The newest audited outcome, possibly the floor's terminal anchor (an ID/epoch floor)."""
    audited = await audited_outcomes(ctx)
    return audited[-1] if audited else None

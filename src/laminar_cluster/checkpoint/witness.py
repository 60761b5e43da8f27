"""The sink-open witness (CD §3.8, CD §4.9; invariant CD-10).

One singleton slot, `checkpoint-sink-open-witness/witness.json`, says "these exactly-once sinks
may have an open external transaction for this attempt". It is opened before any external begin
call and closed (tombstoned with a fresh `close_token`, never deleted) once the attempt is
terminal or rolled back. Because the slot never returns to absent, a stale conditional write from
an earlier generation always fails its precondition.

Transitions are conditional writes on the slot: NativeCas uses create, then update-if-match on
the token read; local mode does the same read-compare-overwrite under the process-wide namespace
lock (`context.namespace_lock`). A lost response is settled by reading the slot back and
comparing it with our exact proposal (`create_token`, or the closed state of our witness).

Errors: input that breaks the witness rules or does not fit the slot -> InvalidArgument, before
any write; a slot that is malformed, foreign or vanished -> CorruptRecord; a slot whose valid
state forbids the transition (open, not advancing, missing, another create identity) -> Refused;
a write whose outcome reconciliation cannot settle -> StoreUnavailable.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.identity import load_or_create_deployment_id
from laminar_cluster.checkpoint.limits import (
    MAX_WITNESS_SLOT_BYTES,
    WITNESS_SLOT_VERSION,
    WITNESS_VERSION,
)
from laminar_cluster.checkpoint.paths import WITNESS_PATH
from laminar_cluster.checkpoint.reader import Loaded, read_record
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointSinkOpenWitness,
    CheckpointSinkOpenWitnessSlot,
    PipelineIdentity,
    WitnessClosed,
    WitnessOpen,
)
from laminar_cluster.checkpoint.validate import validate_slot, validate_witness
from laminar_cluster.codec import encode_checked
from laminar_cluster.codec.shape import reading, writing
from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    Refused,
    StoreError,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store import CREATE, OVERWRITE, ObjectMeta, PutMode

_WHAT = "sink-open witness slot"
# What a put can answer; each is settled by reading the slot back.
_PUT_ERRORS = (StoreError, StoreUnavailable, WriteOutcomeUnknown)
# The answers that mean "the slot was not what our condition named" (a lost race).
_CONDITIONAL = (ObjectAlreadyExists, PreconditionFailed, ObjectNotFound)

Slot = CheckpointSinkOpenWitnessSlot


async def sink_open_witness(ctx: DecisionContext) -> CheckpointSinkOpenWitness | None:
    """The open witness of this deployment, or None if the slot is absent or closed."""
    deployment_id = await load_or_create_deployment_id(ctx)
    current = await _read_slot(ctx)
    if current is None:
        return None
    _check_deployment(current.record, deployment_id)  # closed slots too
    state = current.record.state
    return state.witness if isinstance(state, WitnessOpen) else None


async def create_sink_open_witness(
    ctx: DecisionContext,
    *,
    pipeline_identity: PipelineIdentity,
    participant_id: int,
    attempt: CheckpointAttempt,
    sinks: tuple[str, ...],
) -> CheckpointSinkOpenWitness:
    """Open the witness for `attempt` before any external begin call; returns our exact witness.

    `sinks` must already be strictly sorted and unique: duplicates are refused, never collapsed.
    """
    deployment_id = await load_or_create_deployment_id(ctx)
    candidate = CheckpointSinkOpenWitness(
        version=WITNESS_VERSION,
        deployment_id=deployment_id,
        pipeline_identity=pipeline_identity,
        participant_id=participant_id,
        attempt=attempt,
        committable_sinks=tuple(sinks),
        create_token=str(ctx.clock.uuid7()),
    )
    with writing("sink-open witness"):
        validate_witness(candidate)
    open_slot = Slot(version=WITNESS_SLOT_VERSION, state=WitnessOpen(witness=candidate))
    body = _encode(open_slot)
    # CD-10: an accepted open always has room for its mandatory close tombstone.
    _encode(_closed_slot(ctx, candidate))
    async with _rmw_lock(ctx):
        return await _open(ctx, candidate, open_slot, body)


async def clear_sink_open_witness(
    ctx: DecisionContext, expected: CheckpointSinkOpenWitness
) -> None:
    """Close exactly `expected` (idempotent): the slot is tombstoned, never deleted."""
    with writing("sink-open witness"):
        validate_witness(expected)
    deployment_id = await load_or_create_deployment_id(ctx)
    if expected.deployment_id != deployment_id:
        raise InvalidArgument(
            f"cannot clear sink-open witness from deployment {expected.deployment_id}; current "
            f"deployment is {deployment_id}"
        )
    async with _rmw_lock(ctx):
        await _close(ctx, expected)


async def _open(
    ctx: DecisionContext, candidate: CheckpointSinkOpenWitness, open_slot: Slot, body: bytes
) -> CheckpointSinkOpenWitness:
    checkpoint_id = candidate.attempt.checkpoint_id
    current = await _read_slot(ctx)
    mode: PutMode = CREATE
    prior: Slot | None = None
    if current is not None:
        prior = current.record
        _check_deployment(prior, candidate.deployment_id)
        state = prior.state
        # CD-10: at most one open witness; a proposal never adopts another proposal's slot.
        if isinstance(state, WitnessOpen):
            raise Refused(_conflicting(checkpoint_id, state.witness))
        if state.witness.attempt.checkpoint_id >= checkpoint_id:
            raise Refused(
                f"{WITNESS_PATH}: sink-open witness checkpoint {checkpoint_id} does not advance "
                f"closed checkpoint {state.witness.attempt.checkpoint_id}"
            )
        mode = _update_mode(ctx, current.meta)
    try:
        await ctx.store.put(WITNESS_PATH, body, mode)
    except _PUT_ERRORS as error:
        put_error: Exception = error
    else:
        return candidate
    observed = await _reread(ctx, "open", put_error)
    conditional = isinstance(put_error, _CONDITIONAL)
    if observed is None:
        if conditional:
            raise CorruptRecord(
                f"{WITNESS_PATH}: sink-open witness for checkpoint {checkpoint_id} disappeared "
                f"after create conflict ({put_error})",
                key=WITNESS_PATH,
            )
        raise StoreUnavailable(
            f"{WITNESS_PATH}: sink-open witness open for checkpoint {checkpoint_id} failed and "
            f"the slot is absent: {put_error}"
        )
    _check_deployment(observed.record, candidate.deployment_id)
    # CD-10: only our exact create_token proves that an ambiguous open landed.
    if observed.record == open_slot:
        return candidate
    if not conditional and prior is not None and observed.record == prior:
        raise StoreUnavailable(
            f"{WITNESS_PATH}: sink-open witness open for checkpoint {checkpoint_id} failed and "
            f"the slot is unchanged: {put_error}"
        )
    raise Refused(_conflicting(checkpoint_id, observed.record.state.witness))


async def _close(ctx: DecisionContext, expected: CheckpointSinkOpenWitness) -> None:
    checkpoint_id = expected.attempt.checkpoint_id
    current = await _read_slot(ctx)
    if current is None:
        raise Refused(
            f"{WITNESS_PATH}: sink-open witness slot for checkpoint {checkpoint_id} is missing"
        )
    _check_deployment(current.record, expected.deployment_id)
    state = current.record.state
    if state.witness != expected:
        raise Refused(
            f"{WITNESS_PATH}: cannot clear sink-open witness for checkpoint {checkpoint_id}; "
            f"current slot names checkpoint {state.witness.attempt.checkpoint_id} with a "
            "different create identity"
        )
    if isinstance(state, WitnessClosed):
        return  # idempotent: this exact witness is already closed
    closed = _closed_slot(ctx, expected)
    try:
        await ctx.store.put(WITNESS_PATH, _encode(closed), _update_mode(ctx, current.meta))
    except _PUT_ERRORS as error:
        close_error: Exception = error
    else:
        return
    observed = await _reread(ctx, "close", close_error)
    if observed is None:
        raise CorruptRecord(
            f"{WITNESS_PATH}: sink-open witness slot disappeared while closing checkpoint "
            f"{checkpoint_id}: {close_error}",
            key=WITNESS_PATH,
        )
    if observed.record == closed:
        return
    _check_deployment(observed.record, expected.deployment_id)
    observed_state = observed.record.state
    if observed_state.witness == expected and isinstance(observed_state, WitnessOpen):
        raise StoreUnavailable(
            f"{WITNESS_PATH}: sink-open witness close for checkpoint {checkpoint_id} failed and "
            f"the witness is still open: {close_error}"
        )
    # Closed with our witness (another close token) is an equivalent close. Any other valid
    # generation can only follow a successful close of ours, and a stale conditional write
    # cannot touch it: its token is old (CD-10).


async def _read_slot(ctx: DecisionContext) -> Loaded[Slot] | None:
    """The slot as read (bounded, canonical, validated), or None if absent."""
    loaded = await read_record(
        ctx.store,
        WITNESS_PATH,
        Slot,
        what=_WHAT,
        max_bytes=MAX_WITNESS_SLOT_BYTES,
        require_token=ctx.native_cas,  # CD-12: a shared slot must carry a CAS token
    )
    if loaded is not None:
        with reading(WITNESS_PATH):
            validate_slot(loaded.record)
    return loaded


async def _reread(ctx: DecisionContext, step: str, put_error: Exception) -> Loaded[Slot] | None:
    """Read the slot back after a failed write; a failed read leaves the write unsettled."""
    try:
        return await _read_slot(ctx)
    except StoreUnavailable as read_error:
        raise StoreUnavailable(
            f"{WITNESS_PATH}: sink-open witness {step} failed ({put_error}); reconciliation "
            f"failed ({read_error})"
        ) from read_error


def _check_deployment(slot: Slot, deployment_id: str) -> None:
    owner = slot.state.witness.deployment_id
    if owner != deployment_id:
        raise CorruptRecord(
            f"{WITNESS_PATH}: sink-open witness belongs to deployment {owner}, current "
            f"deployment is {deployment_id}",
            key=WITNESS_PATH,
        )


def _closed_slot(ctx: DecisionContext, witness: CheckpointSinkOpenWitness) -> Slot:
    """A tombstone for `witness` with a fresh close token."""
    closed = WitnessClosed(witness=witness, close_token=str(ctx.clock.uuid7()))
    return Slot(version=WITNESS_SLOT_VERSION, state=closed)


def _encode(slot: Slot) -> bytes:
    """The slot's canonical bytes, validated and within the limit ("maximum is")."""
    with writing(_WHAT):
        validate_slot(slot)
    return encode_checked(slot, what=_WHAT, max_bytes=MAX_WITNESS_SLOT_BYTES)


def _update_mode(ctx: DecisionContext, meta: ObjectMeta) -> PutMode:
    """Replace the slot version we read: by its token (shared), or under the lock (local)."""
    return meta.token if ctx.native_cas else OVERWRITE


def _rmw_lock(ctx: DecisionContext) -> AbstractAsyncContextManager[Any]:
    """Local mode serializes the slot's read-compare-overwrite on the namespace lock."""
    if ctx.native_cas:
        return nullcontext()
    if ctx.namespace_lock is None:
        raise InvalidArgument("local decision store is missing its namespace write lock")
    return ctx.namespace_lock


def _conflicting(checkpoint_id: int, observed: CheckpointSinkOpenWitness) -> str:
    return (
        f"{WITNESS_PATH}: sink-open witness create for checkpoint {checkpoint_id} observed "
        f"conflicting checkpoint {observed.attempt.checkpoint_id}"
    )

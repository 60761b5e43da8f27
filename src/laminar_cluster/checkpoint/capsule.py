"""Recovery capsules: content-addressed, verified on every load (CD §3.9,
CD §4.10; invariant CD-9).

A capsule is stored once, by `CREATE`, at
`checkpoint-recovery-capsules/epoch={e:020}/checkpoint={c:020}/sha256={hex}`, where the hex is the
SHA-256 of its sorted-key canonical JSON. Its reference `{epoch, checkpoint_id, sha256, len}` is
returned only after the capsule is durable, and only then may a cluster commit outcome publish
it. Every load checks the reference, the size (before decoding), the canonical bytes, the digest,
the capsule's own rules and its deployment; a decision store remembers a capsule that passed
(`store.record_cache`: it is content addressed, so it cannot change) and does not read it again.

Errors: an invalid capsule or reference given by the caller -> InvalidArgument (before any I/O);
a stored capsule that is missing, oversized, malformed, tampered or foreign -> CorruptRecord;
a create whose outcome reconciliation cannot settle -> StoreUnavailable; a stored capsule that
differs from the proposal -> Refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.identity import load_or_create_deployment_id
from laminar_cluster.checkpoint.limits import MAX_RECOVERY_CAPSULE_BYTES
from laminar_cluster.checkpoint.paths import capsule_path
from laminar_cluster.checkpoint.reader import read_bytes
from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    ClusterRecoveryCapsule,
    RecoveryCapsuleRef,
)
from laminar_cluster.checkpoint.validate import (
    validate_capsule,
    validate_capsule_ref,
    validate_outcome_shape,
)
from laminar_cluster.codec import decode_sorted, encode_sorted, encode_sorted_checked, sha256_hex
from laminar_cluster.codec.shape import reading, writing
from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
    LaminarError,
    Refused,
    StoreError,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store import CREATE
from laminar_cluster.store.record_cache import record_cache


def encode_and_reference(capsule: ClusterRecoveryCapsule) -> tuple[bytes, RecoveryCapsuleRef]:
    """The capsule's sorted-key canonical bytes and its content-addressed reference.

    Raises InvalidArgument if the capsule breaks its rules or is over the size limit.
    """
    with writing("recovery capsule"):
        validate_capsule(capsule)
    body = encode_sorted_checked(
        capsule, what="recovery capsule", max_bytes=MAX_RECOVERY_CAPSULE_BYTES
    )
    return body, _reference(capsule, body)


def reference_path(ref: RecoveryCapsuleRef) -> str:
    """The object path a reference names."""
    return capsule_path(ref.epoch, ref.checkpoint_id, ref.sha256)


async def create_recovery_capsule(
    ctx: DecisionContext, capsule: ClusterRecoveryCapsule
) -> RecoveryCapsuleRef:
    """Store `capsule` (create-once) and return its reference, which is then safe to publish."""
    body, ref = encode_and_reference(capsule)
    deployment_id = await load_or_create_deployment_id(ctx)
    if capsule.deployment_id != deployment_id:
        raise InvalidArgument(
            f"recovery capsule belongs to deployment {capsule.deployment_id}, current "
            f"deployment is {deployment_id}"
        )
    path = reference_path(ref)
    try:
        # CD-9: content-addressed and create-only; an acknowledged create needs no read-back.
        await ctx.store.put(path, body, CREATE)
    except (StoreError, StoreUnavailable, WriteOutcomeUnknown) as error:
        put_error: Exception = error
    else:
        return ref
    # An identical retry, a lost success, or nothing durable: the stored capsule decides.
    try:
        stored = await load_recovery_capsule(ctx, ref)
    except LaminarError as reconcile_error:
        raise StoreUnavailable(
            f"{path}: recovery capsule write failed ({put_error}); reconciliation failed "
            f"({reconcile_error})"
        ) from reconcile_error
    if stored != capsule:
        raise Refused(f"{path}: recovery capsule '{ref.sha256}' differs from the proposed content")
    return ref


async def load_recovery_capsule(
    ctx: DecisionContext, ref: RecoveryCapsuleRef, *, fresh: bool = False
) -> ClusterRecoveryCapsule:
    """The capsule `ref` names, verified against it; a missing capsule is CorruptRecord. A
    capsule this decision store verified before is not read again, unless `fresh`: a check
    that the capsule is durable now (before an outcome names it, before a floor or a sweep
    relies on it) always reads it."""
    with writing("recovery capsule reference"):
        validate_capsule_ref(ref)
    deployment_id = await load_or_create_deployment_id(ctx)
    path = reference_path(ref)
    cache = record_cache(ctx.store)
    known = None if cache is None or fresh else cache.cached(path, _Verified)
    if known is not None and known.ref == ref:
        return known.capsule  # content addressed: verified against `ref` when first read
    what = f"recovery capsule '{ref.sha256}'"
    read = await read_bytes(ctx.store, path, what=what, max_bytes=MAX_RECOVERY_CAPSULE_BYTES)
    if read is None:
        raise CorruptRecord(f"{path}: recovery capsule '{ref.sha256}' is missing", key=path)
    body, meta = read
    # CD-9, CD-11: the length is checked before the body is decoded.
    if meta.size != ref.len:
        raise CorruptRecord(f"{path}: {what} is {meta.size} bytes, expected {ref.len}", key=path)
    capsule = decode_sorted(
        body, ClusterRecoveryCapsule, key=path, max_bytes=MAX_RECOVERY_CAPSULE_BYTES
    )
    with reading(path):
        validate_capsule(capsule)
    canonical = encode_sorted(capsule)
    # CD-9: the digest and the exact canonical bytes must match the content address.
    if _reference(capsule, canonical) != ref or canonical != body:
        raise CorruptRecord(
            f"{path}: {what} does not match its content-addressed reference", key=path
        )
    if capsule.deployment_id != deployment_id:
        raise CorruptRecord(
            f"{path}: recovery capsule belongs to deployment {capsule.deployment_id}, current "
            f"deployment is {deployment_id}",
            key=path,
        )
    if cache is not None:
        cache.remember(path, _Verified(capsule, ref), len(body))
    return capsule


@dataclass(frozen=True, slots=True)
class _Verified:
    """A capsule that passed every check of `load_recovery_capsule` against `ref`."""

    capsule: ClusterRecoveryCapsule
    ref: RecoveryCapsuleRef


async def validate_recovery_capsule_for_outcome(
    ctx: DecisionContext, outcome: CheckpointOutcome
) -> None:
    """Check that a cluster commit outcome and the capsule it names describe the same attempt.

    InvalidArgument for the outcome's own shape problems and for a capsule of another attempt,
    fence or deployment; CorruptRecord (or StoreUnavailable) from loading the capsule.
    """
    with writing(f"checkpoint outcome epoch {outcome.epoch}"):
        validate_outcome_shape(outcome, outcome.epoch)
    ref = outcome.recovery_capsule
    if ref is None:
        raise InvalidArgument(
            f"cluster commit outcome for epoch {outcome.epoch} requires a recovery capsule"
        )
    capsule = await load_recovery_capsule(ctx, ref, fresh=True)  # durable now, not just once
    if (
        capsule.attempt.epoch != outcome.epoch
        or capsule.attempt.checkpoint_id != outcome.checkpoint_id
        or capsule.assignment_fence != outcome.assignment_fence
        or capsule.deployment_id != outcome.deployment_id
    ):
        raise InvalidArgument(
            f"cluster commit outcome for epoch {outcome.epoch} does not match recovery capsule "
            f"'{ref.sha256}'"
        )


def _reference(capsule: ClusterRecoveryCapsule, body: bytes) -> RecoveryCapsuleRef:
    return RecoveryCapsuleRef(
        epoch=capsule.attempt.epoch,
        checkpoint_id=capsule.attempt.checkpoint_id,
        sha256=sha256_hex(body),
        len=len(body),
    )

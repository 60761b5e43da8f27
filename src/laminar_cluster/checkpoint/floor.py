"""The outcome GC floor: reading it and its compare-and-swap (CD §3.7, CD §4.8 "Floor CAS", CD §5
CD-7).

The floor is the one mutable, monotone record of retention: `checkpoint-outcome-gc/
deployment={uuid}/floor`. It is read with the bounded read of CD §2.5 (at most MAX_FLOOR_BYTES; in
NativeCas mode the version read must carry a CAS token), decoded canonically and validated
against the current deployment (CD §3.7). It is written by create, then by update-if-match; a
local-mode store that cannot update conditionally gets a read-compare-overwrite under the
process-wide namespace lock instead.

`decode_control_record` is the canonical decode both this module and `outcome` use: it keeps the
spec's order of checks (type rules before the canonical-body check) and its message substrings
("unsupported version", "canonical body").

This module is separate from `outcome` and `retention` so that both can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.identity import load_or_create_deployment_id
from laminar_cluster.checkpoint.limits import FLOOR_VERSION, MAX_FLOOR_BYTES
from laminar_cluster.checkpoint.paths import floor_path
from laminar_cluster.checkpoint.reader import Loaded, read_bytes
from laminar_cluster.checkpoint.records import AllocatorMode, OutcomeGcFloor
from laminar_cluster.checkpoint.validate import validate_floor
from laminar_cluster.codec import decode, encode, encode_checked
from laminar_cluster.codec.shape import reading, writing
from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
    NotSupported,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store import CREATE, OVERWRITE, IfMatch, PutMode

T = TypeVar("T", bound=msgspec.Struct)

FLOOR_WHAT = "outcome GC floor"

# What a conditional write can answer besides success: a definite answer or an ambiguous one.
_LOST_CAS = (PreconditionFailed, ObjectAlreadyExists, ObjectNotFound)
_AMBIGUOUS = (WriteOutcomeUnknown, StoreUnavailable)


class _Versioned(msgspec.Struct):
    version: Any = None


def declared_version(body: bytes) -> object:
    """The `version` member of a JSON object body, or None if there is none to be read."""
    try:
        return msgspec.json.decode(body, type=_Versioned).version
    except (msgspec.MsgspecError, RecursionError):
        return None


def decode_control_record(
    body: bytes,
    type_: type[T],
    *,
    key: str,
    max_bytes: int,
    rules: Callable[[T], None],
    canonical_message: str,
) -> T:
    """The canonical record of `type_` in `body`, checked by `rules` (which raise CorruptRecord).

    A body that parses as a valid value but is not its canonical encoding runs `rules` first
    (the spec's order: a record's own rules before its canonical body) and then fails with
    `canonical_message`. Any other decoding failure is the codec's CorruptRecord.
    """
    try:
        value = decode(body, type_, key=key, max_bytes=max_bytes)
    except CorruptRecord as error:
        try:
            lenient = msgspec.json.decode(body, type=type_, strict=True)
        except (msgspec.MsgspecError, RecursionError):
            raise error from None
        rules(lenient)
        try:
            canonical = encode(lenient)
        except InvalidArgument:
            raise error from None
        if canonical != body:
            raise CorruptRecord(f"{key}: {canonical_message} ({error})", key=key) from None
        raise
    rules(value)
    return value


async def read_floor(ctx: DecisionContext) -> Loaded[OutcomeGcFloor] | None:
    """The current deployment's floor with the metadata of the version read, or None (CD §3.7)."""
    deployment_id = await load_or_create_deployment_id(ctx)
    key = floor_path(deployment_id)
    read = await read_bytes(ctx.store, key, what=FLOOR_WHAT, max_bytes=MAX_FLOOR_BYTES)
    if read is None:
        return None
    body, meta = read
    # CD-12: a shared store must really support CAS, so the version read must be nameable.
    if ctx.native_cas and meta.e_tag is None and meta.version is None:
        raise CorruptRecord(
            f"{key}: {FLOOR_WHAT} has neither an ETag nor an object version for CAS", key=key
        )
    version = declared_version(body)
    if type(version) is int and version != FLOOR_VERSION:
        raise CorruptRecord(
            f"{key}: {FLOOR_WHAT} does not match its canonical path, deployment, and version "
            f"(version {version}, expected {FLOOR_VERSION})",
            key=key,
        )

    def rules(floor: OutcomeGcFloor) -> None:
        with reading(key):
            validate_floor(floor, deployment_id)

    floor = decode_control_record(
        body,
        OutcomeGcFloor,
        key=key,
        max_bytes=MAX_FLOOR_BYTES,
        rules=rules,
        canonical_message=f"{FLOOR_WHAT} does not use its canonical body",
    )
    return Loaded(floor, meta)


async def current_floor(ctx: DecisionContext) -> OutcomeGcFloor | None:
    """The current deployment's floor record, or None; floors compare by full value (CD §4.5)."""
    loaded = await read_floor(ctx)
    return None if loaded is None else loaded.record


def _token(loaded: Loaded[OutcomeGcFloor]) -> tuple[str | None, str | None]:
    return loaded.meta.e_tag, loaded.meta.version


async def compare_and_swap_outcome_gc_floor(
    ctx: DecisionContext,
    candidate: OutcomeGcFloor,
    expected: Loaded[OutcomeGcFloor] | None,
) -> bool:
    """Publish `candidate` if the floor is still `expected` (None: if there is no floor yet).

    True means a floor at least as high as the candidate is durable (not necessarily ours);
    False means the CAS lost and the caller rebuilds its candidate from the winner (CD §4.8).
    """
    key = floor_path(candidate.deployment_id)
    with writing(f"{key}: {FLOOR_WHAT}"):
        validate_floor(candidate, candidate.deployment_id)  # CD-7: validated before it is written
    body = encode_checked(candidate, what=f"{key}: {FLOOR_WHAT}", max_bytes=MAX_FLOOR_BYTES)
    mode: PutMode
    if expected is None:
        mode = CREATE
    elif expected.meta.e_tag is None and expected.meta.version is None:
        # Only a local-mode read can lack a token: there is nothing to condition an update on.
        return await _locked_overwrite(ctx, candidate, expected, body)
    else:
        mode = IfMatch(e_tag=expected.meta.e_tag, version=expected.meta.version)
    try:
        await ctx.store.put(key, body, mode)
    except _LOST_CAS:
        return False
    except NotSupported as error:
        if expected is not None and ctx.mode is AllocatorMode.LOCAL_SINGLE_WRITER:
            return await _locked_overwrite(ctx, candidate, expected, body)
        return await _settle(ctx, candidate, f"PutMode::Update is not supported: {error}")
    except _AMBIGUOUS as error:
        return await _settle(ctx, candidate, str(error))
    return True


async def _settle(ctx: DecisionContext, candidate: OutcomeGcFloor, failure: str) -> bool:
    """After a failed floor write: True if a floor at least as high is durable, else Io."""
    # CD-7: "a floor at least this high is durable" is the success condition, not "ours landed".
    current = await read_floor(ctx)
    if current is not None and current.record.before_epoch >= candidate.before_epoch:
        return True
    key = floor_path(candidate.deployment_id)
    found = "no floor" if current is None else f"floor {current.record.before_epoch}"
    raise StoreUnavailable(
        f"{key}: {FLOOR_WHAT} write of {candidate.before_epoch} failed ({failure}); "
        f"reconciliation could not settle it: the store holds {found}"
    )


async def _locked_overwrite(
    ctx: DecisionContext,
    candidate: OutcomeGcFloor,
    expected: Loaded[OutcomeGcFloor],
    body: bytes,
) -> bool:
    """Local mode without conditional update: read, compare and overwrite under the namespace
    lock, which serializes every instance of this process on the namespace (CD §4.8)."""
    key = floor_path(candidate.deployment_id)
    lock = ctx.namespace_lock
    if lock is None or ctx.mode is not AllocatorMode.LOCAL_SINGLE_WRITER:
        raise StoreUnavailable(
            f"{key}: {FLOOR_WHAT} needs PutMode::Update, and only local mode may overwrite "
            "under its namespace lock instead"
        )
    async with lock:
        current = await read_floor(ctx)
        if current is None:
            return False
        if current.record.before_epoch >= candidate.before_epoch:
            return True  # CD-7: superseded by a floor at least as high
        if _token(current) != _token(expected):
            return False
        try:
            await ctx.store.put(key, body, OVERWRITE)
        except (*_LOST_CAS, *_AMBIGUOUS, NotSupported) as error:
            return await _settle(ctx, candidate, str(error))
        return True

"""Deployment identity: create once, read everywhere (CD §4.2, CD §3.5).

Every public operation first loads (or creates) the identity, so even a read on an empty
namespace creates `identity.json`. Instances sharing a store converge on one id; independent
stores get different ids. The allocator mode is recorded in the identity, and a namespace opened
in the other mode is refused.
"""

from __future__ import annotations

from laminar_cluster.checkpoint.context import DecisionContext
from laminar_cluster.checkpoint.limits import MAX_IDENTITY_BYTES
from laminar_cluster.checkpoint.paths import IDENTITY_PATH
from laminar_cluster.checkpoint.reader import Loaded, read_record
from laminar_cluster.checkpoint.records import AllocatorMode, DeploymentIdentity
from laminar_cluster.checkpoint.validate import validate_identity
from laminar_cluster.codec import encode_checked
from laminar_cluster.codec.shape import reading
from laminar_cluster.errors import (
    CorruptRecord,
    ObjectAlreadyExists,
    PreconditionFailed,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store import CREATE, ObjectMeta

_MODE_NAMES = {
    AllocatorMode.NATIVE_CAS: "NativeCas",
    AllocatorMode.LOCAL_SINGLE_WRITER: "LocalSingleWriter",
}


async def read_identity(ctx: DecisionContext) -> Loaded[DeploymentIdentity] | None:
    """Read and validate the identity (version, UUIDs, mode, canonical body), or None."""
    loaded = await read_record(
        ctx.store,
        IDENTITY_PATH,
        DeploymentIdentity,
        what="deployment identity",
        max_bytes=MAX_IDENTITY_BYTES,
        require_token=ctx.native_cas,
    )
    if loaded is None:
        return None
    identity = loaded.record
    with reading(IDENTITY_PATH):
        validate_identity(identity)
    if identity.allocator_mode is not ctx.mode:
        raise CorruptRecord(
            f"{IDENTITY_PATH}: deployment identity allocator mode "
            f"{_MODE_NAMES[identity.allocator_mode]} cannot be opened as {_MODE_NAMES[ctx.mode]}",
            key=IDENTITY_PATH,
        )
    return loaded


async def load_or_create_deployment_id(ctx: DecisionContext) -> str:
    """The deployment id of this namespace, creating the identity if there is none."""
    if ctx.deployment_id is not None:
        return ctx.deployment_id
    async with ctx.metadata_lock:
        if ctx.deployment_id is not None:
            return ctx.deployment_id
        loaded = await read_identity(ctx)
        if loaded is None:
            loaded = await _create_identity(ctx)
        _adopt(ctx, loaded)
        return loaded.record.id


def _adopt(ctx: DecisionContext, loaded: Loaded[DeploymentIdentity]) -> None:
    ctx.deployment_id = loaded.record.id
    if ctx.native_cas and (loaded.meta.e_tag is not None or loaded.meta.version is not None):
        ctx.cached_head = loaded


async def _create_identity(ctx: DecisionContext) -> Loaded[DeploymentIdentity]:
    proposal = DeploymentIdentity(
        version=2,
        id=str(ctx.clock.uuid7()),
        allocator_mode=ctx.mode,
        checkpoint_id=0,
        allocation_id=str(ctx.clock.uuid7()),
    )
    body = encode_checked(proposal, what="deployment identity", max_bytes=MAX_IDENTITY_BYTES)
    try:
        written = await ctx.store.put(IDENTITY_PATH, body, CREATE)
    except (ObjectAlreadyExists, PreconditionFailed):
        # A concurrent creator won (or obstore misreported our own create): adopt what is stored.
        stored = await read_identity(ctx)
        if stored is None:
            # Retryable: S3's 409 ConditionalRequestConflict surfaces as "already exists"
            # although nothing was written.
            raise StoreUnavailable(
                f"{IDENTITY_PATH}: deployment identity disappeared after create conflict; "
                "nothing is stored, retry"
            ) from None
        return stored
    except (WriteOutcomeUnknown, StoreUnavailable) as error:
        stored = await read_identity(ctx)
        if stored is None:
            raise StoreUnavailable(
                f"{IDENTITY_PATH}: deployment identity create failed and nothing is stored: {error}"
            ) from error
        return stored
    # The put's token names exactly what we wrote; without one, no head is cached (`_adopt`).
    meta = ObjectMeta(
        key=IDENTITY_PATH,
        size=len(body),
        e_tag=written.e_tag,
        version=written.version,
        last_modified_ms=ctx.clock.wall_ms(),
    )
    return Loaded(proposal, meta)

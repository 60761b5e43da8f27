"""Checkpoint ID allocation (CD §4.3, CD §3.6; invariants CD-1 to CD-3; CD §6.3).

IDs are never reused within a deployment and are at least the caller's `minimum`; gaps are
allowed. Two protocols, chosen by the allocator mode persisted in the identity:

* **Shared (NativeCas):** a compare-and-swap loop on the identity object, which doubles as the
  allocation head. Each call draws one `allocation_id` (uuid7) and reuses it on every retry, so a
  re-read after a lost response tells "our proposal landed" (the head equals it) from "someone
  else's did". An uncontended allocation costs one conditional put when the head is cached (the
  put's returned token seeds the next CAS), two requests otherwise (read + put).
* **Local (LocalSingleWriter):** immutable 65,536-ID block claims by exclusive create, and an
  in-memory cursor inside the claimed block: one durable write per block, no I/O on the fast
  path. A restart burns the unused tail of its block.

The spec leaves the shared loop and the block-claim loop unbounded (CD §10.2): here each is bounded
by a count (`limits`) and by the caller's absolute `deadline` (DeadlineExceeded). Cached state is
changed only after a durable success or a validated read, so a cancellation at any await leaves
at worst a burned ID or block (CD §6.3).
"""

from __future__ import annotations

from laminar_cluster.checkpoint.context import DecisionContext, LocalReservation
from laminar_cluster.checkpoint.identity import load_or_create_deployment_id, read_identity
from laminar_cluster.checkpoint.limits import (
    ALLOCATION_ATTEMPTS_MAX,
    CHECKPOINT_ID_BLOCK_SIZE,
    LOCAL_BLOCK_CLAIM_ATTEMPTS_MAX,
    MAX_IDENTITY_BYTES,
    U64_MAX,
)
from laminar_cluster.checkpoint.paths import (
    BLOCKS_PREFIX,
    IDENTITY_PATH,
    block_path,
    parse_block_path,
)
from laminar_cluster.checkpoint.reader import Loaded
from laminar_cluster.checkpoint.records import DeploymentIdentity
from laminar_cluster.codec import encode_checked
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    InvalidArgument,
    NotSupported,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    Refused,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store import CREATE, ObjectMeta, PutResult

_EXHAUSTED = "checkpoint ID space exhausted u64"
# The largest block whose first ID fits in a u64: block b covers [b*B + 1, b*B + B].
_MAX_BLOCK = (U64_MAX - 1) // CHECKPOINT_ID_BLOCK_SIZE


async def allocate_checkpoint_id_at_least(
    ctx: DecisionContext, minimum: int, *, deadline: float
) -> int:
    """A checkpoint ID never returned before in this deployment, and at least `minimum`."""
    if type(minimum) is not int:
        raise InvalidArgument(f"minimum checkpoint ID must be an int, not {minimum!r}")
    if minimum == 0:
        raise InvalidArgument("minimum checkpoint ID must be nonzero")
    if not 0 < minimum <= U64_MAX:
        raise InvalidArgument(f"minimum checkpoint ID {minimum} is outside 1..={U64_MAX}")
    # Local fast path. With the lock free and no await between the check and the update, this
    # is exactly what holding the lock for it would do, minus the acquire.
    # CD-1/CD-2 (local): the ID comes from a block this instance claimed, above every earlier one.
    if not ctx.native_cas and ctx.deployment_id is not None and not ctx.metadata_lock.locked():
        reserved = _take_reserved(ctx.local, minimum)
        if reserved is not None:
            return reserved
    what = f"checkpoint ID allocation (minimum {minimum})"
    try:
        async with ctx.clock.timeout_at(deadline):
            deployment_id = await load_or_create_deployment_id(ctx)
            async with ctx.metadata_lock:
                if ctx.native_cas:
                    return await _allocate_shared(ctx, deployment_id, minimum, deadline)
                return await _allocate_local(ctx, minimum, deadline)
    except TimeoutError as error:
        raise DeadlineExceeded(f"{what}: deadline passed") from error


def _check_deadline(ctx: DecisionContext, deadline: float, what: str, attempt: int) -> None:
    if ctx.clock.monotonic() >= deadline:
        raise DeadlineExceeded(f"{what}: deadline passed before attempt {attempt}")


# Shared mode: CAS on the identity head (CD §4.3 "Shared").


async def _allocate_shared(
    ctx: DecisionContext, deployment_id: str, minimum: int, deadline: float
) -> int:
    allocation_id = str(ctx.clock.uuid7())  # one per call, reused on every retry
    current = ctx.cached_head
    if current is None:
        current = await _read_head(ctx, deployment_id)
        if current is None:
            # CD-3: a missing head is never recreated here; only a fresh instance mints a new
            # deployment, so IDs restart only under a new identity.
            raise CorruptRecord(
                f"{IDENTITY_PATH}: checkpoint ID authority for deployment {deployment_id} "
                "disappeared",
                key=IDENTITY_PATH,
            )
        ctx.cached_head = current
    for attempt in range(1, ALLOCATION_ATTEMPTS_MAX + 1):
        _check_deadline(ctx, deadline, "shared checkpoint ID allocation", attempt)
        # CD-2: next = max(head + 1, minimum); the head never regresses (progress check below).
        next_id = max(current.record.checkpoint_id + 1, minimum)
        if next_id > U64_MAX:
            raise Refused(f"{IDENTITY_PATH}: {_EXHAUSTED} (head {current.record.checkpoint_id})")
        proposal = DeploymentIdentity(
            version=2,
            id=deployment_id,
            allocator_mode=ctx.mode,
            checkpoint_id=next_id,
            allocation_id=allocation_id,
        )
        observed = await _propose(ctx, deployment_id, current, proposal)
        if observed is None:
            return next_id
        current = observed
        ctx.cached_head = observed
        await ctx.clock.sleep(0)
    raise DeadlineExceeded(
        f"{IDENTITY_PATH}: shared checkpoint ID allocation gave up after "
        f"{ALLOCATION_ATTEMPTS_MAX} contended attempts"
    )


async def _propose(
    ctx: DecisionContext,
    deployment_id: str,
    current: Loaded[DeploymentIdentity],
    proposal: DeploymentIdentity,
) -> Loaded[DeploymentIdentity] | None:
    """CAS `proposal` over `current`: None if it is durable (and cached), else the head
    observed since, to retry from; an outcome that cannot be settled raises."""
    next_id = proposal.checkpoint_id
    body = encode_checked(proposal, what="checkpoint ID head", max_bytes=MAX_IDENTITY_BYTES)
    try:
        written = await ctx.store.put(IDENTITY_PATH, body, current.meta.token)
    except (PreconditionFailed, ObjectAlreadyExists, ObjectNotFound):
        observed = await _reread_with_progress(ctx, deployment_id, current)
    except NotSupported as error:
        # CD-12: a shared store must support conditional update; nothing was written.
        raise StoreUnavailable(
            f"{IDENTITY_PATH}: checkpoint ID head needs PutMode::Update (conditional update), "
            f"which this store does not support: {error}"
        ) from error
    except (WriteOutcomeUnknown, StoreUnavailable) as error:
        observed = await _reread_after_ambiguous(ctx, deployment_id, current, error)
        if observed.record != proposal and observed.record.checkpoint_id < next_id:
            # Not visible now; if it lands later, the next CAS from `observed` fails and
            # re-reads, so `next_id` is burned, never returned.
            ctx.cached_head = observed
            raise StoreUnavailable(
                f"{IDENTITY_PATH}: checkpoint ID {next_id} proposal outcome unknown and not "
                f"settled by reading the head back (head is at "
                f"{observed.record.checkpoint_id}): {error}"
            ) from error
    else:
        ctx.cached_head = _head_written(ctx, proposal, written, len(body))
        return None
    if observed.record == proposal:
        # CD-1: an ID is returned only if our exact proposal is durable: the re-read shows our
        # unique allocation_id (a lost response, or a conflict reported after applying).
        ctx.cached_head = observed
        return None
    # CD-1: the head moved on without our proposal (or past it): `next_id` is burned, never
    # returned; the caller retries from the observed head.
    return observed


async def _read_head(ctx: DecisionContext, deployment_id: str) -> Loaded[DeploymentIdentity] | None:
    """The validated head (token required in NativeCas), or None; foreign ones are refused."""
    observed = await read_identity(ctx)
    if observed is not None and observed.record.id != deployment_id:
        # CD-3: a head minted by another deployment never continues this one's sequence.
        raise CorruptRecord(
            f"{IDENTITY_PATH}: checkpoint ID head belongs to deployment {observed.record.id}, "
            f"current deployment is {deployment_id}",
            key=IDENTITY_PATH,
        )
    return observed


async def _reread_with_progress(
    ctx: DecisionContext, deployment_id: str, prior: Loaded[DeploymentIdentity]
) -> Loaded[DeploymentIdentity]:
    """Re-read the head after a failed or ambiguous CAS and check that it only moved forward."""
    observed = await _read_head(ctx, deployment_id)
    before = prior.record
    # CD-2/CD-3: the head never disappears, regresses, or changes identity without advancing.
    if observed is None:
        raise CorruptRecord(
            f"{IDENTITY_PATH}: checkpoint ID head disappeared after durable ID "
            f"{before.checkpoint_id}",
            key=IDENTITY_PATH,
        )
    after = observed.record
    if after.checkpoint_id < before.checkpoint_id:
        raise CorruptRecord(
            f"{IDENTITY_PATH}: checkpoint ID head regressed from {before.checkpoint_id} to "
            f"{after.checkpoint_id}",
            key=IDENTITY_PATH,
        )
    if after.checkpoint_id == before.checkpoint_id and after != before:
        raise CorruptRecord(
            f"{IDENTITY_PATH}: checkpoint ID {before.checkpoint_id} changed allocation identity "
            "without advancing",
            key=IDENTITY_PATH,
        )
    return observed


async def _reread_after_ambiguous(
    ctx: DecisionContext,
    deployment_id: str,
    prior: Loaded[DeploymentIdentity],
    error: Exception,
) -> Loaded[DeploymentIdentity]:
    """The progress-checked re-read that settles an ambiguous CAS; if the read fails too, the
    allocation stays unsettled (StoreUnavailable) and the stale cached head makes the next CAS
    fail and re-read, burning whatever landed."""
    try:
        return await _reread_with_progress(ctx, deployment_id, prior)
    except StoreUnavailable as read_error:
        raise StoreUnavailable(
            f"{IDENTITY_PATH}: checkpoint ID head update outcome unknown ({error}) and the "
            f"read-back failed: {read_error}"
        ) from read_error


def _head_written(
    ctx: DecisionContext, proposal: DeploymentIdentity, written: PutResult, size: int
) -> Loaded[DeploymentIdentity] | None:
    """The head to cache after our CAS: ours with the put's token, or none without a token
    (the next allocation then reads the head first)."""
    if written.e_tag is None and written.version is None:
        return None
    meta = ObjectMeta(
        key=IDENTITY_PATH,
        size=size,
        e_tag=written.e_tag,
        version=written.version,
        last_modified_ms=ctx.clock.wall_ms(),
    )
    return Loaded(proposal, meta)


# Local mode: immutable block claims and an in-memory cursor (CD §4.3 "Local", CD §3.6).


def _block_for(checkpoint_id: int) -> int:
    return (checkpoint_id - 1) // CHECKPOINT_ID_BLOCK_SIZE


def _block_bounds(block: int) -> tuple[int, int]:
    """First and last ID of `block`; the end saturates at u64::MAX."""
    if not 0 <= block <= _MAX_BLOCK:
        raise Refused(f"{_EXHAUSTED}: block {block} starts beyond {U64_MAX}")
    start = block * CHECKPOINT_ID_BLOCK_SIZE + 1
    return start, min(start + CHECKPOINT_ID_BLOCK_SIZE - 1, U64_MAX)


def _take_reserved(local: LocalReservation, minimum: int) -> int | None:
    """The next ID of the claimed block (at least `minimum`), or None if it has none left."""
    next_id = local.next_id
    if next_id is None:
        return None
    checkpoint_id = next_id if next_id >= minimum else minimum
    if checkpoint_id > local.block_end:
        local.next_id = None  # burn the tail: a block above `minimum` is claimed next
        return None
    local.next_id = checkpoint_id + 1 if checkpoint_id < local.block_end else None
    return checkpoint_id


async def _initialize_local(ctx: DecisionContext) -> None:
    """List the claimed blocks once per instance; any malformed entry fails closed."""
    entries = await ctx.store.list(BLOCKS_PREFIX)
    highest: int | None = None
    for entry in entries:
        block = parse_block_path(entry.key)
        if block > _MAX_BLOCK:
            raise CorruptRecord(
                f"{entry.key}: checkpoint ID block {block} is out of range ({_EXHAUSTED})",
                key=entry.key,
            )
        highest = block if highest is None else max(highest, block)
    local = ctx.local
    local.initialized = True
    local.highest_block = highest
    local.next_id = None
    local.block_end = 0


async def _allocate_local(ctx: DecisionContext, minimum: int, deadline: float) -> int:
    local = ctx.local
    if not local.initialized:
        await _initialize_local(ctx)
    reserved = _take_reserved(local, minimum)
    if reserved is not None:
        return reserved
    minimum_block = _block_for(minimum)
    highest = local.highest_block
    # CD-2 (local): always claim above every block listed or claimed, so restarts never reuse.
    candidate = minimum_block if highest is None else max(highest + 1, minimum_block)
    for attempt in range(1, LOCAL_BLOCK_CLAIM_ATTEMPTS_MAX + 1):
        _check_deadline(ctx, deadline, "local checkpoint ID block claim", attempt)
        start, end = _block_bounds(candidate)
        key = block_path(candidate)
        try:
            await ctx.store.put(key, b"", CREATE)
        except (ObjectAlreadyExists, PreconditionFailed):
            # CD-1 (local): a block someone else claimed (or whose claim was ambiguous) is
            # never used; move on to the next one.
            local.highest_block = candidate
            candidate += 1
            await ctx.clock.sleep(0)
            continue
        except (WriteOutcomeUnknown, StoreUnavailable, NotSupported, ObjectNotFound) as error:
            raise StoreUnavailable(
                f"{key}: checkpoint ID block claim failed (a retry skips this block if the "
                f"claim landed): {error}"
            ) from error
        checkpoint_id = max(start, minimum)
        local.highest_block = candidate  # above every block listed or skipped so far
        local.block_end = end
        local.next_id = checkpoint_id + 1 if checkpoint_id < end else None
        return checkpoint_id
    raise DeadlineExceeded(
        f"local checkpoint ID block claim gave up after {LOCAL_BLOCK_CLAIM_ATTEMPTS_MAX} blocks "
        "already claimed"
    )

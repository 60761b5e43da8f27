"""Lease operations on the authority log (LA §3.3, LA §4.3; invariants LA-4 to LA-10).

* `begin_new_term`: acquire an empty namespace, or rotate the token when this exact incarnation
  owns the head; a rival's head is `Held`, never overridden (LA-7: wall clocks never authorise).
* `renew_exact`: renew only the exact term named by `token`; anything else is `Fenced` (LA-6).
* `observe_rival` / `try_takeover`: take over only after the rival's liveness identity (owner,
  token, renewal_sequence) stayed unchanged for a full ttl on our monotonic clock (LA-7, LA-8).
  Non-liveness appends by the old term never reset an observation.
* `lease_grants_leadership` / `lease_grants_proof`: the pure hot-path gates (LA §4.3.5).

Counters follow the table of LA §3.3 exactly. The spec's unbounded retry loops are bounded here by
AUTHORITY_MUTATION_ATTEMPTS_MAX and by the caller's absolute monotonic `deadline`
(DeadlineExceeded). `now_ms` (wall clock) only fills the diagnostic `expires_at_ms`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.codec.shape import writing
from laminar_cluster.codec.types import I64_MAX, I64_MIN
from laminar_cluster.errors import (
    CorruptRecord,
    Fenced,
    InvalidArgument,
    StoreUnavailable,
)
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.limits import AUTHORITY_MUTATION_ATTEMPTS_MAX
from laminar_cluster.lease.log import HeadCache, append, load_published_head, require_advanced
from laminar_cluster.lease.outcomes import (
    Acquired,
    AppendContended,
    AppendOutcome,
    Held,
    LeaderLeaseObservation,
    LeaseOutcome,
    PublishedHead,
)
from laminar_cluster.lease.paths import HEAD_PATH
from laminar_cluster.lease.records import LeaderAuthorityRecord, LeaderLease, LeaderLeaseOwner
from laminar_cluster.lease.validate import validate_lease, validate_owner
from laminar_cluster.lease.validate_chains import lease_matches_proof
from laminar_cluster.store import ObjectStore


@dataclass(frozen=True, slots=True)
class TermContext:
    """What every lease operation needs: the store, the clock, a checked ttl, the prune hook."""

    store: ObjectStore
    clock: Clock
    ttl_ms: int
    on_appended: Callable[[], None] | None = None
    head_cache: HeadCache | None = None  # this process's last published head: a hint


class _SameOwner(enum.Enum):
    """What a same-owner head does to the token (LA §4.3.1, LA §4.3.2, LA §4.3.6)."""

    ROTATE = "rotate"  # begin_new_term: +1
    EXACT = "exact"  # renew_exact: must equal the caller's token, kept
    PRESERVE = "preserve"  # test-only fixture renewal: kept


def ttl_ms_of(ttl_s: float) -> int:
    """The lease ttl in whole milliseconds; > 0, finite, no sub-millisecond remainder."""
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float) or not math.isfinite(ttl_s):
        raise InvalidArgument(f"lease TTL must be positive, not {ttl_s!r}")
    ttl_ms = round(ttl_s * 1000)
    if ttl_ms <= 0:
        raise InvalidArgument(f"lease TTL must be positive, not {ttl_s!r} s")
    if abs(ttl_s * 1000 - ttl_ms) > 1e-6:
        raise InvalidArgument(f"lease TTL {ttl_s!r} s is not a whole number of milliseconds")
    if ttl_ms > I64_MAX:
        raise InvalidArgument(f"lease TTL {ttl_ms} ms does not fit in i64")
    return ttl_ms


def lease_grants_leadership(
    lease: LeaderLease | None, owner: LeaderLeaseOwner, deadline_live: bool
) -> bool:
    """The local deadline is live and the exact owner holds the durable lease (LA §4.3.5, LA-8)."""
    return deadline_live and lease is not None and lease.owner == owner


def lease_grants_proof(
    lease: LeaderLease | None, owner: LeaderLeaseOwner, deadline_live: bool, proof: LeaderProof
) -> bool:
    """As `lease_grants_leadership`, and the proof names the current term: a proof captured
    before a token rotation fails (LA §4.3.5, LA-8, LA-9)."""
    return (
        deadline_live
        and proof.owner == owner.proof_owner()
        and lease is not None
        and lease.owner == owner
        and lease_matches_proof(lease, proof)
    )


async def begin_new_term(
    ctx: TermContext, owner: LeaderLeaseOwner, *, now_ms: int, deadline: float
) -> LeaseOutcome:
    """Acquire an empty namespace, rotate the token of our own head, or report `Held`."""
    return await _acquire(ctx, owner, _SameOwner.ROTATE, None, now_ms=now_ms, deadline=deadline)


async def renew_exact(
    ctx: TermContext, owner: LeaderLeaseOwner, token: int, *, now_ms: int, deadline: float
) -> LeaseOutcome:
    """Renew exactly the term `token` of `owner`; never `Held`: anything else is Fenced (LA-6)."""
    return await _acquire(ctx, owner, _SameOwner.EXACT, token, now_ms=now_ms, deadline=deadline)


async def acquire_or_renew_current_term(
    ctx: TermContext, owner: LeaderLeaseOwner, *, now_ms: int, deadline: float
) -> LeaseOutcome:
    """Test fixtures only (LA §4.3.6): `begin_new_term`, but the same owner keeps its token."""
    return await _acquire(ctx, owner, _SameOwner.PRESERVE, None, now_ms=now_ms, deadline=deadline)


def observe_rival(
    ctx: TermContext, owner: LeaderLeaseOwner, lease: LeaderLease
) -> LeaderLeaseObservation:
    """Start a full-ttl observation of a rival's liveness identity, on our monotonic clock."""
    _check_owner(owner)
    _check_lease(lease)
    if lease.owner == owner:
        raise InvalidArgument("leader takeover observation must belong to a rival")
    return LeaderLeaseObservation(lease=lease, started_s=ctx.clock.monotonic())


async def try_takeover(
    ctx: TermContext,
    owner: LeaderLeaseOwner,
    observation: LeaderLeaseObservation,
    *,
    now_ms: int,
    deadline: float,
) -> LeaseOutcome:
    """Take over once the observed liveness identity stayed current for a full ttl (LA §4.3.4)."""
    _check_owner(owner)
    _check_lease(observation.lease)
    if observation.lease.owner == owner:
        raise InvalidArgument("leader takeover observation must belong to a rival")
    # LA-7: only the observer's monotonic clock decides; expires_at_ms is never read.
    if ctx.clock.monotonic() - observation.started_s < ctx.ttl_ms / 1000:
        return Held(lease=observation.lease)
    expires_at_ms = _diagnostic_expiry(now_ms, ctx.ttl_ms)
    observed = observation.lease.liveness_identity()
    async with within_deadline(ctx.clock, deadline, "leader takeover"):
        for attempt in range(AUTHORITY_MUTATION_ATTEMPTS_MAX):
            if attempt:
                await ctx.clock.sleep(0)
            head = await load_published_head(ctx.store, ctx.clock)
            if head is None:
                raise CorruptRecord("observed leader lease disappeared", key=HEAD_PATH)
            current = head.record.lease
            if current.liveness_identity() != observed:
                return Held(lease=current)  # the rival renewed, or someone else took over
            # LA-4: a takeover is a new term: the token advances.
            candidate = _next_record(head.record, owner, current.token + 1, expires_at_ms)
            outcome = await _append_cached(ctx, head, candidate)
            if not isinstance(outcome, AppendContended):
                return Acquired(lease=candidate.lease)
            winner = outcome.winner
            if winner.lease.liveness_identity() != observed:
                return Held(lease=winner.lease)
            # A non-liveness append by the old term (fault, outcome, seal, floor) took the
            # slot: it does not reset the observation, so retry on the winner.
            require_advanced(winner, head.record.lease.seq, "leader takeover")
    raise StoreUnavailable(
        f"leader takeover did not converge in {AUTHORITY_MUTATION_ATTEMPTS_MAX} attempts"
    )


async def _acquire(
    ctx: TermContext,
    owner: LeaderLeaseOwner,
    rule: _SameOwner,
    token: int | None,
    *,
    now_ms: int,
    deadline: float,
) -> LeaseOutcome:
    """The loop of LA §4.3.1/LA §4.3.2: load the head, build the next record, append, settle
    races."""
    _check_owner(owner)
    expires_at_ms = _diagnostic_expiry(now_ms, ctx.ttl_ms)
    what = "exact leader renewal" if rule is _SameOwner.EXACT else "leader term"
    async with within_deadline(ctx.clock, deadline, what):
        for attempt in range(AUTHORITY_MUTATION_ATTEMPTS_MAX):
            if attempt:
                await ctx.clock.sleep(0)
            # The first attempt may start from this process's own last head (a stale hint only
            # costs a failed create, which re-reads); every retry reads the published head.
            head = _usable_hint(ctx, owner, rule, token) if not attempt else None
            head = head or await load_published_head(ctx.store, ctx.clock)
            candidate = _term_candidate(head, owner, rule, token, expires_at_ms)
            if isinstance(candidate, Held):
                return candidate
            outcome = await _append_cached(ctx, head, candidate)
            if not isinstance(outcome, AppendContended):
                return Acquired(lease=candidate.lease)
            winner = outcome.winner
            if winner.lease.owner != owner:
                if rule is _SameOwner.EXACT:
                    raise Fenced("exact leader renewal lost a rival-owner CAS race")  # LA-6
                return Held(lease=winner.lease)
            if rule is _SameOwner.EXACT and winner.lease.token != token:
                raise Fenced("exact leader renewal lost a same-owner CAS race")  # LA-6
            # Our own incarnation (or a decision under our term) took the slot: retry.
            require_advanced(winner, 0 if head is None else head.record.lease.seq, what)
    raise StoreUnavailable(f"{what} did not converge in {AUTHORITY_MUTATION_ATTEMPTS_MAX} attempts")


def _usable_hint(
    ctx: TermContext, owner: LeaderLeaseOwner, rule: _SameOwner, token: int | None
) -> PublishedHead | None:
    """The cached head, only when it is ours under the expected token: a hint may let us skip
    the reads before an append, never decide Held or Fenced (those need a fresh read)."""
    cached = ctx.head_cache.get() if ctx.head_cache is not None else None
    if cached is None or cached.record.lease.owner != owner:
        return None
    if rule is _SameOwner.EXACT and cached.record.lease.token != token:
        return None
    return cached


async def _append_cached(
    ctx: TermContext, head: PublishedHead | None, candidate: LeaderAuthorityRecord
) -> AppendOutcome:
    """Append, keeping the head cache equal to what we published (cleared on any doubt)."""
    cache = ctx.head_cache
    if cache is not None:
        cache.clear()
    outcome = await append(ctx.store, ctx.clock, head, candidate, on_appended=ctx.on_appended)
    if cache is not None and not isinstance(outcome, AppendContended):
        cache.set(outcome.published)
    return outcome


def _term_candidate(
    head: PublishedHead | None,
    owner: LeaderLeaseOwner,
    rule: _SameOwner,
    token: int | None,
    expires_at_ms: int,
) -> LeaderAuthorityRecord | Held:
    """The record to append after `head`, or `Held`; raises Fenced for exact renewals."""
    if head is None:
        if rule is _SameOwner.EXACT:
            raise Fenced("exact leader renewal lost the durable authority head")
        first = LeaderLease(
            seq=1,
            renewal_sequence=1,
            token=1,
            owner=owner,
            expires_at_ms=expires_at_ms,
            catalog_manifest=None,
        )
        return LeaderAuthorityRecord.initial(first)
    current = head.record.lease
    if current.owner != owner:  # LA-10: same node, other boot or term, is a rival
        if rule is _SameOwner.EXACT:
            raise Fenced("exact leader renewal was superseded by a rival owner")  # LA-6
        return Held(lease=current)  # LA-7: never override a rival, whatever its expiry says
    if rule is _SameOwner.ROTATE:
        next_token = current.token + 1  # LA-4, LA-9: a new term of the same owner rotates the token
    elif rule is _SameOwner.EXACT and current.token != token:
        raise Fenced("exact leader renewal was superseded by a newer local term")
    else:
        next_token = current.token  # LA-4: renewal never advances the token
    return _next_record(head.record, owner, next_token, expires_at_ms)


def _next_record(
    head: LeaderAuthorityRecord, owner: LeaderLeaseOwner, token: int, expires_at_ms: int
) -> LeaderAuthorityRecord:
    """A liveness record after `head`: seq+1, renewal+1, the given token (LA §3.3); carried fields
    and the catalog ref copied, admitting fields cleared."""
    current = head.lease
    if current.seq >= U64_MAX:
        raise InvalidArgument("lease sequence exhausted")
    if current.renewal_sequence >= U64_MAX:
        raise InvalidArgument("lease renewal sequence exhausted")
    if token > U64_MAX:
        raise InvalidArgument("leader fencing token exhausted")
    lease = LeaderLease(
        seq=current.seq + 1,
        renewal_sequence=current.renewal_sequence + 1,
        token=token,
        owner=owner,
        expires_at_ms=expires_at_ms,
        catalog_manifest=current.catalog_manifest,
    )
    return head.preserve_with_lease(lease)


def _diagnostic_expiry(now_ms: int, ttl_ms: int) -> int:
    """`now_ms + ttl_ms` as an i64 (diagnostic only, never decides anything)."""
    expires_at_ms = now_ms + ttl_ms
    if not I64_MIN <= now_ms <= I64_MAX or not I64_MIN <= expires_at_ms <= I64_MAX:
        raise InvalidArgument(f"diagnostic lease expiry overflow ({now_ms} ms + {ttl_ms} ms)")
    return expires_at_ms


def _check_owner(owner: LeaderLeaseOwner) -> None:
    with writing("leader lease owner"):
        validate_owner(owner)


def _check_lease(lease: LeaderLease) -> None:
    with writing("observed leader lease"):
        validate_lease(lease)

"""`LeaderLeaseStore`: the leader authority's facade (LA §4.2, LA §4.3, LA §8.9).

Thin on purpose: reads and appends live in `lease.log` (LA §4.1), lease operations in
`lease.term` (LA §4.3); decision modules add their methods next to these, delegating the same way.
No validation at construction: the ttl is checked on every operation (LA §4.3). The wall clock
only fills the diagnostic `expires_at_ms`; every validity question uses the monotonic clock.
"""

from __future__ import annotations

from collections.abc import Callable

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.clock import Clock
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.lease import log, term
from laminar_cluster.lease.limits import MAX_LIVE_AUTHORITY_LINKS
from laminar_cluster.lease.observe import load_observed_head
from laminar_cluster.lease.outcomes import (
    AppendContended,
    AppendOutcome,
    LeaderLeaseObservation,
    LeaseOutcome,
    PublishedHead,
)
from laminar_cluster.lease.records import LeaderAuthorityRecord, LeaderLease, LeaderLeaseOwner
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.probe import verify_store_contract
from laminar_cluster.store.record_cache import caching


class LeaderLeaseStore:
    """The durable leader authority on one object store, for one process."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        clock: Clock,
        ttl_s: float,
        decisions: DecisionStore | None = None,
        live_commit_links_max: int = MAX_LIVE_AUTHORITY_LINKS,
    ) -> None:
        if not 1 <= live_commit_links_max <= MAX_LIVE_AUTHORITY_LINKS:
            raise InvalidArgument(
                f"live_commit_links_max is {live_commit_links_max}; it must be 1.."
                f"{MAX_LIVE_AUTHORITY_LINKS}"
            )
        # Records are read once per authority instance (a process builds one): `caching` wraps
        # the store with this authority's memory of verified records and the watched head.
        self.store = caching(store)
        self.clock = clock
        self.ttl_s = ttl_s
        # The checkpoint decision store of the same namespace: deployment identity, canonical
        # cluster outcomes and recovery capsules (LA §8.5). Decision operations require it.
        self.decisions = decisions
        # The head this process last published: lets a renewal skip the head reads.
        self.head_cache = log.HeadCache()
        # Called after every successful append (LA §4.8.1); the prune scheduler installs itself.
        self.prune_hook: Callable[[], None] | None = None
        # LA-21's admission bound on live Commit links (LA §4.4.1 step 5). The spec fixes it at
        # MAX_LIVE_AUTHORITY_LINKS; a lower value only lets tests reach it with few checkpoints.
        self.live_commit_links_max = live_commit_links_max

    def require_decisions(self) -> DecisionStore:
        if self.decisions is None:
            raise InvalidArgument("this leader authority was opened without a decision store")
        return self.decisions

    def schedule_prune(self) -> None:
        """Ask for a background history prune (LA §4.8.1); a failing hook is only logged."""
        log.schedule_prune(self.prune_hook)

    def context(self) -> term.TermContext:
        """Store, clock, prune hook and the ttl, checked now (> 0, whole milliseconds)."""
        return term.TermContext(
            store=self.store,
            clock=self.clock,
            ttl_ms=term.ttl_ms_of(self.ttl_s),
            on_appended=self.prune_hook,
            head_cache=self.head_cache,
        )

    async def verify_store_contract(self, timeout_s: float) -> None:
        """Refuse a store without atomic create, native CAS or read-after-delete (LA §4.2,
        LA-12)."""
        await verify_store_contract(self.store, self.clock, timeout_s=timeout_s)

    async def load(self) -> LeaderLease | None:
        """The lease of the published head, or None for an empty namespace."""
        record = await self.load_record()
        return None if record is None else record.lease

    async def load_record(self) -> LeaderAuthorityRecord | None:
        """The published head record (after successor repair), or None."""
        head = await log.load_published_head(self.store, self.clock)
        return None if head is None else head.record

    async def observe(self, *, successor: bool = False) -> LeaderLease | None:
        """The lease of the record the published pointer names, read as cheaply as the store
        allows (`lease.observe.load_observed_head`: the successor probe only with `successor`,
        no repair): what a rival polls while it observes the leader (LA §4.9.3). Never for a
        decision."""
        record = await load_observed_head(self.store, self.clock, successor=successor)
        return None if record is None else record.lease

    async def observe_record(self) -> LeaderAuthorityRecord | None:
        """The record the published pointer names, read as `observe` reads it: for a loop
        that only needs to know whether the authority moved. Never for a decision."""
        return await load_observed_head(self.store, self.clock)

    async def load_published_head(self) -> PublishedHead | None:
        """The published head record with the pointer it was read through, for appends."""
        return await log.load_published_head(self.store, self.clock)

    async def append(
        self, expected_head: PublishedHead | None, candidate: LeaderAuthorityRecord
    ) -> AppendOutcome:
        """Append `candidate` right after `expected_head` (LA §4.1.6), scheduling a prune."""
        self.head_cache.clear()
        outcome = await log.append(
            self.store, self.clock, expected_head, candidate, on_appended=self.prune_hook
        )
        if not isinstance(outcome, AppendContended):
            self.head_cache.set(outcome.published)
        return outcome

    async def begin_new_term(self, owner: LeaderLeaseOwner, *, deadline: float) -> LeaseOutcome:
        """Acquire an empty namespace or rotate our own token; `Held` on a rival (LA §4.3.1)."""
        return await term.begin_new_term(
            self.context(), owner, now_ms=self.clock.wall_ms(), deadline=deadline
        )

    async def renew_exact(
        self, owner: LeaderLeaseOwner, token: int, *, deadline: float
    ) -> LeaseOutcome:
        """Renew exactly the term `token`; raises Fenced otherwise (LA §4.3.2)."""
        return await term.renew_exact(
            self.context(), owner, token, now_ms=self.clock.wall_ms(), deadline=deadline
        )

    def observe_rival(self, owner: LeaderLeaseOwner, lease: LeaderLease) -> LeaderLeaseObservation:
        """Start observing a rival's liveness identity now, on the monotonic clock (LA §4.3.3)."""
        return term.observe_rival(self.context(), owner, lease)

    async def try_takeover(
        self, owner: LeaderLeaseOwner, observation: LeaderLeaseObservation, *, deadline: float
    ) -> LeaseOutcome:
        """Take over after a full-ttl observation of an unchanged rival (LA §4.3.4)."""
        return await term.try_takeover(
            self.context(), owner, observation, now_ms=self.clock.wall_ms(), deadline=deadline
        )

"""A rival's view of the leader lease: the observation read and when to make it (LA §4.9.3
"Observation reads"; LA-7).

While a rival leads, a candidate only needs to notice each renewal soon after it lands: LA-7
starts a full-TTL observation whenever the liveness identity it sees changes, and a takeover
happens only after one such observation on the candidate's own monotonic clock, followed by
`try_takeover`, which loads the head in full (the pointer, its record and the successor
probe of LA-3) and appends a new term only after the very record it observed. Neither the
read below nor the polling rate can therefore make a takeover unsafe: reading less often only
starts the observation of the rival's last renewal later, which delays a takeover and never
hastens one.

* `load_observed_head`: the published head as cheaply as the store can tell: a conditional
  read of the head pointer (no body while it is unchanged) and the record it names only when
  it moved (create-only records are read once, `store.record_cache`). Unlike
  `log.load_published_head` it does not probe S + 1 or repair a lagging pointer: a renewal
  created but not yet published is seen when the pointer moves (its writer's next append, or
  any full load, publishes it; LA-3), or by the takeover attempt's full load.
* `ObservationSchedule`: when the next read is due. With a fixed period (the manager's
  `observe_interval_s`), every period. Without one, once per renewal interval R, timed for just
  after the rival's next renewal should have landed: the record's diagnostic `expires_at_ms`
  minus the TTL is the wall time the renewal attempt started, and the rival renews every R, so
  the next one starts R later; the read is due then plus `lag_s`, the delay observed between a
  renewal's start and its visibility here (store latency and clock skew between the hosts,
  learned from reads that had to wait for it, and shrinking a little after each renewal found
  at once). A read that finds no new renewal is retried every R / 8 until one is seen (or the
  takeover instant comes), and those retries also probe S + 1 (`probe_successor`): a renewal
  is late either because its writer is slow or dead, or because it created its record and
  died before publishing it, which only the probe sees before the takeover attempt would. The
  wall clocks only time reads; they decide nothing (LA-7).
"""

from __future__ import annotations

from typing import Final

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.clock import Clock
from laminar_cluster.lease.log import load_published_head, read_pointer, read_record
from laminar_cluster.lease.records import LeaderAuthorityRecord, LeaderLease
from laminar_cluster.store import ObjectStore

# A read that found no new renewal is retried after this fraction of the renewal interval.
RETRY_FRACTION: Final = 1 / 8
# The delay assumed between a renewal's start and its visibility before any was measured, and
# the most that is ever assumed, as fractions of the renewal interval.
LAG_FRACTION_INITIAL: Final = 1 / 8
LAG_FRACTION_MAX: Final = 1 / 2
# After a renewal found at the first read, the assumed delay shrinks by this fraction of the
# renewal interval, so an estimate made under a slow store does not keep reads late for good.
LAG_DECAY_FRACTION: Final = 1 / 64


async def load_observed_head(
    store: ObjectStore, clock: Clock, *, successor: bool = False
) -> LeaderAuthorityRecord | None:
    """The record the published pointer names (module docstring), or None for an empty
    namespace; a full `load_published_head` when the pointer names a record that is gone (it
    moved past a pruned target) or when there is no pointer yet. With `successor`, record
    S + 1 too, returned when it exists (created but not yet published, LA-3; not repaired
    here): a renewal whose writer died before its pointer update is then seen at once."""
    pointer = await read_pointer(store)
    if pointer is not None:
        record = await read_record(store, pointer.sequence)
        if record is not None:
            if successor and record.lease.seq < U64_MAX:
                following = await read_record(store, record.lease.seq + 1)
                return record if following is None else following
            return record
    head = await load_published_head(store, clock)
    return None if head is None else head.record


class ObservationSchedule:
    """When a candidate next reads a rival's lease (module docstring). Pure: the caller
    passes the times and what the read found."""

    def __init__(
        self, *, renew_interval_s: float, ttl_ms: int, fixed_period_s: float | None
    ) -> None:
        assert renew_interval_s > 0 and ttl_ms > 0
        assert fixed_period_s is None or fixed_period_s > 0
        self.renew_interval_s = renew_interval_s
        self.ttl_ms = ttl_ms
        self.fixed_period_s = fixed_period_s
        self.lag_s = renew_interval_s * LAG_FRACTION_INITIAL
        self._waited = False  # the last read found no new renewal

    @property
    def probe_successor(self) -> bool:
        """Whether the next read also probes S + 1: it retries a read that found no renewal."""
        return self._waited

    @property
    def retry_s(self) -> float:
        """The wait after a read that found nothing new (or failed)."""
        if self.fixed_period_s is not None:
            return self.fixed_period_s
        return self.renew_interval_s * RETRY_FRACTION

    def next_read(self, now_s: float, now_wall_ms: int, lease: LeaderLease, renewed: bool) -> float:
        """The monotonic time of the next read, after a read at `now_s` that found `lease`
        (`renewed`: a liveness identity not seen before)."""
        if self.fixed_period_s is not None:
            return now_s + self.fixed_period_s
        period_s = self.renew_interval_s
        if not renewed:
            self._waited = True
            return now_s + self.retry_s
        started_ms = lease.expires_at_ms - self.ttl_ms  # the renewal attempt's start (rival's)
        seen_after_s = (now_wall_ms - started_ms) / 1000
        if self._waited:  # it landed after a read that missed it: how late renewals show up
            self.lag_s = min(max(seen_after_s, 0.0), period_s * LAG_FRACTION_MAX)
        else:  # found at once: try a little earlier next time (a miss measures it again)
            self.lag_s = max(self.lag_s - period_s * LAG_DECAY_FRACTION, 0.0)
        self._waited = False
        due_s = now_s + (period_s - seen_after_s) + self.lag_s
        return min(max(due_s, now_s + self.retry_s), now_s + period_s)

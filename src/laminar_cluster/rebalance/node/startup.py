"""A node's startup (`RebalanceNode.run`): acquire the process lease, activate it, read the
first membership view. Every step is retried on `StoreUnavailable` with full-jitter backoff
(`clock.retry_until`) until one absolute startup deadline, so one transient store error never
ends a starting process (issue 7: a node crashed when a fault hit its first membership poll).

What each step may retry, and why it is safe:

* acquire: every attempt starts a new boot and reads before its conditional write; a write that
  applied unseen is only taken over by our own next attempt (term + 1, ML-1, ML-11);
* activate: `ProcessLeaseHolder.renew` carries a nonce and reads back; a renewal that applied
  unseen is adopted by the next one (`ProcessLeaseHolder._settle_unconfirmed`). It is bounded by
  the lease's own validity as well: past it `renew` raises `ProcessFenced` (exit 3);
* first membership view: a read.

Errors that are not `StoreUnavailable` (`CorruptRecord`, `ProcessFenced`, a view without this
node) propagate at once; so does `DeadlineExceeded` once the startup deadline passes. The
node logs them as `startup_failed` and exits `EXIT_STARTUP_FAILED`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from laminar_cluster.clock import Clock, retry_until
from laminar_cluster.membership.discovery import MembershipView
from laminar_cluster.membership.leave import activate
from laminar_cluster.membership.process_lease import AcquiredLease, ProcessLeaseHolder
from laminar_cluster.rebalance.cluster.controller import StoreClusterController

# Attempts per step; the startup deadline normally ends a long outage first (with the backoff
# capped at 1 s, 64 attempts span about 40 s of sleeping on average).
STARTUP_ATTEMPTS_MAX: Final = 64
STARTUP_BACKOFF_S_MIN: Final = 0.05
STARTUP_BACKOFF_S_MAX: Final = 1.0

T = TypeVar("T")


async def _startup_step(
    work: Callable[[], Awaitable[T]], what: str, clock: Clock, *, deadline: float
) -> T:
    """`work`, retried on StoreUnavailable with the startup backoff until `deadline`."""
    return await retry_until(
        work,
        what=what,
        clock=clock,
        deadline=deadline,
        attempts_max=STARTUP_ATTEMPTS_MAX,
        backoff_s_min=STARTUP_BACKOFF_S_MIN,
        backoff_s_max=STARTUP_BACKOFF_S_MAX,
    )


async def acquire_lease(
    holder: ProcessLeaseHolder, clock: Clock, *, deadline: float
) -> AcquiredLease:
    """A new term of `holder`'s process lease, retried on StoreUnavailable until `deadline`."""
    return await _startup_step(
        lambda: holder.acquire(deadline=deadline),
        f"node-{holder.node}: acquiring the process lease",
        clock,
        deadline=deadline,
    )


async def activate_lease(holder: ProcessLeaseHolder, clock: Clock, *, deadline: float) -> None:
    """joining -> active, retried on StoreUnavailable until `deadline` or the lease's validity,
    whichever is first (past its validity `renew` raises ProcessFenced)."""
    valid_until_s = holder.valid_until_s
    until = deadline if valid_until_s is None else min(deadline, valid_until_s)
    await _startup_step(
        lambda: activate(holder, deadline=until),
        f"node-{holder.node}: activating the process lease",
        clock,
        deadline=until,
    )


async def first_members(
    controller: StoreClusterController, clock: Clock, *, deadline: float
) -> MembershipView:
    """The first membership view, retried on StoreUnavailable until `deadline`."""
    return await _startup_step(
        lambda: controller.refresh_members(deadline=deadline),
        f"node-{controller.node_id}: first membership refresh",
        clock,
        deadline=deadline,
    )

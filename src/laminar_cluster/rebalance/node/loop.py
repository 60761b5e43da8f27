"""The rebalance controller loop, on every node (RB §4.2).

It wakes on a membership change (then waits for `rebalance_debounce` of quiet) or on the audit
tick (`watcher_poll`, first tick immediate, missed ticks skipped), and while this process is
leader runs `try_rebalance` until it succeeds, finds nothing to do, or leadership is lost.
Shutdown wins every wait. A failed attempt is handled by the kind of its error (errors.py):

* the retryable kinds (`errors.RETRYABLE`: StoreUnavailable, DeadlineExceeded, Contended,
  Refused, InventoryChanged, and WriteOutcomeUnknown, whose read-back is the next attempt's
  re-read of the head) are retried every `retry_delay`;
* Fenced ends the leader work: the attempts stop at once. When the lease manager still grants
  the very proof the attempt ran under, the durable authority has superseded that term before
  the manager noticed, so no later attempt runs under that proof (a tick finds it and does
  nothing) until the manager ends the term and a new one begins. A grant the manager withdrew
  meanwhile is the ordinary loss of leadership, which the leader check before every attempt
  handles (a re-granted proof acts again);
* CorruptRecord, and every other LaminarError (InvalidArgument, ...), is reported: logged at
  ERROR with the object once while the same error persists, and not retried until the next
  audit tick or membership change (a blind retry would only repeat it);
* anything that is not a LaminarError is a bug: it propagates and ends the node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from laminar_cluster.errors import RETRYABLE, Fenced, LaminarError, Refused
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.rebalance.context import RebalanceContext
from laminar_cluster.rebalance.coordinated.stopped import run_stopped_recovery_round
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.stats import PurposeCountingStore
from laminar_cluster.rebalance.refusals import Refusal, refused_because
from laminar_cluster.rebalance.rotation.planner import try_rebalance

logger: Final = logging.getLogger(__name__)

Attempt = Callable[[RebalanceContext, Sequence[int]], Awaitable[int | None]]


async def rebalance_attempt(ctx: RebalanceContext, live: Sequence[int]) -> int | None:
    """One leader attempt: first a coordinated-recovery round when this process is
    recovering (a missed ack quorum left a draining head, RB §1.3), then `try_rebalance`."""
    if ctx.controller.is_recovering():
        settled = await run_stopped_recovery_round(ctx)
        if settled is not None:
            return settled
    return await try_rebalance(ctx, live)


async def logged_attempt(
    ctx: RebalanceContext, live: Sequence[int], log: NodeLog, requests: PurposeCountingStore
) -> int | None:
    """`rebalance_attempt`, logged (`rotated` with its own store requests, or
    `rebalance_failed`); the caller holds the node's `leader_work`."""
    clock = ctx.clock
    started_s = clock.monotonic()
    before = requests.count_of("rebalance")
    try:
        settled = await rebalance_attempt(ctx, live)
    except LaminarError as error:
        log.write("rebalance_failed", kind=type(error).__name__, error=str(error), live=list(live))
        raise
    if settled is not None:
        log.write(
            "rotated",
            version=settled,
            live=list(live),
            attempt_started=started_s,
            attempt_s=round(clock.monotonic() - started_s, 4),
            requests=requests.count_of("rebalance") - before,
        )
    return settled


class RebalanceLoop:
    """One node's controller loop. `attempt` is `rebalance_attempt` (injectable for tests)."""

    def __init__(self, ctx: RebalanceContext, attempt: Attempt = rebalance_attempt) -> None:
        self.ctx = ctx
        self._attempt = attempt
        self.attempts = 0  # how many times `attempt` ran (for tests and metrics)
        self.last_error: LaminarError | None = None
        self.fenced_proof: LeaderProof | None = None  # the leader term a Fenced ended
        self._reported: tuple[type[LaminarError], str] | None = None  # logged at ERROR

    async def run(self, shutdown: asyncio.Event) -> None:
        ctx = self.ctx
        clock = ctx.clock
        watch = ctx.controller.members_watch()
        seen = watch.version()
        next_tick = clock.monotonic()  # the first audit tick fires immediately
        while not shutdown.is_set():
            now = clock.monotonic()
            if now >= next_tick:
                # Skip missed ticks: the next one is a whole period after now.
                next_tick = now + ctx.config.watcher_poll_s
                changed = False
            else:
                woke = await self._wait(shutdown, watch.changed(seen), next_tick)
                if woke is None:
                    continue  # the tick (or shutdown; the loop condition decides)
                seen, changed = woke, True
            if shutdown.is_set():
                return
            if changed:
                seen = await self._debounce(shutdown, seen)
                if shutdown.is_set():
                    return
            await self._attempt_until_settled(shutdown)

    async def _debounce(self, shutdown: asyncio.Event, seen: int) -> int:
        """Wait until `rebalance_debounce` passes with no further change (RB §4.2)."""
        ctx = self.ctx
        watch = ctx.controller.members_watch()
        while not shutdown.is_set():
            quiet_until = ctx.clock.monotonic() + ctx.config.rebalance_debounce_s
            woke = await self._wait(shutdown, watch.changed(seen), quiet_until)
            if woke is None:
                return seen
            seen = woke
        return seen

    async def _wait(
        self, shutdown: asyncio.Event, changed: Awaitable[int], until: float
    ) -> int | None:
        """The new watch version, or None at `until` or shutdown."""
        clock = self.ctx.clock
        closed = False
        result: int | None = None
        async with asyncio.TaskGroup() as group:
            change = group.create_task(_settled(changed))
            stop = group.create_task(shutdown.wait())
            try:
                async with clock.timeout_at(until):
                    await asyncio.wait({change, stop}, return_when=asyncio.FIRST_COMPLETED)
            except TimeoutError:
                pass
            finally:
                change.cancel()
                stop.cancel()
        if change.done() and not change.cancelled():
            outcome = change.result()
            if isinstance(outcome, Refused):
                closed = True
            else:
                result = outcome
        if closed:
            logger.info("membership watch closed; rebalance loop exits")
            shutdown.set()
        return result

    async def _attempt_until_settled(self, shutdown: asyncio.Event) -> None:
        ctx = self.ctx
        while not shutdown.is_set():
            proof = ctx.controller.capture_leader_proof()
            if proof is None or proof == self.fenced_proof:
                return  # not the leader, or only under a term that was fenced
            live = ctx.controller.assignable_instances()
            self.attempts += 1
            try:
                settled = await self._attempt(ctx, live)
            except LaminarError as error:
                self.last_error = error
                if not self._retries(error, proof):
                    return
                if await self._sleep(shutdown, ctx.config.retry_delay_s):
                    return
                continue
            self.last_error = None
            self._reported = None
            if settled is not None:
                logger.info("rotated to assignment %d", settled)
            return

    def _retries(self, error: LaminarError, proof: LeaderProof) -> bool:
        """Whether a failed attempt is retried after `retry_delay` (module docstring)."""
        if isinstance(error, Fenced):
            if self.ctx.controller.capture_leader_proof() == proof:
                self.fenced_proof = proof  # the authority superseded it; the manager lags
            logger.warning(
                "leader term of token %d was fenced; leader work stops: %s",
                proof.fencing_token,
                error,
            )
            return False
        if isinstance(error, RETRYABLE):
            logger.warning("rebalance attempt failed; retrying: %s", error)
            return True
        self._report(error)
        return False

    def _report(self, error: LaminarError) -> None:
        """ERROR once, naming the object, while the same error persists; DEBUG on repeats."""
        key: str | None = getattr(error, "key", None)  # CorruptRecord and store answers name one
        seen = (type(error), f"{key}: {error}")
        level = logging.DEBUG if seen == self._reported else logging.ERROR
        self._reported = seen
        logger.log(
            level,
            "rebalance attempt stopped by %s (object %s); not retried before the next audit "
            "tick: %s",
            type(error).__name__,
            key or "unnamed",
            error,
        )

    async def _sleep(self, shutdown: asyncio.Event, seconds: float) -> bool:
        """Sleep, or return True early on shutdown."""
        clock = self.ctx.clock
        try:
            async with clock.timeout_at(clock.monotonic() + seconds):
                await shutdown.wait()
        except TimeoutError:
            return False
        return True


async def _settled(changed: Awaitable[int]) -> int | Refused:
    """The watch result, with a closed watch as a value (a TaskGroup must not fail)."""
    try:
        return await changed
    except Refused as error:
        if not refused_because(error, Refusal.MEMBERS_WATCH_CLOSED):
            raise
        return error

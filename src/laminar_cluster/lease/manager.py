"""The leader lease manager: acquires and renews leadership while this process is a candidate
(LA §4.9.1, LA §4.9.3, LA §6; invariants LA-4, LA-6, LA-7, LA-8, LA-9).

`LeaderLeaseManager.run(candidacy, shutdown)` loops: (1) a changed candidacy generation
withdraws the grant and forgets the token (LA-9); (2) while ineligible it withdraws and waits;
(3) it waits for shutdown (fence), a candidacy change, the grant's validity instant (fence: a
missed renewal) or the next tick (every `renew_interval_s`, missed ticks skipped); (4) it runs
`try_takeover` with an observation, else `renew_exact` with a held token, else `begin_new_term`
(a fresh manager always begins a new term, LA-9), raced against shutdown (fence), a candidacy
change (abandon) and `min(valid_until, attempt_valid_until)` (fence), where
`attempt_valid_until` = monotonic now + ttl at the attempt's START (LA-8); (5) an answer at or
after either instant fences (LA-8); (6) `Acquired` extends the deadline to `attempt_valid_until`
and publishes the lease; `Held` withdraws and observes the rival, keeping the running
observation while the rival is unchanged (LA-7); `Fenced` fences (LA-6); other errors keep the
state for the next tick, and the validity instant still ends leadership on time.

Withdraw (candidacy loss, a rival holds it) is not terminal; fence (shutdown, missed or late
renewal, durable fencing, cancellation of `run`) is, and a higher layer builds a new manager.
Wall clocks decide nothing here: only the Clock's monotonic time (LA §6).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol

from laminar_cluster.clock import Clock
from laminar_cluster.codec.shape import writing
from laminar_cluster.errors import (
    CorruptRecord,
    DeadlineExceeded,
    Fenced,
    InvalidArgument,
    LaminarError,
)
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.candidacy import CandidacyWatch, LeaderCandidacy
from laminar_cluster.lease.deadline import LeaseDeadline, LeaseWatch
from laminar_cluster.lease.limits import DEFAULT_RENEW_INTERVAL_S, DEFAULT_TTL_S
from laminar_cluster.lease.observe import ObservationSchedule
from laminar_cluster.lease.outcomes import Acquired, Held, LeaderLeaseObservation, LeaseOutcome
from laminar_cluster.lease.records import LeaderLease, LeaderLeaseOwner
from laminar_cluster.lease.term import lease_grants_leadership, lease_grants_proof, ttl_ms_of
from laminar_cluster.lease.validate import validate_owner

logger: Final = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseManagerConfig:
    """Renewal timing: ttl in whole milliseconds (> 0), renew interval in (0, ttl)."""

    ttl_s: float = DEFAULT_TTL_S
    renew_interval_s: float = DEFAULT_RENEW_INTERVAL_S
    # How often a rival re-reads the head while it observes; None: once per renewal interval,
    # timed for just after the rival's next renewal (`lease.observe.ObservationSchedule`).
    observe_interval_s: float | None = None

    def __post_init__(self) -> None:
        ttl_ms_of(self.ttl_s)  # > 0, finite, whole milliseconds, fits i64
        if not (math.isfinite(self.renew_interval_s) and 0 < self.renew_interval_s < self.ttl_s):
            raise InvalidArgument(
                f"leader lease manager: renew interval {self.renew_interval_s} s must be "
                f"positive and below the ttl {self.ttl_s} s"
            )
        observe = self.observe_interval_s
        if observe is not None and not (math.isfinite(observe) and 0 < observe <= self.ttl_s):
            raise InvalidArgument(
                f"leader lease manager: observe interval {observe} s must be in (0, ttl]"
            )

    @property
    def ttl_ms(self) -> int:
        return ttl_ms_of(self.ttl_s)


class LeaderLeaseAuthority(Protocol):
    """The lease operations of `LeaderLeaseStore` the manager drives (LA §4.3)."""

    @property
    def ttl_s(self) -> float: ...

    async def load(self) -> LeaderLease | None: ...

    async def observe(self, *, successor: bool = False) -> LeaderLease | None: ...

    async def begin_new_term(self, owner: LeaderLeaseOwner, *, deadline: float) -> LeaseOutcome: ...

    async def renew_exact(
        self, owner: LeaderLeaseOwner, token: int, *, deadline: float
    ) -> LeaseOutcome: ...

    def observe_rival(
        self, owner: LeaderLeaseOwner, lease: LeaderLease
    ) -> LeaderLeaseObservation: ...

    async def try_takeover(
        self, owner: LeaderLeaseOwner, observation: LeaderLeaseObservation, *, deadline: float
    ) -> LeaseOutcome: ...


class _Ticker:
    """Ticks every `period_s` from `start_s`; the first is due at once; missed ticks are
    skipped (the next one is the next multiple of the period after now)."""

    def __init__(self, start_s: float, period_s: float) -> None:
        self.next_at = start_s
        self._period_s = period_s

    def consume(self, now: float) -> None:
        missed = max(0, math.floor((now - self.next_at) / self._period_s))
        self.next_at += self._period_s * (missed + 1)
        if self.next_at <= now:  # rounding: never a second tick at the same instant
            self.next_at += self._period_s


@dataclass(frozen=True, slots=True)
class _Shutdown:
    def __str__(self) -> str:
        return "shutdown"


@dataclass(frozen=True, slots=True)
class _CandidacyChanged:
    closed: bool

    def __str__(self) -> str:
        return "candidacy watch closed" if self.closed else "candidacy changed"


@dataclass(frozen=True, slots=True)
class _Timer:
    def __str__(self) -> str:
        return "operation deadline passed"


@dataclass(frozen=True, slots=True)
class _Completed:
    result: LeaseOutcome | LaminarError


_Event = _Shutdown | _CandidacyChanged | _Timer | _Completed


@dataclass(slots=True)
class _TermState:
    valid_until: float | None = None
    observation: LeaderLeaseObservation | None = None
    held_token: int | None = None  # None at start: a fresh manager begins a new term (LA-9)
    next_poll: float = 0.0  # while observing: when to re-read the rival's liveness
    # While observing past the takeover instant: a failed takeover is retried at the next tick,
    # never at once (a store that fails fast would otherwise be hammered in a tight loop).
    takeover_retry_at: float = 0.0

    def clear(self) -> None:
        self.valid_until, self.observation, self.held_token = None, None, None
        self.takeover_retry_at = 0.0


async def _settled(operation: Callable[[], Awaitable[LeaseOutcome]]) -> LeaseOutcome | LaminarError:
    """The operation's outcome, with its expected errors as values (a raising child would tear
    down the TaskGroup that races it)."""
    try:
        return await operation()
    except LaminarError as error:
        return error
    except TimeoutError as error:
        return DeadlineExceeded(f"leader lease operation timed out: {error}")


class LeaderLeaseManager:
    """Acquires and renews the leader lease for one exact process incarnation."""

    def __init__(
        self,
        authority: LeaderLeaseAuthority,
        owner: LeaderLeaseOwner,
        config: LeaseManagerConfig,
        clock: Clock,
    ) -> None:
        with writing("leader lease manager owner"):
            validate_owner(owner)
        authority_ttl_ms = ttl_ms_of(authority.ttl_s)
        if config.ttl_ms != authority_ttl_ms:
            raise InvalidArgument(
                f"leader lease manager: ttl {config.ttl_ms} ms must equal the store's ttl "
                f"{authority_ttl_ms} ms"
            )
        self._authority = authority
        self._owner = owner
        self._config = config
        self._clock = clock
        self._deadline = LeaseDeadline(clock)
        self._watch = LeaseWatch()
        self._started = False
        self._schedule = ObservationSchedule(
            renew_interval_s=config.renew_interval_s,
            ttl_ms=config.ttl_ms,
            fixed_period_s=config.observe_interval_s,
        )
        # Monotonic time this manager last learned who holds the lease (itself or a rival);
        # for readiness only, never for a lease decision.
        self.known_at_s: float | None = None

    @property
    def owner(self) -> LeaderLeaseOwner:
        return self._owner

    @property
    def deadline(self) -> LeaseDeadline:
        """The shared monotonic gate for leader hot paths."""
        return self._deadline

    @property
    def lease_watch(self) -> LeaseWatch:
        return self._watch

    def grants_leadership(self) -> bool:
        """`lease_grants_leadership` on the published lease and the live deadline."""
        return lease_grants_leadership(self._watch.current(), self._owner, self._deadline.is_live())

    def proof(self) -> LeaderProof | None:
        """The current proof, only while `lease_grants_proof` holds for it."""
        lease = self._watch.current()
        if lease is None:
            return None
        proof = lease.proof()
        if not lease_grants_proof(lease, self._owner, self._deadline.is_live(), proof):
            return None
        return proof

    async def run(self, candidacy: CandidacyWatch, shutdown: asyncio.Event) -> None:
        """The renewal loop (LA §4.9.3). Returns after fencing; every exit path fences,
        cancellation included. A manager runs once: after it, build a new one."""
        if self._started:
            raise InvalidArgument("leader lease manager: run() was already called")
        self._started = True
        try:
            await self._loop(candidacy, shutdown)
        finally:
            self._fence("manager stopped", logging.INFO)

    async def _loop(self, candidacy: CandidacyWatch, shutdown: asyncio.Event) -> None:
        ticker = _Ticker(self._clock.monotonic(), self._config.renew_interval_s)
        state = _TermState()
        generation = candidacy.current().generation
        while True:  # the service loop: it ends only by fencing
            seen = candidacy.current()
            if seen.generation != generation:
                # LA-9: a changed generation means a grant was lost; never renew its token
                self._withdraw("candidacy generation changed")
                state.clear()
                generation = seen.generation
            if not seen.eligible:
                self._withdraw("not a candidate")
                state.clear()
                event = await self._race(None, candidacy, seen, shutdown, wake_at=None)
                if isinstance(event, _CandidacyChanged) and not event.closed:
                    continue
                self._fence(f"stopped while ineligible: {event}", logging.INFO)
                return
            wake_at = self._wake_at(ticker, state)
            event = await self._race(None, candidacy, seen, shutdown, wake_at=wake_at)
            if isinstance(event, _Shutdown | _CandidacyChanged):
                if isinstance(event, _CandidacyChanged) and not event.closed:
                    continue
                self._fence(f"stopped: {event}", logging.INFO)
                return
            now = self._clock.monotonic()
            if state.valid_until is not None and now >= state.valid_until:
                self._fence("renewal missed its deadline")  # LA-8
                return
            if state.observation is not None:
                if not await self._observing(now, ticker, candidacy, seen, shutdown, state):
                    return
                continue
            if now < ticker.next_at:
                continue
            ticker.consume(now)
            if not await self._attempt(candidacy, seen, shutdown, state):
                return

    def _wake_at(self, ticker: _Ticker, state: _TermState) -> float:
        """The next tick; while observing, the next poll or the takeover instant instead."""
        observation = state.observation
        if observation is not None:
            takeover_at = observation.started_s + self._config.ttl_s
            if self._clock.monotonic() >= takeover_at:  # no more polls: the next attempt
                return max(takeover_at, state.takeover_retry_at)
            return min(state.next_poll, takeover_at)
        if state.valid_until is not None:
            return min(ticker.next_at, state.valid_until)
        return ticker.next_at

    async def _observing(
        self,
        now: float,
        ticker: _Ticker,
        candidacy: CandidacyWatch,
        seen: LeaderCandidacy,
        shutdown: asyncio.Event,
        state: _TermState,
    ) -> bool:
        """While a rival is observed: take over exactly when a full ttl has passed since the
        observation started (LA-7), else re-read the head when the `ObservationSchedule` says
        (LA §4.9.3), so that the observation of the rival's last renewal starts soon after it;
        the reading rate never makes the takeover itself earlier (`lease.observe`)."""
        observation = state.observation
        assert observation is not None
        if now >= observation.started_s + self._config.ttl_s:
            if now < state.takeover_retry_at:
                return True  # the last takeover attempt failed: wait for the next tick
            ticker.consume(now)
            state.takeover_retry_at = ticker.next_at
            return await self._attempt(candidacy, seen, shutdown, state)
        if now < state.next_poll:
            return True
        state.next_poll = now + self._schedule.retry_s  # unless the read answers (`_on_held`)
        event = await self._race(
            self._poll_rival, candidacy, seen, shutdown, wake_at=now + self._config.ttl_s
        )
        if isinstance(event, _Shutdown):
            self._fence("stopped: shutdown", logging.INFO)
            return False
        if isinstance(event, _CandidacyChanged):
            if event.closed:
                self._fence("stopped: candidacy watch closed", logging.INFO)
                return False
            return True
        if isinstance(event, _Completed):
            if isinstance(event.result, Held):
                self._on_held(event.result, state)
            elif isinstance(event.result, LaminarError):
                logger.warning("leader lease observation read failed: %s", event.result)
        return True

    async def _poll_rival(self) -> LeaseOutcome:
        """The published head as `Held` (the cheap observation read), for `_on_held` to keep
        or restart the observation."""
        lease = await self._authority.observe(successor=self._schedule.probe_successor)
        if lease is None:
            raise CorruptRecord("observed leader lease disappeared")
        return Held(lease=lease)

    async def _attempt(
        self,
        candidacy: CandidacyWatch,
        seen: LeaderCandidacy,
        shutdown: asyncio.Event,
        state: _TermState,
    ) -> bool:
        """One lease operation; False when the manager fenced and must exit."""
        # LA-8: validity is anchored at the START of the attempt, never at the response
        attempt_valid_until = self._clock.monotonic() + self._config.ttl_s
        op_deadline = attempt_valid_until
        if state.valid_until is not None:
            op_deadline = min(op_deadline, state.valid_until)
        operation = self._operation(state, op_deadline)
        event = await self._race(operation, candidacy, seen, shutdown, wake_at=op_deadline)
        if isinstance(event, _CandidacyChanged) and not event.closed:
            logger.info("leader lease operation abandoned: candidacy changed")
            return True
        if isinstance(event, _Shutdown | _CandidacyChanged):
            self._fence(f"operation stopped: {event}", logging.INFO)
            return False
        if isinstance(event, _Timer):
            self._fence(f"operation abandoned: {event}")  # LA-8: a hung request ends the grant
            return False
        if self._late(attempt_valid_until, state):
            return False
        return self._handle(event.result, attempt_valid_until, state)

    def _operation(
        self, state: _TermState, op_deadline: float
    ) -> Callable[[], Awaitable[LeaseOutcome]]:
        authority, owner = self._authority, self._owner
        observation, token = state.observation, state.held_token
        if observation is not None:
            return lambda: authority.try_takeover(owner, observation, deadline=op_deadline)
        if token is not None:
            return lambda: authority.renew_exact(owner, token, deadline=op_deadline)
        return lambda: authority.begin_new_term(owner, deadline=op_deadline)

    def _late(self, attempt_valid_until: float, state: _TermState) -> bool:
        """LA-8: an answer at or after either validity instant never counts: fence."""
        now = self._clock.monotonic()
        if now >= attempt_valid_until or (
            state.valid_until is not None and now >= state.valid_until
        ):
            self._fence("response arrived after its validity")
            return True
        return False

    def _handle(
        self, result: LeaseOutcome | LaminarError, attempt_valid_until: float, state: _TermState
    ) -> bool:
        """Apply one completed operation; False when the manager fenced and must exit."""
        if isinstance(result, Fenced):
            self._fence(f"operation was fenced: {result}")  # LA-6
            return False
        if isinstance(result, LaminarError):
            logger.warning("leader lease operation failed: %s", result)
            return True  # keep the state; the next tick retries, valid_until still binds
        if isinstance(result, Acquired):
            lease = result.lease
            if lease.owner != self._owner:
                self._fence(f"acquired for another owner {lease.owner}")
                return False
            if self._late(attempt_valid_until, state):
                return False
            state.observation = None
            state.valid_until = attempt_valid_until
            state.held_token = lease.token
            self.known_at_s = self._clock.monotonic()
            self._deadline.extend_until(attempt_valid_until)
            self._watch.publish(lease)
            logger.debug("leader lease granted: seq %d token %d", lease.seq, lease.token)
            return True
        self._on_held(result, state)
        return True

    def _on_held(self, held: Held, state: _TermState) -> None:
        self.known_at_s = self._clock.monotonic()
        self._withdraw("a rival holds the leader lease")
        state.valid_until, state.held_token = None, None
        rival = held.lease
        if rival.owner == self._owner:
            # Our own earlier (abandoned or ambiguous) takeover landed: there is no rival to
            # observe. The next tick begins a new term, which rotates the token (LA-9).
            state.observation = None
            return
        observed = state.observation
        now = self._clock.monotonic()
        # A read behind the observed record (a probe found S + 1 before its pointer moved, the
        # next read saw S again) is no change of the rival: it keeps the observation.
        renewed = observed is None or (
            rival.seq > observed.lease.seq
            and observed.lease.liveness_identity() != rival.liveness_identity()
        )
        state.next_poll = self._schedule.next_read(now, self._clock.wall_ms(), rival, renewed)
        if not renewed:
            return  # LA-7: an unchanged rival keeps the running observation
        try:
            state.observation = self._authority.observe_rival(self._owner, rival)
        except LaminarError as error:
            logger.warning("leader lease observation rejected: %s", error)
            state.observation = None

    async def _race(
        self,
        operation: Callable[[], Awaitable[LeaseOutcome]] | None,
        candidacy: CandidacyWatch,
        seen: LeaderCandidacy,
        shutdown: asyncio.Event,
        *,
        wake_at: float | None,
    ) -> _Event:
        """The first of: shutdown, a candidacy change, `wake_at`, the operation's completion
        (checked in that order). The other waiters, the operation included, are cancelled."""
        timed_out = False
        async with asyncio.TaskGroup() as group:
            stop = group.create_task(shutdown.wait())
            change = group.create_task(candidacy.wait_changed(seen))
            work = None if operation is None else group.create_task(_settled(operation))
            tasks: set[asyncio.Task[object]] = {stop, change}
            if work is not None:
                tasks.add(work)
            try:
                timed_out = await self._wait_first(tasks, wake_at)
            finally:
                for task in tasks:
                    task.cancel()
        if shutdown.is_set() or (stop.done() and not stop.cancelled()):
            return _Shutdown()
        if candidacy.current() != seen or candidacy.closed:
            return _CandidacyChanged(closed=candidacy.current() == seen)
        if timed_out or (wake_at is not None and self._clock.monotonic() >= wake_at):
            return _Timer()
        assert work is not None and not work.cancelled(), "a race returned without an event"
        return _Completed(work.result())

    async def _wait_first(self, tasks: set[asyncio.Task[object]], wake_at: float | None) -> bool:
        """Wait for the first task; True when `wake_at` came first."""
        if wake_at is None:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            return False
        try:
            async with self._clock.timeout_at(wake_at):
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            return True
        return False

    def _withdraw(self, reason: str) -> None:
        if self._watch.current() is not None or self._deadline.valid_until is not None:
            logger.info("leader lease withdrawn: %s", reason)
        self._deadline.withdraw()
        self._watch.publish(None)

    def _fence(self, reason: str, level: int = logging.WARNING) -> None:
        if not self._deadline.terminal:
            logger.log(level, "leader lease fenced: %s", reason)
        self._deadline.fence()
        self._watch.publish(None)

"""The checkpoint pointer: how participants notice a prepare without listing
(docs/protocols/distributed-checkpoint.md, "Change detection", DC-18).

`checkpoints/pointer.json` (`CheckpointPointer`) is overwritten by the leader right after it
creates a prepare (a copy of it, no verdict) and right after it records that attempt's outcome
(the same prepare and the verdict). It is a hint: a participant cuts for the pointer's prepare,
but binds its manifest to that prepare's SHA-256 (the leader accepts only manifests that answered
its own prepare), reads `prepare.json` itself before using a newer term's prepare to close an
attempt (DC-8), and learns every decision from the authority (DC-6). A lost or stale pointer
write costs at most the one attempt nobody noticed (aborted at the leader's deadline) or a
later notice; a foreign or corrupt pointer is reported and skipped.

`PointerReader` polls with `get_if_changed` (one conditional GET; nothing is transferred while
the pointer is unchanged). `PollSchedule` decides when: after a change, `fast_s` doubling up to
`quiet_s` while nothing changes; once the newest attempt is decided, quiet (at most `quiet_s`
apart) until shortly before the next periodic prepare is due (the last periodic prepare seen
plus the expected period, or the time the leader's verdict pointer names; a pre-rotation
prepare, with a drain transition, moves neither), `fast_s` around that time; if it is late, once
more one period later (a leader puts off a periodic checkpoint it cannot start by an interval),
then back off again. For two intervals after this node sees the cluster change (a membership
change, a new fence: what precedes a pre-rotation prepare or a new leader's first, which no pointer
announces), every wait is at most four fast polls. Every wait is at most `quiet_s`: that is the
bound on the time to notice any prepare (plus one request).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from laminar_cluster.checkpoint.records import CheckpointVerdict
from laminar_cluster.codec import decode
from laminar_cluster.coordinator.objects import MAX_POINTER_BYTES, POINTER_VERSION, encode_record
from laminar_cluster.coordinator.paths import POINTER_PATH
from laminar_cluster.coordinator.records import CheckpointPointer, CheckpointPrepare
from laminar_cluster.errors import CorruptRecord, InvalidArgument, ObjectNotFound
from laminar_cluster.store import OVERWRITE, GetResult, ObjectStore

logger: Final = logging.getLogger(__name__)

QUIET_MAX_S: Final = 1.0  # the longest wait between two polls, whatever the interval
QUIET_INTERVAL_FRACTION: Final = 0.25  # quiet_s = interval / 4, within [fast_s, QUIET_MAX_S]
# The fast window around the expected prepare: due +- max(2, min(period / 10, 4 fast_s)) fast polls
WINDOW_PERIOD_FRACTION: Final = 0.1
WINDOW_FAST_POLLS_MIN: Final = 2
WINDOW_FAST_POLLS_MAX: Final = 4
# After a cluster change (`hurry`): every wait at most 4 fast polls, for two intervals
HURRY_FAST_POLLS: Final = 4
HURRY_INTERVALS: Final = 2


async def write_pointer(
    store: ObjectStore,
    prepare: CheckpointPrepare,
    verdict: CheckpointVerdict | None,
    next_in_ms: int | None = None,
) -> None:
    """Overwrite the pointer (the caller treats a failure as best effort)."""
    pointer = CheckpointPointer(
        version=POINTER_VERSION, prepare=prepare, verdict=verdict, next_in_ms=next_in_ms
    )
    await store.put(POINTER_PATH, encode_record(pointer, key=POINTER_PATH), OVERWRITE)


@dataclass
class PointerReader:
    """One participant's view of the pointer: the last one read and its e_tag."""

    store: ObjectStore
    last: CheckpointPointer | None = None
    e_tag: str | None = None
    changes: int = 0  # valid pointers read since start (each a change)
    corrupt: int = 0  # pointers refused since start

    async def poll(self) -> bool:
        """One (conditional) GET; True when a new, valid pointer was read into `last`."""
        try:
            if self.e_tag is None:
                got: GetResult | None = await self.store.get(
                    POINTER_PATH, end=MAX_POINTER_BYTES + 1
                )
            else:
                got = await self.store.get_if_changed(POINTER_PATH, self.e_tag)
        except ObjectNotFound:
            self.e_tag = None
            return False
        if got is None:
            return False
        self.e_tag = got.meta.e_tag  # a corrupt version is not read twice
        try:
            if got.meta.size > MAX_POINTER_BYTES or not got.complete:
                raise CorruptRecord(f"{POINTER_PATH}: pointer is {got.meta.size} bytes")
            pointer = decode(
                got.body, CheckpointPointer, key=POINTER_PATH, max_bytes=MAX_POINTER_BYTES
            )
        except CorruptRecord as error:
            self.corrupt += 1
            logger.warning("checkpoint pointer refused (a hint, skipped): %s", error)
            return False
        self.last = pointer
        self.changes += 1
        return True


@dataclass
class PollSchedule:
    """When the next pointer poll is due (module docstring). Times are the clock's monotonic
    seconds, passed in: the schedule itself is pure."""

    fast_s: float
    quiet_s: float
    interval_s: float | None = None  # the configured checkpoint interval (None: unknown)
    period_s: float | None = None  # the expected time between two prepares (None: unknown)
    _prepare_seen_s: float | None = None
    _expected_s: float | None = None  # when the leader said its next periodic prepare is due
    _busy: bool = True  # a prepare without a known verdict (or nothing seen yet)
    _backoff_s: float = 0.0
    _rolled: bool = False  # the expected prepare was late once: expected one period later
    _hurry_until_s: float = float("-inf")  # `hurry`: short waits until then

    def __post_init__(self) -> None:
        if not 0 < self.fast_s <= self.quiet_s:
            raise InvalidArgument(f"poll schedule: need 0 < fast {self.fast_s} <= quiet")
        self._backoff_s = self.fast_s
        if self.period_s is None:
            self.period_s = self.interval_s

    @staticmethod
    def for_interval(fast_s: float, interval_s: float | None) -> PollSchedule:
        """`quiet_s` = interval / 4 within [fast_s, QUIET_MAX_S]; no interval: poll every
        `fast_s`."""
        if interval_s is None:
            return PollSchedule(fast_s, fast_s)
        quiet_s = min(QUIET_MAX_S, max(fast_s, interval_s * QUIET_INTERVAL_FRACTION))
        return PollSchedule(fast_s, quiet_s, interval_s=interval_s)

    def prepare_seen(self, now_s: float, *, periodic: bool = True) -> None:
        """A newer prepare: poll fast for its verdict. A periodic one (no drain transition)
        anchors the next expected prepare, and the time since the last periodic one (never below
        the configured interval) is the period expected next; a forced one (a pre-rotation
        checkpoint) moves neither."""
        if periodic:
            if self._prepare_seen_s is not None and now_s > self._prepare_seen_s:
                observed_s = now_s - self._prepare_seen_s
                self.period_s = max(observed_s, self.interval_s or 0.0)
            self._prepare_seen_s = now_s
        self._expected_s = None
        self._rolled = False
        self._busy = True
        self._backoff_s = self.fast_s

    def settled(self) -> None:
        """The newest prepare is decided (as the pointer says): quiet until the next is due."""
        if self._busy:
            self._busy = False
            self._backoff_s = self.fast_s

    def expect(self, due_s: float) -> None:
        """The leader's hint (the verdict pointer's `next_in_ms`): its next periodic prepare is
        due at `due_s` on our clock. It replaces the learnt anchor until the next prepare."""
        self._expected_s = due_s
        self._rolled = False

    def _due(self) -> float | None:
        if self._expected_s is not None:
            return self._expected_s
        seen_s, period_s = self._prepare_seen_s, self.period_s
        return None if seen_s is None or period_s is None else seen_s + period_s

    def _window_s(self) -> float:
        """Half the fast window around the expected prepare."""
        period_s = self.period_s or 0.0
        return self.fast_s * max(
            WINDOW_FAST_POLLS_MIN,
            min(period_s * WINDOW_PERIOD_FRACTION / self.fast_s, WINDOW_FAST_POLLS_MAX),
        )

    def hurry(self, now_s: float) -> None:
        """The cluster changed (this node saw a membership change or a new fence): a
        pre-rotation prepare or a new leader's first, which no pointer announces, may follow, so
        wait at most `HURRY_FAST_POLLS` fast polls for the next `HURRY_INTERVALS` intervals."""
        if self.interval_s is not None:
            self._hurry_until_s = now_s + HURRY_INTERVALS * self.interval_s

    def next_delay(self, now_s: float) -> float:
        """The wait before the next poll, at most `quiet_s` (one call per poll)."""
        delay_s = self._scheduled_delay(now_s)
        if now_s < self._hurry_until_s:
            return min(delay_s, HURRY_FAST_POLLS * self.fast_s)
        return delay_s

    def _scheduled_delay(self, now_s: float) -> float:
        due_s = self._due()
        if not self._busy and due_s is not None:
            window_s = self._window_s()
            if now_s >= due_s + window_s and not self._rolled and self.period_s:
                # Late: the leader puts off a periodic checkpoint it cannot start (a rotation
                # in progress) by one interval, so expect it once more, one period later.
                self._rolled = True
                self._expected_s = due_s = due_s + self.period_s
            if now_s < due_s - window_s:
                return min(self.quiet_s, due_s - window_s - now_s)
            if now_s < due_s + window_s:
                return self.fast_s
        delay_s = self._backoff_s
        self._backoff_s = min(2 * self._backoff_s, self.quiet_s)
        return delay_s

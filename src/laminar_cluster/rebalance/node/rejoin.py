"""Rejoining after fencing (issue 15 "A node cut off from the store rejoins by itself";
docs/protocols/membership.md "Fenced, then rejoin").

A fenced process incarnation never acts again (ML-2, ML-5: `ProcessFenced` is terminal for the
incarnation). What the *process* does next is this module's: unless the operator asked it to
exit on fencing (`NodeConfig.exit_on_fence`, `--exit-on-fence`), it waits with a growing
backoff until the store answers, reads its node's lease record once per attempt and decides
from it (`rejoin_verdict`, pure):

* no record, a record naming one of this process's own boots (its lapsed term: nobody took it
  over), or a record in state `left` (a leader fenced the dead incarnation, or a later process
  left) -> start a new incarnation: a new boot and term, and a cold engine that restores what
  the assignment gives it from the committed checkpoints;
* a record naming another boot that is not `left` -> a newer process holds the node id (a
  duplicate start, ML-2): this one stops (exit 3), so two processes never take the id from each
  other in turn.

Each attempt is one log line (`rejoining`: the attempt, the reason, the next attempt's time on
the monotonic clock and the seconds until it) and one GET. Leaving or stopping while waiting
ends the wait. The loop is bounded by `REJOIN_ATTEMPTS_MAX` (about 40 hours at the capped
backoff), after which the process stops as fenced.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import LaminarError
from laminar_cluster.membership.process_lease import read_node_record
from laminar_cluster.membership.records import NodeLeaseRecord, NodeState
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.store import ObjectStore

REJOIN_BACKOFF_S_MIN: Final = 0.5
REJOIN_BACKOFF_S_MAX: Final = 15.0
REJOIN_ATTEMPTS_MAX: Final = 10_000
REJOIN_READ_TIMEOUT_S: Final = 10.0


class RejoinVerdict(enum.Enum):
    REJOIN = "rejoin"  # start a new incarnation
    DUPLICATE = "duplicate"  # a newer process holds the node id: stop


def rejoin_verdict(record: NodeLeaseRecord | None, own_boots: Collection[str]) -> RejoinVerdict:
    """Whether a fenced process may start a new incarnation over `record` (module docstring)."""
    if record is None or record.lease.owner in own_boots or record.state is NodeState.LEFT:
        return RejoinVerdict.REJOIN
    return RejoinVerdict.DUPLICATE


@dataclass(slots=True)
class Rejoiner:
    """Waits for the store after a fence (module docstring); one per process."""

    store: ObjectStore
    clock: Clock
    node: int
    log: NodeLog
    backoff_s_min: float = REJOIN_BACKOFF_S_MIN
    backoff_s_max: float = REJOIN_BACKOFF_S_MAX
    attempts: int = 0  # attempts of the current wait

    async def wait(self, reason: str, own_boots: Collection[str], *, stop: asyncio.Event) -> bool:
        """True once the store answers and the record allows a new incarnation; False when a
        newer process holds the node id, `stop` is set (a leave or stop was asked for), or the
        attempts ran out."""
        backoff_s = self.backoff_s_min
        for attempt in range(1, REJOIN_ATTEMPTS_MAX + 1):
            self.attempts = attempt
            sleep_s = self.clock.random.uniform(backoff_s / 2, backoff_s)
            next_s = self.clock.monotonic() + sleep_s
            self.log.write(
                "rejoining",
                attempt=attempt,
                reason=reason,
                next_attempt_in_s=round(sleep_s, 3),
                next_attempt_t_mono=round(next_s, 3),
            )
            if await _stopped_before(self.clock, next_s, stop):
                return False
            try:
                deadline = self.clock.monotonic() + REJOIN_READ_TIMEOUT_S
                async with within_deadline(self.clock, deadline, "rejoin: node record"):
                    stored = await read_node_record(self.store, self.node)
            except LaminarError as error:
                reason = f"store not answering: {type(error).__name__}: {error}"
                backoff_s = min(2 * backoff_s, self.backoff_s_max)
                continue
            record = None if stored is None else stored.record
            if rejoin_verdict(record, own_boots) is RejoinVerdict.DUPLICATE:
                assert record is not None
                self.log.write(
                    "fenced",
                    error=f"node {self.node}: process term {record.lease.term} (boot "
                    f"{record.lease.owner}, {record.state.value}) holds the node id; not rejoining",
                )
                return False
            return True
        return False


async def _stopped_before(clock: Clock, until_s: float, stop: asyncio.Event) -> bool:
    """Wait until `until_s`; True as soon as `stop` is set."""
    try:
        async with clock.timeout_at(until_s):
            await stop.wait()
    except TimeoutError:
        pass
    return stop.is_set()

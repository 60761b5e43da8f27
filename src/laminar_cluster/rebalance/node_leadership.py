"""Leadership of a rebalance node: lease managers back to back (spec_leader_lease §4.9.3, S9).

A `LeaderLeaseManager` runs once and ends fenced (shutdown, a missed renewal, durable fencing);
a higher layer builds the next one, which begins a new term with a new token. `ManagedLeadership`
is that layer for a node that is always a candidate, and it is the controller's `Leadership`:
`proof()` and `grants_leadership()` ask the manager running now (none: not the leader).
"""

from __future__ import annotations

import asyncio
from typing import Final

from laminar_cluster.checkpoint.records import LeaderProof
from laminar_cluster.clock import Clock
from laminar_cluster.lease.candidacy import CandidacyWatch
from laminar_cluster.lease.manager import (
    LeaderLeaseAuthority,
    LeaderLeaseManager,
    LeaseManagerConfig,
)
from laminar_cluster.lease.records import LeaderLeaseOwner

# A bound on the loop; at one manager per renew interval it outlasts any process.
MANAGERS_MAX: Final = 10_000_000


class ManagedLeadership:
    def __init__(
        self,
        authority: LeaderLeaseAuthority,
        owner: LeaderLeaseOwner,
        config: LeaseManagerConfig,
        clock: Clock,
    ) -> None:
        self._authority, self._owner, self._config, self._clock = authority, owner, config, clock
        self._manager: LeaderLeaseManager | None = None
        self.generation = 0  # how many managers ran

    def proof(self) -> LeaderProof | None:
        manager = self._manager
        return None if manager is None else manager.proof()

    def grants_leadership(self) -> bool:
        manager = self._manager
        return manager is not None and manager.grants_leadership()

    async def run(self, shutdown: asyncio.Event) -> None:
        """Contend until shutdown; after a fenced manager, pause one renew interval."""
        candidacy = CandidacyWatch(eligible=True)
        for _ in range(MANAGERS_MAX):
            if shutdown.is_set():
                return
            manager = LeaderLeaseManager(self._authority, self._owner, self._config, self._clock)
            self._manager = manager
            self.generation += 1
            await manager.run(candidacy, shutdown)
            try:
                pause_until = self._clock.monotonic() + self._config.renew_interval_s
                async with self._clock.timeout_at(pause_until):
                    await shutdown.wait()
            except TimeoutError:
                pass

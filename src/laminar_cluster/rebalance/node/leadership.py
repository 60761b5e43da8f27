"""Leadership of a rebalance node: lease managers back to back (LA §4.9.3, LA-9).

A `LeaderLeaseManager` runs once and ends fenced (shutdown, a missed renewal, durable fencing);
a higher layer builds the next one, which begins a new term with a new token. `ManagedLeadership`
is that layer, and it is the controller's `Leadership`: `proof()` and `grants_leadership()` ask
the manager running now (none: not the leader).

Candidacy (`leader_eligible`): a process may lead only while it owns vnodes in the assignment
it runs, or while no owner of that assignment is live (a fresh cluster, or every owner gone).
A leader outside the predecessor roster could never take the pre-rotation checkpoint (a cluster
outcome's leader must be in its fence), so every graceful rotation it opened would abort and a
new version would be burnt per attempt. Losing eligibility withdraws the grant at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Final

from laminar_cluster.clock import Clock
from laminar_cluster.fencing import LeaderProof
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
        self.candidacy = CandidacyWatch(eligible=True)

    def set_eligible(self, eligible: bool) -> None:
        self.candidacy.set(eligible)

    def proof(self) -> LeaderProof | None:
        manager = self._manager
        return None if manager is None else manager.proof()

    def grants_leadership(self) -> bool:
        manager = self._manager
        return manager is not None and manager.grants_leadership()

    def lease_known_at_s(self) -> float | None:
        """When the running manager last learned who holds the leader lease (monotonic
        seconds; None: not yet). For readiness (metrics.health), never for a decision."""
        manager = self._manager
        return None if manager is None else manager.known_at_s

    async def run(self, shutdown: asyncio.Event) -> None:
        """Contend until shutdown; after a fenced manager, pause one renew interval."""
        candidacy = self.candidacy
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


def leader_eligible(node_id: int, owners: Sequence[int], live_nodes: Sequence[int]) -> bool:
    """May this node lead while it runs an assignment with `owners` (module doc)?"""
    if not owners or node_id in owners:
        return True
    live = set(live_nodes)
    return not any(owner in live for owner in set(owners))

"""A rebalance node's observable state changes, as log events (RB §9 "Logging").

Every `interval_s` (in memory only, no store requests) it compares what it saw last with:
leadership (`leader` with the fencing token / `leader_lost`), the members watch (`members`),
the engine's registry (`adopted`: the assignment version this process runs, and the vnodes it
owns in it) and installed fence (`activated`), and, when `stats_interval_s` > 0, logs the store
request counters (`requests`). The interval bounds how late an event's `t_mono` can be.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from laminar_cluster.fencing import LeaderProof
from laminar_cluster.rebalance.cluster.controller import StoreClusterController
from laminar_cluster.rebalance.engine.base import BaseEngine
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.rebalance.node.stats import PurposeCountingStore


class _Leadership(Protocol):
    def proof(self) -> LeaderProof | None: ...


@dataclass(slots=True)
class NodeMonitor:
    log: NodeLog
    controller: StoreClusterController
    engine: BaseEngine
    leadership: _Leadership
    requests: PurposeCountingStore
    interval_s: float
    stats_interval_s: float = 0.0
    _token: int | None = None
    _members: int = 0
    _registry: int = 0
    _fence: int = 0
    _next_stats_s: float = 0.0

    async def run(self, shutdown: asyncio.Event) -> None:
        clock = self.controller.clock
        while not shutdown.is_set():
            self.observe()
            try:
                async with clock.timeout_at(clock.monotonic() + self.interval_s):
                    await shutdown.wait()
            except TimeoutError:
                pass
        self.observe()

    def observe(self) -> None:
        self._leadership()
        self._membership()
        self._adoption()
        self._stats()

    def _leadership(self) -> None:
        proof = self.leadership.proof()
        token = None if proof is None else proof.fencing_token
        if token == self._token:
            return
        if token is None:
            self.log.write("leader_lost", token=self._token)
        else:
            self.log.write("leader", token=token)
        self._token = token

    def _membership(self) -> None:
        watch = self.controller.members_watch()
        version = watch.version()
        if version == self._members:
            return
        self._members = version
        members = [{"node": m.node_id, "state": m.state} for m in watch.current()]
        self.log.write("members", version=version, members=members)

    def _adoption(self) -> None:
        registry = self.engine.registry()
        if registry.version != self._registry:
            self._registry = registry.version
            owned = sum(1 for owner in registry.owners if owner == self.controller.node_id)
            self.log.write("adopted", version=registry.version, vnodes=owned)
        fence = self.engine.installed_fence()
        version = 0 if fence is None else fence.assignment_version
        if version != self._fence:
            self._fence = version
            if fence is not None:
                self.log.write("activated", version=version)

    def _stats(self) -> None:
        if self.stats_interval_s <= 0:
            return
        now_s = self.controller.clock.monotonic()
        if now_s < self._next_stats_s:
            return
        self._next_stats_s = now_s + self.stats_interval_s
        self.log.write("requests", **self.requests.snapshot())

"""`NodeConfig`: the timings of one rebalance node process
(`rebalance.node.rebalance_node.RebalanceNode`; RB §1, RB §4.2, RB §4.17), checked when
built."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.rebalance.config import RebalanceConfig

VNODE_COUNT_DEFAULT: Final = 256
# Defaults chosen for the store bill (docs/protocols/membership.md and leader-authority.md,
# "Cost"): every renewal is a PUT, so the lease ttl sets the idle price. 10 s (renewals every
# 2.5 s) costs half of 5 s and detects a dead node or leader about 5 s later.
TTL_S_DEFAULT: Final = 10.0
CHECKPOINT_INTERVAL_S_DEFAULT: Final = 10.0


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Seconds. The process and leader leases share `ttl_s`; both renew every `ttl_s / 4`.
    `poll_s` is the discovery refresh and the watcher/audit tick (`watcher_poll`)."""

    node_id: int
    ttl_s: float = TTL_S_DEFAULT
    poll_s: float = 2.0
    debounce_s: float = 5.0
    checkpoint_interval_s: float = CHECKPOINT_INTERVAL_S_DEFAULT
    retry_delay_s: float = 2.0
    drain_ack_timeout_s: float = 10.0
    checkpoint_timeout_s: float = 15.0
    leave_timeout_s: float = 120.0
    vnode_count: int = VNODE_COUNT_DEFAULT
    stats_interval_s: float = 0.0  # > 0: log the store request counters this often
    # How often the monitor turns state changes into log events (None: min(20 ms, poll / 10)).
    monitor_interval_s: float | None = None
    # How often a rival re-reads the leader lease head while it observes (None: renew / 4).
    observe_interval_s: float | None = None
    # A fenced process stops (exit 3) instead of rejoining with a new incarnation
    # (rebalance.node.rejoin).
    exit_on_fence: bool = False

    def __post_init__(self) -> None:
        if self.node_id < 1:
            raise InvalidArgument(f"node id must be >= 1, not {self.node_id}")
        for name in ("ttl_s", "poll_s", "checkpoint_interval_s", "leave_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InvalidArgument(f"node config: {name} must be > 0, not {value!r}")
        if self.vnode_count < 1:
            raise InvalidArgument(f"node config: vnode_count must be >= 1, not {self.vnode_count}")
        self.rebalance_config()  # its own checks (drain ack timeout > poll, ...)

    @property
    def renew_interval_s(self) -> float:
        return self.ttl_s / 4

    def rebalance_config(self) -> RebalanceConfig:
        return RebalanceConfig(
            watcher_poll_s=self.poll_s,
            rebalance_debounce_s=self.debounce_s,
            checkpoint_timeout_s=self.checkpoint_timeout_s,
            retry_delay_s=self.retry_delay_s,
            drain_ack_timeout_s=self.drain_ack_timeout_s,
        )

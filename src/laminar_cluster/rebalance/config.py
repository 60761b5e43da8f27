"""`RebalanceConfig` (RB §4.1): every timing of the control plane in one place."""

from __future__ import annotations

from dataclasses import dataclass

from laminar_cluster.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class RebalanceConfig:
    """Seconds. `drain_ack_timeout_s` must exceed `watcher_poll_s` (followers ack from their
    watcher tick), and every value must be positive."""

    watcher_poll_s: float = 2.0
    rebalance_debounce_s: float = 5.0
    checkpoint_timeout_s: float = 15.0
    retry_delay_s: float = 2.0
    drain_ack_timeout_s: float = 10.0
    placement_isolation_tier: int = 0
    # How often `await_drain_quorum` re-reads the ack slots (RB §4.6: 100 ms).
    quorum_poll_s: float = 0.1

    def __post_init__(self) -> None:
        for name in (
            "watcher_poll_s",
            "rebalance_debounce_s",
            "checkpoint_timeout_s",
            "retry_delay_s",
            "drain_ack_timeout_s",
            "quorum_poll_s",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value > 0:
                raise InvalidArgument(f"rebalance config: {name} must be > 0, not {value!r}")
        if self.drain_ack_timeout_s <= self.watcher_poll_s:
            raise InvalidArgument(
                "rebalance config: drain_ack_timeout_s must exceed watcher_poll_s "
                f"({self.drain_ack_timeout_s} <= {self.watcher_poll_s})"
            )
        if self.placement_isolation_tier < 0:
            raise InvalidArgument("rebalance config: placement_isolation_tier must be >= 0")

    @classmethod
    def test_preset(cls) -> RebalanceConfig:
        """The spec's test preset (RB §4.1)."""
        return cls(
            watcher_poll_s=0.2,
            rebalance_debounce_s=0.5,
            checkpoint_timeout_s=30.0,
            retry_delay_s=0.5,
            drain_ack_timeout_s=5.0,
        )

"""The deterministic rebalance simulation harness (several nodes in one process)."""

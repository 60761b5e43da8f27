"""One process's whole rebalance control plane: startup, leadership, the rebalance loop, the
leader's duties, the watcher, graceful leave, logs and stats."""

"""The vnode rebalance control plane (docs/protocols/rebalance.md, RB)."""

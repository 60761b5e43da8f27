"""The vnode rebalance control plane (spec_rebalance.md; docs/protocols/rebalance.md)."""

"""`node_readiness`: whether one node process is ready to serve, for `/readyz` (issue 17).

Local state only (no store request), checked in this order; the first that fails is the
one-line reason:

0. the process is not rejoining after a fence (`rebalance.node.rejoin`: the reason it was
   fenced is the answer until a new incarnation starts);
1. the process lease is held: acquired, not released by a leave, renewed within its ttl on
   this process's monotonic clock (a fenced process has no valid lease: ML-2, ML-5);
2. no problem repeats without progress: a node stuck on a bad record (it logs the problem
   once and then counts its repeats, `NodeLog.problem`, until it makes progress again) is not
   ready, and says which problem holds it (the object's name is in it);
3. the leader lease state is known: this process's lease manager learned who holds the leader
   lease (itself or a rival) within the last ttl. A process that is not a leader candidate
   (it owns no vnodes while owners of its assignment are live, `leader_eligible`) does not
   contend, reads no lease and needs none to serve: this check passes for it;
4. an assignment is adopted: the engine runs an assignment version and has its fence
   installed (a rotation drops the fence until the next one is activated, so readiness
   drops for that moment, truthfully).
"""

from __future__ import annotations

from typing import Final

from laminar_cluster.rebalance.node.rebalance_node import RebalanceNode

NOT_STARTED: Final = "starting: the process lease is not acquired yet"


def node_readiness(node: RebalanceNode) -> str | None:
    """None when `node` is ready, else why not (module docstring)."""
    holder, clock = node.holder, node.clock
    if node.rejoining is not None:
        return f"rejoining after a fence: {node.rejoining}"
    if holder is None or node.controller is None:
        return NOT_STARTED
    if holder.released:
        return "the node left the cluster"
    if not holder.is_live():
        return "the process lease is not held (fenced, or its renewal is overdue)"
    if node.log.problem is not None:  # the most precise reason: it names the bad object
        return f"stuck, repeating without progress: {node.log.problem}"
    leadership = node.leadership
    if leadership is None:
        return NOT_STARTED
    if leadership.candidacy.current().eligible:
        known_at_s = leadership.lease_known_at_s()
        ttl_s = node.config.ttl_s
        if known_at_s is None:
            return "the leader lease state is not known yet"
        if clock.monotonic() - known_at_s > ttl_s:
            return f"the leader lease state was last learned over {ttl_s:g} s ago"
    engine = node.engine
    if engine is None or engine.registry().version < 1:
        return "no assignment adopted yet"
    if engine.installed_fence() is None:
        version = engine.registry().version
        return f"assignment version {version}: its fence is not installed (a rotation settles)"
    return None

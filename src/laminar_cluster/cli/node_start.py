"""Whether a live process holds a node id, checked before a node starts (issue 17: "a second
node started with an id in use refuses to start ... instead of silently fencing the healthy
one").

A new start of a node id fences the process that held it (ML-2): right after a crash that is
what a restart needs, but a second start by mistake would fence a healthy node. So before
`laminar-cluster node` acquires its lease, `held_by_live_process` reads the node's process
lease record:

* absent, `left`, or taken over by a leader (`views.members.taken_over`): free;
* older than its ttl by the store's last-modified time: free (the process stopped renewing);
* otherwise it watches the record, on this process's monotonic clock, for at most one ttl:
  renewed meanwhile (a new liveness identity that is not `left`) means a live process holds
  it: refused, naming it; unchanged for a full ttl means it is dead (ML-4): free.

A restart right after a crash therefore waits at most one ttl. `--replace` skips the check.
Store errors and a corrupt record do not refuse: the node's own startup reports those.
"""

from __future__ import annotations

from typing import Final

from laminar_cluster.clock import Clock
from laminar_cluster.errors import CorruptRecord, StoreUnavailable
from laminar_cluster.membership.records import NodeLeaseRecord, NodeState
from laminar_cluster.rebalance.node.log import NodeLog
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.members import LIVE_STATES, liveness, read_member

WATCH_POLL_S_MAX: Final = 0.5


async def held_by_live_process(store: ObjectStore, clock: Clock, log: NodeLog) -> str | None:
    """Why this node id is held by a live process (one line, naming it), or None when free."""
    node = log.node
    try:
        found = await read_member(store, node, clock.wall_ms())
        if found is None or liveness(*found)[0] not in LIVE_STATES | {"suspected"}:
            return None
        record, age_ms = found
        ttl_s = record.ttl_ms / 1000
        log.write(
            "waiting",
            message=f"node {node}'s process lease was renewed {age_ms / 1000:.1f} s ago: "
            f"watching it for up to {ttl_s:g} s (its ttl) to see whether that process is "
            "alive (--replace skips this)",
        )
        return await _renewed_within_ttl(store, clock, node, record)
    except (StoreUnavailable, CorruptRecord):
        return None


async def _renewed_within_ttl(
    store: ObjectStore, clock: Clock, node: int, first: NodeLeaseRecord
) -> str | None:
    ttl_s = first.ttl_ms / 1000
    poll_s = min(WATCH_POLL_S_MAX, ttl_s / 4)
    started_s = clock.monotonic()
    while clock.monotonic() - started_s < ttl_s:
        await clock.sleep(poll_s)
        found = await read_member(store, node, clock.wall_ms())
        if found is None:
            return None
        record, age_ms = found
        if record.liveness_identity() == first.liveness_identity():
            continue
        if record.state is NodeState.LEFT:
            return None
        return (
            f"node id {node} is in use by a live process (boot {record.lease.owner}, term "
            f"{record.lease.term}, lease renewed {max(0, age_ms) / 1000:.1f} s ago): stop that "
            "process first, or start with --replace to fence it (it then exits 3)"
        )
    return None

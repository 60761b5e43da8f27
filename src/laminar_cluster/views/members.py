"""The node process leases as a one-shot reader finds them (ML §1.3, ML §2.2;
docs/protocols/membership.md), with each record's liveness judged from its age.

One bounded listing of `membership/nodes/` and one strict read per node. Each member gets
the age of its last renewal (the store's last-modified time against this machine's wall
clock) and a `state`:

* `left`: it announced `left` itself (a graceful leave);
* `dead`: its record is older than its ttl and it never left, or it was taken over by a
  leader's fence after it stopped renewing (the record says `left` but was written by the
  takeover, `takeovers[0]` naming this very lease: a SIGKILLed node, not a graceful leave);
* `suspected`: older than half its ttl;
* else the state it announced (joining, active, draining).

The ages are diagnostics: the protocol declares a node dead only for an observer that saw its
liveness identity unchanged for a full ttl on its own monotonic clock (ML-4), which a one-shot
reader cannot do; a view that keeps watching (`status --watch`) also does that. Corrupt records
are problems naming the object, never trusted. Never writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from laminar_cluster.errors import CorruptRecord
from laminar_cluster.membership.discovery import MEMBERSHIP_NODES_MAX, SUSPECT_TTL_FRACTION
from laminar_cluster.membership.paths import NODES_PREFIX, parse_node_lease_path
from laminar_cluster.membership.process_lease import read_node_record
from laminar_cluster.membership.records import NodeLeaseRecord, NodeState
from laminar_cluster.store import ObjectStore

AGE_NOTE: Final = (
    "dead and suspected here are a diagnostic from the last renewal's age (the store's "
    "last-modified time against this machine's wall clock); peers declare a node dead only "
    "after a full ttl unchanged on their own clock"
)
LIVE_STATES: Final = frozenset({"joining", "active", "draining"})


@dataclass
class MembersView:
    store: str
    members: list[dict[str, Any]] = field(default_factory=list)
    problems: list[dict[str, str]] = field(default_factory=list)


def taken_over(record: NodeLeaseRecord) -> bool:
    """The record was written by a takeover of a process that stopped renewing (a leader's
    fence, `rebalance.cluster.process_takeover`): state `left`, and its newest takeover's
    successor is this very lease (a graceful leave renews its own lease instead)."""
    newest = record.takeovers[0] if record.takeovers else None
    return (
        record.state is NodeState.LEFT and newest is not None and newest.successor == record.lease
    )


def liveness(record: NodeLeaseRecord, age_ms: int) -> tuple[str, str | None]:
    """The member's state by its record's age (module docstring) and why, when not announced."""
    ttl_ms = record.ttl_ms
    if taken_over(record):
        return "dead", "stopped renewing and was fenced by the leader (never left gracefully)"
    if record.state is NodeState.LEFT:
        return "left", None
    if age_ms > ttl_ms:
        return "dead", f"no renewal for {age_ms / 1000:.0f} s (ttl {ttl_ms / 1000:g} s)"
    if age_ms > ttl_ms * SUSPECT_TTL_FRACTION:
        return "suspected", f"no renewal for {age_ms / 1000:.1f} s (ttl {ttl_ms / 1000:g} s)"
    return record.state.value, None


def member_row(node: int, record: NodeLeaseRecord, age_ms: int) -> dict[str, Any]:
    """One member as the views show it (JSON-ready)."""
    state, why = liveness(record, age_ms)
    return {
        "node": node,
        "state": state,
        "announced": record.state.value,
        "why": why,
        "term": record.lease.term,
        "boot": record.lease.owner,
        "renewal_seq": record.lease.seq,
        "last_renewal_age_ms": age_ms,
        "ttl_ms": record.ttl_ms,
        "failure_domain": record.failure_domain,
        "job": job_figures(record),
    }


def job_figures(record: NodeLeaseRecord) -> dict[str, int] | None:
    """The job's late events and dead letters in the vnodes the node held at its last renewal
    (the report's `job`, ML-12), or None when it reports none (no job, or an older node)."""
    job = None if record.report is None else record.report.job
    if job is None:
        return None
    return {"late_events": job.late_events, "dead_letters": job.dead_letters}


async def read_member(
    store: ObjectStore, node: int, now_ms: int
) -> tuple[NodeLeaseRecord, int] | None:
    """The node's record and the age of its last write (ms), or None when absent."""
    stored = await read_node_record(store, node)
    if stored is None:
        return None
    return stored.record, now_ms - stored.last_modified_ms


async def view_members(store: ObjectStore, now_ms: int) -> MembersView:
    """Every member's row, sorted by node; a corrupt record is a problem naming it."""
    view = MembersView(store=store.url)
    metas = await store.list(NODES_PREFIX, limit=MEMBERSHIP_NODES_MAX + 1)
    if len(metas) > MEMBERSHIP_NODES_MAX:
        message = f"more than {MEMBERSHIP_NODES_MAX} node lease objects"
        view.problems.append({"object": NODES_PREFIX, "error": message})
        metas = metas[:MEMBERSHIP_NODES_MAX]
    for meta in metas:
        try:
            node = parse_node_lease_path(meta.key)
            found = await read_member(store, node, now_ms)
        except CorruptRecord as error:
            view.problems.append({"object": meta.key, "error": str(error)})
            continue
        if found is not None:
            view.members.append(member_row(node, *found))
    view.members.sort(key=lambda row: row["node"])
    return view

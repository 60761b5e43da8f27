"""`laminar-cluster members --store URL [--json]`: the node process leases, read-only
(upstream_context §1.3, §2.2, §2.11; docs/protocols/membership.md).

One bounded listing of `membership/nodes/` and one strict read per node: node, announced state,
process term, boot id, and the age of the last renewal by the store's last-modified time and
this machine's wall clock. That age is a diagnostic: a node is dead only for an observer that
saw its liveness identity unchanged for a full ttl on its own monotonic clock (ML-4), which a
one-shot command cannot do. Exits 1 naming any corrupt object; never writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.table import Table

from laminar_cluster.clock import RealClock
from laminar_cluster.errors import CorruptRecord, ObjectNotFound
from laminar_cluster.membership.discovery import MEMBERSHIP_NODES_MAX
from laminar_cluster.membership.paths import NODES_PREFIX, parse_node_lease_path
from laminar_cluster.membership.records import MAX_NODE_LEASE_RECORD_BYTES, decode_node_record
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.output import console, print_json, run_on_store

AGE_NOTE = (
    "last renewal age is a diagnostic from the store's last-modified time and this machine's "
    "wall clock; peers declare a node dead only after a full ttl unchanged on their own clock"
)


@dataclass
class MembersView:
    store: str
    members: list[dict[str, Any]] = field(default_factory=list)
    problems: list[dict[str, str]] = field(default_factory=list)


async def view_members(store: ObjectStore, now_ms: int) -> MembersView:
    view = MembersView(store=store.url)
    metas = await store.list(NODES_PREFIX, limit=MEMBERSHIP_NODES_MAX + 1)
    if len(metas) > MEMBERSHIP_NODES_MAX:
        message = f"more than {MEMBERSHIP_NODES_MAX} node lease objects"
        view.problems.append({"object": NODES_PREFIX, "error": message})
        metas = metas[:MEMBERSHIP_NODES_MAX]
    for meta in metas:
        try:
            node = parse_node_lease_path(meta.key)
            got = await store.get(meta.key, end=MAX_NODE_LEASE_RECORD_BYTES + 1)
            record = decode_node_record(got.body, key=meta.key, node=node)
        except ObjectNotFound:
            continue
        except CorruptRecord as error:
            view.problems.append({"object": meta.key, "error": str(error)})
            continue
        view.members.append(
            {
                "node": node,
                "state": record.state.value,
                "term": record.lease.term,
                "boot": record.lease.owner,
                "renewal_seq": record.lease.seq,
                "last_renewal_age_ms": now_ms - got.meta.last_modified_ms,
                "ttl_ms": record.ttl_ms,
                "failure_domain": record.failure_domain,
            }
        )
    return view


def run_members(url: str, *, as_json: bool) -> int:
    """Print the members; exit 1 naming each corrupt object."""

    view = run_on_store(url, lambda store: view_members(store, RealClock().wall_ms()))
    if as_json:
        print_json(
            {
                "store": view.store,
                "members": view.members,
                "problems": view.problems,
                "note": AGE_NOTE,
            }
        )
    else:
        _print_table(view)
    return 1 if view.problems else 0


def _print_table(view: MembersView) -> None:
    if not view.members:
        console.print("no members")
    else:
        table = Table("node", "state", "term", "boot", "last renewal age")
        for member in view.members:
            age_s = member["last_renewal_age_ms"] / 1000
            table.add_row(
                str(member["node"]),
                member["state"],
                str(member["term"]),
                member["boot"],
                f"{age_s:.1f} s (ttl {member['ttl_ms'] / 1000:g} s)",
            )
        console.print(table)
        console.print(AGE_NOTE)
    for problem in view.problems:
        console.print(f"[red]{problem['object']}: {problem['error']}[/red]")

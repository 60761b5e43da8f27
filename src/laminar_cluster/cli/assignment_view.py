"""`laminar-cluster assignment --store URL [--version N] [--json]`: one assignment generation,
read-only (AS §2.3, AS §2.11; docs/protocols/assignment-snapshots.md).

Shows the version (the head, or `--version N`), whether it is draining or committed and where
the generation came from (raw object, drain finalization, recovery materialization), whether
the leader authority holds the decision that backs it (AS-6; `assignment.audit`), the vnodes
per node, and a compact map of which node owns which vnode: rows of 16 cells, one character
per node, with a legend. Exits 1 naming the object on an absent version or bad durable state;
never writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from laminar_cluster.assignment.audit import AuthorityDecisions, version_backing_problem
from laminar_cluster.assignment.rendezvous import vnodes_per_node
from laminar_cluster.assignment.snapshot_io import (
    inventory,
    load_finalization,
    load_materialization,
    load_raw,
)
from laminar_cluster.clock import RealClock
from laminar_cluster.errors import InvalidArgument, LaminarError
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import DEFAULT_TTL_S
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.diagnose import redact_url
from laminar_cluster.views.output import console, error_console, print_json, run_on_store

MAP_ROW_CELLS: Final = 16
NODE_CODES: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
OVERFLOW_CODE: Final = "#"  # more nodes than codes (up to 129 participants): shared code


@dataclass(frozen=True, slots=True)
class AssignmentView:
    version: int
    head_version: int
    state: str  # "draining" | "committed"
    origin: str  # "raw" | "drain finalization" | "recovery materialization"
    owners: tuple[int, ...]
    participants: list[dict[str, Any]]
    rows: list[str]
    transition: dict[str, int] | None
    authority: str  # whether an authority decision backs this generation (AS-6)


async def view_assignment(store: ObjectStore, version: int | None) -> AssignmentView | str:
    """The view of `version` (default: the head), or a message saying why there is none."""
    versions = await inventory(store)
    if not versions:
        return _EMPTY
    chosen = versions[-1] if version is None else version
    if chosen not in versions:
        return (
            f"assignment version {chosen} is not retained (retained: {versions[0]}..{versions[-1]})"
        )
    transition = None
    materialized = await load_materialization(store, chosen)
    if materialized is not None:
        snapshot, origin = materialized.snapshot, "recovery materialization"
    else:
        raw = await load_raw(store, chosen)
        if raw is None:
            return f"assignment version {chosen} vanished while reading"
        snapshot, origin = raw, "raw"
        if raw.drain_transition is not None:
            transition = {
                "predecessor_version": raw.drain_transition.predecessor.assignment_version,
                "target_version": raw.drain_transition.target.assignment_version,
                "leader_node": raw.drain_transition.leader.owner.node_id,
            }
            finalization = await load_finalization(store, raw)
            if finalization is not None:
                snapshot, origin = finalization.proposal, "drain finalization"
    authority = await _authority(store, chosen, snapshot.draining)
    codes = {p.node_id: _code(i) for i, p in enumerate(snapshot.participants)}
    counts = vnodes_per_node(snapshot.owners)
    participants = [
        {
            "node": p.node_id,
            "boot": p.boot_incarnation,
            "code": codes[p.node_id],
            "vnodes": counts.get(p.node_id, 0),
        }
        for p in snapshot.participants
    ]
    cells = "".join(codes.get(owner, "?") for owner in snapshot.owners)
    rows = [cells[i : i + MAP_ROW_CELLS] for i in range(0, len(cells), MAP_ROW_CELLS)]
    return AssignmentView(
        version=chosen,
        head_version=versions[-1],
        state="draining" if snapshot.draining else "committed",
        origin=origin,
        owners=snapshot.owners,
        participants=participants,
        rows=rows,
        transition=transition,
        authority=authority,
    )


async def _authority(store: ObjectStore, version: int, draining: bool) -> str:
    """AS-6 for one version: v1 is the seed; an open drain awaits its decision."""
    if version == 1:
        return "seed (version 1 needs no decision)"
    if draining:
        return "open drain intent (no decision yet)"
    decisions = AuthorityDecisions(LeaderLeaseStore(store, clock=RealClock(), ttl_s=DEFAULT_TTL_S))
    problem = await version_backing_problem(store, decisions, version)
    return "backed by its authority decision" if problem is None else f"NOT BACKED: {problem}"


_EMPTY = "no assignment: the snapshot store is empty"


def _code(index: int) -> str:
    return NODE_CODES[index] if index < len(NODE_CODES) else OVERFLOW_CODE


def run_assignment(url: str, *, version: int | None, as_json: bool) -> int:
    """`laminar-cluster assignment`: print one generation; exit 1 naming a bad object or an
    absent version (an empty store is reported and exits 0)."""

    shown = redact_url(url)  # the URL as every line below shows it
    try:
        view = run_on_store(url, lambda store: view_assignment(store, version), must_exist=True)
    except InvalidArgument:
        raise  # a store that cannot be used, a bad URL: a usage error (exit 2)
    except LaminarError as error:
        return _fail(shown, f"{type(error).__name__}: {error}", as_json)
    if view == _EMPTY and version is None:
        # Nothing assigned yet is a state, not an error (like `lease` on an empty log).
        if as_json:
            print_json({"ok": True, "store": shown, "version": None, "note": view})
        else:
            console.print(
                f"store      {shown}\n{view}", markup=False, highlight=False, soft_wrap=True
            )
        return 0
    if isinstance(view, str):
        return _fail(shown, view, as_json)
    if as_json:
        print_json({"ok": True, "store": shown, **_json(view)})
    else:
        _print(shown, view)
    return 0


def _json(view: AssignmentView) -> dict[str, Any]:
    return {
        "version": view.version,
        "head_version": view.head_version,
        "state": view.state,
        "origin": view.origin,
        "vnode_count": len(view.owners),
        "participants": view.participants,
        "map": view.rows,
        "owners": list(view.owners),
        "transition": view.transition,
        "authority": view.authority,
    }


def _fail(url: str, message: str, as_json: bool) -> int:
    if as_json:
        print_json({"ok": False, "store": url, "error": message})
    else:
        error_console.print(f"assignment: {message}", markup=False, highlight=False, soft_wrap=True)
    return 1


def _print(url: str, view: AssignmentView) -> None:
    out = console.print
    out(f"store      {url}", markup=False, highlight=False, soft_wrap=True)
    head = "" if view.version == view.head_version else f" (head is {view.head_version})"
    out(f"version    {view.version}{head}", markup=False, highlight=False, soft_wrap=True)
    out(f"state      {view.state} ({view.origin})", markup=False, highlight=False, soft_wrap=True)
    if view.transition is not None:
        t = view.transition
        out(
            f"drain      v{t['predecessor_version']} -> v{t['target_version']}, opened by "
            f"node {t['leader_node']}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    out(f"authority  {view.authority}", markup=False, highlight=False, soft_wrap=True)
    out(f"vnodes     {len(view.owners)}", markup=False, highlight=False, soft_wrap=True)
    for p in view.participants:
        out(
            f"  {p['code']}  node {p['node']:<6} vnodes {p['vnodes']:<5} boot {p['boot']}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    out("map (row start: vnode)", markup=False, highlight=False, soft_wrap=True)
    for index, row in enumerate(view.rows):
        out(f"  {index * MAP_ROW_CELLS:>5}  {row}", markup=False, highlight=False, soft_wrap=True)

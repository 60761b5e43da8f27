"""The console's view of a cluster (issue 17): one JSON document per refresh, read from the
store alone and never written, built on `views.status.StatusReader`.

`ConsoleFeed.read()` returns the status sections (leader, members, assignment head, last
commit, source lag, notes, problems) and adds:

* `history` (views.authority_history): leader terms with their tokens, the checkpoint timeline
  (verdict, duration, events committed) and the assignment decisions (rotations: drain commit
  or abort, recovery), read incrementally from the authority log;
* `vnodes`: the head assignment's owner of every vnode; while it drains, the owner each moving
  vnode leaves (`from`, the predecessor version's owner, read once per version); and the vnodes
  their owners report still restoring;
* `rates` (views.request_rates): store requests per second by kind, per node and in total,
  from the reports in the members' lease records;
* `members[].report`: each member's reported assignment version and restoring count;
* `cost`: the store requests this refresh made, by kind (a `CountingStore` under the reader).

Every request goes through the status reader's `ReadOnlyStore`. A section that fails becomes a
problem naming it; the rest of the document is still served.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Final

from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot_io import load_effective
from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import LaminarError
from laminar_cluster.membership.discovery import Member
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.views.authority_history import AuthorityHistory
from laminar_cluster.views.request_rates import RequestRates
from laminar_cluster.views.status import StatusReader, event_log_opener

FEED_TIMEOUT_S: Final = 10.0
SNAPSHOTS_KEPT_MAX: Final = 8


class ConsoleFeed:
    """Reads console documents of one store; keep one per console (it remembers)."""

    def __init__(self, store: ObjectStore, clock: Clock) -> None:
        self.counter = CountingStore(store)
        self.clock = clock
        self.reader = StatusReader(self.counter, clock, event_log_opener(clock))
        self.history = AuthorityHistory(self.reader.store, self.reader.capsule_of)
        self.rates = RequestRates()
        self._snapshots: dict[int, AssignmentSnapshot] = {}  # committed predecessors

    async def read(self, *, timeout_s: float = FEED_TIMEOUT_S) -> dict[str, Any]:
        """One document (module docstring); each section within `timeout_s`."""
        self.counter.reset()
        view = await self.reader.read(timeout_s=timeout_s)
        document = view.as_json()
        problems: list[dict[str, str | None]] = document["problems"]
        head, leader = self.reader.last_head, view.leader
        if head is not None and leader is not None:
            seen_ms = view.observed_at_ms - int(leader["record_age_ms"])
            await self._guarded(problems, "history", self.history.update(head, seen_ms), timeout_s)
        history = self.history.as_json()
        problems.extend(
            {"section": "history", "object": None, "error": error}
            for error in history.pop("problems")
        )
        members = self.reader.last_members
        vnodes = await self._guarded(
            problems, "vnodes", self._vnodes(self.reader.last_snapshot, members), timeout_s
        )
        _add_reports(document["members"], members)
        document.update(
            ok=not problems,
            check=view.check(),  # `status --check`'s answer: None, or why not (no live leader)
            history=history,
            vnodes=vnodes,
            rates=self.rates.observe(members),
            cost={
                "requests": dict(sorted(self.counter.requests.items())),
                "total": self.counter.total,
            },
        )
        return document

    async def _guarded(
        self,
        problems: list[dict[str, str | None]],
        section: str,
        work: Awaitable[Any],
        timeout_s: float,
    ) -> Any:
        """`work` within `timeout_s`; a LaminarError becomes a problem naming `section`."""
        deadline = self.clock.monotonic() + timeout_s
        try:
            async with within_deadline(self.clock, deadline, f"console {section}"):
                return await work
        except LaminarError as error:
            key = getattr(error, "key", None)
            problems.append(
                {"section": section, "object": key, "error": f"{type(error).__name__}: {error}"}
            )
            return None

    async def _vnodes(
        self, snapshot: AssignmentSnapshot | None, members: tuple[Member, ...]
    ) -> dict[str, Any] | None:
        if snapshot is None:
            return None
        owners = list(snapshot.owners)
        leaving: list[int | None] | None = None
        transition = snapshot.drain_transition if snapshot.draining else None
        if transition is not None:
            previous = await self._committed(transition.predecessor.assignment_version)
            if previous is not None and len(previous.owners) == len(owners):
                leaving = [
                    None if before == after else before
                    for before, after in zip(previous.owners, owners, strict=True)
                ]
        restoring = sorted(
            vnode
            for member in members
            if member.live and member.record.report is not None
            for vnode in member.record.report.restoring
            if vnode < len(owners) and owners[vnode] == member.node
        )
        return {
            "version": snapshot.assignment_version,
            "draining": snapshot.draining,
            "owners": owners,
            "from": leaving,
            "restoring": restoring,
        }

    async def _committed(self, version: int) -> AssignmentSnapshot | None:
        """A predecessor version's effective snapshot, read once (it no longer changes)."""
        kept = self._snapshots.get(version)
        if kept is not None:
            return kept
        snapshot = await load_effective(self.reader.store, version)
        if snapshot is not None and not snapshot.draining:
            if len(self._snapshots) >= SNAPSHOTS_KEPT_MAX:
                self._snapshots.pop(min(self._snapshots))
            self._snapshots[version] = snapshot
        return snapshot


def _add_reports(rows: list[dict[str, Any]], members: tuple[Member, ...]) -> None:
    """Each member row gains its report's assignment version and restoring count."""
    by_node = {member.node: member for member in members}
    for row in rows:
        member = by_node.get(row["node"])
        report = None if member is None else member.record.report
        row["report"] = (
            None
            if report is None
            else {
                "assignment_version": report.assignment_version,
                "restoring": report.restoring_count,
            }
        )

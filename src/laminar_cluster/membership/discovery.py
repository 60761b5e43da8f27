"""Discovery: who is in the cluster, read from the store (ML §1.3, ML §2.2,
ML §4.3.4; docs/protocols/membership.md).

Each poll makes one bounded listing of `membership/nodes/` (ML-8) and reads only the records
whose version changed since the last poll. Each node's liveness identity (boot, term, seq) is
observed on this process's monotonic clock from the first poll that saw it: unchanged for half
its ttl -> `suspected`, for a full ttl -> `dead` (ML-4, the takeover rule of ML §4.3.4). The view
is a pure function of the records and these ages, sorted by node id, and includes this node
itself, so every node converges on the same view (ML-9). Corrupt records are reported, never
trusted (ML-10).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import CorruptRecord, ObjectNotFound
from laminar_cluster.membership.paths import NODES_PREFIX, parse_node_lease_path
from laminar_cluster.membership.records import (
    MAX_NODE_LEASE_RECORD_BYTES,
    NodeLeaseRecord,
    NodeState,
    decode_node_record,
)
from laminar_cluster.store import IfMatch, ObjectMeta, ObjectStore

MEMBERSHIP_NODES_MAX: Final = 1024
SUSPECT_TTL_FRACTION: Final = 0.5


class ObservedState(enum.Enum):
    """An announced state, or what an observer concluded from an unchanged identity."""

    JOINING = "joining"
    ACTIVE = "active"
    DRAINING = "draining"
    LEFT = "left"
    SUSPECTED = "suspected"
    DEAD = "dead"


_ANNOUNCED: Final = {state: ObservedState(state.value) for state in NodeState}
_LIVE: Final = frozenset({ObservedState.JOINING, ObservedState.ACTIVE, ObservedState.DRAINING})


@dataclass(frozen=True, slots=True)
class Member:
    node: int
    state: ObservedState
    record: NodeLeaseRecord
    unchanged_s: float  # how long this observer has seen the same liveness identity
    # The store's last-modified time of the record as last listed (a diagnostic for views:
    # the age of the last renewal; never decides anything here).
    modified_ms: int = 0

    @property
    def term(self) -> int:
        return self.record.lease.term

    @property
    def boot(self) -> str:
        return self.record.lease.owner

    @property
    def live(self) -> bool:
        return self.state in _LIVE


@dataclass(frozen=True, slots=True)
class MembershipView:
    members: tuple[Member, ...]
    problems: tuple[str, ...]
    observed_at_s: float

    def live_nodes(self) -> tuple[int, ...]:
        """Joining, active or draining, and not suspected or dead."""
        return tuple(member.node for member in self.members if member.live)

    def assignable_nodes(self) -> tuple[int, ...]:
        """ML §1.3: only active nodes receive vnodes."""
        return tuple(m.node for m in self.members if m.state is ObservedState.ACTIVE)

    def member(self, node: int) -> Member | None:
        return next((member for member in self.members if member.node == node), None)

    def signature(self) -> tuple[tuple[int, str, int], ...]:
        """What watchers compare (ML §1.3 publish_if_changed): ages excluded."""
        return tuple((m.node, m.state.value, m.term) for m in self.members)


@dataclass(slots=True)
class _Seen:
    token: IfMatch | None
    record: NodeLeaseRecord
    first_seen_s: float  # monotonic time of the poll that first saw this liveness identity
    modified_ms: int = 0  # the listing's last-modified time of the record (diagnostics)


@dataclass(slots=True)
class Discovery:
    """One observer's memory of the records and when each identity was first seen."""

    store: ObjectStore
    clock: Clock
    nodes_max: int = MEMBERSHIP_NODES_MAX
    _seen: dict[int, _Seen] = field(default_factory=dict)

    async def poll(self, *, deadline: float) -> MembershipView:
        """One listing (bounded by `nodes_max`), changed records read, the view derived."""
        async with within_deadline(self.clock, deadline, "membership poll"):
            metas = await self.store.list(NODES_PREFIX, limit=self.nodes_max + 1)
            if len(metas) > self.nodes_max:
                raise CorruptRecord(
                    f"{NODES_PREFIX}: more than {self.nodes_max} node lease objects",
                    key=NODES_PREFIX,
                )
            problems: list[str] = []
            present: set[int] = set()
            for meta in metas:
                node = await self._refresh(meta, problems)
                if node is not None:
                    present.add(node)
        now_s = self.clock.monotonic()
        for gone in set(self._seen) - present:
            del self._seen[gone]
        return self._view(now_s, problems)

    async def _refresh(self, meta: ObjectMeta, problems: list[str]) -> int | None:
        """Bring one node's memory up to date; None when it has no usable record."""
        try:
            node = parse_node_lease_path(meta.key)
        except CorruptRecord as error:
            problems.append(str(error))
            return None
        seen = self._seen.get(node)
        listed = meta.token if meta.e_tag is not None or meta.version is not None else None
        if seen is not None and listed is not None and seen.token == listed:
            seen.modified_ms = meta.last_modified_ms
            return node  # unchanged version: no read needed
        try:
            got = await self.store.get(meta.key, end=MAX_NODE_LEASE_RECORD_BYTES + 1)
            record = decode_node_record(got.body, key=meta.key, node=node)
        except ObjectNotFound:
            return None
        except CorruptRecord as error:
            problems.append(str(error))  # ML-10: reported, never trusted
            self._seen.pop(node, None)
            return None
        token = got.meta.token if listed is not None else None
        # ML-4: an observation starts after the read that returned the record, never before.
        now_s = self.clock.monotonic()
        if seen is None or seen.record.liveness_identity() != record.liveness_identity():
            seen = self._seen[node] = _Seen(token=token, record=record, first_seen_s=now_s)
        else:
            seen.token, seen.record = token, record
        seen.modified_ms = got.meta.last_modified_ms
        return node

    def _view(self, now_s: float, problems: list[str]) -> MembershipView:
        members = tuple(_member(node, seen, now_s) for node, seen in sorted(self._seen.items()))
        return MembershipView(members=members, problems=tuple(problems), observed_at_s=now_s)


def _member(node: int, seen: _Seen, now_s: float) -> Member:
    """ML-4: a full ttl of the same identity on our clock makes a node dead."""
    record = seen.record
    unchanged_s = max(0.0, now_s - seen.first_seen_s)
    ttl_s = record.ttl_ms / 1000
    if record.state is NodeState.LEFT:
        state = ObservedState.LEFT
    elif unchanged_s >= ttl_s:
        state = ObservedState.DEAD
    elif unchanged_s >= ttl_s * SUSPECT_TTL_FRACTION:
        state = ObservedState.SUSPECTED
    else:
        state = _ANNOUNCED[record.state]
    return Member(
        node=node,
        state=state,
        record=record,
        unchanged_s=unchanged_s,
        modified_ms=seen.modified_ms,
    )

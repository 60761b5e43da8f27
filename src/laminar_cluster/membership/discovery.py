"""Discovery: who is in the cluster, read from the store (ML §1.3, ML §2.2,
ML §4.3.4; docs/protocols/membership.md).

A poll reads the roster `membership/roster.json` with one conditional GET (ML-14), then each
node of the roster or of the last view with one conditional GET on the e_tag it last read
(unchanged: no body, what it knew stands; not found: gone). It lists `membership/nodes/`
instead (bounded, reading only the records whose version changed, ML-8) at its first poll,
every `list_every`-th poll (a repair: records whose node never made it into the roster), and
while the roster is missing (a store written before it) or corrupt (reported, never trusted).

Each node's liveness identity (boot, term, seq) is observed on this process's monotonic clock
from the read that first returned it: unchanged for half its ttl -> `suspected`, for a full ttl
-> `dead` (ML-4, the takeover rule of ML §4.3.4). The view is the same as a listing's, a
pure function of the records and these ages, sorted by node id, including this node itself, so
every node converges on the same view (ML-9). Corrupt records are reported, never trusted
(ML-10).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.errors import CorruptRecord, InvalidArgument, ObjectNotFound
from laminar_cluster.membership.paths import (
    NODES_PREFIX,
    ROSTER_PATH,
    node_lease_path,
    parse_node_lease_path,
)
from laminar_cluster.membership.records import (
    MAX_NODE_LEASE_RECORD_BYTES,
    MAX_ROSTER_RECORD_BYTES,
    MEMBERSHIP_NODES_MAX,
    MembershipRoster,
    NodeLeaseRecord,
    NodeState,
    decode_node_record,
    decode_roster,
)
from laminar_cluster.store import GetResult, IfMatch, ObjectMeta, ObjectStore

__all__ = [
    "MEMBERSHIP_NODES_MAX",
    "ROSTER_LIST_EVERY_DEFAULT",
    "SUSPECT_TTL_FRACTION",
    "Discovery",
    "Member",
    "MembershipView",
    "ObservedState",
]

SUSPECT_TTL_FRACTION: Final = 0.5
# ML-8: a repair listing every this many polls (30 s at the default 2 s poll), which finds a
# record whose node is not in the roster (died before joining it, or an older binary's).
ROSTER_LIST_EVERY_DEFAULT: Final = 15


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
    modified_ms: int = 0  # the store's last-modified time of the record (diagnostics)


@dataclass(slots=True)
class Discovery:
    """One observer's memory of the records and when each identity was first seen, and of
    the roster's last version (ML-8, ML-14)."""

    store: ObjectStore
    clock: Clock
    nodes_max: int = MEMBERSHIP_NODES_MAX
    list_every: int = ROSTER_LIST_EVERY_DEFAULT
    _seen: dict[int, _Seen] = field(default_factory=dict)
    _polls: int = 0
    _roster: tuple[str, MembershipRoster] | None = None  # (e_tag, roster) last decoded
    _path_problems: tuple[str, ...] = ()  # foreign keys of the last listing (ML-10)

    async def poll(self, *, deadline: float) -> MembershipView:
        """ML-8: a listing at the first poll, every `list_every`-th and whenever the roster is
        missing or corrupt; otherwise the roster and each known node's record, conditionally."""
        if self.list_every < 1:
            raise InvalidArgument(f"list_every {self.list_every} must be at least 1")
        async with within_deadline(self.clock, deadline, "membership poll"):
            problems: list[str] = []
            roster = None
            if self._polls % self.list_every != 0:
                roster = await self._read_roster(problems)
            self._polls += 1
            if roster is None:
                present = await self._poll_listing(problems)
            else:
                present = await self._poll_roster(roster, problems)
        now_s = self.clock.monotonic()
        for gone in set(self._seen) - present:
            del self._seen[gone]
        return self._view(now_s, problems)

    async def _poll_listing(self, problems: list[str]) -> set[int]:
        """One listing (bounded by `nodes_max`), only the records whose version changed read."""
        metas = await self.store.list(NODES_PREFIX, limit=self.nodes_max + 1)
        if len(metas) > self.nodes_max:
            raise CorruptRecord(
                f"{NODES_PREFIX}: more than {self.nodes_max} node lease objects",
                key=NODES_PREFIX,
            )
        path_problems: list[str] = []
        present: set[int] = set()
        for meta in metas:
            node = await self._refresh(meta, path_problems, problems)
            if node is not None:
                present.add(node)
        self._path_problems = tuple(path_problems)
        problems[:0] = path_problems
        return present

    async def _read_roster(self, problems: list[str]) -> tuple[int, ...] | None:
        """ML-14: the roster's ids by one conditional GET; None (list instead) when it is
        missing, or corrupt (reported, never trusted: ML-10)."""
        known = self._roster
        try:
            if known is not None:
                got = await self.store.get_if_changed(ROSTER_PATH, known[0])
                if got is None:
                    return known[1].nodes
            else:
                got = await self.store.get(ROSTER_PATH, end=MAX_ROSTER_RECORD_BYTES + 1)
            roster = decode_roster(got.body, key=ROSTER_PATH, nodes_max=self.nodes_max)
        except ObjectNotFound:
            self._roster = None
            return None
        except CorruptRecord as error:
            problems.append(str(error))
            self._roster = None
            return None
        e_tag = got.meta.e_tag
        self._roster = None if e_tag is None else (e_tag, roster)
        return roster.nodes

    async def _poll_roster(self, roster: tuple[int, ...], problems: list[str]) -> set[int]:
        """Each node of the roster or of the last view, read conditionally on its last e_tag."""
        wanted = sorted({*roster, *self._seen})
        if len(wanted) > self.nodes_max:
            raise CorruptRecord(
                f"{ROSTER_PATH}: more than {self.nodes_max} nodes listed or known",
                key=ROSTER_PATH,
            )
        problems.extend(self._path_problems)  # until the next listing looks again
        present: set[int] = set()
        for node in wanted:
            if await self._reread(node, problems):
                present.add(node)
        return present

    async def _reread(self, node: int, problems: list[str]) -> bool:
        """One conditional GET of `node`'s record (a plain GET without a known e_tag); False
        when it has no usable record."""
        key = node_lease_path(node)
        seen = self._seen.get(node)
        e_tag = None if seen is None or seen.token is None else seen.token.e_tag
        try:
            if e_tag is not None:
                got = await self.store.get_if_changed(key, e_tag)
                if got is None:
                    return True  # unchanged: the observation goes on (ML-4)
            else:
                got = await self.store.get(key, end=MAX_NODE_LEASE_RECORD_BYTES + 1)
        except ObjectNotFound:
            return False
        return self._accept(node, got, problems, keep_token=True)

    async def _refresh(
        self, meta: ObjectMeta, path_problems: list[str], problems: list[str]
    ) -> int | None:
        """Bring one listed node's memory up to date; None when it has no usable record."""
        try:
            node = parse_node_lease_path(meta.key)
        except CorruptRecord as error:
            path_problems.append(str(error))
            return None
        seen = self._seen.get(node)
        listed = meta.token if meta.e_tag is not None or meta.version is not None else None
        if seen is not None and listed is not None and seen.token == listed:
            seen.modified_ms = meta.last_modified_ms
            return node  # unchanged version: no read needed
        try:
            got = await self.store.get(meta.key, end=MAX_NODE_LEASE_RECORD_BYTES + 1)
        except ObjectNotFound:
            return None
        return node if self._accept(node, got, problems, keep_token=listed is not None) else None

    def _accept(self, node: int, got: GetResult, problems: list[str], *, keep_token: bool) -> bool:
        """Remember the record just read (False when corrupt: reported, forgotten, ML-10)."""
        key = got.meta.key
        try:
            record = decode_node_record(got.body, key=key, node=node)
        except CorruptRecord as error:
            problems.append(str(error))  # ML-10: reported, never trusted
            self._seen.pop(node, None)
            return False
        has_token = got.meta.e_tag is not None or got.meta.version is not None
        token = got.meta.token if keep_token and has_token else None
        # ML-4: an observation starts after the read that returned the record, never before.
        now_s = self.clock.monotonic()
        seen = self._seen.get(node)
        if seen is None or seen.record.liveness_identity() != record.liveness_identity():
            seen = self._seen[node] = _Seen(token=token, record=record, first_seen_s=now_s)
        else:
            seen.token, seen.record = token, record
        seen.modified_ms = got.meta.last_modified_ms
        return True

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

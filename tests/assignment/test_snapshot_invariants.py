"""RB-1 over the real assignment snapshot store (docs/protocols/rebalance.md): durable versions
stay contiguous, each new one exactly head + 1, and no object ever changes once created, under
any sequence of seeds, rotations, drains, finalizations, recovery materializations and prunes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_cluster.assignment.model import aborted_target, committed_target
from laminar_cluster.assignment.paths import (
    FINALIZATIONS_PREFIX,
    MATERIALIZATIONS_PREFIX,
    PROPOSALS_PREFIX,
    SNAPSHOTS_PREFIX,
    parse_version_name,
)
from laminar_cluster.assignment.records import AssignmentSnapshot
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Conflict, Rotated
from laminar_cluster.assignment.snapshot_io import load_raw
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.lease.records import AssignmentVerdict
from laminar_cluster.store import ObjectStore, open_store
from tests.assignment.snapshot_support import decision, draining, snapshot

MAPS = ((1, 1), (1, 2), (2, 1), (2, 2), (1, 3))
NAMESPACES = (SNAPSHOTS_PREFIX, FINALIZATIONS_PREFIX, PROPOSALS_PREFIX)
VERSION_IN_KEY = re.compile(r".*/v([0-9]{20})(?:\.json$|/)")
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("seed"), st.sampled_from(MAPS)),
        st.tuples(st.just("rotate"), st.integers(-2, 1), st.sampled_from(MAPS)),
        st.tuples(
            st.just("drain"),
            st.integers(-1, 1),
            st.sampled_from(MAPS),
            st.sampled_from([None, *AssignmentVerdict]),
        ),
        st.tuples(st.just("finalize"), st.sampled_from(list(AssignmentVerdict))),
        st.tuples(st.just("recover"), st.integers(-1, 1), st.sampled_from(MAPS)),
        st.tuples(st.just("prune")),
    ),
    max_size=14,
)


@dataclass
class History:
    """What the test has seen: every object's first bytes and every committed version."""

    snaps: AssignmentSnapshotStore
    floor: int = 1
    objects: dict[str, bytes] = field(default_factory=dict)
    committed: dict[int, AssignmentSnapshot] = field(default_factory=dict)
    step: int = 0

    @property
    def store(self) -> ObjectStore:
        """The object store under the snapshot store."""
        return self.snaps.store

    async def head(self) -> AssignmentSnapshot:
        """The effective head (never None: v1 is seeded first)."""
        head = await self.snaps.load()
        assert head is not None
        return head

    async def listing(self) -> dict[str, bytes]:
        """Every object of the snapshot namespaces, by key, with its bytes."""
        found: dict[str, bytes] = {}
        for prefix in NAMESPACES:
            for meta in await self.store.list(prefix):
                found[meta.key] = (await self.store.get(meta.key)).body
        return found

    async def versions(self) -> list[int]:
        """The versions of the raw and materialized snapshot objects, read by listing."""
        found = []
        for meta in await self.store.list(SNAPSHOTS_PREFIX):
            name = meta.key.removeprefix(MATERIALIZATIONS_PREFIX).removeprefix(SNAPSHOTS_PREFIX)
            version = parse_version_name(name)
            assert version is not None, meta.key
            found.append(version)
        return sorted(set(found))

    async def check(self) -> None:
        """RB-1 after every step: contiguous from the prune floor to the head, nothing changed."""
        versions = await self.versions()
        head = await self.head()
        assert versions == list(range(self.floor, head.assignment_version + 1)), versions
        for key, body in (await self.listing()).items():
            assert self.objects.setdefault(key, body) == body, f"{key} changed"
        for version in versions:
            loaded = await self.snaps.load_version(version)
            assert loaded is not None
            if not loaded.draining:
                assert self.committed.setdefault(version, loaded) == loaded, version

    async def refused(self, write: Awaitable[object]) -> None:
        """A create anywhere but head + 1: refused, or the existing winner; nothing written."""
        before = await self.listing()
        try:
            result = await write
        except InvalidArgument:
            pass
        else:
            assert result is None or isinstance(result, Conflict), result
        assert await self.listing() == before


def object_version(key: str) -> int:
    """The assignment version an object of the four namespaces belongs to."""
    match = VERSION_IN_KEY.search(key)
    assert match is not None, key
    return int(match.group(1))


async def apply(history: History, op: tuple[object, ...]) -> None:
    """One step; refusals are checked to write nothing (`History.refused`)."""
    snaps, head = history.snaps, await history.head()
    history.step += 1
    at_ms = 10_000 + history.step
    top = head.assignment_version
    match op:
        case ("seed", owners):
            await history.refused(snaps.save_if_absent(snapshot(1, owners, at_ms=at_ms)))
        case ("rotate", 0, owners) if not head.draining:
            rotation = snapshot(top + 1, owners, at_ms=at_ms)
            assert await snaps.save_if_version(rotation, top) == Rotated(rotation)
            retry = snapshot(top + 1, owners, at_ms=at_ms + 1)
            await history.refused(snaps.save_if_version(retry, top))
        case ("rotate", int(delta), owners) if delta != 0 and top + 1 + delta >= 1:
            version = top + 1 + delta
            rotation = snapshot(version, owners, at_ms=at_ms)
            await history.refused(snaps.save_if_version(rotation, version - 1))
        case ("drain", int(delta), owners, verdict) if not head.draining and owners != head.owners:
            drain = draining(head, owners)
            if delta != 0:
                await history.refused(snaps.save_if_version(drain, top + delta))
                return
            assert await snaps.save_if_version(drain, top) == Rotated(drain)
            if isinstance(verdict, AssignmentVerdict):
                await finalize(history, top + 1, verdict, at_ms)
        case ("finalize", AssignmentVerdict() as verdict):
            await finalize(history, top, verdict, at_ms)
        case ("recover", int(delta), owners) if not head.draining and top + 1 + delta != top:
            version = top + 1 + delta  # at the head itself a materialization overlays (AS-7)
            ref = await snaps.stage_recovery_proposal(snapshot(version, owners, at_ms=at_ms))
            if delta == 0:
                assert isinstance(await snaps.materialize_recovery(ref), Rotated)
            else:
                await history.refused(snaps.materialize_recovery(ref))
        case ("prune",) if top >= 3:
            await snaps.prune_before(top - 1)
            history.floor = top - 1
            history.objects = {
                k: v for k, v in history.objects.items() if object_version(k) >= history.floor
            }


async def finalize(history: History, top: int, verdict: AssignmentVerdict, at_ms: int) -> None:
    """The terminal of a draining head, then a second one with the other verdict: refused."""
    snaps = history.snaps
    raw = await load_raw(snaps.store, top)
    if raw is None or not raw.draining or not (await history.head()).draining:
        return
    predecessor = await snaps.load_version(top - 1)
    assert predecessor is not None
    terminals = {
        AssignmentVerdict.COMMIT: committed_target(raw, now_ms=at_ms),
        AssignmentVerdict.ABORT: aborted_target(raw, predecessor, now_ms=at_ms),
    }
    proposal = terminals.pop(verdict)
    assert await snaps.finalize_drain(raw, proposal, decision(raw, verdict)) == Rotated(proposal)
    ((other, late),) = terminals.items()
    await history.refused(snaps.finalize_drain(raw, late, decision(raw, other)))


@settings(max_examples=80, deadline=None)
@given(STEPS)
def test_rb1_versions_stay_contiguous_and_immutable(steps: list[tuple[object, ...]]) -> None:
    async def main() -> None:
        history = History(AssignmentSnapshotStore(open_store("memory://")))
        assert await history.snaps.save_if_absent(snapshot(1, (1, 1))) is not None
        await history.check()
        for op in steps:
            await apply(history, op)
            await history.check()

    asyncio.run(main())

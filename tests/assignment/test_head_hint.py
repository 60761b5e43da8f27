"""The head hint and the watched head load (AS §2.14): one conditional read per unchanged
tick, the full load only when the hint moved, and a hint that is missing, corrupt or stale
repaired by the next full load. Requests are counted with `CountingStore`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from laminar_cluster.assignment.head_hint import read_hint
from laminar_cluster.assignment.model import committed_target
from laminar_cluster.assignment.paths import HEAD_HINT_PATH, snapshot_path
from laminar_cluster.assignment.records import AssignmentHeadHint, HeadState
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore, Rotated
from laminar_cluster.codec import encode
from laminar_cluster.lease.records import AssignmentVerdict
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore
from laminar_cluster.store.counting import CountingStore
from tests.assignment.snapshot_support import decision, draining, snapshot

LOCAL = pytest.mark.parametrize("backend", ["memory", "file"])


def _hint(version: int, state: HeadState) -> AssignmentHeadHint:
    return AssignmentHeadHint(version=1, assignment_version=version, state=state)


@LOCAL
def test_as10_an_unchanged_head_costs_one_conditional_read(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = CountingStore(make_store())
        writer, watcher = AssignmentSnapshotStore(store), AssignmentSnapshotStore(store)
        v1 = snapshot(1, [1, 2])
        await writer.save_if_absent(v1)
        assert (await read_hint(store)).hint == _hint(1, HeadState.COMMITTED)
        assert await watcher.load_watched() == v1  # first: the full load
        store.reset()
        for _ in range(5):
            assert await watcher.load_watched() == v1
        assert store.requests == {"get": 5}  # one conditional GET of the hint per call

        # A draining successor moves the hint: the next call loads in full, once.
        drain = draining(v1, [2, 1])
        assert isinstance(await writer.save_if_version(drain, 1), Rotated)
        store.reset()
        assert await watcher.load_watched() == drain
        assert store.requests["list"] == 1
        store.reset()
        assert await watcher.load_watched() == drain
        assert store.requests == {"get": 1}

        # Its finalization (same version, another object) moves it too.
        assert drain.drain_transition is not None
        target = await writer.finalize_drain(
            drain, committed_target(drain, now_ms=3_000), decision(drain, AssignmentVerdict.COMMIT)
        )
        assert isinstance(target, Rotated)
        assert (await read_hint(store)).hint == _hint(2, HeadState.FINALIZED)
        assert await watcher.load_watched() == target.snapshot

    asyncio.run(main())


@LOCAL
def test_as10_a_missing_corrupt_or_stale_hint_is_repaired(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = make_store()
        v1 = snapshot(1, [1, 2])
        await store.put(snapshot_path(1), encode(v1), CREATE)  # an older layout: no hint
        watcher = AssignmentSnapshotStore(store)
        assert await watcher.load_watched() == v1
        assert (await read_hint(store)).hint == _hint(1, HeadState.COMMITTED)  # created

        await store.put(HEAD_HINT_PATH, b"not a hint", OVERWRITE)
        assert await AssignmentSnapshotStore(store).load_watched() == v1  # read as no hint
        assert (await read_hint(store)).hint == _hint(1, HeadState.COMMITTED)  # overwritten

        # A writer that died between its create and its hint: the hint still says v1. The
        # periodic full load finds v2 and repairs the hint; every watcher then sees it moved.
        v2 = snapshot(2, [1, 2])
        await store.put(snapshot_path(2), encode(v2), CREATE)
        other = AssignmentSnapshotStore(store)
        assert await other.load_watched() == v2  # never loaded: a full load
        assert await watcher.load_watched() == v2  # the repair moved the hint
        assert (await read_hint(store)).hint == _hint(2, HeadState.COMMITTED)
        v3 = snapshot(3, [1, 2])
        await store.put(snapshot_path(3), encode(v3), CREATE)
        assert await watcher.load_watched() == v2  # the hint did not move: not seen yet
        assert await watcher.load_watched(full=True) == v3  # the periodic full load sees it

    asyncio.run(main())

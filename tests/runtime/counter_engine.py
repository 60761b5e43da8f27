"""The smallest embedded engine (docs/embedding.md): counts keys per vnode from an in-memory feed.

`feed[vnode]` is the vnode's source, an append-only list of keys every process can read from
any offset (a replayable log, shared in one test process). The engine implements `DataPlane`
and nothing else; test_counter_engine.py runs it through a rotation and a recovery.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable

from laminar_cluster.rebalance.engine.data_plane import Cut, Intake, VnodeCut


class CounterEngine:
    """Per vnode: how often each key was seen, and the next offset of its feed."""

    def __init__(self, feed: dict[int, list[str]]) -> None:
        self.feed = feed
        self.counts: dict[int, Counter[str]] = {}
        self.offsets: dict[int, int] = {}
        self.paused: frozenset[int] = frozenset()

    def restore(self, vnode: int, cut: VnodeCut | None, *, vnode_count: int) -> None:
        state = b"{}" if cut is None or cut.state is None else cut.state
        self.counts[vnode] = Counter(json.loads(state))
        self.offsets[vnode] = 0 if cut is None else cut.offsets.get(vnode, 0)

    def drop(self, vnode: int) -> None:
        self.counts.pop(vnode, None)
        self.offsets.pop(vnode, None)

    def pause(self, vnodes: frozenset[int]) -> None:
        self.paused = vnodes

    def capture(self, vnodes: tuple[int, ...]) -> Callable[[], Cut]:
        frozen = {vnode: (dict(self.counts[vnode]), self.offsets[vnode]) for vnode in vnodes}

        def encode() -> Cut:
            cuts = {
                vnode: VnodeCut(json.dumps(counts, sort_keys=True).encode(), {vnode: offset})
                for vnode, (counts, offset) in frozen.items()
            }
            return Cut(vnodes=cuts, output=b"")  # no sink: nothing to emit

        return encode

    def resolve(self, vnodes: tuple[int, ...], committed: bool) -> None:
        pass  # no output is in flight

    async def run(self, intake: Intake, shutdown: asyncio.Event) -> None:
        while not shutdown.is_set():
            async with intake.executing():
                if intake.open():
                    for vnode in sorted(self.offsets.keys() - self.paused):
                        events = self.feed.get(vnode, [])[self.offsets[vnode] :]
                        self.counts[vnode].update(events)
                        self.offsets[vnode] += len(events)
            await intake.changed(0.01)

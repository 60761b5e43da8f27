"""The leader's learned first wait before listing `manifest/` (distributed-checkpoint.md L5):
0.75 x the shortest of the last 4 complete collections, so one slow collection (the first after
a rotation, say) does not hold back the next checkpoints, and an incomplete one teaches nothing."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from laminar_cluster.coordinator import collect
from laminar_cluster.coordinator.collect import AckCollector, Collection


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def test_first_wait_learns_from_the_shortest_recent_complete_collection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _Clock()
    waits: list[float] = []
    took = iter([0.5, 0.6, 1.2, 3.0, 0.8, 0.9, 1.0, 1.1, 0.0])  # the fourth is incomplete

    async def fake_collect_acks(*_: Any, first_wait_s: float, **__: Any) -> Collection:
        waits.append(first_wait_s)
        clock.now += next(took)
        return Collection()  # nothing sealed: complete only for a fence without participants

    monkeypatch.setattr(collect, "collect_acks", fake_collect_acks)
    decisions = cast(Any, SimpleNamespace(ctx=SimpleNamespace(clock=clock)))
    collector = AckCollector(cast(Any, None), decisions, poll_s=0.05, lost=None)
    complete = SimpleNamespace(participants=())
    incomplete = SimpleNamespace(participants=(SimpleNamespace(node_id=2),))

    async def main() -> None:
        for index in range(9):
            fence = incomplete if index == 3 else complete
            prepare = cast(Any, SimpleNamespace(attempt=None, fence=fence))
            await collector.collect(prepare, [], b"prepare", None, until=clock.now + 60)

    asyncio.run(main())
    # 0 before any; 0.75 x 0.5 while 0.5 is among the last four complete ones (the incomplete
    # 3.0 s is not learned, the slow 1.2 s never governs); then 0.75 x 0.6, 0.75 x 0.8.
    assert waits == pytest.approx([0.0, 0.375, 0.375, 0.375, 0.375, 0.375, 0.45, 0.6, 0.6])


def test_dc18_a_prepare_the_participants_did_not_expect_teaches_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A collection of a prepare no pointer announced (a new leader's first, a pre-rotation
    one: participants notice it up to `quiet_s` late) is not learned, so the next announced
    periodic prepare is listed for early instead of after 0.75 x the slow one."""
    clock = _Clock()
    waits: list[float] = []
    took = iter([1.4, 0.4, 1.2, 0.5])

    async def fake_collect_acks(*_: Any, first_wait_s: float, **__: Any) -> Collection:
        waits.append(first_wait_s)
        clock.now += next(took)
        return Collection()

    monkeypatch.setattr(collect, "collect_acks", fake_collect_acks)
    decisions = cast(Any, SimpleNamespace(ctx=SimpleNamespace(clock=clock)))
    collector = AckCollector(cast(Any, None), decisions, poll_s=0.05, lost=None)
    prepare = cast(Any, SimpleNamespace(attempt=None, fence=SimpleNamespace(participants=())))

    async def main() -> None:
        for learn in (False, True, False, True):
            await collector.collect(prepare, [], b"p", None, until=clock.now + 60, learn=learn)

    asyncio.run(main())
    assert waits == pytest.approx([0.0, 0.0, 0.3, 0.3])  # 1.4 and 1.2 never learnt

"""A steady-state renewal costs two store requests, and a stale head hint stays safe.

The authority keeps the head this process last published (`HeadCache`). A renewal starts from
it: one create of the next record plus one pointer update, no head reads. When anything else
appended meanwhile, the create finds the key taken and the renewal falls back to the full read,
so the hint never decides an outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from laminar_cluster.errors import Fenced
from laminar_cluster.lease import log
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.counting import CountingStore
from tests.lease.pausing_store import (
    A,
    B,
    acquired,
    authority,
    begin,
    counters,
    fault_record,
    renew,
    sim,
    takeover,
)


def test_steady_state_renewal_is_one_create_and_one_pointer_update(
    make_store: Callable[[], ObjectStore],
) -> None:
    async def main() -> None:
        store = CountingStore(make_store())
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        store.reset()
        for expected_seq in range(2, 12):
            lease = acquired(await renew(leader, lease.token))
            assert lease.seq == expected_seq and lease.token == 1
        assert store.total == 20, store.requests  # 2 per renewal
        assert store.requests == {"put": 20}
        # The durable head is exactly what the cheap renewals wrote.
        head = await log.load_published_head(store.inner, leader.clock)
        assert head is not None and head.record.lease == lease

    asyncio.run(main())


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_a_stale_hint_after_a_foreign_append_re_reads_and_renews(
    make_store: Callable[[], ObjectStore],
) -> None:
    """Another process appends a fault on top of our head: the hinted create fails, the
    renewal re-reads and lands at the next free sequence with the same token."""

    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        lease = acquired(await begin(leader))
        other = authority(store, 2)
        head = await other.load_published_head()
        assert head is not None
        await other.append(head, fault_record(head.record, 7))  # seq 2, same lease identity
        renewed = acquired(await renew(leader, lease.token))
        assert counters(renewed) == (3, 2, 1)

    asyncio.run(main())


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_a_stale_hint_never_lets_a_deposed_leader_renew(
    make_store: Callable[[], ObjectStore],
) -> None:
    """LA-6 with the hint: the rival took over at seq 2; our hinted create of seq 2 fails and the
    renewal is fenced, never written."""

    async def main() -> None:
        store = make_store()
        leader = authority(store, 1)
        lease = acquired(await begin(leader, A))
        rival = authority(store, 2)
        observation = rival.observe_rival(B, lease)
        sim(rival).advance(10.0)
        taken = acquired(await takeover(rival, observation, B))
        assert taken.token == 2 and leader.head_cache.get() is not None
        with pytest.raises(Fenced):
            await renew(leader, lease.token)
        head = await log.load_published_head(store, rival.clock)
        assert head is not None and head.record.lease == taken

    asyncio.run(main())

"""A node's request counters (rebalance/node/stats.py): each request counted under the purpose
of the task that made it (or of the `counted_as` block around it, for that block only), by
kind, and by the object family its key names; a multi-object delete as the requests S3 bills."""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.errors import ObjectNotFound
from laminar_cluster.rebalance.node.stats import (
    PurposeCountingStore,
    counted_as,
    counting_as,
    family_of,
)
from laminar_cluster.store import CREATE, open_store


def test_family_is_the_first_key_segment() -> None:
    assert family_of("checkpoints/attempt=1/prepare.json") == "checkpoints"
    assert family_of("checkpoints/pointer.json") == "checkpoints/pointer"  # polled: apart
    assert family_of("membership/") == "membership"
    assert family_of("events") == "events"
    assert family_of("") == ""


def test_requests_count_by_purpose_kind_and_object_family() -> None:
    async def main() -> dict[str, object]:
        store = PurposeCountingStore(open_store("memory://"))

        async def watcher() -> None:
            counting_as("watcher")
            with pytest.raises(ObjectNotFound):
                await store.get("membership/nodes/node=1/lease.json")
            await store.put("checkpoints/a", b"a", CREATE)
            await store.put("checkpoints/b", b"b", CREATE)
            with counted_as("retention"):
                await store.delete_many(["checkpoints/a", "checkpoints/b"])
                await store.list("checkpoints/")
            await store.list("")  # the whole store: family ""

        async with asyncio.TaskGroup() as group:
            group.create_task(watcher())
        await store.put("events/layout.json", b"{}", CREATE)  # this task: unnamed
        snapshot = store.snapshot()
        await store.close()
        return snapshot

    snapshot = asyncio.run(main())
    assert snapshot["counts"] == {
        "other": {"put": 1},
        "retention": {"delete": 1, "list": 1},  # two keys, one multi-object delete
        "watcher": {"get": 1, "list": 1, "put": 2},
    }
    objects = snapshot["objects"]
    assert isinstance(objects, dict)
    assert objects["membership"] == {"get": 1}
    assert objects["events"] == {"put": 1}
    assert objects[""] == {"list": 1}
    assert objects["checkpoints"] == {"delete": 1, "list": 1, "put": 2}
    assert snapshot["purpose.watcher"] == 4 and snapshot["op.put"] == 3
    assert snapshot["total"] == sum(sum(kinds.values()) for kinds in objects.values())

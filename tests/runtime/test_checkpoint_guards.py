"""What a node checks around its checkpoints (runtime/checkpoint_guards.py): the participants a
membership view holds lost (DC-19), and the old checkpoint layout refused before anything is
written, by a node process (`laminar-cluster node`) and by `laminar-cluster output` (DC-17).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from laminar_cluster.assignment.model import snapshot_fence
from laminar_cluster.clock import RealClock
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.lease.records import ProcessLease
from laminar_cluster.membership.discovery import Member, MembershipView, ObservedState
from laminar_cluster.membership.records import NodeLeaseRecord, NodeState
from laminar_cluster.runtime.checkpoint_guards import check_checkpoint_layout, lost_participants
from laminar_cluster.store import CREATE, ObjectStore, open_store
from tests.assignment.snapshot_support import participant, snapshot

LAYOUT1_PARTIAL = "checkpoints/attempt=00000000000000000003/vnode=00007.json"
LAYOUT1_OUTPUT = "checkpoints/attempt=00000000000000000003/output/node=00000000000000000001.json"


def _member(node: int, state: str, boot: str) -> Member:
    record = NodeLeaseRecord(
        version=2,
        lease=ProcessLease(node=node, owner=boot, term=1, seq=1, expires_at_ms=0),
        state=NodeState.ACTIVE,
        ttl_ms=2000,
        nonce=boot,
        failure_domain=None,
        takeovers=(),
        report=None,
    )
    return Member(node=node, state=ObservedState(state), record=record, unchanged_s=0.0)


def test_dc19_lost_participants_are_suspected_dead_left_or_another_boot() -> None:
    fence = snapshot_fence(snapshot(1, [1, 2, 3, 4, 5, 6]))
    boot = {n: participant(n).boot_incarnation for n in range(1, 7)}
    view = MembershipView(
        members=(
            _member(1, "suspected", boot[1]),  # the local node: never counted
            _member(2, "active", boot[2]),
            _member(3, "suspected", boot[3]),
            _member(4, "dead", boot[4]),
            _member(5, "left", boot[5]),
            _member(6, "active", participant(6, 99).boot_incarnation),  # restarted
        ),
        problems=(),
        observed_at_s=0.0,
    )
    assert lost_participants(view, fence, local_node=1) == {3, 4, 5, 6}
    draining = MembershipView(
        members=(_member(2, "draining", boot[2]), _member(3, "joining", boot[3])),
        problems=(),
        observed_at_s=0.0,
    )  # node 4 to 6 not listed: not counted (the view may be catching up)
    assert lost_participants(draining, fence, local_node=1) == frozenset()


async def _keys(store: ObjectStore) -> dict[str, bytes]:
    return {m.key: (await store.get(m.key)).body for m in await store.list("")}


def _layout1_store(tmp_path: Path, key: str) -> str:
    url = f"file://{tmp_path / 'store'}?fsync=false"

    async def write() -> None:
        store = open_store(url)
        await store.put("checkpoints/attempt=00000000000000000003/prepare.json", b"{}", CREATE)
        await store.put(key, b"{}", CREATE)
        await store.close()

    asyncio.run(write())
    return url


@pytest.mark.parametrize("key", [LAYOUT1_PARTIAL, LAYOUT1_OUTPUT])
def test_dc17_the_layout_check_names_the_layout1_object(tmp_path: Path, key: str) -> None:
    url = _layout1_store(tmp_path, key)

    async def main() -> None:
        store = open_store(url)
        with pytest.raises(InvalidArgument, match=f"^{key}: written by the old checkpoint layout"):
            await check_checkpoint_layout(store, RealClock())
        fresh = open_store("memory://")
        await check_checkpoint_layout(fresh, RealClock())  # an empty store passes

    asyncio.run(main())


@pytest.mark.parametrize("command", ["node", "output"])
def test_dc17_a_layout1_store_is_refused_and_nothing_is_written(
    tmp_path: Path, command: str
) -> None:
    url = _layout1_store(tmp_path, LAYOUT1_PARTIAL)
    before = asyncio.run(_keys(open_store(url)))
    args = ["--node-id", "1"] if command == "node" else []
    finished = subprocess.run(
        [sys.executable, "-m", "laminar_cluster.cli", command, "--store", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode != 0
    lines = [line for line in finished.stderr.splitlines() if "old checkpoint layout" in line]
    assert len(lines) == 1 and LAYOUT1_PARTIAL in lines[0], finished.stderr
    assert "previous release" in lines[0]  # what to do
    assert asyncio.run(_keys(open_store(url))) == before  # nothing written

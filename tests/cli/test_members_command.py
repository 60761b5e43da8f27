"""`laminar-cluster members`: node, state, term, boot, last renewal age; read-only
(docs/protocols/membership.md; ML §1.3)."""

from __future__ import annotations

import asyncio
import json

import pytest

from laminar_cluster.cli.members import run_members
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.membership import ProcessLeaseHolder, activate, node_lease_path
from laminar_cluster.store import OVERWRITE, open_store

FAR = 1e9


def _start_nodes(url: str) -> list[str]:
    async def main() -> list[str]:
        clock = SimulatedClock(seed=1)
        store = open_store(url)
        boots = []
        for node in (2, 1):
            holder = ProcessLeaseHolder(store, clock, node, ttl_s=5.0)
            acquired = await holder.acquire(deadline=FAR)
            boots.append(acquired.record.lease.owner)
            if node == 1:
                await activate(holder, deadline=FAR)
        again = ProcessLeaseHolder(store, clock, 2, ttl_s=5.0)
        boots.append((await again.acquire(deadline=FAR)).record.lease.owner)
        await store.close()
        return boots

    return asyncio.run(main())


def test_members_json_lists_node_state_term_boot_and_age(
    file_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    boots = _start_nodes(file_url)
    assert run_members(file_url, as_json=True) == 0
    document = json.loads(capsys.readouterr().out)
    rows = [(m["node"], m["state"], m["term"], m["boot"]) for m in document["members"]]
    assert rows == [(1, "active", 1, boots[1]), (2, "joining", 2, boots[2])]
    assert all(m["last_renewal_age_ms"] >= -5_000 for m in document["members"])
    assert document["problems"] == [] and "diagnostic" in document["note"]


def test_members_table_and_corrupt_record(
    file_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_members(file_url, as_json=False) == 0
    assert "no members" in capsys.readouterr().out
    _start_nodes(file_url)

    async def corrupt() -> None:
        store = open_store(file_url)
        await store.put(node_lease_path(9), b"{}", OVERWRITE)
        await store.close()

    asyncio.run(corrupt())
    assert run_members(file_url, as_json=False) == 1
    out = capsys.readouterr().out
    assert "active" in out and "joining" in out and "last renewal age" in out
    assert node_lease_path(9) in out

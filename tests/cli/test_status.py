"""`laminar-cluster status` (cli/status.py, views/status.py): leader and token, members,
assignment head and vnodes per node, last committed checkpoint with its age, source lag; on an
empty store and on a cluster built with the real modules (tests/rebalance/scenario.py); never
creates, changes or deletes an object."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Sequence
from typing import Any

import pytest
from rich.console import Console

from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.cli.status import _watch, run_status
from laminar_cluster.clock import RealClock, SimulatedClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.connectors.eventlog_ends import publish_shard
from laminar_cluster.errors import CorruptRecord, NotSupported
from laminar_cluster.rebalance.engine.handoff_checkpoint import LeaderCheckpointer
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore, open_store
from laminar_cluster.views.status import (
    ReadOnlyStore,
    StatusReader,
    StatusView,
    indexed_partitions,
    status_once,
)
from laminar_cluster.views.status_render import render
from tests.rebalance.cluster_support import PROCESS_TTL_S
from tests.rebalance.scenario import Scenario

OWNERS = (1, 2, 3, 1)
SOURCE_OFFSETS = {"0": 500, "1": 300, "5": 40}


async def _build(store: ObjectStore, clock: SimulatedClock) -> Scenario:
    """Three active nodes, node 1 elected, v1 = OWNERS installed everywhere, and one committed
    cluster checkpoint whose capsule holds SOURCE_OFFSETS."""
    scenario = await Scenario.start(store, clock, (1, 2, 3), vnode_count=len(OWNERS))
    node = scenario.cluster.node(1)
    assert node.authority.decisions is not None
    checkpointer = LeaderCheckpointer(
        node.authority.decisions,
        node.authority,
        node.controller.capture_leader_proof,
        lambda fence: scenario.engines[1].registry().owners,
        source_offsets=SOURCE_OFFSETS,
    )
    scenario.add_engine(1, checkpointer=checkpointer)
    await scenario.bring_up(OWNERS, leader=1)
    await scenario.checkpoint(1)
    return scenario


def _seed(url: str) -> dict[str, Any]:
    """Build the cluster on `url`; the leader's token and the nodes' boots."""

    async def main() -> dict[str, Any]:
        store = open_store(url)
        try:
            scenario = await _build(store, SimulatedClock(seed=7))
            proof = scenario.cluster.controller(1).capture_leader_proof()
            assert proof is not None
            boots = {n: scenario.cluster.node(n).boot for n in (1, 2, 3)}
            return {"token": proof.fencing_token, "boots": boots}
        finally:
            await store.close()

    return asyncio.run(main())


def _inventory(url: str) -> list[tuple[str, int, str | None, str | None]]:
    async def main() -> list[tuple[str, int, str | None, str | None]]:
        store = open_store(url)
        try:
            return [(m.key, m.size, m.e_tag, m.version) for m in await store.list("")]
        finally:
            await store.close()

    return asyncio.run(main())


def _status_json(url: str, capsys: pytest.CaptureFixture[str], code: int = 0) -> dict[str, Any]:
    assert run_status(url, as_json=True, watch=False, interval_s=2.0) == code
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def test_status_of_an_empty_store(file_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    document = _status_json(file_url, capsys)
    assert document["ok"] is True and document["problems"] == []
    assert document["leader"] is None and document["members"] == []
    assert document["assignment"] is None and document["checkpoint"] is None
    assert document["lag"]["known"] is True and document["lag"]["total"] == 0
    assert _inventory(file_url) == []  # nothing created, not even the deployment identity
    assert run_status(file_url, as_json=False, watch=False, interval_s=2.0) == 0
    out = capsys.readouterr().out
    assert "leader" in out and "none" in out and "no members" in out


def test_status_json_of_a_running_cluster(
    file_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seeded = _seed(file_url)
    before = _inventory(file_url)
    document = _status_json(file_url, capsys)
    assert _inventory(file_url) == before  # no object created, changed or deleted

    assert document["ok"] is True, document["problems"]
    leader = document["leader"]
    assert (leader["node"], leader["token"]) == (1, seeded["token"])
    assert leader["boot"] == seeded["boots"][1]
    members = [(m["node"], m["state"], m["boot"], m["vnodes"]) for m in document["members"]]
    assert members == [(n, "active", seeded["boots"][n], OWNERS.count(n)) for n in (1, 2, 3)]
    assignment = document["assignment"]
    assert (assignment["head_version"], assignment["draining"], assignment["drain"]) == (
        1,
        False,
        None,
    )
    assert assignment["vnodes_per_node"] == {"1": 2, "2": 1, "3": 1}
    checkpoint = document["checkpoint"]
    assert checkpoint["epoch"] >= 1 and checkpoint["assignment_version"] == 1
    assert checkpoint["participants"] == [1, 2, 3]
    assert checkpoint["source_partitions"] == 3 and checkpoint["committed_events"] == 840
    assert 0 <= checkpoint["age_ms"] < 120_000
    assert document["lag"] == {  # no event log in this store: nothing behind
        "known": True,
        "total": 0,
        "partitions": [],
        "note": document["lag"]["note"],
    }

    assert run_status(file_url, as_json=False, watch=False, interval_s=2.0) == 0
    text = capsys.readouterr().out
    assert f"node 1  token {seeded['token']}" in text
    assert "version 1  committed" in text and "epoch" in text
    assert _inventory(file_url) == before


def test_lag_of_a_real_event_log(file_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(file_url)

    async def produce() -> None:
        store, clock = open_store(file_url), SimulatedClock(seed=3)
        log = EventLog(store, clock=clock)
        await log.declare_partitions(6, deadline=clock.monotonic() + 30)
        for partition, end in FakeLog.ends.items():
            for first in range(0, end, 200):  # batches of 200 events
                count = min(200, end - first)
                await log.append(
                    partition, [7] * count, [1] * count, deadline=clock.monotonic() + 30
                )
        await store.close()

    asyncio.run(produce())
    before = _inventory(file_url)
    lag = _status_json(file_url, capsys)["lag"]
    assert _inventory(file_url) == before
    rows = [
        (r["partition"], r["end_offset"], r["committed_offset"], r["lag"])
        for r in lag["partitions"]
    ]
    assert rows == [
        (0, 520, 500, 20),
        (1, 300, 300, 0),
        (2, 7, 0, 7),
        (3, 0, 0, 0),
        (4, 0, 0, 0),
        (5, 41, 40, 1),
    ]
    assert lag["known"] is True and lag["total"] == 28


class FakeLog:
    """An event log of 6 declared partitions (3 and 4 empty), by the lag's protocol."""

    ends = {0: 520, 1: 300, 2: 7, 5: 41}
    declared: int | None = 6

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    async def partitions(self, *, deadline: float) -> int | None:
        return self.declared

    async def end_offsets(self, partitions: Sequence[int], *, deadline: float) -> dict[int, int]:
        return {partition: self.ends.get(partition, 0) for partition in partitions}


class UndeclaredLog(FakeLog):
    declared = None


def test_lag_is_end_offset_minus_the_committed_capsule_offset() -> None:
    async def main() -> None:
        store, clock = open_store("memory://"), SimulatedClock(seed=7)
        await _build(store, clock)
        reader = StatusReader(store, clock, FakeLog)
        assert isinstance(reader.event_log, FakeLog)
        assert isinstance(reader.event_log.store, ReadOnlyStore)
        view = await reader.read(timeout_s=30.0)
        assert view.ok, view.problems
        lags = {row["partition"]: row["lag"] for row in view.lag["partitions"]}
        assert lags == {0: 20, 1: 0, 2: 7, 3: 0, 4: 0, 5: 1}  # 2: nothing committed yet
        assert view.lag["known"] is True and view.lag["total"] == 28
        assert "source lag" in _plain(view) and "28 events" in _plain(view)

    asyncio.run(main())


@pytest.mark.parametrize("backend", ["memory", "file"])
def test_undeclared_partitions_are_found_in_the_index(backend: str, file_url: str) -> None:
    async def main() -> None:
        store = open_store("memory://" if backend == "memory" else file_url)
        clock = SimulatedClock(seed=7)
        await publish_shard(store, 0, {0: (3, 0), 5: (30, 1), 17: (1, 2)}, 3)
        assert await indexed_partitions(store, limit=10) == [0, 5, 17]
        assert await indexed_partitions(store, limit=1) == [0, 5]  # limit + 1: "more"
        view = await StatusReader(store, clock, UndeclaredLog).read(timeout_s=30.0)
        rows = [(row["partition"], row["lag"]) for row in view.lag["partitions"]]
        assert rows == [(0, 520), (5, 41), (17, 0)]  # no checkpoint: everything is lag
        await store.put("event-log-ends/shard=00000.json", b"{}", OVERWRITE)
        with pytest.raises(CorruptRecord):
            await indexed_partitions(store, limit=10)

    asyncio.run(main())


def test_watching_turns_silent_members_suspected_then_dead() -> None:
    async def main() -> None:
        store, clock = open_store("memory://"), SimulatedClock(seed=7)
        await _build(store, clock)
        reader = StatusReader(store, clock)
        states = [[m["state"] for m in (await reader.read(timeout_s=30.0)).members]]
        for _ in range(2):  # nobody renews: the same liveness identity for half, then a ttl
            await clock.step(PROCESS_TTL_S / 2)
            states.append([m["state"] for m in (await reader.read(timeout_s=30.0)).members])
        assert states == [["active"] * 3, ["suspected"] * 3, ["dead"] * 3]

    asyncio.run(main())


def test_a_corrupt_object_is_a_problem_of_its_section_only(
    file_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seeded = _seed(file_url)

    async def corrupt() -> None:
        store = open_store(file_url)
        await store.put(snapshot_path(1), b"{}", OVERWRITE)
        await store.close()

    asyncio.run(corrupt())
    document = _status_json(file_url, capsys, code=1)
    assert document["leader"]["token"] == seeded["token"]
    assert document["checkpoint"] is not None and len(document["members"]) == 3
    assert document["assignment"] is None
    [problem] = document["problems"]
    assert problem["section"] == "assignment" and problem["object"] == snapshot_path(1)


def test_the_read_only_store_refuses_writes() -> None:
    async def main() -> None:
        store = ReadOnlyStore(open_store("memory://"))
        with pytest.raises(NotSupported):
            await store.put("a", b"x", CREATE)
        with pytest.raises(NotSupported):
            await store.delete("a")
        assert await store.list("") == []

    asyncio.run(main())


def _watch_for(url: str, seconds: float, *, as_json: bool) -> None:
    async def main() -> None:
        store = open_store(url)
        try:
            async with asyncio.timeout(seconds):
                await _watch(store, RealClock(), as_json=as_json, interval_s=0.3)
        except TimeoutError:
            pass
        finally:
            await store.close()

    asyncio.run(main())


def test_watch_prints_one_json_document_per_interval(
    file_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(file_url)
    _watch_for(file_url, 1.0, as_json=True)
    documents = _documents(capsys.readouterr().out)
    assert len(documents) >= 3  # at 0, 0.3, 0.6 and 0.9 s
    assert all(d["ok"] and d["leader"]["node"] == 1 for d in documents)


def test_watch_redraws_the_live_view(file_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(file_url)
    _watch_for(file_url, 0.8, as_json=False)
    out = capsys.readouterr().out
    assert "members" in out and "every 0.3 s; Ctrl-C to stop" in out


def _plain(view: StatusView) -> str:
    out = io.StringIO()
    Console(file=out, width=120).print(render(view))
    return out.getvalue()


def _documents(text: str) -> list[dict[str, Any]]:
    """The JSON documents printed one after another."""
    decoder, documents, at = json.JSONDecoder(), [], 0
    text = text.strip()
    while at < len(text):
        document, at = decoder.raw_decode(text, at)
        documents.append(document)
        while at < len(text) and text[at].isspace():
            at += 1
    return documents


def test_status_once_adds_the_members_note() -> None:
    async def main() -> None:
        view = await status_once(open_store("memory://"), RealClock())
        assert any("suspected" in note for note in view.notes)

    asyncio.run(main())

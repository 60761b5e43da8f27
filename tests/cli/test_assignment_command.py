"""`laminar-cluster assignment` (cli/assignment_view.py; AS §2.3, AS §2.11): run
in-process on a file:// store (and once on the S3 test server) holding a seed, a finalized
drain and a recovery materialization; it prints the version, the state, vnodes per node and a
16 x 16 map, exits 0 on an empty store and 1 on an absent version or a corrupt object, and
never writes.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from laminar_cluster.assignment.model import committed_target
from laminar_cluster.assignment.paths import snapshot_path
from laminar_cluster.assignment.rendezvous import rendezvous_assignment
from laminar_cluster.assignment.snapshot import AssignmentSnapshotStore
from laminar_cluster.cli.assignment_view import run_assignment
from laminar_cluster.lease.records import AssignmentVerdict
from laminar_cluster.store import CREATE, open_store
from tests.assignment.snapshot_support import decision, draining, snapshot


def _populate(url: str) -> None:
    async def main() -> None:
        store = open_store(url)
        try:
            snaps = AssignmentSnapshotStore(store)
            v1 = snapshot(1, rendezvous_assignment(256, [1, 2, 3]))
            await snaps.save_if_absent(v1)
            drain = draining(v1, rendezvous_assignment(256, [1, 2, 3, 4]))
            await snaps.save_if_version(drain, 1)
            terminal = committed_target(drain, now_ms=3_000)
            await snaps.finalize_drain(drain, terminal, decision(drain, AssignmentVerdict.COMMIT))
            ref = await snaps.stage_recovery_proposal(snapshot(3, [1] * 256, at_ms=4_000))
            await snaps.materialize_recovery(ref)
        finally:
            await store.close()

    asyncio.run(main())


def _json_out(capsys: pytest.CaptureFixture[str], code: int, expected: int) -> dict[str, object]:
    assert code == expected
    value: dict[str, object] = json.loads(capsys.readouterr().out)
    return value


def test_assignment_json_and_text(file_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _populate(file_url)
    head = _json_out(capsys, run_assignment(file_url, version=None, as_json=True), 0)
    assert (head["version"], head["state"], head["origin"]) == (
        3,
        "committed",
        "recovery materialization",
    )
    assert head["participants"] == [
        {"node": 1, "boot": "00000000-0000-0000-0000-00000000000b", "code": "0", "vnodes": 256}
    ]
    # Written straight to the store, without the leader authority: reported (AS-6).
    assert head["authority"] == (
        "NOT BACKED: recovery materialization has no recovery authority decision"
    )
    v2 = _json_out(capsys, run_assignment(file_url, version=2, as_json=True), 0)
    assert v2["authority"] == "NOT BACKED: finalized drain has no drain authority decision"
    assert v2["origin"] == "drain finalization" and v2["head_version"] == 3
    assert [p["vnodes"] for p in v2["participants"]] == [65, 59, 68, 64]  # type: ignore[attr-defined]
    rows = v2["map"]
    assert isinstance(rows, list) and len(rows) == 16 and all(len(r) == 16 for r in rows)
    assert v2["transition"] == {"predecessor_version": 1, "target_version": 2, "leader_node": 1}
    assert run_assignment(file_url, version=1, as_json=False) == 0
    text = capsys.readouterr().out
    assert "authority  seed (version 1 needs no decision)" in text
    assert "version    1 (head is 3)" in text and "committed (raw)" in text
    assert "  3  node 4" not in text and "  2  node 3" in text


def test_assignment_failures(file_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    empty = _json_out(capsys, run_assignment(file_url, version=None, as_json=True), 0)
    assert empty["version"] is None and "empty" in str(empty["note"])
    missing = _json_out(capsys, run_assignment(file_url, version=1, as_json=True), 1)
    assert missing["ok"] is False
    _populate(file_url)
    absent = _json_out(capsys, run_assignment(file_url, version=9, as_json=True), 1)
    assert "not retained" in str(absent["error"])

    async def corrupt() -> None:
        store = open_store(file_url)
        await store.put(snapshot_path(4), b'{"version":1}', CREATE)
        await store.close()

    asyncio.run(corrupt())
    assert run_assignment(file_url, version=4, as_json=False) == 1
    assert "CorruptRecord" in capsys.readouterr().err


@pytest.mark.s3
def test_assignment_on_s3(s3_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _populate(s3_url)
    head = _json_out(capsys, run_assignment(s3_url, version=2, as_json=True), 0)
    assert head["state"] == "committed" and head["vnode_count"] == 256

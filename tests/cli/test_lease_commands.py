"""`laminar-cluster lease` and `laminar-cluster authority` (cli/lease_view.py,
views/authority_audit.py; LA §2-§3, LA §4.1; invariants LA-1..LA-4, LA-11, LA-13, LA-16, LA-17).

The commands run in-process (`run_lease`, `run_authority`) against a file:// store holding a
history of three terms (a token rotation and a takeover), outcomes, a fault and its release, a
catalog seal and a drain decision; a subset runs against the S3 test server. Corrupted, stray,
lagging and hand-edited objects make them exit 1 naming the object; they never write.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from laminar_cluster.authority.assignment_decisions import (
    DecisionCreated,
    record_assignment_drain_decision,
)
from laminar_cluster.authority.catalog import seal_catalog
from laminar_cluster.authority.cluster_outcomes import record_cluster_outcome
from laminar_cluster.authority.recovery_faults import (
    record_recovery_fault,
    recovery_fault_inventory,
)
from laminar_cluster.authority.recovery_release import (
    record_recovery_release_commit,
    stage_recovery_release_terminal,
)
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import CheckpointVerdict, Created
from laminar_cluster.cli.lease_view import run_authority, run_lease
from laminar_cluster.clock import SimulatedClock
from laminar_cluster.codec import encode
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.log import read_record
from laminar_cluster.lease.paths import RECORDS_PREFIX, record_path
from laminar_cluster.lease.records import LeaderAuthorityRecord, LeaderLease
from laminar_cluster.lease.validate import encode_record
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore, open_store
from laminar_cluster.views.authority_audit import audit_authority
from laminar_cluster.views.lease import view_lease
from tests.authority.assignment_support import drain
from tests.authority.recovery_support import manifest_of, publisher, round_of, terminal_of
from tests.checkpoint.test_capsule import FENCE
from tests.cli.manifest_support import capsule_with_manifests
from tests.lease.pausing_store import (
    A,
    B,
    PausingStore,
    acquired,
    far_deadline,
    pointer_seq,
    put_record,
    record_at,
    set_pointer,
)

FUTURE_WALL_MS = 4_000_000_000_000  # 2096: the head's diagnostic expiry lies ahead of "now"


def authority_of(store: ObjectStore, seed: int, wall_start_ms: int) -> LeaderLeaseStore:
    clock = SimulatedClock(seed=seed, wall_start_ms=wall_start_ms)
    decisions = DecisionStore.shared(store, clock=clock)
    return LeaderLeaseStore(store, clock=clock, ttl_s=5.0, decisions=decisions)


async def outcome(leader: LeaderLeaseStore, lease: LeaderLease, epoch: int, commit: bool) -> None:
    decisions = leader.require_decisions()
    capsule = None
    if commit:
        deployment = await decisions.load_or_create_deployment_id()
        made = await capsule_with_manifests(leader.store, deployment, epoch)
        capsule = await decisions.create_recovery_capsule(made)
    verdict = CheckpointVerdict.COMMIT if commit else CheckpointVerdict.ABORT
    result = await record_cluster_outcome(
        leader,
        lease.proof(),
        epoch=epoch,
        checkpoint_id=epoch,
        assignment_fence=FENCE,
        verdict=verdict,
        recovery_capsule=capsule,
        deadline=far_deadline(leader.clock),
    )
    assert isinstance(result, Created), result


async def build_history(url: str, *, wall_start_ms: int = 1_700_000_000_000) -> None:
    """seq 1 A acquires (token 1), 2 Commit e1, 3 A's new term (token 2), 4 Abort e2, 5 fault of
    node 5, 6 its release, 7 catalog seal, 8 drain decision v2, 9 B takes over (token 3), 10
    Abort e3 under B, 11 B renews."""
    store = open_store(url)
    a = authority_of(store, 1, wall_start_ms)
    lease = acquired(await a.begin_new_term(A, deadline=far_deadline(a.clock)))
    await outcome(a, lease, 1, True)
    lease = acquired(await a.begin_new_term(A, deadline=far_deadline(a.clock)))
    await outcome(a, lease, 2, False)
    deadline = far_deadline(a.clock)
    await record_recovery_fault(a, publisher(5), 1, deadline=deadline)
    frozen = round_of(lease.proof(), await recovery_fault_inventory(a), owners=(5,))
    ref = await stage_recovery_release_terminal(a, terminal_of(frozen))
    await record_recovery_release_commit(a, lease.proof(), ref, deadline=deadline)
    await seal_catalog(a, lease.proof(), manifest_of("orders"), deadline=deadline)
    admitted = await record_assignment_drain_decision(
        a, lease.proof(), drain(2, lease.proof()), deadline=deadline
    )
    assert isinstance(admitted, DecisionCreated)
    b = authority_of(store, 2, wall_start_ms)
    observation = b.observe_rival(B, lease)
    assert isinstance(b.clock, SimulatedClock)
    b.clock.advance(6.0)
    rival = acquired(await b.try_takeover(B, observation, deadline=far_deadline(b.clock)))
    await outcome(b, rival, 3, False)
    rival = acquired(await b.renew_exact(B, rival.token, deadline=far_deadline(b.clock)))
    assert rival.seq == 11
    await store.close()


def file_store_url(tmp_path: Path) -> str:
    """An existing store directory (the views refuse one that does not exist)."""
    (tmp_path / "store").mkdir(exist_ok=True)
    return f"file://{tmp_path / 'store'}?fsync=false"


def run_json(command: Any, url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    capsys.readouterr()
    code = command(url, as_json=True)
    return code, json.loads(capsys.readouterr().out)


def run_text(command: Any, url: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = command(url, as_json=False)
    return code, "".join(capsys.readouterr().out.split())  # rich wraps long lines


async def rewrite(url: str, seq: int, **changes: Any) -> None:
    """Replace record `seq` by a hand-edited, individually valid record (canonical bytes)."""
    store = open_store(url)
    record = await read_record(store, seq)
    assert record is not None
    edited = msgspec.structs.replace(record, **changes)
    await store.put(record_path(seq), encode_record(edited), OVERWRITE)
    await store.close()


async def overwrite(url: str, key: str, body: bytes) -> None:
    store = open_store(url)
    await store.put(key, body, OVERWRITE)
    await store.close()


def test_lease_command_shows_the_head(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = file_store_url(tmp_path)
    asyncio.run(build_history(url))
    code, view = run_json(run_lease, url, capsys)
    assert code == 0 and view["ok"] and view["leader"]
    head = view["head"]
    assert view["pointer_sequence"] == 11 and head["sequence"] == 11
    assert head["owner"] == {"node": 2, "boot": B.boot, "process_term": 1}
    assert (head["token"], head["renewal_sequence"]) == (3, 4)
    assert 0 <= head["record_age_ms"] < 600_000  # the file's mtime against this machine's clock
    assert head["unexpired_by_local_wall_clock"] is False  # written by a 2023 simulated clock
    assert "diagnostic" in head["expiry_note"] and head["catalog_sha256"] is not None
    code, text = run_text(run_lease, url, capsys)
    assert code == 0
    assert "node2," in text and "fencingtoken3" in text and "renewalsequence4" in text
    assert "diagnosticonly" in text and "inthepast" in text


def test_lease_expiry_is_a_labelled_local_diagnostic(tmp_path: Path) -> None:
    url = file_store_url(tmp_path)
    asyncio.run(build_history(url, wall_start_ms=FUTURE_WALL_MS))

    async def main() -> None:
        store = open_store(url)
        view = await view_lease(store, SimulatedClock(wall_start_ms=FUTURE_WALL_MS))
        assert view.ok and view.head is not None
        assert view.head["unexpired_by_local_wall_clock"] is True
        assert view.head["expires_in_ms"] == 6_000 + 5_000  # B renewed 6 s in, for a 5 s ttl
        await store.close()

    asyncio.run(main())


def test_authority_command_lists_the_decisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = file_store_url(tmp_path)
    asyncio.run(build_history(url))
    code, audit = run_json(run_authority, url, capsys)
    assert code == 0 and audit["ok"] and audit["problems"] == []
    assert (audit["pointer_sequence"], audit["head_sequence"], audit["records"]) == (11, 11, 11)
    assert [(t["token"], t["owner"], t["first_sequence"]) for t in audit["terms"]] == [
        (1, 1, 1),
        (2, 1, 3),
        (3, 2, 9),
    ]
    assert [(o["sequence"], o["epoch"], o["verdict"], o["live"]) for o in audit["outcomes"]] == [
        (2, 1, "commit", True),
        (4, 2, "abort", True),
        (10, 3, "abort", True),
    ]
    assert audit["assignment_decisions"] == [
        {"sequence": 8, "kind": "drain", "target_version": 2, "verdict": "commit", "live": True}
    ]
    assert audit["releases"] == [{"sequence": 6, "generation": 1, "epoch": 4}]
    assert audit["faults"]["revision"] == 6
    assert [(s["node"], s["fault_sequence"], s["active"]) for s in audit["faults"]["slots"]] == [
        (5, 5, False)
    ]
    assert audit["catalog"]["entry_count"] == 1
    assert audit["outcome_floor"] is None and audit["decision_floor"] is None
    code, text = run_text(run_authority, url, capsys)
    assert code == 0 and "theleaderauthoritylogisconsistent" in text


def test_authority_names_a_corrupted_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = file_store_url(tmp_path)
    asyncio.run(build_history(url))
    pretty = json.dumps(json.loads(asyncio.run(read_bytes(url, record_path(4)))), indent=2)
    asyncio.run(overwrite(url, record_path(4), pretty.encode()))  # valid JSON, not canonical
    code, audit = run_json(run_authority, url, capsys)
    assert code == 1 and not audit["ok"]
    assert [p["object"] for p in audit["problems"]] == [record_path(4)]
    assert audit["records"] == 10
    code, text = run_text(run_authority, url, capsys)
    assert code == 1 and f"AUDITFAILED{record_path(4)}" in text
    assert run_lease(url, as_json=True) == 0  # the head itself is sound
    asyncio.run(overwrite(url, record_path(11), b"{}"))
    code, view = run_json(run_lease, url, capsys)
    assert code == 1 and [p["object"] for p in view["problems"]] == [record_path(11)]


async def read_bytes(url: str, key: str) -> bytes:
    store = open_store(url)
    body = (await store.get(key)).body
    await store.close()
    return body


def test_authority_names_a_rewritten_back_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = file_store_url(tmp_path)
    asyncio.run(build_history(url))
    record = asyncio.run(read_record_at(url, 4))
    assert record.previous_outcome is not None and record.previous_outcome.sequence == 2
    wrong = msgspec.structs.replace(record.previous_outcome, sequence=3)
    asyncio.run(rewrite(url, 4, previous_outcome=wrong))  # record 3 admits no outcome
    code, audit = run_json(run_authority, url, capsys)
    assert code == 1
    objects = [p["object"] for p in audit["problems"]]
    assert objects[0] == record_path(4) and record_path(3) in objects
    assert "previous_outcome names sequence 3" in audit["problems"][0]["error"]


async def read_record_at(url: str, seq: int) -> LeaderAuthorityRecord:
    store = open_store(url)
    record = await read_record(store, seq)
    await store.close()
    assert record is not None
    return record


def test_authority_names_lag_strays_and_token_regressions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = file_store_url(tmp_path)

    async def build() -> None:
        store = open_store(url)
        for seq, token in ((1, 1), (2, 3), (3, 2)):  # the token regresses at 3
            await put_record(store, record_at(seq, token=token))
        await set_pointer(store, 1)  # and the pointer lags by two
        await store.put(f"{RECORDS_PREFIX}notes.txt", b"x", CREATE)
        await store.close()

    asyncio.run(build())
    code, audit = run_json(run_authority, url, capsys)
    assert code == 1
    stray = f"{RECORDS_PREFIX}notes.txt"
    problems = [(p["object"], p["error"]) for p in audit["problems"]]
    assert [key for key, _ in problems] == [stray, record_path(3), record_path(3)]
    assert "not a canonical leader authority record path" in problems[0][1]
    assert "lags by more than one record" in problems[1][1]
    assert "fencing token regresses from 3 to 2" in problems[2][1]
    code, view = run_json(run_lease, url, capsys)
    assert code == 1 and "lags by more than one record" in view["problems"][0]["error"]


def test_commands_never_write_and_report_a_pending_publication(tmp_path: Path) -> None:
    url = file_store_url(tmp_path)
    asyncio.run(build_history(url))

    async def main() -> None:
        inner = open_store(url)
        head = await read_record(inner, 11)
        assert head is not None
        lease = msgspec.structs.replace(head.lease, seq=12, renewal_sequence=5)
        await put_record(inner, head.preserve_with_lease(lease))  # created, not yet published
        store = PausingStore(inner)
        view = await view_lease(store, SimulatedClock())
        assert view.ok and view.head is not None and view.head["sequence"] == 12
        assert "lags one record" in view.notes[0]
        audit = await audit_authority(store, SimulatedClock())
        assert audit.ok and audit.head_sequence == 12 and audit.pointer_sequence == 11
        assert store.count("put") == 0 and store.count("delete") == 0
        assert await pointer_seq(inner) == 11  # not repaired: the commands only read
        await inner.close()

    asyncio.run(main())


def test_commands_on_an_empty_namespace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = file_store_url(tmp_path)
    code, view = run_json(run_lease, url, capsys)
    assert code == 0 and view["ok"] and not view["leader"] and view["head"] is None
    code, text = run_text(run_lease, url, capsys)
    assert code == 0 and "noleader" in text
    code, text = run_text(run_authority, url, capsys)
    assert code == 0 and "noleader" in text

    async def unpublished() -> None:  # records, but no pointer yet (bootstrap)
        store = open_store(url)
        for seq in (1, 2):
            await put_record(store, record_at(seq))
        await store.close()

    asyncio.run(unpublished())
    code, view = run_json(run_lease, url, capsys)
    assert code == 0 and view["head"]["sequence"] == 2 and view["pointer_sequence"] is None
    assert "found by listing" in view["notes"][0]
    code, audit = run_json(run_authority, url, capsys)
    assert code == 0 and audit["head_sequence"] == 2 and audit["records"] == 2
    assert asyncio.run(pointer_seq_of(url)) is None  # still unpublished: nothing was written


async def pointer_seq_of(url: str) -> int | None:
    store = open_store(url)
    try:
        return await pointer_seq(store)
    finally:
        await store.close()


@pytest.mark.s3
def test_commands_against_s3(s3_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def build() -> None:
        store = open_store(s3_url)
        leader = authority_of(store, 1, 1_700_000_000_000)
        lease = acquired(await leader.begin_new_term(A, deadline=far_deadline(leader.clock)))
        await outcome(leader, lease, 1, False)
        await store.put(record_path(7), encode(record_at(7)), CREATE)  # a stray future record
        await store.close()

    asyncio.run(build())
    code, view = run_json(run_lease, s3_url, capsys)
    assert code == 0 and view["head"]["sequence"] == 2 and view["head"]["token"] == 1
    code, audit = run_json(run_authority, s3_url, capsys)
    assert code == 1 and [p["object"] for p in audit["problems"]] == [record_path(7)]
    assert [o["epoch"] for o in audit["outcomes"]] == [1]

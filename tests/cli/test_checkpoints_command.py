"""`laminar-cluster checkpoints`: the audited view, run as a user runs it."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from laminar_cluster.checkpoint import CheckpointScope, CheckpointVerdict, DecisionStore
from laminar_cluster.clock import RealClock
from laminar_cluster.store import CREATE, OVERWRITE, open_store
from tests.cli.test_commands import run


def store_url(tmp_path: Path) -> str:
    """An existing, empty store directory (the views refuse one that does not exist)."""
    (tmp_path / "store").mkdir(exist_ok=True)
    return f"file://{tmp_path}/store"


def populate(url: str, *, local: bool = False) -> str:
    """Three outcomes (commit 1, abort 2, commit 3) and a floor at 3; returns the deployment."""

    async def body() -> str:
        clock = RealClock()
        if local:
            root = url.removeprefix("file://")
            decisions = DecisionStore.local_filesystem(root, clock=clock, fsync=False)
        else:
            decisions = DecisionStore.shared(open_store(url), clock=clock)
        deadline = clock.monotonic() + 30
        for verdict in (
            CheckpointVerdict.COMMIT,
            CheckpointVerdict.ABORT,
            CheckpointVerdict.COMMIT,
        ):
            checkpoint_id = await decisions.allocate_checkpoint_id(deadline=deadline)
            await decisions.record_outcome(
                epoch=checkpoint_id,
                checkpoint_id=checkpoint_id,
                scope=CheckpointScope.LOCAL,
                verdict=verdict,
            )
        await decisions.prune_outcomes_before(3, deadline=deadline)
        return await decisions.load_or_create_deployment_id()

    return asyncio.run(body())


def test_an_empty_namespace_is_reported_and_nothing_is_created(tmp_path: Path) -> None:
    url = store_url(tmp_path)
    result = run("checkpoints", "--store", url)
    assert result.returncode == 0, result.stderr
    assert "no deployment identity" in result.stdout
    assert asyncio.run(open_store(url).list("")) == []  # a read-only view wrote nothing


@pytest.mark.parametrize("local", [False, True])
def test_shows_identity_mode_floor_and_outcomes(tmp_path: Path, local: bool) -> None:
    url = store_url(tmp_path)
    deployment = populate(url, local=local)
    result = run("checkpoints", "--store", url, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["deployment_id"] == deployment
    assert report["allocator_mode"] == ("local_single_writer" if local else "native_cas")
    assert report["floor_before_epoch"] == 3
    rows = [(o["epoch"], o["verdict"], o["scope"], o["anchor"]) for o in report["outcomes"]]
    # Below the floor only the anchors survive: the newest commit (1) and newest terminal (2).
    assert rows == [
        (1, "commit", "local", True),
        (2, "abort", "local", True),
        (3, "commit", "local", False),
    ]
    if local:
        assert report["id_blocks"] == 1
    else:
        assert report["last_allocated_id"] == 3
    table = run("checkpoints", "--store", url)
    assert table.returncode == 0 and deployment in table.stdout


def test_a_malformed_outcome_fails_the_audit_naming_the_object(tmp_path: Path) -> None:
    url = store_url(tmp_path)
    populate(url)
    bad = "checkpoint-outcomes/epoch=4/outcome"
    asyncio.run(open_store(url).put(bad, b'{"version":2, "scope":"local"}', CREATE))
    result = run("checkpoints", "--store", url, "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["problems"][0]["object"] == bad
    human = run("checkpoints", "--store", url)
    assert human.returncode == 1 and "AUDIT FAILED" in human.stdout and bad in human.stdout


def test_a_foreign_outcome_fails_the_audit_naming_the_object(tmp_path: Path) -> None:
    url = store_url(tmp_path)
    deployment = populate(url)
    store = open_store(url)
    key = "checkpoint-outcomes/epoch=5/outcome"
    foreign = str(uuid.uuid4())
    body = (
        '{"version":2,"scope":"local","epoch":5,"checkpoint_id":5,'
        f'"deployment_id":"{foreign}","assignment_fence":null,"leader_proof":null,'
        '"recovery_capsule":null,"verdict":"commit"}'
    )
    asyncio.run(store.put(key, body.encode(), OVERWRITE))
    result = run("checkpoints", "--store", url, "--json")
    assert result.returncode == 1
    problem = json.loads(result.stdout)["problems"][0]
    assert problem["object"] == key
    assert foreign in problem["error"] and deployment in problem["error"]


def test_a_stray_object_under_the_outcomes_prefix_fails_the_audit(tmp_path: Path) -> None:
    url = store_url(tmp_path)
    populate(url)
    asyncio.run(open_store(url).put("checkpoint-outcomes/tmp", b"x", CREATE))
    result = run("checkpoints", "--store", url, "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["problems"][0]["object"] == "checkpoint-outcomes/tmp"

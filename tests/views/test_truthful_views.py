"""Views that tell the truth (issue 17 "Truthful views"): a cluster whose every record is
older than its ttl shows no live leader and dead members, and `status --check` exits 1 saying
why; views print tables, never Python reprs (`{'revision': 0, ...}`, `None`, `True`), and a
value is never broken across lines at 80 columns."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path

import pytest

from laminar_cluster.cli.checkpoints import run_checkpoints
from laminar_cluster.cli.lease_view import run_authority, run_lease
from laminar_cluster.cli.members import run_members
from laminar_cluster.cli.status import run_status
from tests.cli.test_lease_commands import build_history, file_store_url
from tests.cli.test_status import _seed

AGE_S = 60
REPRS = ("{'", "['", "None", "True", "False")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _age_everything(root: Path, seconds: float) -> None:
    """Every object as last written `seconds` ago (the store's last-modified time)."""
    then = time.time() - seconds
    for path in root.rglob("*"):
        if path.is_file():
            os.utime(path, (then, then))


def _root(url: str) -> Path:
    return Path(url.removeprefix("file://").split("?")[0])


def test_a_stopped_cluster_has_no_live_leader(
    file_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seeded = _seed(file_url)
    assert run_status(file_url, as_json=False, watch=False, interval_s=2.0, check=True) == 0
    capsys.readouterr()
    _age_everything(_root(file_url), AGE_S)

    assert run_status(file_url, as_json=True, watch=False, interval_s=2.0, check=True) == 1
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["ok"] is True and document["live_leader"] is False
    assert document["leader"]["live"] is False and document["leader"]["node"] == 1
    assert "older than the lease ttl" in document["leader"]["why"]
    assert document["check"]["passed"] is False
    assert [m["state"] for m in document["members"]] == ["dead", "dead", "dead"]
    assert captured.err.startswith("check failed: no live leader (last: node 1, token ")

    assert run_status(file_url, as_json=False, watch=False, interval_s=2.0) == 0  # no --check
    text = capsys.readouterr().out
    token = seeded["token"]
    assert f"no live leader (last: node 1, token {token}, renewed {AGE_S} s ago" in text
    assert f"node 1  token {token}" not in text  # never printed as a live leader
    assert "draining" not in text and "active" not in text

    assert run_lease(file_url, as_json=False) == 0
    assert "NO LIVE LEADER: the last leader was node 1" in capsys.readouterr().out
    assert run_members(file_url, as_json=True) == 0
    states = {m["node"]: m["state"] for m in json.loads(capsys.readouterr().out)["members"]}
    assert states == {1: "dead", 2: "dead", 3: "dead"}


def test_views_print_tables_not_python_reprs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = file_store_url(tmp_path)
    asyncio.run(build_history(url))
    for view in (run_authority, run_checkpoints, run_lease):
        capsys.readouterr()
        assert view(url, as_json=False) == 0
        out = capsys.readouterr().out
        assert not [r for r in REPRS if r in out], (view, out)
    capsys.readouterr()
    run_authority(url, as_json=False)
    out = capsys.readouterr().out
    assert "recovery faults   revision 6, 1 slots, 0 active" in out
    assert "catalog           sealed: sha256 " in out


def test_values_never_break_across_lines(file_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    seeded = _seed(file_url)
    boots = set(seeded["boots"].values())
    for view in (run_members, run_lease):
        capsys.readouterr()
        view(file_url, as_json=False)
        out = capsys.readouterr().out
        assert boots & set(UUID.findall(out)), out  # whole UUIDs, each on one line
        assert "…" not in out
    capsys.readouterr()
    run_status(file_url, as_json=False, watch=False, interval_s=2.0)
    out = capsys.readouterr().out
    assert set(UUID.findall(out)) == boots and "…" not in out
    checkpoint = next(line for line in out.splitlines() if line.startswith("checkpoint"))
    assert checkpoint.rstrip().endswith("events committed)")  # the whole value on its line

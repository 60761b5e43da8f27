"""`laminar-cluster output --events N` on a store whose event log holds another count (issue
17): the check fails saying the counts disagree with what was asked (the user named the
workload wrongly), not that the system counted events twice."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_commands import run


def test_a_wrongly_named_workload_is_not_blamed_on_the_system(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    url = f"file://{tmp_path / 'store'}?fsync=false"
    produced = run("produce", "--store", url, "--events", "400", "--partitions", "4")
    assert produced.returncode == 0, produced.stderr
    result = run("output", "--store", url, "--events", "399", "--partitions", "4")
    assert result.returncode == 1
    out = " ".join(result.stdout.split())
    assert "check failed: the counts disagree with what was asked" in out
    assert "the event log holds 400 events" in out and "has 399" in out
    assert "counted twice" not in out
    document = json.loads(
        run("output", "--store", url, "--events", "399", "--partitions", "4", "--json").stdout
    )
    assert document["check"]["produced_events"] == 400
    assert document["check"]["expected_events"] == 399

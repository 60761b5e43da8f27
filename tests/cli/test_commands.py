"""The command line, run as a user runs it: the installed console script in a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.s3server import S3Server

COMMAND = shutil.which("laminar-cluster") or str(Path(sys.executable).parent / "laminar-cluster")


def run(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )


def test_store_check_passes_a_file_store(tmp_path: Path) -> None:
    result = run("store-check", f"file://{tmp_path}/store", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert [check["name"] for check in report["checks"]] == [
        "create_exclusive",
        "read_metadata",
        "update_if_match",
        "stale_update_rejected",
        "list_visible",
        "delete_visible",
    ]
    assert all(check["ok"] for check in report["checks"])


@pytest.mark.s3
def test_store_check_passes_the_s3_server(s3_url: str) -> None:
    result = run("store-check", s3_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "stale_update_rejected" in result.stdout and "FAIL" not in result.stdout


def test_store_check_fails_an_unreachable_store() -> None:
    url = "s3://nowhere?endpoint=http://127.0.0.1:9&allow_http=true&region=us-east-1"
    url += "&access_key_id=x&secret_access_key=y"
    result = run("store-check", url, "--json", "--timeout", "10")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["checks"][0]["ok"] is False
    assert "secret_access_key=***" in report["store"]  # credentials never printed


def test_store_check_rejects_a_bad_url_with_a_clear_message() -> None:
    result = run("store-check", "ftp://somewhere")
    assert result.returncode == 2
    assert "unknown store scheme 'ftp'" in result.stderr


def test_store_check_rejects_a_relative_file_path() -> None:
    result = run("store-check", "file://relative/path")
    assert result.returncode == 2
    assert "file://" in result.stderr


@pytest.mark.parametrize("url", ["memory://", "file://{tmp}/bench?fsync=false"])
def test_bench_store_prints_figures_as_json(url: str, tmp_path: Path) -> None:
    result = run("bench", "store", "--store", url.format(tmp=tmp_path), "--ops", "20", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert set(figures["results"]) == {"create", "get", "conditional_update"}
    for row in figures["results"].values():
        assert row["ops"] == 20
        assert row["ops_per_s"] > 0
        assert 0 < row["p50_ms"] <= row["p99_ms"]


@pytest.mark.s3
def test_bench_store_runs_against_s3(s3_server: S3Server) -> None:
    url = s3_server.url(s3_server.create_bucket())
    result = run("bench", "store", "--store", url, "--ops", "5", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["results"]["conditional_update"]["ops"] == 5


@pytest.mark.processes
def test_demo_runs_end_to_end_on_a_local_store(tmp_path: Path) -> None:
    """`make demo`'s job on a small workload: 3 nodes, a join, the leader SIGKILLed, a
    graceful leave, every event committed exactly once."""
    args = ["--events", "40000", "--partitions", "16", "--keys", "500", "--json"]
    result = run("demo", "--store", f"file://{tmp_path}/demo", *args, timeout_s=280)
    assert result.returncode == 0, result.stdout + result.stderr
    figures = json.loads(result.stdout)
    assert figures["store_contract"]["ok"] is True
    assert figures["check"]["passed"] is True
    assert figures["check"]["committed_events"] == figures["check"]["expected_events"] == 40_000
    assert figures["checkpoints"]["committed"] >= 1
    assert figures["rotations"] >= 3  # the join, the recovery, the leave
    assert figures["leader_kill"]["recovery_s"] > 0
    assert figures["leave"]["left_s"] > 0
    assert figures["scratch"]["kept"] is False  # issue 17: removed unless --keep
    assert not Path(figures["scratch"]["path"]).exists()

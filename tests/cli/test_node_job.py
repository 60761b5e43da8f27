"""`laminar-cluster node --job`: a job path that does not name a job is one error line and exit
2, before the store is touched; a job that names no sink the node can run is refused the same
way."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_commands import run


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (
            "no_such_module_xyz:job",
            "module no_such_module_xyz does not import: ModuleNotFoundError",
        ),
        ("examples.clickstream", "write it as module:attribute"),
        ("examples.clickstream:nothing", "module examples.clickstream has no attribute nothing"),
        ("examples.clickstream:MINUTE_MS", "MINUTE_MS is of type int, not a laminar_cluster.Job"),
    ],
)
def test_a_job_path_that_names_no_job_is_one_line_and_exit_2(
    tmp_path: Path, job: str, expected: str
) -> None:
    store = tmp_path / "store"
    result = run("node", "--store", f"file://{store}", "--node-id", "1", "--job", job)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: job ") and expected in lines[0]
    assert not store.exists()  # refused before anything was written


def test_close_idle_windows_without_a_job_is_refused(tmp_path: Path) -> None:
    result = run(
        "node", "--store", f"file://{tmp_path}/s", "--node-id", "1", "--close-idle-windows", "2"
    )
    assert result.returncode == 2
    assert "--close-idle-windows needs --job" in result.stderr

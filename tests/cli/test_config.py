"""One configuration (cli/config.py; issue 17 "One configuration"), run as a user runs it:
every flag also from `LAMINAR_<FLAG>` and from a TOML file (`--config` or `LAMINAR_CONFIG`),
flag > environment > file > default, unknown keys named; `--version`; shell completion; the
same flags and defaults across commands (`store-check --store`, `produce`'s defaults); a node
id outside 1..2^64-1 is a usage error before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from laminar_cluster.cli.config import env_name
from tests.cli.test_commands import COMMAND, run


def run_env(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env},
    )


def flat(text: str) -> str:
    """`text` without the error box's borders and line breaks (it wraps at 80 columns)."""
    return " ".join(text.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


def _store(tmp_path: Path, name: str) -> str:
    (tmp_path / name).mkdir()
    return f"file://{tmp_path / name}"


def test_the_environment_variable_rule() -> None:
    assert env_name("--store") == "LAMINAR_STORE"
    assert env_name("--node-id") == "LAMINAR_NODE_ID"
    assert env_name("--metrics-port") == "LAMINAR_METRICS_PORT"


def test_version_and_completion() -> None:
    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("laminar-cluster 0.1.0")
    assert "--install-completion" in run("--help").stdout
    completed = run_env(
        env={
            "_LAMINAR_CLUSTER_COMPLETE": "complete_bash",
            "COMP_WORDS": "laminar-cluster st",
            "COMP_CWORD": "1",
        }
    )
    assert completed.stdout.split() == ["store-check", "status"]
    flags = run_env(
        env={
            "_LAMINAR_CLUSTER_COMPLETE": "complete_bash",
            "COMP_WORDS": "laminar-cluster node --node",
            "COMP_CWORD": "2",
        }
    )
    assert "--node-id" in flags.stdout.split()


def test_flag_beats_environment_beats_file(tmp_path: Path) -> None:
    from_file, from_env, from_flag = (_store(tmp_path, n) for n in ("file", "env", "flag"))
    config = tmp_path / "laminar.toml"
    config.write_text(f'store = "{from_file}"\n\n[members]\njson = true\n')
    only_file = run("members", "--config", str(config))
    assert only_file.returncode == 0, only_file.stderr
    assert json.loads(only_file.stdout)["store"] == from_file  # [members] json = true
    env = {"LAMINAR_CONFIG": str(config), "LAMINAR_STORE": from_env}
    with_env = run_env("members", env=env)
    assert json.loads(with_env.stdout)["store"] == from_env
    with_flag = run_env("members", "--store", from_flag, env=env)
    assert json.loads(with_flag.stdout)["store"] == from_flag
    no_json = run_env("members", env={**env, "LAMINAR_JSON": "false"})
    assert no_json.returncode == 0 and no_json.stdout.startswith(f"store  {from_env}")


def test_unknown_keys_and_bad_files_are_usage_errors(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('store = "file:///tmp"\nnodeid = 3\n')
    result = run("status", "--config", str(config))
    assert result.returncode == 2
    assert "unknown key 'nodeid'" in flat(result.stderr) and str(config) in flat(result.stderr)
    config.write_text("[status]\nnode-id = 3\n")
    result = run("status", "--config", str(config))
    assert result.returncode == 2 and "unknown key 'node-id' in [status]" in flat(result.stderr)
    config.write_text("store = \n")
    result = run("status", "--config", str(config))
    assert result.returncode == 2 and "not valid TOML" in flat(result.stderr)


def test_store_check_takes_store_like_every_command(tmp_path: Path) -> None:
    url = _store(tmp_path, "store")
    flagged = run("store-check", "--store", url, "--json")
    assert flagged.returncode == 0 and json.loads(flagged.stdout)["ok"] is True
    assert "deprecated" not in flagged.stderr
    positional = run("store-check", url, "--json")
    assert positional.returncode == 0 and json.loads(positional.stdout)["ok"] is True
    assert "`store-check URL` is deprecated; write `store-check --store URL`" in positional.stderr
    both = run("store-check", url, "--store", _store(tmp_path, "other"))
    assert both.returncode == 2 and "two store URLs given" in both.stderr
    neither = run("store-check")
    assert neither.returncode == 2 and "missing the store" in neither.stderr


def test_produce_defaults_like_output(tmp_path: Path) -> None:
    url = _store(tmp_path, "store")
    result = run("produce", "--store", url, "--events", "300", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert (figures["partitions"], figures["keys"], figures["seed"]) == (64, 10_000, 0)
    assert figures["appended"] == 300


@pytest.mark.parametrize(
    ("node_id", "fragment"),
    [
        ("18446744073709551616", "less than or equal to 18446744073709551615"),
        ("0", "greater than or equal to 1"),
    ],
)
def test_a_node_id_outside_u64_is_a_usage_error(
    tmp_path: Path, node_id: str, fragment: str
) -> None:
    store = tmp_path / "store"
    flagged = run("node", "--store", f"file://{store}", "--node-id", node_id)
    assert flagged.returncode == 2 and fragment in flat(flagged.stderr)
    from_env = run_env("node", "--store", f"file://{store}", env={"LAMINAR_NODE_ID": node_id})
    assert from_env.returncode == 2 and "LAMINAR_NODE_ID" in flat(from_env.stderr)
    assert not store.exists()  # nothing started, nothing written

"""Store failures at the command line (issue 17 "Errors that say what to do"): every view and
the node answer a store they cannot use with one line (the node: one `refused` JSON event)
and exit 2; the secret never appears, nor XML, a Rust debug dump or the metadata service."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_commands import COMMAND
from tests.support.s3server import ACCESS_KEY, REGION, S3Server

SECRET = "Sup3rSecretValue"
NOISE = ("169.254.169.254", "<?xml", "Debug source", "PROBLEM", "Traceback", SECRET)
NO_AWS = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": ""}


def run_clean(*args: str) -> subprocess.CompletedProcess[str]:
    """The command without any AWS credentials in its environment."""
    env = {k: v for k, v in os.environ.items() if k not in NO_AWS}
    return subprocess.run(
        [COMMAND, *args], capture_output=True, text=True, timeout=120, check=False, env=env
    )


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    assert not any(noise in result.stderr for noise in NOISE), result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def _s3(server: S3Server, bucket: str, options: str) -> str:
    return f"s3://{bucket}?endpoint={server.endpoint}&region={REGION}{options}"


CREDENTIALS = f"&access_key_id={ACCESS_KEY}&secret_access_key={SECRET}"


@pytest.mark.s3
@pytest.mark.parametrize("view", ["status", "members", "lease", "authority", "checkpoints"])
def test_views_on_stores_they_cannot_use(s3_server: S3Server, view: str) -> None:
    bucket = s3_server.create_bucket()
    cases = {
        _s3(s3_server, bucket, "&allow_http=true"): "error: no S3 credentials: set "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or access_key_id=... in the URL",
        _s3(s3_server, "missing-bucket", CREDENTIALS + "&allow_http=true"): "error: bucket "
        f"'missing-bucket' does not exist at {s3_server.endpoint}",
        _s3(s3_server, bucket, CREDENTIALS): f"error: endpoint {s3_server.endpoint} is plain "
        "http: add allow_http=true",
        _s3(s3_server, bucket, CREDENTIALS + "&allow_http=true&bogus=1"): "unknown S3 option "
        "'bogus'",
    }
    for url, expected in cases.items():
        line = _one_line_error(run_clean(view, "--store", url))
        assert expected in line, (url, line)


def test_unreachable_endpoint_and_file_stores(tmp_path: Path) -> None:
    url = f"s3://b?endpoint=http://127.0.0.1:9&region={REGION}{CREDENTIALS}&allow_http=true"
    line = _one_line_error(run_clean("status", "--store", url))
    assert "cannot reach the store endpoint http://127.0.0.1:9" in line
    regular = tmp_path / "plain-file"
    regular.write_text("x")
    cases = {
        f"file://{tmp_path}/absent": "no such directory",
        f"file://{regular}/store": f"{regular} is a regular file",
        f"file://{tmp_path}/my dir": "percent-encode it",
    }
    for url, expected in cases.items():
        for view in ("status", "members", "checkpoints"):
            assert expected in _one_line_error(run_clean(view, "--store", url)), (view, url)
    assert not (tmp_path / "absent").exists()  # a reader never creates it


@pytest.mark.s3
def test_store_check_fails_its_first_check_with_the_line(s3_server: S3Server) -> None:
    url = _s3(s3_server, "missing-bucket", CREDENTIALS + "&allow_http=true")
    result = run_clean("store-check", "--store", url, "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["checks"][0]["detail"].startswith("bucket 'missing-bucket' does not exist")
    assert [c["detail"] for c in report["checks"][1:]] == ["not reached"] * 5
    assert SECRET not in result.stdout and "secret_access_key=***" in report["store"]


@pytest.mark.s3
@pytest.mark.processes
def test_a_node_refuses_a_store_without_credentials_in_one_event(s3_server: S3Server) -> None:
    url = _s3(s3_server, s3_server.create_bucket(), "&allow_http=true")
    result = run_clean("node", "--store", url, "--node-id", "1")
    assert result.returncode == 2
    events = [json.loads(line) for line in result.stderr.splitlines()]
    assert [e["event"] for e in events] == ["refused"]
    assert events[0]["level"] == "ERROR"
    assert events[0]["error"].startswith("no S3 credentials: set AWS_ACCESS_KEY_ID")
    assert not any(noise in result.stderr for noise in NOISE)


@pytest.mark.s3
@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("status", "--json"),
        ("members",),
        ("lease",),
        ("authority",),
        ("checkpoints", "--json"),
        ("assignment",),
        ("assignment", "--json"),
        ("store-check", "--json"),
    ],
)
def test_no_view_prints_the_secret(s3_server: S3Server, args: tuple[str, ...]) -> None:
    """A usable bucket whose URL carries the secret: every view shows the URL redacted."""
    url = _s3(s3_server, s3_server.create_bucket(), CREDENTIALS + "&allow_http=true")
    result = run_clean(*args, "--store", url)
    assert result.returncode == 0, result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert SECRET not in output
    assert "secret_access_key=***" in output

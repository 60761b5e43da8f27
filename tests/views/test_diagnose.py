"""Store failures as one actionable line (store/diagnose.py; issue 17 "Errors that say what
to do"): against moto's S3 server and file://, each failure the issue lists gives one line that
names what to fix, never a secret, an XML body, a Rust debug dump or the metadata service."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store import open_store
from laminar_cluster.store.diagnose import (
    NO_CREDENTIALS,
    diagnose,
    parse_file_url,
    redact_text,
    redact_url,
)
from tests.support.s3server import ACCESS_KEY, REGION, SECRET_KEY, S3Server

SECRET = "s3cr3t-value-never-shown"
NOISE = ("169.254.169.254", "<?xml", "Debug source", "PROBLEM", SECRET)


def _diagnosed(url: str, *, must_exist: bool = True) -> str | None:
    async def main() -> str | None:
        store = open_store(url)
        try:
            return await diagnose(store, url, must_exist=must_exist)
        finally:
            await store.close()

    return asyncio.run(main())


def _one_clean_line(line: str | None) -> str:
    assert line is not None
    assert "\n" not in line, line
    assert not any(noise in line for noise in NOISE), line
    return line


def _s3(server: S3Server, bucket: str, options: str) -> str:
    return f"s3://{bucket}?endpoint={server.endpoint}&region={REGION}{options}"


CREDENTIALS = f"&access_key_id={ACCESS_KEY}&secret_access_key={SECRET_KEY}"


@pytest.mark.s3
def test_a_usable_s3_store_has_no_problem(s3_server: S3Server) -> None:
    url = _s3(s3_server, s3_server.create_bucket(), CREDENTIALS + "&allow_http=true")
    assert _diagnosed(url) is None


@pytest.mark.s3
def test_no_credentials_is_one_line_saying_so(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    url = _s3(s3_server, s3_server.create_bucket(), "&allow_http=true")
    line = _one_clean_line(_diagnosed(url))
    assert line == NO_CREDENTIALS
    assert line == (
        "no S3 credentials: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or access_key_id=... "
        "in the URL"
    )


@pytest.mark.s3
def test_a_missing_bucket_says_bucket(s3_server: S3Server) -> None:
    url = _s3(s3_server, "no-such-bucket", CREDENTIALS + "&allow_http=true")
    line = _one_clean_line(_diagnosed(url))
    assert line.startswith("bucket 'no-such-bucket' does not exist at http://127.0.0.1:")
    assert "create it or fix the bucket name" in line


@pytest.mark.s3
def test_plain_http_without_allow_http_says_allow_http(s3_server: S3Server) -> None:
    url = _s3(s3_server, s3_server.create_bucket(), CREDENTIALS)
    line = _one_clean_line(_diagnosed(url))
    assert line == (
        f"endpoint {s3_server.endpoint} is plain http: add allow_http=true to the store URL "
        "(or use an https endpoint)"
    )
    assert "builder error" not in line


def test_an_unreachable_endpoint_names_it() -> None:
    url = f"s3://b?endpoint=http://127.0.0.1:9&region={REGION}{CREDENTIALS}&allow_http=true"
    line = _one_clean_line(_diagnosed(url))
    assert line.startswith("cannot reach the store endpoint http://127.0.0.1:9 (connection")
    assert "check endpoint= in the URL" in line


def test_an_unknown_s3_option_is_one_line_naming_it() -> None:
    url = f"s3://b?endpoint=http://127.0.0.1:9&secret_access_key={SECRET}&bogus_option=1"
    with pytest.raises(InvalidArgument) as raised:
        open_store(url)
    line = _one_clean_line(str(raised.value))
    assert "unknown S3 option 'bogus_option'" in line
    assert "secret_access_key=***" in line


def test_a_missing_directory_and_a_path_under_a_file(tmp_path: Path) -> None:
    missing = tmp_path / "nothing" / "here"
    line = _one_clean_line(_diagnosed(f"file://{missing}"))
    assert line == (
        f"file://{missing}: no such directory {missing}: nothing to read there; check the path "
        "(a node or `produce` creates it on first write)"
    )
    assert _diagnosed(f"file://{missing}", must_exist=False) is None  # a writer creates it
    regular = tmp_path / "a-file"
    regular.write_text("x")
    under = f"file://{regular}/store"
    for must_exist in (True, False):
        line = _one_clean_line(_diagnosed(under, must_exist=must_exist))
        assert line.startswith(f"{under}: {regular} is a regular file: a file:// store is a")
    (tmp_path / "store").mkdir()
    assert _diagnosed(f"file://{tmp_path}/store") is None


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("file:///tmp/my dir", "percent-encode it (file:///tmp/my%20dir)"),
        ("file:///tmp/a#b", "percent-encode it (file:///tmp/a%23b)"),
        ("file:///tmp/%zz", "'%' must start an escape of two hex digits"),
        ("file:///tmp/a%2Fb", "an escaped '/' or NUL (%2F, %00) is not a directory name"),
        ("file://relative/path", "file:// URLs name a local path"),
    ],
)
def test_a_malformed_file_url_is_refused_never_reencoded(url: str, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        open_store(url)
    assert fragment in str(raised.value)


def test_a_well_formed_file_url_keeps_its_path() -> None:
    assert parse_file_url("file:///tmp/my%20dir?fsync=false") == (
        "/tmp/my dir",
        {"fsync": "false"},
    )
    assert open_store("file:///tmp/my%20dir").url == "file:///tmp/my%20dir"  # round-trips


def test_redaction_hides_secret_values_and_keeps_the_rest() -> None:
    url = (
        "s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1"
        f"&access_key_id=AKIA&secret_access_key={SECRET}&session_token=tok&allow_http=true"
    )
    assert redact_url(url) == (
        "s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1"
        "&access_key_id=***&secret_access_key=***&session_token=***&allow_http=true"
    )
    text = f"opening {url} failed"
    assert SECRET not in redact_text(text) and "secret_access_key=***" in redact_text(text)
    assert open_store(url).url == redact_url(url)
    assert redact_url("s3://user:pw@bucket") == "s3://user:***@bucket"
    assert redact_text("set access_key_id=... in the URL") == "set access_key_id=... in the URL"

"""SHA-256 content addresses and Digest32 values."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_cluster.codec import (
    content_address,
    digest32,
    digest32_bytes,
    is_sha256_hex,
    parse_content_address,
    sha256_digest32,
    sha256_hex,
    verify_digest,
)
from laminar_cluster.errors import CorruptRecord, InvalidArgument

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
PREFIX = "checkpoint-recovery-capsules/epoch=00000000000000000007/checkpoint=00000000000000000007/"
KEY = "checkpoint-recovery-capsules/x"


def test_sha256_hex_of_known_inputs() -> None:
    assert sha256_hex(b"") == EMPTY_SHA256
    assert sha256_hex(b"abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=512))
def test_sha256_hex_is_hashlib_lowercase_and_recognized(data: bytes) -> None:
    digest = sha256_hex(data)
    assert digest == hashlib.sha256(data).hexdigest()
    assert is_sha256_hex(digest)
    assert sha256_digest32(data) == tuple(hashlib.sha256(data).digest())
    assert digest32_bytes(sha256_digest32(data)).hex() == digest
    verify_digest(data, digest, key=KEY)


@pytest.mark.parametrize(
    "text",
    [
        EMPTY_SHA256.upper(),
        EMPTY_SHA256[:-1],
        EMPTY_SHA256 + "0",
        EMPTY_SHA256 + "\n",
        " " + EMPTY_SHA256,
        "sha256:" + EMPTY_SHA256,
        EMPTY_SHA256[:-1] + "g",
        "٣" * 64,  # Arabic-Indic digits: str.isdigit, but not [0-9]
        "",
        None,
        EMPTY_SHA256.encode(),
        int(EMPTY_SHA256, 16),
    ],
)
def test_is_sha256_hex_refuses_every_other_spelling(text: object) -> None:
    assert not is_sha256_hex(text)


def test_content_address_and_its_parser() -> None:
    key = content_address(PREFIX, b"")
    assert key == f"{PREFIX}sha256={EMPTY_SHA256}"
    assert parse_content_address(PREFIX, key) == EMPTY_SHA256
    for bad in (
        f"{PREFIX}sha256={EMPTY_SHA256.upper()}",
        f"{PREFIX}sha256={EMPTY_SHA256}/",
        f"{PREFIX}sha256={EMPTY_SHA256[:-1]}",
        f"{PREFIX}sha256=",
        f"{PREFIX}{EMPTY_SHA256}",
        f"other/sha256={EMPTY_SHA256}",
        f"{PREFIX}sha256={EMPTY_SHA256}\n",
    ):
        with pytest.raises(InvalidArgument, match="is not a content address"):
            parse_content_address(PREFIX, bad)


def test_verify_digest_reports_a_mismatch_as_corrupt() -> None:
    with pytest.raises(CorruptRecord) as caught:
        verify_digest(b"x", EMPTY_SHA256, key=KEY)
    assert caught.value.key == KEY
    assert str(caught.value) == f"{KEY}: content has sha256 {sha256_hex(b'x')}; expected " + (
        EMPTY_SHA256
    )
    with pytest.raises(InvalidArgument, match="not 64 lowercase hex"):
        verify_digest(b"", EMPTY_SHA256.upper(), key=KEY)


def test_digest32_conversions() -> None:
    raw = bytes(range(32))
    assert digest32(raw) == tuple(range(32))
    assert digest32_bytes(digest32(raw)) == raw
    with pytest.raises(InvalidArgument, match="digest is 31 bytes"):
        digest32(raw[:31])
    with pytest.raises(InvalidArgument, match="digest must be bytes, not str"):
        digest32("x" * 32)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="digest has 33 items"):
        digest32_bytes(tuple(range(33)))
    with pytest.raises(InvalidArgument, match=r"ints 0\.\.255"):
        digest32_bytes((256,) * 32)

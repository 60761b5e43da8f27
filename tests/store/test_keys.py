"""Key and prefix validation."""

from __future__ import annotations

import pytest

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store.keys import MAX_KEY_BYTES, validate_key, validate_prefix

VALID = [
    "a",
    "control/leader-lease/v0000000000000001.json",
    "checkpoint-outcomes/epoch=12/outcome",
    "unicode/é/ключ",
    "a#b/c",
    "x/y#12z",
]
INVALID = [
    "",
    "/abs/path",
    "trailing/",
    "a//b",
    "a/../b",
    "..",
    "a/./b",
    "tmp#12",
    "dir/file#0",
    "dir#3/file",
    "nul\x00byte",
    "new\nline",
    "back\\slash",
    "x" * (MAX_KEY_BYTES + 1),
    "lone\ud800surrogate",
]


@pytest.mark.parametrize("key", VALID)
def test_valid_keys_pass_unchanged(key: str) -> None:
    assert validate_key(key) == key


@pytest.mark.parametrize("key", INVALID)
def test_sc9_invalid_keys_are_rejected_with_a_message(key: str) -> None:
    with pytest.raises(InvalidArgument, match="key"):
        validate_key(key)


def test_non_string_keys_are_rejected() -> None:
    with pytest.raises(InvalidArgument):
        validate_key(b"bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix", ["", "a/", "a/b", "checkpoint-id-blocks/block=", "a/b/"])
def test_valid_prefixes(prefix: str) -> None:
    assert validate_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["/a", "a//b", "a/../", "a/..", "tmp#1/", "bad\x01"])
def test_sc9_invalid_prefixes(prefix: str) -> None:
    with pytest.raises(InvalidArgument):
        validate_prefix(prefix)

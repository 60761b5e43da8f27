"""Object keys: one validation shared by every backend.

A key is a `/`-separated relative path of non-empty segments. Rejected: the empty key, a
leading or trailing `/`, empty segments (`a//b`), the segments `.` and `..`, backslashes,
control characters, keys longer than `MAX_KEY_BYTES` in UTF-8, and segments ending in
`#<digits>` (the form temporary files take in object_store's local backend, so such a key could
collide with a temporary file).
"""

from __future__ import annotations

import re
from typing import Final

from laminar_cluster.errors import InvalidArgument

MAX_KEY_BYTES: Final = 1024

_TEMP_SUFFIX = re.compile(r"#[0-9]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def validate_key(key: str) -> str:
    """Return `key` unchanged if it is a valid object key, else raise InvalidArgument."""
    if not isinstance(key, str):
        raise InvalidArgument(f"object key must be a str, not {type(key).__name__}")
    if key == "":
        raise InvalidArgument("object key is empty")
    _validate_text(key)
    if key.startswith("/"):
        raise InvalidArgument(f"object key {key!r} is absolute; keys are relative to the store")
    if key.endswith("/"):
        raise InvalidArgument(f"object key {key!r} ends with '/'")
    for segment in key.split("/"):
        _validate_segment(key, segment)
    return key


def validate_prefix(prefix: str) -> str:
    """Return `prefix` if it is a valid listing prefix: "" or the start of a valid key.

    A prefix may end in `/` (list a "directory") or in the middle of a segment
    (`checkpoint-id-blocks/block=`).
    """
    if not isinstance(prefix, str):
        raise InvalidArgument(f"prefix must be a str, not {type(prefix).__name__}")
    if prefix == "":
        return prefix
    _validate_text(prefix)
    if prefix.startswith("/"):
        raise InvalidArgument(f"prefix {prefix!r} is absolute; prefixes are relative to the store")
    segments = prefix.split("/")
    complete, last = segments[:-1], segments[-1]
    for segment in complete:
        _validate_segment(prefix, segment)
    if last in (".", ".."):
        raise InvalidArgument(f"prefix {prefix!r} ends in the segment {last!r}")
    return prefix


def _validate_text(text: str) -> None:
    if len(text.encode("utf-8", errors="surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidArgument(f"object key {text[:64]!r}... is longer than {MAX_KEY_BYTES} bytes")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidArgument(f"object key {text!r} is not valid UTF-8: {error}") from error
    if _CONTROL.search(text):
        raise InvalidArgument(f"object key {text!r} contains a control character")
    if "\\" in text:
        raise InvalidArgument(f"object key {text!r} contains a backslash")


def _validate_segment(key: str, segment: str) -> None:
    if segment == "":
        raise InvalidArgument(f"object key {key!r} has an empty segment")
    if segment in (".", ".."):
        raise InvalidArgument(f"object key {key!r} has the segment {segment!r}")
    if _TEMP_SUFFIX.search(segment):
        raise InvalidArgument(
            f"object key {key!r} has a segment ending in '#<digits>', reserved for temporary files"
        )

"""SHA-256 content addresses.

A digest in text is exactly 64 lowercase hex characters (`[0-9a-f]{64}`): upper case, a
`sha256:` prefix, surrounding whitespace or a trailing newline are all refused, so one digest has
one spelling and a key built from it has one form. Content-addressed keys end in
`sha256={hex}` (`checkpoint-recovery-capsules/epoch=.../checkpoint=.../sha256={hex}`);
`parse_content_address` re-formats the key it parsed and compares, as every path parser does.

A fixed 32-byte digest inside a record is a `Digest32` (`codec.types`), written as a JSON array
of 32 ints; `sha256_digest32` gives one.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from laminar_cluster.errors import CorruptRecord, InvalidArgument

SHA256_HEX_CHARS: Final = 64
CONTENT_ADDRESS_FIELD: Final = "sha256="

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of `data` as 64 lowercase hex characters."""
    return hashlib.sha256(data).hexdigest()


def sha256_digest32(data: bytes) -> tuple[int, ...]:
    """The SHA-256 of `data` as a `Digest32` value (a tuple of 32 ints 0..255)."""
    return tuple(hashlib.sha256(data).digest())


def is_sha256_hex(text: object) -> bool:
    """Whether `text` is a str of exactly 64 lowercase hex characters."""
    return isinstance(text, str) and _SHA256_HEX.fullmatch(text) is not None


def content_address(prefix: str, data: bytes) -> str:
    """The key `f"{prefix}sha256={sha256_hex(data)}"` that addresses `data` under `prefix`."""
    return f"{prefix}{CONTENT_ADDRESS_FIELD}{sha256_hex(data)}"


def parse_content_address(prefix: str, key: str) -> str:
    """The hex digest in `key`, a content address under `prefix`; InvalidArgument otherwise."""
    head = f"{prefix}{CONTENT_ADDRESS_FIELD}"
    digest = key[len(head) :] if key.startswith(head) else ""
    if not is_sha256_hex(digest) or f"{head}{digest}" != key:
        raise InvalidArgument(f"{key!r} is not a content address of the form {head}<64 hex>")
    return digest


def verify_digest(data: bytes, expected_hex: str, *, key: str) -> None:
    """Raise CorruptRecord naming `key` unless `sha256_hex(data) == expected_hex`."""
    if not is_sha256_hex(expected_hex):
        raise InvalidArgument(f"{key}: expected digest {expected_hex!r} is not 64 lowercase hex")
    actual = sha256_hex(data)
    if actual != expected_hex:
        raise CorruptRecord(f"{key}: content has sha256 {actual}; expected {expected_hex}", key=key)

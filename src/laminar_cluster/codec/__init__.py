"""Canonical JSON records and SHA-256 content addresses (see `canonical` and `types`)."""

from laminar_cluster.codec.canonical import (
    decode,
    decode_sorted,
    encode,
    encode_checked,
    encode_sorted,
    encode_sorted_checked,
)
from laminar_cluster.codec.digest import (
    content_address,
    is_sha256_hex,
    parse_content_address,
    sha256_digest32,
    sha256_hex,
    verify_digest,
)
from laminar_cluster.codec.types import (
    I64,
    U8,
    U16,
    U32,
    U64,
    Digest32,
    NonZeroU64,
    Record,
    check_record_type,
    digest32,
    digest32_bytes,
)

__all__ = [
    "I64",
    "U8",
    "U16",
    "U32",
    "U64",
    "Digest32",
    "NonZeroU64",
    "Record",
    "check_record_type",
    "content_address",
    "decode",
    "decode_sorted",
    "digest32",
    "digest32_bytes",
    "encode",
    "encode_checked",
    "encode_sorted",
    "encode_sorted_checked",
    "is_sha256_hex",
    "parse_content_address",
    "sha256_digest32",
    "sha256_hex",
    "verify_digest",
]

"""Object paths of the leader authority (LA §2.1), each parser re-formats and
compares."""

from __future__ import annotations

import re
from typing import Final

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.errors import CorruptRecord

RECORDS_PREFIX: Final = "control/leader-lease/"
HEAD_PATH: Final = "control/leader-lease-head/v1.json"
RELEASE_TERMINALS_PREFIX: Final = "control/recovery-release-terminals/v2/"
CATALOG_MANIFEST_PREFIX: Final = "control/catalog-manifest/v1/"

_RECORD = re.compile(r"control/leader-lease/v([0-9]+)\.json")
_TERMINAL = re.compile(
    r"control/recovery-release-terminals/v2/generation=([0-9]{20})/sha256=([0-9a-f]{64})\.json"
)


def record_path(seq: int) -> str:
    """`v` + the sequence zero-padded to at least 16 digits + `.json`."""
    return f"{RECORDS_PREFIX}v{seq:016d}.json"


def parse_record_path(path: str) -> int:
    match = _RECORD.fullmatch(path)
    if match is None:
        raise CorruptRecord(f"{path}: not a canonical leader authority record path", key=path)
    seq = int(match.group(1))
    if seq == 0 or seq > U64_MAX or record_path(seq) != path:
        raise CorruptRecord(f"{path}: not a canonical leader authority record path", key=path)
    return seq


def release_terminal_path(generation: int, sha256: str) -> str:
    return f"{RELEASE_TERMINALS_PREFIX}generation={generation:020d}/sha256={sha256}.json"


def parse_release_terminal_path(path: str) -> tuple[int, str]:
    match = _TERMINAL.fullmatch(path)
    if match is None:
        raise CorruptRecord(f"{path}: not a canonical recovery release terminal path", key=path)
    generation = int(match.group(1))
    if generation == 0 or release_terminal_path(generation, match.group(2)) != path:
        raise CorruptRecord(f"{path}: not a canonical recovery release terminal path", key=path)
    return generation, match.group(2)


def catalog_manifest_path(sha256: str) -> str:
    return f"{CATALOG_MANIFEST_PREFIX}{sha256}.json"

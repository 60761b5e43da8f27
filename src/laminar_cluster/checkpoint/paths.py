"""Object paths of the checkpoint decision store, each with a parser that re-formats and compares.

| path | record |
| --- | --- |
| `checkpoint-deployment/identity.json` | DeploymentIdentity |
| `checkpoint-id-blocks/block={b:020}` | empty; local mode |
| `checkpoint-outcomes/epoch={e}/outcome` (plain decimal, non-zero) | CheckpointOutcome |
| `checkpoint-outcome-gc/deployment={uuid}/floor` | OutcomeGcFloor |
| `checkpoint-sink-open-witness/witness.json` | CheckpointSinkOpenWitnessSlot |
| `checkpoint-recovery-capsules/epoch={e:020}/checkpoint={c:020}/sha256={hex}` | capsule |
| `checkpoint-recovery-capsule-gc/deployment={uuid}/cursor` | RecoveryCapsuleGcCursor |
| `checkpoint-recovery-capsule-quarantine/path-sha256={sha256(path)}` | quarantined bytes |

Parsers use explicit regular expressions (Python's `int()` accepts `+`, `_` and whitespace) and
then require that formatting the parsed value gives back exactly the same path.
"""

from __future__ import annotations

import re
from typing import Final

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.codec import sha256_hex
from laminar_cluster.errors import CorruptRecord

IDENTITY_PATH: Final = "checkpoint-deployment/identity.json"
BLOCKS_PREFIX: Final = "checkpoint-id-blocks/"
OUTCOMES_PREFIX: Final = "checkpoint-outcomes/"
FLOOR_PREFIX: Final = "checkpoint-outcome-gc/"
WITNESS_PATH: Final = "checkpoint-sink-open-witness/witness.json"
CAPSULES_PREFIX: Final = "checkpoint-recovery-capsules/"
CAPSULE_GC_PREFIX: Final = "checkpoint-recovery-capsule-gc/"
QUARANTINE_PREFIX: Final = "checkpoint-recovery-capsule-quarantine/"

_BLOCK = re.compile(r"checkpoint-id-blocks/block=([^/]{20})")
_TWENTY_DIGITS = re.compile(r"[0-9]{20}")
_OUTCOME = re.compile(r"checkpoint-outcomes/epoch=([1-9][0-9]*)/outcome")
_CAPSULE = re.compile(
    r"checkpoint-recovery-capsules/epoch=([0-9]{20})/checkpoint=([0-9]{20})/sha256=([^/]{64})"
)


def block_path(block: int) -> str:
    return f"{BLOCKS_PREFIX}block={block:020d}"


def parse_block_path(path: str) -> int:
    """The block number of a listed block path; CorruptRecord if it is not canonical."""
    match = _BLOCK.fullmatch(path)
    if match is None or not _TWENTY_DIGITS.fullmatch(match.group(1)):
        raise CorruptRecord(f"malformed checkpoint ID block path: {path}", key=path)
    block = int(match.group(1))
    if block > U64_MAX or block_path(block) != path:
        raise CorruptRecord(f"checkpoint ID block path {path} is not canonical", key=path)
    return block


def outcome_path(epoch: int) -> str:
    return f"{OUTCOMES_PREFIX}epoch={epoch}/outcome"


def parse_outcome_path(path: str) -> int:
    """The epoch of a listed outcome path; CorruptRecord for anything else under the prefix."""
    match = _OUTCOME.fullmatch(path)
    if match is None:
        raise CorruptRecord(f"malformed checkpoint outcome path: {path}", key=path)
    epoch = int(match.group(1))
    if epoch > U64_MAX or outcome_path(epoch) != path:
        raise CorruptRecord(f"malformed checkpoint outcome path: {path}", key=path)
    return epoch


def floor_path(deployment_id: str) -> str:
    return f"{FLOOR_PREFIX}deployment={deployment_id}/floor"


def capsule_gc_cursor_path(deployment_id: str) -> str:
    return f"{CAPSULE_GC_PREFIX}deployment={deployment_id}/cursor"


def capsule_path(epoch: int, checkpoint_id: int, sha256: str) -> str:
    return f"{CAPSULES_PREFIX}epoch={epoch:020d}/checkpoint={checkpoint_id:020d}/sha256={sha256}"


def parse_capsule_path(path: str) -> tuple[int, int, str] | None:
    """(epoch, checkpoint_id, sha256 text) of a capsule path, or None if it does not parse.

    The digest text is returned unchecked (the reference validation judges it); capsule GC
    quarantines what does not parse.
    """
    match = _CAPSULE.fullmatch(path)
    if match is None:
        return None
    epoch, checkpoint_id, digest = int(match.group(1)), int(match.group(2)), match.group(3)
    if epoch > U64_MAX or checkpoint_id > U64_MAX:
        return None
    if capsule_path(epoch, checkpoint_id, digest) != path:
        return None
    return epoch, checkpoint_id, digest


def quarantine_path(original_path: str) -> str:
    return f"{QUARANTINE_PREFIX}path-sha256={sha256_hex(original_path.encode('utf-8'))}"

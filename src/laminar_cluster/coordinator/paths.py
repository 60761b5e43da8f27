"""Object paths of one distributed checkpoint attempt, each with a parser that re-formats and
compares (docs/protocols/distributed-checkpoint.md, "Objects").

| path | record |
| --- | --- |
| `checkpoints/attempt={id:020}/prepare.json` | CheckpointPrepare |
| `checkpoints/attempt={id:020}/state/node={n:020}.bin` | state bytes (no record) |
| `checkpoints/attempt={id:020}/manifest/node={n:020}.json` | ParticipantManifest |
| `checkpoints/attempt={id:020}/committed.json` | SinkCommit |
| `checkpoints/pointer.json` | CheckpointPointer |

Layout 1's per-vnode partials (`vnode={v:05}.json`) and outputs (`output/node={n:020}.json`)
are recognized only to refuse a store that holds them (`is_layout1_key`).

Attempt IDs are zero-padded so that listing order is numeric order: a participant finds newer
attempts by listing after `after_attempt(id)`, the first key past every key of attempt `id`.
Parsers use explicit regular expressions (Python's `int()` accepts `+`, `_` and whitespace) and
then require that formatting the parsed value gives back exactly the same path.
"""

from __future__ import annotations

import enum
import re
from typing import Final

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.errors import CorruptRecord, InvalidArgument

CHECKPOINTS_PREFIX: Final = "checkpoints/"
ATTEMPTS_PREFIX: Final = "checkpoints/attempt="
POINTER_PATH: Final = "checkpoints/pointer.json"
MAX_VNODE: Final = 65_534  # vnode counts are at most 65,535 (assignment.vnode.MAX_VNODE_COUNT)

_ATTEMPT = r"checkpoints/attempt=([0-9]{20})/"
_ATTEMPT_KEY = re.compile(_ATTEMPT + r".+")
_PREPARE = re.compile(_ATTEMPT + r"prepare\.json")
_STATE = re.compile(_ATTEMPT + r"state/node=([0-9]{20})\.bin")
_LAYOUT1 = re.compile(_ATTEMPT + r"(vnode=[0-9]{5}\.json|output/node=[0-9]{20}\.json)")
_MANIFEST = re.compile(_ATTEMPT + r"manifest/node=([0-9]{20})\.json")
_SINK_COMMIT = re.compile(_ATTEMPT + r"committed\.json")


def attempt_prefix(checkpoint_id: int) -> str:
    """`checkpoints/attempt={id:020}/`: every object of one attempt is under it."""
    _check_id(checkpoint_id)
    return f"{ATTEMPTS_PREFIX}{checkpoint_id:020d}/"


def after_attempt(checkpoint_id: int) -> str:
    """A listing offset past every key of attempt `checkpoint_id` and before the next attempt:
    the attempt prefix with its `/` (0x2F) replaced by `0` (0x30)."""
    return attempt_prefix(checkpoint_id)[:-1] + "0"


def before_attempt(checkpoint_id: int) -> str:
    """A listing offset just below every key of attempt `checkpoint_id` (and above the previous
    attempt's keys)."""
    return attempt_prefix(checkpoint_id)[:-1]


def prepare_path(checkpoint_id: int) -> str:
    return f"{attempt_prefix(checkpoint_id)}prepare.json"


def state_path(checkpoint_id: int, node_id: int) -> str:
    """The state object node `node_id` wrote for attempt `checkpoint_id`."""
    _check_id(node_id, what="node id", minimum=0)
    return f"{attempt_prefix(checkpoint_id)}state/node={node_id:020d}.bin"


def manifest_prefix(checkpoint_id: int) -> str:
    return f"{attempt_prefix(checkpoint_id)}manifest/"


def manifest_path(checkpoint_id: int, node_id: int) -> str:
    _check_id(node_id, what="node id", minimum=0)
    return f"{manifest_prefix(checkpoint_id)}node={node_id:020d}.json"


def sink_commit_path(checkpoint_id: int) -> str:
    return f"{attempt_prefix(checkpoint_id)}committed.json"


def parse_attempt_key(key: str) -> int:
    """The attempt ID of any key under `checkpoints/attempt={id:020}/`."""
    match = _ATTEMPT_KEY.fullmatch(key)
    if match is None:
        raise CorruptRecord(f"{key}: not a key of a checkpoint attempt", key=key)
    checkpoint_id = int(match.group(1))
    if not 1 <= checkpoint_id <= U64_MAX or not key.startswith(_format_prefix(checkpoint_id)):
        raise CorruptRecord(f"{key}: checkpoint attempt key is not canonical", key=key)
    return checkpoint_id


def parse_prepare_path(key: str) -> int:
    match = _PREPARE.fullmatch(key)
    if match is None:
        raise CorruptRecord(f"{key}: not a checkpoint prepare path", key=key)
    checkpoint_id = _parsed_id(key, match.group(1))
    _require(key, prepare_path(checkpoint_id))
    return checkpoint_id


def parse_state_path(key: str) -> tuple[int, int]:
    """(attempt ID, node id) of a state object path."""
    match = _STATE.fullmatch(key)
    if match is None:
        raise CorruptRecord(f"{key}: not a state object path", key=key)
    checkpoint_id, node_id = _parsed_id(key, match.group(1)), _parsed_node(key, match.group(2))
    _require(key, state_path(checkpoint_id, node_id))
    return checkpoint_id, node_id


def is_layout1_key(key: str) -> bool:
    """Whether `key` is a per-vnode partial or a separate sink output: objects only layout 1
    (before one state object per participant) wrote."""
    return _LAYOUT1.fullmatch(key) is not None


def parse_manifest_path(key: str) -> tuple[int, int]:
    """(attempt ID, node id) of a participant manifest path."""
    match = _MANIFEST.fullmatch(key)
    if match is None:
        raise CorruptRecord(f"{key}: not a participant manifest path", key=key)
    checkpoint_id, node_id = _parsed_id(key, match.group(1)), _parsed_node(key, match.group(2))
    _require(key, manifest_path(checkpoint_id, node_id))
    return checkpoint_id, node_id


def parse_sink_commit_path(key: str) -> int:
    match = _SINK_COMMIT.fullmatch(key)
    if match is None:
        raise CorruptRecord(f"{key}: not a sink commit marker path", key=key)
    checkpoint_id = _parsed_id(key, match.group(1))
    _require(key, sink_commit_path(checkpoint_id))
    return checkpoint_id


class AttemptObject(enum.Enum):
    """The kinds of object of one attempt."""

    PREPARE = "prepare"
    STATE = "state"
    MANIFEST = "manifest"
    SINK_COMMIT = "sink commit"


def parse_attempt_object(key: str) -> tuple[int, AttemptObject]:
    """(attempt ID, kind) of a canonical attempt object path; CorruptRecord for any other key."""
    if key.endswith("/prepare.json"):
        return parse_prepare_path(key), AttemptObject.PREPARE
    if key.endswith("/committed.json"):
        return parse_sink_commit_path(key), AttemptObject.SINK_COMMIT
    if "/state/" in key:
        return parse_state_path(key)[0], AttemptObject.STATE
    if "/manifest/" in key:
        return parse_manifest_path(key)[0], AttemptObject.MANIFEST
    raise CorruptRecord(f"{key}: not an object of a checkpoint attempt", key=key)


def _check_id(value: int, *, what: str = "checkpoint ID", minimum: int = 1) -> None:
    if type(value) is not int or not minimum <= value <= U64_MAX:
        raise InvalidArgument(f"{what} {value!r} is outside {minimum}..={U64_MAX}")


def _format_prefix(checkpoint_id: int) -> str:
    return f"{ATTEMPTS_PREFIX}{checkpoint_id:020d}/"


def _parsed_id(key: str, text: str) -> int:
    checkpoint_id = int(text)
    if not 1 <= checkpoint_id <= U64_MAX:
        raise CorruptRecord(
            f"{key}: checkpoint ID {checkpoint_id} is outside 1..={U64_MAX}", key=key
        )
    return checkpoint_id


def _parsed_node(key: str, text: str) -> int:
    node_id = int(text)
    if node_id > U64_MAX:
        raise CorruptRecord(f"{key}: node id {node_id} is above {U64_MAX}", key=key)
    return node_id


def _require(key: str, canonical: str) -> None:
    if key != canonical:
        raise CorruptRecord(f"{key}: path is not canonical (expected {canonical})", key=key)

"""Keys of the file sinks (docs/protocols/file-sink.md, "Objects").

A sink prefix is a relative key prefix ending in `/`, outside the cluster's own top-level
prefixes. Under it, each delivery is one object:

    {prefix}checkpoint={checkpoint_id:020d}/node={node_id:020d}.{extension}

Zero-padded ids make key order checkpoint order, which `delivered_through` relies on (FO-4).
"""

from __future__ import annotations

import re
from typing import Final

from laminar_cluster.assignment.paths import SNAPSHOTS_PREFIX
from laminar_cluster.checkpoint.paths import (
    BLOCKS_PREFIX,
    CAPSULE_GC_PREFIX,
    CAPSULES_PREFIX,
    FLOOR_PREFIX,
    IDENTITY_PATH,
    OUTCOMES_PREFIX,
    QUARANTINE_PREFIX,
    WITNESS_PATH,
)
from laminar_cluster.codec.types import U64_MAX
from laminar_cluster.coordinator.paths import CHECKPOINTS_PREFIX
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.membership.paths import NODES_PREFIX
from laminar_cluster.store import validate_prefix

CHECKPOINT_SEGMENT: Final = "checkpoint="


def _top(path: str) -> str:
    return path.split("/", 1)[0]


# The first key segments the cluster itself writes under. `events` and `event-log-ends` are the
# event log's (connectors/eventlog_segments.py, eventlog_ends.py; named here, checked by
# test_every_prefix_the_cluster_writes_under_is_refused), `bench` the benchmarks' scratch
# space, `assignment` reserved.
RESERVED_TOP_SEGMENTS: Final = frozenset(
    {
        _top(CHECKPOINTS_PREFIX),
        _top(SNAPSHOTS_PREFIX),  # control/
        _top(NODES_PREFIX),  # membership/
        *(
            _top(p)
            for p in (
                BLOCKS_PREFIX,
                CAPSULE_GC_PREFIX,
                CAPSULES_PREFIX,
                FLOOR_PREFIX,
                IDENTITY_PATH,
                OUTCOMES_PREFIX,
                QUARANTINE_PREFIX,
                WITNESS_PATH,
            )
        ),
        "events",
        "event-log-ends",
        "bench",
        "assignment",
    }
)
# Also refused: any first segment starting `checkpoint` (the checkpoint layer's family of
# top-level prefixes grows: `checkpoint-outcomes/`, `checkpoint-id-blocks/`, ...).
RESERVED_TOP_STEM: Final = "checkpoint"

_DELIVERY = re.compile(r"checkpoint=([0-9]{20})/node=([0-9]{20})\.([a-z]+)")
_CHECKPOINT_DIRECTORY = re.compile(r"checkpoint=([0-9]{20})")


def validate_sink_prefix(prefix: str, *, what: str = "sink") -> str:
    """`prefix` unchanged if it can hold a file sink's objects (or, `what="source"`, a file
    source's files), else InvalidArgument."""
    if not isinstance(prefix, str):
        raise InvalidArgument(f"{what} prefix must be a str, not {type(prefix).__name__}")
    if not prefix.endswith("/") or prefix.startswith("/"):
        raise InvalidArgument(
            f"{what} prefix {prefix!r} must be a relative key prefix ending in '/' "
            "(e.g. 'out/clicks/')"
        )
    try:
        validate_prefix(prefix)  # no '..', '.', empty segments, control characters, backslashes
    except InvalidArgument as error:
        raise InvalidArgument(f"{what} prefix {prefix!r}: {error}") from error
    top = _top(prefix)
    if top in RESERVED_TOP_SEGMENTS or top.startswith(RESERVED_TOP_STEM):
        raise InvalidArgument(
            f"{what} prefix {prefix!r} is under {top + '/'!r}, which the cluster itself writes; "
            f"choose another first segment (reserved: {sorted(RESERVED_TOP_SEGMENTS)} and "
            f"'{RESERVED_TOP_STEM}*')"
        )
    return prefix


def bind_job(bound: str | None, job: str, where: str) -> str:
    """The job a writer serves after a call naming `job`: `job` if none was bound yet, else the
    bound one; InvalidArgument for a bad name or a second job (two jobs must not share a
    prefix: the key does not name the job)."""
    if not isinstance(job, str) or not job:
        raise InvalidArgument(f"{where}: job name must be a non-empty str, not {job!r}")
    if bound is not None and job != bound:
        raise InvalidArgument(
            f"{where}: this sink writer serves job {bound!r}, not {job!r}; "
            "two jobs must not share a sink prefix"
        )
    return job


def check_ids(checkpoint_id: int, node_id: int) -> None:
    """InvalidArgument unless checkpoint_id is a u64 and node_id a nonzero u64."""
    for what, value, minimum in (("checkpoint id", checkpoint_id, 0), ("node id", node_id, 1)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgument(f"delivery {what} must be an int, not {type(value).__name__}")
        if not minimum <= value <= U64_MAX:
            raise InvalidArgument(f"delivery {what} {value} is outside {minimum}..={U64_MAX}")


def checkpoints_prefix(prefix: str) -> str:
    """The listing prefix of every delivery object under a sink prefix."""
    return prefix + CHECKPOINT_SEGMENT


def checkpoint_offset(prefix: str, checkpoint_id: int) -> str:
    """A listing offset: keys after it are those of checkpoints >= `checkpoint_id` (FO-4)."""
    return f"{prefix}{CHECKPOINT_SEGMENT}{checkpoint_id:020d}"


def delivery_path(prefix: str, extension: str, checkpoint_id: int, node_id: int) -> str:
    """The key of one participant's delivery of one checkpoint."""
    check_ids(checkpoint_id, node_id)
    return f"{prefix}{CHECKPOINT_SEGMENT}{checkpoint_id:020d}/node={node_id:020d}.{extension}"


def parse_checkpoint_directory(name: str) -> int | None:
    """The checkpoint id of a directory name `checkpoint={id:020d}`, None for any other name."""
    match = _CHECKPOINT_DIRECTORY.fullmatch(name)
    if match is None or int(match.group(1)) > U64_MAX:
        return None
    return int(match.group(1))


def parse_delivery_path(prefix: str, extension: str, key: str) -> tuple[int, int] | None:
    """(checkpoint_id, node_id) of a delivery key of this sink, None for any other key
    (strict: the key must re-format to itself)."""
    if not key.startswith(prefix):
        return None
    match = _DELIVERY.fullmatch(key, len(prefix))
    if match is None or match.group(3) != extension:
        return None
    checkpoint_id, node_id = int(match.group(1)), int(match.group(2))
    if not (checkpoint_id <= U64_MAX and 1 <= node_id <= U64_MAX):
        return None
    if delivery_path(prefix, extension, checkpoint_id, node_id) != key:
        return None
    return checkpoint_id, node_id

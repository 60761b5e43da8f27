"""The head hint of the assignment snapshot store: change detection without listing (AS §2.14).

`control/assignment-head/v1.json` holds an `AssignmentHeadHint` (the head version and which
object decides it). Every mutator of the store overwrites it after its create landed
(`publish_hint`, best effort), so a watcher reads one small object with a conditional GET each
tick and lists the inventory only when it changed. The hint is never authoritative: the head is
always what the inventory and the objects say (AS-2, AS-7), and a reader that finds the hint
disagreeing with them after a full load repairs it with an update-if-match of the version it
read (`repair_hint`), so a writer that crashed between its create and the hint, or a late
writer that put an older hint back, is corrected by the next full load. A hint that is absent
or unreadable only makes readers load in full (and repair it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from laminar_cluster.assignment.paths import HEAD_HINT_PATH
from laminar_cluster.assignment.records import AssignmentHeadHint, AssignmentSnapshot, HeadState
from laminar_cluster.codec import decode, encode_checked
from laminar_cluster.errors import (
    CorruptRecord,
    LaminarError,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
)
from laminar_cluster.store import CREATE, OVERWRITE, GetResult, IfMatch, ObjectStore, PutMode
from laminar_cluster.store.record_cache import read_watched, record_cache

logger: Final = logging.getLogger(__name__)

MAX_HEAD_HINT_BYTES: Final = 256


@dataclass(frozen=True, slots=True)
class HintRead:
    """The hint as read now: its value (None: absent or unreadable), the e_tag of that version
    (None when absent, unreadable or served without one) and whether an unreadable object is
    there (a repair overwrites it)."""

    hint: AssignmentHeadHint | None
    e_tag: str | None
    unreadable: bool = False


def hint_of(snapshot: AssignmentSnapshot, state: HeadState) -> AssignmentHeadHint:
    return AssignmentHeadHint(
        version=1, assignment_version=snapshot.assignment_version, state=state
    )


def _decode_hint(got: GetResult) -> AssignmentHeadHint:
    return decode(got.body, AssignmentHeadHint, key=HEAD_HINT_PATH, max_bytes=MAX_HEAD_HINT_BYTES)


async def read_hint(store: ObjectStore) -> HintRead:
    """The hint, read conditionally against the version this store's cache last saw (one GET).
    Bad bytes are logged and read as no hint: the caller loads in full and repairs it."""
    try:
        read = await read_watched(
            store, HEAD_HINT_PATH, _decode_hint, AssignmentHeadHint, max_bytes=MAX_HEAD_HINT_BYTES
        )
    except CorruptRecord as error:
        logger.warning("%s: unreadable assignment head hint: %s", HEAD_HINT_PATH, error)
        return HintRead(None, None, unreadable=True)
    return HintRead(None, None) if read is None else HintRead(read[0], read[1])


async def publish_hint(store: ObjectStore, hint: AssignmentHeadHint) -> None:
    """Overwrite the hint after a mutator's create landed. Best effort: a failure is logged
    and left to the next full load's repair (the create itself already stands)."""
    await _write(store, hint, OVERWRITE, what="published")


async def repair_hint(store: ObjectStore, seen: HintRead, hint: AssignmentHeadHint) -> None:
    """Make the hint say `hint` after a full load found `seen` saying otherwise: create it
    when absent, overwrite it when unreadable, else update it only if it is still the version
    read (a concurrent writer's newer hint is left for the next load to judge)."""
    if seen.hint == hint:
        return
    mode: PutMode = CREATE
    if seen.e_tag is not None:
        mode = IfMatch(e_tag=seen.e_tag, version=None)
    elif seen.hint is not None or seen.unreadable:
        mode = OVERWRITE  # bad bytes, or a hint without an e_tag: nothing to compare against
    await _write(store, hint, mode, what="repaired")


async def _write(store: ObjectStore, hint: AssignmentHeadHint, mode: PutMode, *, what: str) -> None:
    body = encode_checked(hint, what=HEAD_HINT_PATH, max_bytes=MAX_HEAD_HINT_BYTES)
    cache = record_cache(store)
    try:
        written = await store.put(HEAD_HINT_PATH, body, mode)
    except (ObjectAlreadyExists, PreconditionFailed, ObjectNotFound):
        return  # someone else wrote it meanwhile: the next load judges theirs
    except LaminarError as error:
        logger.warning("%s: assignment head hint not %s: %s", HEAD_HINT_PATH, what, error)
        return
    if cache is not None:
        cache.watch(HEAD_HINT_PATH, written.e_tag, hint)

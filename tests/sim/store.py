"""The simulation's shared object store: a pure-Python, single-threaded memory store.

obstore's memory store answers from other threads, so the order in which racing requests land
would depend on the host; this one applies every request on the event loop, in the order the
seeded schedule reaches it, so a run replays from its seed alone.

Each request first yields to the event loop once (`asyncio.sleep(0)`): requests of different
nodes interleave at request granularity, and a crash (task cancellation) can land between any
two requests of a node. `direct()` is a view of the same objects that never yields: the
checkers read through it, so no node runs while they look.

Every applied mutation is folded into `digest` (key, mode, body, simulated time), and counted
per top-level namespace in `mutations`, so the checkers re-read only what changed and a replay
can be compared byte for byte.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
from collections import Counter
from dataclasses import dataclass

from laminar_cluster.clock import Clock
from laminar_cluster.errors import ObjectAlreadyExists, ObjectNotFound, PreconditionFailed
from laminar_cluster.store import (
    Create,
    GetResult,
    IfMatch,
    ObjectMeta,
    ObjectStore,
    Overwrite,
    PutMode,
    PutResult,
    validate_key,
    validate_prefix,
)


@dataclass(frozen=True, slots=True)
class _Object:
    body: bytes
    meta: ObjectMeta


class SimObjects:
    """The objects themselves, shared by every view."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.objects: dict[str, _Object] = {}
        self.keys: list[str] = []  # sorted
        self.writes = 0  # e_tag source: every write gets a new one
        self.mutations: Counter[str] = Counter()
        self._digest = hashlib.sha256()
        self._valid_keys: set[str] = set()

    def _key(self, key: str) -> None:
        """`validate_key`, once per distinct key (the same keys recur all the time)."""
        if key not in self._valid_keys:
            validate_key(key)
            self._valid_keys.add(key)

    @property
    def digest(self) -> str:
        return self._digest.hexdigest()

    def meta(self, key: str, found: _Object) -> ObjectMeta:
        return found.meta

    def get(self, key: str, end: int | None) -> GetResult:
        self._key(key)
        found = self.objects.get(key)
        if found is None:
            raise ObjectNotFound(f"{key}: not found", key=key)
        if end is not None and end < 0:
            raise ValueError(f"get {key}: end must be >= 0, not {end}")
        body = found.body if end is None else found.body[:end]
        return GetResult(meta=self.meta(key, found), body=body)

    def head(self, key: str) -> ObjectMeta:
        self._key(key)
        found = self.objects.get(key)
        if found is None:
            raise ObjectNotFound(f"{key}: not found", key=key)
        return self.meta(key, found)

    def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        self._key(key)
        current = self.objects.get(key)
        if isinstance(mode, Create):
            if current is not None:
                raise ObjectAlreadyExists(f"{key}: already exists", key=key)
        elif isinstance(mode, IfMatch):
            if current is None:
                raise PreconditionFailed(f"{key}: no object to update", key=key)
            if mode.e_tag is not None and mode.e_tag != current.meta.e_tag:
                raise PreconditionFailed(f"{key}: e_tag {mode.e_tag} is not current", key=key)
            if mode.e_tag is None:
                raise PreconditionFailed(f"{key}: this store has no object versions", key=key)
        elif not isinstance(mode, Overwrite):
            raise TypeError(f"unknown put mode {mode!r}")
        self.writes += 1
        e_tag = f'"{self.writes:x}"'
        if current is None:
            bisect.insort(self.keys, key)
        meta = ObjectMeta(
            key=key,
            size=len(body),
            e_tag=e_tag,
            version=None,
            last_modified_ms=self.clock.wall_ms(),
        )
        self.objects[key] = _Object(bytes(body), meta)
        self._note(key, type(mode).__name__.encode(), body)
        return PutResult(e_tag=e_tag, version=None)

    def list(self, prefix: str, offset: str | None, limit: int | None) -> list[ObjectMeta]:
        validate_prefix(prefix)
        if limit is not None and limit < 1:
            raise ValueError(f"list {prefix!r}: limit must be >= 1, not {limit}")
        start = prefix if offset is None else max(prefix, offset)
        index = bisect.bisect_left(self.keys, start)
        found: list[ObjectMeta] = []
        while index < len(self.keys):
            key = self.keys[index]
            index += 1
            if not key.startswith(prefix):
                break
            if offset is not None and key <= offset:
                continue
            found.append(self.meta(key, self.objects[key]))
            if limit is not None and len(found) >= limit:
                break
        return found

    def delete(self, key: str) -> None:
        self._key(key)
        if self.objects.pop(key, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]
            self._note(key, b"delete", b"")

    def _note(self, key: str, what: bytes, body: bytes) -> None:
        namespace = "/".join(key.split("/")[:2])
        self.mutations[namespace] += 1
        stamp = f"{self.clock.monotonic():.6f}".encode()
        for part in (stamp, key.encode(), what, hashlib.sha256(body).digest()):
            self._digest.update(len(part).to_bytes(4, "big"))
            self._digest.update(part)


class SimStore(ObjectStore):
    """An `ObjectStore` view of `SimObjects`; `yields` makes every request yield first."""

    def __init__(self, objects: SimObjects, *, yields: bool = True) -> None:
        self.objects = objects
        self._yields = yields

    @classmethod
    def fresh(cls, clock: Clock) -> SimStore:
        return cls(SimObjects(clock))

    def direct(self) -> SimStore:
        """A view of the same objects whose requests never yield (for the checkers)."""
        return SimStore(self.objects, yields=False)

    @property
    def url(self) -> str:
        return "sim://"

    async def _turn(self) -> None:
        if self._yields:
            await asyncio.sleep(0)

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        await self._turn()
        return self.objects.get(key, end)

    async def head(self, key: str) -> ObjectMeta:
        await self._turn()
        return self.objects.head(key)

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        await self._turn()
        return self.objects.put(key, body, mode)

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        await self._turn()
        return self.objects.list(prefix, offset, limit)

    async def delete(self, key: str) -> None:
        await self._turn()
        self.objects.delete(key)

"""A store wrapper that injects faults, deterministically from a seed.

Fault kinds (`FaultKind`):

* `BEFORE`: the request fails and nothing is applied (`StoreUnavailable`).
* `AFTER`: a write is applied and its response is lost (`WriteOutcomeUnknown`).
* `AFTER_AS_CONFLICT`: a write is applied and reported as a conflict, as obstore's internal
  retries do (`ObjectAlreadyExists` for a create, `PreconditionFailed` for an update).
* `PHANTOM_CONFLICT`: a create is refused without being applied but reported as
  `ObjectAlreadyExists`, as S3's 409 ConditionalRequestConflict surfaces through obstore.
* latency: every request sleeps a random time in `[latency_s_min, latency_s_max]` first.
* outage windows: every request in `[start, end)` of monotonic time fails `BEFORE`; and while
  `outage_file` exists, every request fails `BEFORE` (a test cuts one process off the store by
  creating the file, and lets it back by deleting it).

Random faults come from `FaultConfig` rates; scripted faults (`fail_next`) hit the next
matching request exactly, for tests of one crash point. The same seed and the same sequence of
requests give the same faults. A request no store could serve is InvalidArgument before any
fault is drawn, as on every backend (`api.check_*`); so is a bad configuration.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from laminar_cluster.clock import Clock, seeded_random
from laminar_cluster.errors import (
    InvalidArgument,
    ObjectAlreadyExists,
    PreconditionFailed,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store.api import (
    Create,
    GetResult,
    IfMatch,
    ObjectMeta,
    ObjectStore,
    PutMode,
    PutResult,
    check_e_tag,
    check_get,
    check_keys,
    check_list,
    check_put,
    check_range,
)
from laminar_cluster.store.keys import validate_key

READ_OPS = frozenset({"get", "head", "list"})
WRITE_OPS = frozenset({"put", "delete"})


class FaultKind(enum.Enum):
    BEFORE = "before"
    AFTER = "after"
    AFTER_AS_CONFLICT = "after_as_conflict"
    PHANTOM_CONFLICT = "phantom_conflict"


@dataclass(frozen=True)
class FaultConfig:
    """Probabilities per request (0..1) and latency bounds in seconds."""

    error_before_rate: float = 0.0
    error_after_rate: float = 0.0
    conflict_after_rate: float = 0.0
    phantom_conflict_rate: float = 0.0
    latency_s_min: float = 0.0
    latency_s_max: float = 0.0
    outages: tuple[tuple[float, float], ...] = ()
    outage_file: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "error_before_rate",
            "error_after_rate",
            "conflict_after_rate",
            "phantom_conflict_rate",
        ):
            rate = getattr(self, name)
            if not 0.0 <= rate <= 1.0:
                raise InvalidArgument(f"{name} must be within 0..1, not {rate}")
        if not 0.0 <= self.latency_s_min <= self.latency_s_max:
            raise InvalidArgument("latency bounds must satisfy 0 <= min <= max")


@dataclass
class _Scripted:
    kind: FaultKind
    op: str
    key_prefix: str


@dataclass
class FaultStats:
    """How many faults of each kind were injected."""

    injected: dict[FaultKind, int] = field(default_factory=lambda: dict.fromkeys(FaultKind, 0))


class FaultyStore(ObjectStore):
    """Wraps `inner`; every request may be delayed or failed as configured."""

    def __init__(
        self, inner: ObjectStore, *, clock: Clock, seed: int, config: FaultConfig | None = None
    ) -> None:
        self.inner = inner
        self.config = config or FaultConfig()
        self.stats = FaultStats()
        self._clock = clock
        self._random = seeded_random(seed)
        self._scripted: list[_Scripted] = []

    @property
    def url(self) -> str:
        return self.inner.url

    def fail_next(self, kind: FaultKind, *, op: str = "put", key_prefix: str = "") -> None:
        """Inject `kind` into the next `op` request whose key starts with `key_prefix`."""
        if op not in READ_OPS | WRITE_OPS:
            raise InvalidArgument(f"unknown store operation {op!r}")
        if kind is not FaultKind.BEFORE and op not in WRITE_OPS:
            raise InvalidArgument(f"{kind.value} faults apply to writes, not {op}")
        self._scripted.append(_Scripted(kind, op, key_prefix))

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        check_get(key, end)
        await self._before("get", key)
        return await self.inner.get(key, end=end)

    async def head(self, key: str) -> ObjectMeta:
        validate_key(key)
        await self._before("head", key)
        return await self.inner.head(key)

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        check_list(prefix, offset, limit)
        await self._before("list", prefix)
        return await self.inner.list(prefix, offset=offset, limit=limit)

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        check_put(key, body, mode)
        kind = await self._before("put", key, mode=mode)
        result = await self.inner.put(key, body, mode)
        self._after(kind, "put", key, mode)
        return result

    async def delete(self, key: str) -> None:
        validate_key(key)
        kind = await self._before("delete", key)
        await self.inner.delete(key)
        self._after(kind, "delete", key, None)

    async def get_if_changed(self, key: str, e_tag: str) -> GetResult | None:
        check_e_tag(key, e_tag)
        await self._before("get", key)
        return await self.inner.get_if_changed(key, e_tag)

    async def get_range(self, key: str, start: int, end: int) -> GetResult:
        check_range(key, start, end)
        await self._before("get", key)
        return await self.inner.get_range(key, start, end)

    async def delete_many(self, keys: Sequence[str]) -> None:
        batch = check_keys(keys)
        kind = await self._before("delete", batch[0] if batch else "")
        await self.inner.delete_many(batch)
        self._after(kind, "delete", batch[0] if batch else "", None)

    async def close(self) -> None:
        await self.inner.close()

    async def _before(self, op: str, key: str, *, mode: PutMode | None = None) -> FaultKind | None:
        """Sleep the latency; raise a BEFORE fault; return the after-fault to apply, if any."""
        config = self.config
        if config.latency_s_max > 0:
            await self._clock.sleep(
                self._random.uniform(config.latency_s_min, config.latency_s_max)
            )
        kind = self._take_scripted(op, key) or self._draw(op, mode)
        if kind is FaultKind.PHANTOM_CONFLICT and not isinstance(mode, Create):
            kind = FaultKind.BEFORE  # only a create can be refused as a phantom conflict
        if kind is FaultKind.BEFORE:
            self._count(kind)
            raise StoreUnavailable(f"{key}: injected fault before {op} was applied")
        if kind is FaultKind.PHANTOM_CONFLICT:
            self._count(kind)
            raise ObjectAlreadyExists(f"{key}: injected 409 conflict; nothing written", key=key)
        return kind

    def _after(self, kind: FaultKind | None, op: str, key: str, mode: PutMode | None) -> None:
        if kind is None:
            return
        self._count(kind)
        if kind is FaultKind.AFTER_AS_CONFLICT and isinstance(mode, Create):
            raise ObjectAlreadyExists(f"{key}: injected conflict after our create applied", key=key)
        if kind is FaultKind.AFTER_AS_CONFLICT and isinstance(mode, IfMatch):
            raise PreconditionFailed(f"{key}: injected conflict after our update applied", key=key)
        raise WriteOutcomeUnknown(f"{key}: injected lost response after {op} was applied", key=key)

    def _take_scripted(self, op: str, key: str) -> FaultKind | None:
        for index, scripted in enumerate(self._scripted):
            if scripted.op == op and key.startswith(scripted.key_prefix):
                del self._scripted[index]
                return scripted.kind
        return None

    def _draw(self, op: str, mode: PutMode | None) -> FaultKind | None:
        config = self.config
        now = self._clock.monotonic()
        if any(start <= now < end for start, end in config.outages):
            return FaultKind.BEFORE
        if config.outage_file is not None and os.path.exists(config.outage_file):
            return FaultKind.BEFORE
        draw = self._random.random()
        if draw < config.error_before_rate:
            return FaultKind.BEFORE
        if op not in WRITE_OPS:
            return None
        draw -= config.error_before_rate
        if draw < config.error_after_rate:
            return FaultKind.AFTER
        draw -= config.error_after_rate
        if draw < config.conflict_after_rate and op == "put" and not _is_overwrite(mode):
            return FaultKind.AFTER_AS_CONFLICT
        draw -= config.conflict_after_rate
        if draw < config.phantom_conflict_rate and isinstance(mode, Create):
            return FaultKind.PHANTOM_CONFLICT
        return None

    def _count(self, kind: FaultKind) -> None:
        self.stats.injected[kind] += 1


def _is_overwrite(mode: PutMode | None) -> bool:
    return mode is not None and not isinstance(mode, Create | IfMatch)

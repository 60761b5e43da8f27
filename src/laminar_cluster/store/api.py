"""The one object-store interface every layer above uses.

Semantics every backend gives (docs/protocols/store-contract.md SC-1 .. SC-9, checked by
`tests/store/test_contract.py` on every backend):

* `put(key, body, CREATE)` is atomic and exclusive: exactly one of several racing creates
  succeeds; the others raise `ObjectAlreadyExists`.
* `put(key, body, IfMatch(e_tag, version))` replaces the object only if its current version is
  the named one, else raises `PreconditionFailed` (a missing object raises `ObjectNotFound` or
  `PreconditionFailed`) and leaves it unchanged. Every successful write changes the e_tag or
  version, also for identical bytes on backends that can (the file backend; S3 e_tags are
  content hashes, so bodies that are CASed carry a nonce).
* `put(key, body, OVERWRITE)` atomically replaces.
* `get` returns the whole body (or its first `end` bytes) with metadata of the same version.
* `list(prefix)` is a string-prefix listing, sorted by key, without temporary objects.
* `delete` is idempotent and visible to the next `get`.

Three requests with default implementations on top of those five, which the backends replace
with one request each (wrappers forward them):

* `get_if_changed(key, e_tag)` is a conditional read (`If-None-Match`): None when the object's
  current e_tag is `e_tag` (S3 answers 304 and bills one GET), else the whole object. The cheap
  way to watch a small pointer object that changes now and then.
* `get_range(key, start, end)` reads bytes `[start, end)` (clipped to the object) with the
  metadata of the same version: one slice of an object that holds several.
* `delete_many(keys)` deletes several objects; S3 takes up to `DELETE_BATCH_KEYS` keys per
  request (a multi-object delete), other backends one request per key.

Errors: `ObjectNotFound`, `ObjectAlreadyExists`, `PreconditionFailed`, `NotSupported` are the
store's definite answers; `StoreUnavailable` means the request failed and nothing changed as far
as anyone knows (reads), `WriteOutcomeUnknown` that a write may have been applied. A request no
store could serve (a bad key or prefix, a negative `end` or `limit`, a body that is not bytes, an
unknown mode, an argument of the wrong type) is `InvalidArgument` on every backend, raised before
any I/O by the checks below (`check_get`, `check_put`, `check_list`).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.store.keys import validate_key, validate_prefix


@dataclass(frozen=True, slots=True)
class ObjectMeta:
    """Metadata of one version of one object."""

    key: str
    size: int
    e_tag: str | None
    version: str | None
    last_modified_ms: int  # wall clock of the store, milliseconds since the epoch; diagnostic

    @property
    def token(self) -> IfMatch:
        """The update-if-match token that names exactly this version."""
        return IfMatch(e_tag=self.e_tag, version=self.version)


@dataclass(frozen=True, slots=True)
class GetResult:
    """A body (possibly cut at the requested end) with the metadata of the same version."""

    meta: ObjectMeta
    body: bytes

    @property
    def complete(self) -> bool:
        """Whether `body` is the whole object."""
        return len(self.body) == self.meta.size


@dataclass(frozen=True, slots=True)
class PutResult:
    """What the store says about the version a put created."""

    e_tag: str | None
    version: str | None


@dataclass(frozen=True, slots=True)
class Create:
    """Write only if no object exists at the key."""


@dataclass(frozen=True, slots=True)
class Overwrite:
    """Replace unconditionally."""


@dataclass(frozen=True, slots=True)
class IfMatch:
    """Replace only if the current version is this one (e_tag and/or version)."""

    e_tag: str | None
    version: str | None

    def __post_init__(self) -> None:
        if self.e_tag is None and self.version is None:
            raise InvalidArgument("IfMatch needs an e_tag or a version")
        for name, value in (("e_tag", self.e_tag), ("version", self.version)):
            if value is not None and not isinstance(value, str):
                raise InvalidArgument(f"IfMatch {name} must be a str, not {type(value).__name__}")


PutMode = Create | Overwrite | IfMatch

CREATE: Final = Create()
OVERWRITE: Final = Overwrite()
# The most keys one multi-object delete names on S3 (and what `delete_many` is billed per).
DELETE_BATCH_KEYS: Final = 1_000


class ObjectStore(abc.ABC):
    """An object store with conditional writes. Keys are validated by `keys.validate_key`."""

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """A URL naming this store (no credentials)."""

    @abc.abstractmethod
    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        """Read the object; with `end`, only its first `end` bytes (meta.size is the full size)."""

    @abc.abstractmethod
    async def head(self, key: str) -> ObjectMeta:
        """Metadata of the current version."""

    @abc.abstractmethod
    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        """Write the whole body atomically under `mode`."""

    @abc.abstractmethod
    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        """Objects whose key starts with `prefix` (and sorts after `offset`), sorted by key.

        With `limit`, at most that many: page through a large prefix with `offset` set to the
        last key of the previous page.
        """

    @abc.abstractmethod
    async def delete(self, key: str) -> None:
        """Remove the object; removing a missing object is not an error."""

    async def get_if_changed(self, key: str, e_tag: str) -> GetResult | None:
        """None if the object's e_tag is still `e_tag`, else the whole object (ObjectNotFound if
        it is gone). The default reads the object and compares; backends send one conditional
        GET instead."""
        check_e_tag(key, e_tag)
        result = await self.get(key)
        return None if result.meta.e_tag == e_tag else result

    async def get_range(self, key: str, start: int, end: int) -> GetResult:
        """Bytes `[start, end)` of the object (clipped to its size), with the metadata of the
        same version. The default reads the first `end` bytes; backends read only the range."""
        check_range(key, start, end)
        result = await self.get(key, end=end)
        return GetResult(meta=result.meta, body=result.body[start:])

    async def delete_many(self, keys: Sequence[str]) -> None:
        """Delete every key (missing ones are not an error). The default deletes one by one;
        S3 backends send one multi-object delete per `DELETE_BATCH_KEYS` keys."""
        for key in check_keys(keys):
            await self.delete(key)

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; the default has none."""


def check_get(key: str, end: int | None) -> None:
    """A valid key, and `end` None or an int >= 0 (InvalidArgument otherwise)."""
    validate_key(key)
    _check_count(f"get {key}: end", end)


def check_put(key: str, body: bytes, mode: PutMode) -> None:
    """A valid key, a bytes-like body and one of the three modes (InvalidArgument otherwise)."""
    validate_key(key)
    if not isinstance(body, bytes | bytearray | memoryview):
        raise InvalidArgument(f"put {key}: the body must be bytes, not {type(body).__name__}")
    if not isinstance(mode, Create | Overwrite | IfMatch):
        raise InvalidArgument(f"put {key}: unknown put mode {mode!r}")


def check_e_tag(key: str, e_tag: str) -> None:
    """A valid key and a non-empty str e_tag (InvalidArgument otherwise)."""
    validate_key(key)
    if not isinstance(e_tag, str) or not e_tag:
        raise InvalidArgument(f"get {key}: the e_tag to compare must be a non-empty str")


def check_range(key: str, start: int, end: int) -> None:
    """A valid key and ints 0 <= start <= end (InvalidArgument otherwise)."""
    validate_key(key)
    _check_count(f"get {key}: start", start)
    _check_count(f"get {key}: end", end)
    if start is None or end is None or start > end:
        raise InvalidArgument(f"get {key}: range [{start}, {end}) is reversed")


def check_keys(keys: Sequence[str]) -> tuple[str, ...]:
    """Every key valid (InvalidArgument otherwise); the keys as a tuple."""
    if isinstance(keys, str) or not isinstance(keys, Sequence):
        raise InvalidArgument(f"delete_many: keys must be a sequence of str, not {keys!r:.80}")
    for key in keys:
        validate_key(key)
    return tuple(keys)


def delete_requests(key_count: int) -> int:
    """How many requests S3 bills for deleting `key_count` keys with `delete_many`."""
    return -(-key_count // DELETE_BATCH_KEYS)


def check_list(prefix: str, offset: str | None, limit: int | None) -> None:
    """A valid prefix, `offset` None or a str, `limit` None or an int >= 0 (InvalidArgument)."""
    validate_prefix(prefix)
    if offset is not None and not isinstance(offset, str):
        raise InvalidArgument(f"list {prefix!r}: offset must be a str, not {type(offset).__name__}")
    _check_count(f"list {prefix!r}: limit", limit)


def _check_count(what: str, value: int | None) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{what} must be an int, not {type(value).__name__}")
    if value < 0:
        raise InvalidArgument(f"{what} is {value}; it must be 0 or more")

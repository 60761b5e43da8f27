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

Errors: `ObjectNotFound`, `ObjectAlreadyExists`, `PreconditionFailed`, `NotSupported` are the
store's definite answers; `StoreUnavailable` means the request failed and nothing changed as far
as anyone knows (reads), `WriteOutcomeUnknown` that a write may have been applied. A request no
store could serve (a bad key or prefix, a negative `end` or `limit`, a body that is not bytes, an
unknown mode, an argument of the wrong type) is `InvalidArgument` on every backend, raised before
any I/O by the checks below (`check_get`, `check_put`, `check_list`).
"""

from __future__ import annotations

import abc
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

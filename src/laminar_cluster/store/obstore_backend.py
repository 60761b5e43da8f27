"""obstore-backed stores: `memory://`, `s3://`, `gs://`, `az://`.

Known defects of obstore 0.12.1 that this module and `readback` handle:

* With its internal retries on, a lost response to our own winning conditional write comes back
  as `AlreadyExistsError` / `PreconditionError`. We turn obstore's retries off (`max_retries=0`),
  so a lost response surfaces as an I/O error, which we report for writes as
  `WriteOutcomeUnknown` (read back first).
* S3 may answer `409 ConditionalRequestConflict` to a create that did not write; obstore reports
  it as `AlreadyExistsError`. So `ObjectAlreadyExists` from these backends is "maybe": callers
  that must know read back (`readback.resolve_write`).
* A missing object raises the builtin `FileNotFoundError`; mapped to `ObjectNotFound`.
* A ranged GET of an empty object fails ("range starting at 0, but object was only 0 bytes");
  we fall back to an unranged GET, which for a 0-byte object is bounded.
* obstore is not fork-safe: a child forked after the parent used it hangs. Start processes with
  the spawn method.
* A process that used obstore can abort at exit (SIGABRT, about 1 in 3 short runs against the S3
  test server): a tokio blocking thread that has just handed a result to the event loop
  (`call_soon_threadsafe`) waits for the GIL again while the interpreter finalizes, and the
  thread exit that CPython then forces cannot unwind through Rust frames. An `atexit` hook
  releases every store still open and waits `_EXIT_SETTLE_S` with the GIL released, so those
  threads return to Rust before finalization starts.
"""

from __future__ import annotations

import atexit
import datetime
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import obstore
from obstore import exceptions as obx
from obstore.store import MemoryStore

from laminar_cluster.errors import (
    NotSupported,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    StoreUnavailable,
    WriteOutcomeUnknown,
)
from laminar_cluster.store.api import (
    Create,
    GetResult,
    ObjectMeta,
    ObjectStore,
    Overwrite,
    PutMode,
    PutResult,
    check_get,
    check_list,
    check_put,
)
from laminar_cluster.store.keys import validate_key

T = TypeVar("T")

_LIST_PAGE_HINT = 1000
# What obstore raises for store answers and I/O; anything else is a bug and propagates.
_OBSTORE_ERRORS = (obx.BaseError, OSError)


class ObstoreStore(ObjectStore):
    """An ObjectStore over any obstore store object."""

    def __init__(self, inner: Any, *, url: str) -> None:
        self._inner = inner
        self._url = url
        _OPEN_STORES.add(self)
        _used.set()

    @classmethod
    def memory(cls) -> ObstoreStore:
        """A fresh, empty in-memory store (unit tests of one layer)."""
        return cls(MemoryStore(), url="memory://")

    @property
    def url(self) -> str:
        return self._url

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        check_get(key, end)
        if end == 0:
            return GetResult(meta=await self.head(key), body=b"")
        options: Any = {} if end is None else {"range": (0, end)}
        try:
            result = await _read(key, lambda: obstore.get_async(self._inner, key, options=options))
        except StoreUnavailable as error:
            if end is None or "range" not in str(error).lower():
                raise
            # Empty objects cannot be read with a range; an unranged read of one is bounded.
            meta = await self.head(key)
            if meta.size != 0:
                raise
            result = await _read(key, lambda: obstore.get_async(self._inner, key))
        body = bytes(await _read(key, result.bytes_async))
        return GetResult(meta=_meta(result.meta), body=body)

    async def head(self, key: str) -> ObjectMeta:
        validate_key(key)
        return _meta(await _read(key, lambda: obstore.head_async(self._inner, key)))

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        check_put(key, body, mode)
        obstore_mode: Any
        if isinstance(mode, Create):
            obstore_mode = "create"
        elif isinstance(mode, Overwrite):
            obstore_mode = "overwrite"
        else:
            obstore_mode = {
                name: value
                for name, value in (("e_tag", mode.e_tag), ("version", mode.version))
                if value is not None
            }
        try:
            result = await obstore.put_async(
                self._inner, key, bytes(body), mode=obstore_mode, use_multipart=False
            )
        except _OBSTORE_ERRORS as error:
            raise _write_error(key, error) from error
        return PutResult(e_tag=result["e_tag"], version=result["version"])

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        check_list(prefix, offset, limit)
        if limit == 0:
            return []
        # obstore lists by whole segments; list the deepest complete directory and filter.
        directory = prefix[: prefix.rfind("/") + 1] if "/" in prefix else ""
        start = max(offset, prefix) if offset is not None else None
        entries: list[ObjectMeta] = []
        try:
            stream = obstore.list(
                self._inner,
                prefix=directory or None,
                offset=start,
                chunk_size=_LIST_PAGE_HINT,
            )
            async for chunk in stream:
                for item in chunk:
                    meta = _meta(item)
                    if meta.key.startswith(prefix) and (offset is None or meta.key > offset):
                        entries.append(meta)
        except _OBSTORE_ERRORS as error:
            raise _read_error(prefix, error) from error
        entries.sort(key=lambda meta: meta.key)
        return entries if limit is None else entries[:limit]

    async def delete(self, key: str) -> None:
        validate_key(key)
        try:
            await obstore.delete_async(self._inner, key)
        except (FileNotFoundError, obx.NotFoundError):
            return
        except _OBSTORE_ERRORS as error:
            raise _write_error(key, error) from error

    async def close(self) -> None:
        """Release the inner store; the store cannot be used afterwards."""
        self.release()

    def release(self) -> None:
        self._inner = None
        _OPEN_STORES.discard(self)


_OPEN_STORES: weakref.WeakSet[ObstoreStore] = weakref.WeakSet()


_EXIT_SETTLE_S = 0.1
_used = threading.Event()


@atexit.register
def _settle_at_exit() -> None:
    for store in list(_OPEN_STORES):
        store.release()
    if _used.is_set():
        threading.Event().wait(_EXIT_SETTLE_S)  # releases the GIL; see the module docstring


async def _read(key: str, call: Callable[[], Awaitable[T]]) -> T:
    try:
        return await call()
    except _OBSTORE_ERRORS as error:
        raise _read_error(key, error) from error


def _meta(raw: Any) -> ObjectMeta:
    modified: datetime.datetime = raw["last_modified"]
    return ObjectMeta(
        key=raw["path"],
        size=raw["size"],
        e_tag=raw.get("e_tag"),
        version=raw.get("version"),
        last_modified_ms=int(modified.timestamp() * 1000),
    )


def _definite_error(key: str, error: BaseException) -> Exception | None:
    """The store's definite answers, or None for anything else."""
    first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
    if isinstance(error, FileNotFoundError | obx.NotFoundError):
        return ObjectNotFound(f"{key}: not found", key=key)
    if isinstance(error, obx.AlreadyExistsError):
        return ObjectAlreadyExists(f"{key}: already exists ({first_line})", key=key)
    if isinstance(error, obx.PreconditionError):
        return PreconditionFailed(f"{key}: precondition failed ({first_line})", key=key)
    if isinstance(error, obx.NotSupportedError):
        return NotSupported(f"{key}: not supported by this store ({first_line})", key=key)
    return None


def _read_error(key: str, error: BaseException) -> Exception:
    definite = _definite_error(key, error)
    if definite is not None:
        return definite
    return StoreUnavailable(f"{key}: {type(error).__name__}: {_summary(error)}")


def _write_error(key: str, error: BaseException) -> Exception:
    definite = _definite_error(key, error)
    if definite is not None:
        return definite
    if isinstance(error, obx.PermissionDeniedError | obx.UnauthenticatedError):
        # Refused before anything was applied.
        return StoreUnavailable(f"{key}: {type(error).__name__}: {_summary(error)}")
    return WriteOutcomeUnknown(
        f"{key}: write outcome unknown after {type(error).__name__}: {_summary(error)}", key=key
    )


def _summary(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else repr(error)

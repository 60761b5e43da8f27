"""A `file://` object store with real cross-process compare-and-swap on ONE host.

For one host's local filesystem only (ext4, xfs, btrfs, tmpfs), NOT for network file systems:
NFS and SMB do not give reliable `flock` exclusion between clients, nor reliably atomic and
exclusive `link`/`rename`. Protocol, invariants FS-1.., crashes: `docs/protocols/file-store.md`.

Layout under the root: `objects/<key>` (one file per object; key segments are directories),
`tmp/<id>.tmp` (writes in flight; same filesystem; never listed) and `locks/NN.lock` (256 stripe
locks, NN = first byte of sha256(key) in hex). An object file is a 37-byte header, `LCF1` + 32
hex digits of a random 128-bit generation id + `\\n`, then the body. The e_tag is the generation
id, new on every write even of identical bytes (inode, mtime and size repeat on ext4, so they are
not used); `version` is None. CREATE links a fsynced temp file to the final name (EEXIST: another
create won). OVERWRITE and IfMatch hold the key's stripe lock (`fcntl.flock` on a fresh fd, which
excludes processes and threads), compare the generation (IfMatch), then write and fsync a temp
file, `os.replace` it and fsync the directory. Reads take no lock: header and body come from one
open fd, which sees exactly one version.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import re
import secrets
import urllib.parse
from collections.abc import Iterator
from typing import Final, TypeAlias

from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
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
    IfMatch,
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

MAGIC: Final = b"LCF1"
GENERATION_HEX_CHARS: Final = 32
HEADER_BYTES: Final = len(MAGIC) + GENERATION_HEX_CHARS + 1  # 37
LOCK_STRIPES: Final = 256  # one per value of the first byte of sha256(key)
NAME_MAX_BYTES: Final = 255  # longest file name (one key segment) on Linux file systems
LINK_ATTEMPTS_MAX: Final = 2  # a directory that vanished between makedirs and link: once more

_HEADER = re.compile(rb"LCF1([0-9a-f]{32})\n")
_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)
_NOTHING_THERE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG})
_Metas: TypeAlias = list[ObjectMeta]  # `list` is a method name inside FileStore


class FileStore(ObjectStore):
    """Objects as files under `root`, for processes and threads of one host."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self._root = os.path.abspath(os.fspath(root))
        self._objects = os.path.join(self._root, "objects")
        self._tmp = os.path.join(self._root, "tmp")
        self._locks = os.path.join(self._root, "locks")
        self._fsync = fsync
        self._layout_ready = False

    @property
    def url(self) -> str:
        return "file://" + urllib.parse.quote(self._root)  # round-trips through open_store

    async def get(self, key: str, *, end: int | None = None) -> GetResult:
        check_get(key, end)
        path = self._object_path(key)
        return await asyncio.to_thread(self._read_sync, key, path, end)

    async def head(self, key: str) -> ObjectMeta:
        path = self._object_path(key)
        return (await asyncio.to_thread(self._read_sync, key, path, 0)).meta

    async def put(self, key: str, body: bytes, mode: PutMode) -> PutResult:
        check_put(key, body, mode)
        path = self._object_path(key)
        if isinstance(mode, Create):
            return await asyncio.to_thread(self._create_sync, key, path, body)
        return await asyncio.to_thread(self._replace_sync, key, path, body, mode)

    async def list(
        self, prefix: str, *, offset: str | None = None, limit: int | None = None
    ) -> list[ObjectMeta]:
        check_list(prefix, offset, limit)  # FS-11
        return await asyncio.to_thread(self._list_sync, prefix, offset, limit)

    async def delete(self, key: str) -> None:
        path = self._object_path(key)
        await asyncio.to_thread(self._delete_sync, key, path)

    async def sweep_temp_files(self, older_than_s: float) -> int:
        """Remove temp files (left by crashed writers) older than `older_than_s`; count them.

        `older_than_s` must exceed the longest write (an hour is ample): removing the temp file of
        a write in flight fails it. Age is measured on the file system's clock (a probe's mtime).
        """
        if older_than_s < 0:
            raise InvalidArgument(f"sweep {self.url}: older_than_s is {older_than_s}; need >= 0")
        return await asyncio.to_thread(self._sweep_sync, older_than_s)

    def _object_path(self, key: str) -> str:
        validate_key(key)  # FS-11: before any file system call
        segments = key.split("/")
        longest = max(len(segment.encode("utf-8")) for segment in segments)
        if longest > NAME_MAX_BYTES:
            raise InvalidArgument(f"{key}: a segment is {longest} bytes; maximum {NAME_MAX_BYTES}")
        return os.path.join(self._objects, *segments)

    def _ensure_layout(self) -> None:
        if self._layout_ready:
            return
        try:
            for directory in (self._objects, self._tmp, self._locks):
                os.makedirs(directory, exist_ok=True)
            self._sync_dir(self._root)
        except OSError as error:
            raise StoreUnavailable(f"{self.url}: cannot make the layout: {error}") from error
        self._layout_ready = True

    @contextlib.contextmanager
    def _stripe_lock(self, key: str) -> Iterator[None]:
        """Hold the key's stripe lock. FS-4: flock on a fresh fd excludes processes and threads."""
        stripe = hashlib.sha256(key.encode("utf-8")).digest()[0] % LOCK_STRIPES
        lock_path = os.path.join(self._locks, f"{stripe:02x}.lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise StoreUnavailable(f"{key}: cannot open lock {lock_path}: {error}") from error
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as error:
                raise StoreUnavailable(f"{key}: cannot lock {lock_path}: {error}") from error
            yield
        finally:
            os.close(fd)  # closing the only fd of this open file description releases the flock

    def _sync_dir(self, directory: str) -> None:
        if not self._fsync:
            return
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _sync_parents(self, path: str, made_dirs: bool) -> None:
        """FS-9: fsync the directory holding `path`, and, if we made directories, their parents."""
        directory = os.path.dirname(path)
        self._sync_dir(directory)
        while made_dirs and directory != self._objects:
            directory = os.path.dirname(directory)
            self._sync_dir(directory)

    def _make_parents(self, key: str, path: str) -> bool:
        """Make the directories above `path`; return whether any may have been made."""
        parent = os.path.dirname(path)
        try:
            if os.path.isdir(parent):
                return False
            os.makedirs(parent, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as error:
            raise _conflict(key) from error
        except OSError as error:
            raise StoreUnavailable(f"{key}: cannot create directory {parent}: {error}") from error
        return True

    def _read_sync(self, key: str, path: str, end: int | None) -> GetResult:
        """FS-5: header, size and body all come from one open fd, so from one version."""
        try:
            with open(path, "rb") as file:
                stat = os.fstat(file.fileno())
                generation = _parse_header(key, file.read(HEADER_BYTES))
                size = stat.st_size - HEADER_BYTES
                wanted = size if end is None else min(end, size)
                body = file.read(wanted)
        except _MISSING as error:
            raise ObjectNotFound(f"{key}: no such object", key=key) from error
        except OSError as error:
            raise StoreUnavailable(f"{key}: read failed: {error}") from error
        if len(body) != wanted:
            raise CorruptRecord(f"{key}: read {len(body)} of {wanted} body bytes", key=key)
        meta = ObjectMeta(key, size, generation, None, stat.st_mtime_ns // 1_000_000)
        return GetResult(meta=meta, body=body)

    def _list_sync(self, prefix: str, offset: str | None, limit: int | None) -> _Metas:
        found: _Metas = []
        if limit == 0:
            return found
        start_key = prefix.rpartition("/")[0]  # the deepest complete directory: "a/b/c" -> a/b
        start = os.path.join(self._objects, *start_key.split("/")) if start_key else self._objects
        for key, path in self._walk(start, start_key, prefix, offset):
            try:
                found.append(self._read_sync(key, path, 0).meta)
            except ObjectNotFound:
                continue  # deleted while we walked
            if limit is not None and len(found) >= limit:
                break
        return found

    def _walk(
        self, directory: str, dir_key: str, prefix: str, offset: str | None
    ) -> Iterator[tuple[str, str]]:
        """Yield (key, path) of files under `directory` in key order (FS-7).

        Sorting a directory's entries by name, with "/" appended to directory names, gives key
        order: every key below directory "d" starts with "d/", and no sibling name contains "/".
        """
        try:
            with os.scandir(directory) as scan:
                entries = [
                    (entry.name + "/" if entry.is_dir(follow_symlinks=False) else entry.name, entry)
                    for entry in scan
                    if entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False)
                ]
        except OSError as error:
            if error.errno in _NOTHING_THERE:
                return  # no such directory, or it was removed while we walked
            raise StoreUnavailable(f"list {prefix!r}: cannot read {directory}: {error}") from error
        entries.sort(key=lambda pair: pair[0])
        base = dir_key + "/" if dir_key else ""
        for sort_name, entry in entries:
            key = base + sort_name
            if not sort_name.endswith("/"):
                if key.startswith(prefix) and (offset is None or key > offset):
                    yield key, entry.path
                continue
            if not (key.startswith(prefix) or prefix.startswith(key)):
                continue  # no key below can start with the prefix
            if offset is not None and key < offset and not offset.startswith(key):
                continue  # every key below sorts before the offset
            yield from self._walk(entry.path, key[:-1], prefix, offset)

    def _write_temp(self, key: str, body: bytes) -> tuple[str, str]:
        """Write header + body to a new temp file (fsynced); return its path and generation."""
        generation = secrets.token_hex(GENERATION_HEX_CHARS // 2)  # FS-2: new on every write
        tmp = os.path.join(self._tmp, generation + ".tmp")
        created = False
        try:
            with open(tmp, "xb") as file:
                created = True
                file.write(MAGIC + generation.encode("ascii") + b"\n")
                file.write(body)
                file.flush()
                if self._fsync:
                    os.fsync(file.fileno())  # FS-9: the body is durable before it gets a name
        except OSError as error:
            if created:
                _unlink_quietly(tmp)
            raise StoreUnavailable(f"{key}: cannot write temp file {tmp}: {error}") from error
        return tmp, generation

    def _create_sync(self, key: str, path: str, body: bytes) -> PutResult:
        self._ensure_layout()
        tmp, generation = self._write_temp(key, body)
        try:
            made_dirs = self._link_exclusive(key, tmp, path)
        finally:
            _unlink_quietly(tmp)  # after a link the object keeps its own name; a stray is swept
        try:
            self._sync_parents(path, made_dirs)
        except OSError as error:
            raise _unknown(key, "fsync after link", error) from error
        return PutResult(e_tag=generation, version=None)

    def _link_exclusive(self, key: str, tmp: str, path: str) -> bool:
        """FS-1: give the temp file the final name only if no object has it."""
        made_dirs = False
        for attempt in range(1, LINK_ATTEMPTS_MAX + 1):
            made_dirs = self._make_parents(key, path) or made_dirs
            try:
                os.link(tmp, path)
                return made_dirs
            except FileExistsError as error:
                if os.path.isdir(path):
                    raise _conflict(key) from error
                raise ObjectAlreadyExists(f"{key}: object already exists", key=key) from error
            except FileNotFoundError as error:
                if attempt == LINK_ATTEMPTS_MAX:  # FS-8: at the link, the outcome is unknown
                    raise _unknown(key, "link", error) from error
            except OSError as error:
                raise _unknown(key, "link", error) from error
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _replace_sync(
        self, key: str, path: str, body: bytes, mode: Overwrite | IfMatch
    ) -> PutResult:
        self._ensure_layout()
        with self._stripe_lock(key):
            if isinstance(mode, IfMatch):
                _check_match(key, self._read_sync(key, path, 0).meta, mode)  # FS-3
            made_dirs = self._make_parents(key, path)
            tmp, generation = self._write_temp(key, body)
            try:
                os.replace(tmp, path)
            except OSError as error:
                _unlink_quietly(tmp)
                if isinstance(error, IsADirectoryError):
                    raise _conflict(key) from error
                raise _unknown(key, "replace", error) from error
            try:
                self._sync_parents(path, made_dirs)
            except OSError as error:
                raise _unknown(key, "fsync after replace", error) from error
        return PutResult(e_tag=generation, version=None)

    def _delete_sync(self, key: str, path: str) -> None:
        self._ensure_layout()
        with self._stripe_lock(key):
            try:
                os.unlink(path)  # FS-10; empty directories stay, so racing creates never lose one
            except _MISSING:
                return
            except OSError as error:
                raise _unknown(key, "unlink", error) from error
            try:
                self._sync_dir(os.path.dirname(path))
            except OSError as error:
                raise _unknown(key, "fsync after unlink", error) from error

    def _sweep_sync(self, older_than_s: float) -> int:
        self._ensure_layout()
        removed = 0
        try:
            cutoff_ns = self._file_system_now_ns() - int(older_than_s * 1_000_000_000)
            with os.scandir(self._tmp) as scan:
                for entry in scan:
                    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                        if entry.stat(follow_symlinks=False).st_mtime_ns < cutoff_ns:
                            os.unlink(entry.path)
                            removed += 1
        except OSError as error:
            raise StoreUnavailable(f"sweep {self.url}: {error}") from error
        return removed

    def _file_system_now_ns(self) -> int:
        """The file system's current time: the mtime of a probe file made now."""
        probe = os.path.join(self._tmp, secrets.token_hex(16) + ".probe")
        with open(probe, "xb") as file:
            now_ns = os.fstat(file.fileno()).st_mtime_ns
        os.unlink(probe)
        return now_ns


def _parse_header(key: str, header: bytes) -> str:
    """The generation id of a well-formed header; CorruptRecord otherwise (FS-6)."""
    match = _HEADER.fullmatch(header)
    if match is None:
        raise CorruptRecord(
            f"{key}: header is not {MAGIC.decode()} + {GENERATION_HEX_CHARS} hex digits + "
            f"newline (read {len(header)} bytes: {header[:HEADER_BYTES]!r})",
            key=key,
        )
    return match.group(1).decode("ascii")


def _check_match(key: str, current: ObjectMeta, mode: IfMatch) -> None:
    if mode.version is not None:  # this backend has no versions: none can match
        raise PreconditionFailed(f"{key}: IfMatch names version {mode.version!r}", key=key)
    if mode.e_tag != current.e_tag:
        raise PreconditionFailed(f"{key}: e_tag is {current.e_tag}, not {mode.e_tag}", key=key)


def _conflict(key: str) -> NotSupported:
    return NotSupported(
        f"{key}: an object and a prefix directory of other objects would share this path; this "
        "backend cannot store both (a prefix of the key is an object, or objects are under it)",
        key=key,
    )


def _unknown(key: str, step: str, error: OSError) -> WriteOutcomeUnknown:  # FS-8
    return WriteOutcomeUnknown(f"{key}: {step} failed; the write may have landed: {error}", key=key)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)

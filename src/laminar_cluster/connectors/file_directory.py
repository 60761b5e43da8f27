"""The plain-directory target of the file sinks (docs/protocols/file-sink.md, "Plain
directory", FD-1 .. FD-3): plain files that DuckDB, Polars and pandas read in place.

Each delivery with records is one file `{root}/{prefix}checkpoint={id:020d}/node={id:020d}.ext`,
created exclusively and atomically: the whole body goes to a temp file in the same directory
(named `.{final name}.{uuid}.tmp`: globs of `*.parquet`/`*.jsonl` and pyarrow's dataset
discovery skip it), which is fsynced, then hard-linked to the final name (`link` fails if that
name exists: the delivery was there already, False), unlinked, and the directory fsynced. A
crash leaves at most that delivery's temp file, never a visible partial file; the next delivery
into the same directory removes temp files not modified for `TEMP_AGE_MS_MAX`.

The file system must support hard links with an atomic "fails if the name exists" (local
POSIX file systems do; so does NFSv3+). The blocking calls run in a worker thread under the
deadline; one cut off by the deadline may still finish, which a retry then sees (False).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import Final, TypeVar

from laminar_cluster.clock import Clock, retry_until
from laminar_cluster.connectors.delivery import Delivery
from laminar_cluster.connectors.file_encoding import FileFormat, encode_within
from laminar_cluster.connectors.file_paths import (
    bind_job,
    check_ids,
    delivery_path,
    parse_checkpoint_directory,
    parse_delivery_path,
    validate_sink_prefix,
)
from laminar_cluster.errors import StoreUnavailable

T = TypeVar("T")
TEMP_SUFFIX: Final = ".tmp"
TEMP_AGE_MS_MAX: Final = 10 * 60 * 1000  # an older temp file is a crashed writer's leftover
CHECKPOINT_DIRECTORIES_MAX: Final = 10_000_000  # a bound on the directories one search visits


class DirectorySinkWriter:
    """The `SinkWriter` of a file sink whose target is a plain local directory `root`."""

    def __init__(self, root: str, clock: Clock, *, prefix: str, file_format: FileFormat) -> None:
        self.root = root
        self.clock = clock
        self.prefix = validate_sink_prefix(prefix)
        self.file_format = file_format
        self.job: str | None = None  # the job this writer serves, bound on first use

    async def deliver(self, delivery: Delivery, *, deadline: float) -> bool:
        """Create the delivery's file: True if this call created it, False if it was there
        already (a replay; its bytes stay, FD-2) or the delivery is empty (no file)."""
        self.job = bind_job(self.job, delivery.job, f"{self.root}/{self.prefix}")
        check_ids(delivery.checkpoint_id, delivery.node_id)
        if not delivery.records:
            return False
        key = delivery_path(
            self.prefix, self.file_format.extension, delivery.checkpoint_id, delivery.node_id
        )
        path = os.path.join(self.root, *key.split("/"))
        body = await encode_within(
            self.clock, self.file_format, delivery.records, key=path, deadline=deadline
        )
        temp = f".{os.path.basename(path)}.{self.clock.uuid4().hex}{TEMP_SUFFIX}"
        now_ms = self.clock.wall_ms()
        return await self._run(f"create {path}", deadline, create_file, path, temp, body, now_ms)

    async def delivered_through(self, job: str, *, deadline: float) -> int | None:
        """The highest checkpoint id with a file of this sink under the prefix, None if none.
        Reads the prefix directory, then checkpoint directories from the newest down until one
        holds a delivery file."""
        self.job = bind_job(self.job, job, f"{self.root}/{self.prefix}")
        base = os.path.join(self.root, *self.prefix.split("/"))
        return await self._run(
            f"list {base}", deadline, newest_checkpoint, base, self.prefix, self.file_format
        )

    async def close(self) -> None:
        """Nothing to release."""

    async def _run(self, what: str, deadline: float, call: Callable[..., T], *args: object) -> T:
        """`call(*args)` in a worker thread, retried on StoreUnavailable within the deadline."""

        async def attempt() -> T:
            return await asyncio.to_thread(call, *args)

        return await retry_until(attempt, what=what, clock=self.clock, deadline=deadline)


def create_file(path: str, temp_name: str, body: bytes, now_ms: int) -> bool:
    """FD-1: create `path` holding `body` exclusively and atomically; False if it exists.
    StoreUnavailable for a file system error: before the link nothing visible changed; after it
    (the directory fsync failed) the file is there and a retry returns False."""
    directory = os.path.dirname(path)
    temp = os.path.join(directory, temp_name)
    try:
        _make_directories(directory)
        sweep_temp_files(directory, now_ms)
        _write_synced(temp, body)
        try:
            linked = _link(temp, path)
        finally:
            _unlink_quietly(temp)
        _sync_directory(directory)
    except OSError as error:
        raise StoreUnavailable(f"{path}: cannot create the file: {error}") from error
    return linked


def _link(temp: str, path: str) -> bool:
    """The commit point: True if `path` now names `temp`'s file, False if it existed."""
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    return True


def _write_synced(temp: str, body: bytes) -> None:
    try:
        with open(temp, "xb") as file:
            file.write(body)
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        _unlink_quietly(temp)
        raise


def _make_directories(directory: str) -> None:
    """Make `directory` and its missing parents, fsyncing the parent of each one made."""
    missing: list[str] = []
    probe = directory
    while not os.path.isdir(probe) and len(missing) < directory.count("/"):
        missing.append(probe)
        probe = os.path.dirname(probe)
    for made in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(made)
        _sync_directory(os.path.dirname(made))


def sweep_temp_files(directory: str, now_ms: int) -> None:
    """Remove the temp files in `directory` not modified for TEMP_AGE_MS_MAX (FD-3). Removing
    a live writer's temp file is safe anyway: its link then fails and it retries."""
    with os.scandir(directory) as entries:
        for entry in entries:
            if not (entry.name.startswith(".") and entry.name.endswith(TEMP_SUFFIX)):
                continue
            with contextlib.suppress(OSError):
                if now_ms - entry.stat(follow_symlinks=False).st_mtime_ns // 1_000_000 > (
                    TEMP_AGE_MS_MAX
                ):
                    os.unlink(entry.path)


def newest_checkpoint(base: str, prefix: str, file_format: FileFormat) -> int | None:
    """The highest checkpoint id with a delivery file under `base` (the prefix's directory)."""
    try:
        names = os.listdir(base)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise StoreUnavailable(f"{base}: cannot list: {error}") from error
    found = ((parse_checkpoint_directory(name), name) for name in names)
    checkpoints = sorted(((c, n) for c, n in found if c is not None), reverse=True)
    for checkpoint_id, name in checkpoints[:CHECKPOINT_DIRECTORIES_MAX]:
        if _holds_a_delivery(os.path.join(base, name), f"{prefix}{name}/", prefix, file_format):
            return checkpoint_id
    return None


def _holds_a_delivery(directory: str, key_prefix: str, prefix: str, fmt: FileFormat) -> bool:
    """Whether `directory` holds a regular file named as one of this sink's deliveries."""
    try:
        with os.scandir(directory) as entries:
            return any(
                parse_delivery_path(prefix, fmt.extension, key_prefix + entry.name) is not None
                and entry.is_file(follow_symlinks=False)
                for entry in entries
            )
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        raise StoreUnavailable(f"{directory}: cannot list: {error}") from error


def _sync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)

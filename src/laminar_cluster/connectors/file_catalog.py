"""The catalog of a file source: every file found under its prefix, in the order found
(docs/jobs.md, "File sources").

A file is a *split*: the catalog gives it a sequence number `seq` (0, 1, ... in the order the
files were found) and it belongs to vnode `key_hash(name) % 256`, whose owner reads it. The
catalog is a chain of create-only pages in the cluster's store,

    events/files/page=<page:020>.json    {"version":1,"page":k,"first_seq":s,"files":[...]}

each page naming the files one discovery found new (ascending names), so a file's `seq` never
changes once written and every node derives the same splits from the same pages. The leader
appends pages (`FileDiscovery`); a page a racing writer created first is read and the new
files computed again against it, so a file is catalogued once. Readers (`refresh`) read pages
from the next one they lack until one is absent: nothing new costs one GET.

A page read is checked strictly: its number and first seq continue the chain, names are keys
under the source prefix, none catalogued twice; CorruptRecord otherwise.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from typing import Final, Literal

from laminar_cluster.assignment.vnode import VNODE_COUNT
from laminar_cluster.clock import Clock, retry_until
from laminar_cluster.codec import U64, Record, decode, encode_checked
from laminar_cluster.connectors.eventlog_reader import get_or_none
from laminar_cluster.connectors.eventlog_records import key_hash
from laminar_cluster.connectors.eventlog_writer import create_settled
from laminar_cluster.coordinator.objects import gather_bounded
from laminar_cluster.errors import CorruptRecord, StoreUnavailable
from laminar_cluster.store import ObjectStore

FILES_PREFIX: Final = "events/files/"
PAGE_FILES_MAX: Final = 1_000
PAGE_BYTES_MAX: Final = 1024 * 1024
PAGES_AHEAD: Final = 8  # pages read at once while catching up
# Pages another writer creates first that one append steps over before it gives up.
PAGE_RACES_MAX: Final = 16


class CatalogFile(Record):
    """One file of the source: its key in the source's store, size and entity tag when found."""

    name: str
    size: U64
    e_tag: str | None


class CatalogPage(Record):
    """Page `page` of the catalog: files `first_seq ..< first_seq + len(files)`."""

    version: Literal[1]
    page: U64
    first_seq: U64
    files: tuple[CatalogFile, ...]


def page_path(page: int) -> str:
    """The key of catalog page `page`."""
    return f"{FILES_PREFIX}page={page:020d}.json"


def vnode_of_file(name: str) -> int:
    """The vnode whose owner reads the file `name`."""
    return key_hash(name) % VNODE_COUNT


class FileCatalog:
    """What one process knows of the catalog (module docstring). `prefix` is the source's."""

    def __init__(self, store: ObjectStore, clock: Clock, prefix: str) -> None:
        self.store, self.clock, self.prefix = store, clock, prefix
        self.files: list[CatalogFile] = []  # index: seq
        self.names: set[str] = set()
        self._pages = 0
        self._by_vnode: dict[int, list[int]] = {}  # vnode -> its files' seqs, ascending

    async def refresh(self, *, deadline: float) -> bool:
        """Read the pages written since the last refresh; whether any was. Nothing new costs
        one GET; after a page is found, the next ones are read two, then four, up to
        `PAGES_AHEAD` at a time (a start catching up on a long catalog), up to the first that
        is absent: one new page costs three GETs."""
        found = False
        window = 1
        while True:
            first = self._pages
            calls = [functools.partial(self._get_page, first + i, deadline) for i in range(window)]
            pages = await gather_bounded(calls, limit=PAGES_AHEAD)
            for page in pages:
                if page is None:
                    return found
                self._learn(page)
                found = True
            window = min(2 * window, PAGES_AHEAD)

    async def _get_page(self, page: int, deadline: float) -> CatalogPage | None:
        path = page_path(page)
        result = await get_or_none(self.store, path, clock=self.clock, deadline=deadline)
        if result is None:
            return None
        return decode(result.body, CatalogPage, key=path, max_bytes=PAGE_BYTES_MAX)

    def _learn(self, page: CatalogPage) -> None:
        path = page_path(self._pages)
        if page.page != self._pages or page.first_seq != len(self.files) or not page.files:
            raise CorruptRecord(
                f"{path}: holds page {page.page} from seq {page.first_seq} with "
                f"{len(page.files)} files; the chain continues at seq {len(self.files)}",
                key=path,
            )
        seen: set[str] = set()
        for file in page.files:  # every check before anything is learned: none is trusted
            name = file.name
            if not name.startswith(self.prefix) or name in self.names or name in seen:
                raise CorruptRecord(
                    f"{path}: file {name!r} is not under {self.prefix!r} or catalogued twice",
                    key=path,
                )
            seen.add(name)
        for file in page.files:
            self.names.add(file.name)
            self._by_vnode.setdefault(vnode_of_file(file.name), []).append(len(self.files))
            self.files.append(file)
        self._pages += 1

    async def append(self, found: Sequence[CatalogFile], *, deadline: float) -> int:
        """Catalogue the files of `found` not catalogued yet, as one new page; how many were
        new. A page another writer created first is learned and the rest tried again."""
        for _ in range(PAGE_RACES_MAX):
            await self.refresh(deadline=deadline)
            new = sorted((f for f in found if f.name not in self.names), key=lambda f: f.name)
            if not new:
                return 0
            new = new[:PAGE_FILES_MAX]
            page = CatalogPage(
                version=1, page=self._pages, first_seq=len(self.files), files=tuple(new)
            )
            path = page_path(self._pages)
            body = encode_checked(page, what=path, max_bytes=PAGE_BYTES_MAX)
            resolution = await create_settled(self.store, path, body)
            if resolution.ours:
                self._learn(page)
                return len(new)
        raise StoreUnavailable(
            f"{FILES_PREFIX}: {PAGE_RACES_MAX} pages were created by others during one append"
        )

    def next_file(self, vnode: int, seq: int) -> int | None:
        """The first file of `vnode` with a seq of at least `seq`, None if none is known."""
        seqs = self._by_vnode.get(vnode, [])
        index = bisect.bisect_left(seqs, seq)
        return seqs[index] if index < len(seqs) else None

    def pending(self, vnode: int, seq: int) -> int:
        """How many known files of `vnode` have a seq of at least `seq`."""
        seqs = self._by_vnode.get(vnode, [])
        return len(seqs) - bisect.bisect_left(seqs, seq)


LIST_PAGE_MAX: Final = 1_000


async def discover(catalog: FileCatalog, files: ObjectStore, *, deadline: float) -> int:
    """List the source prefix of `files` (a LIST per 1,000 keys) and catalogue what is new
    (`FileCatalog.append`); how many files were new. Keys ending in `/` are not files."""
    found: list[CatalogFile] = []
    offset: str | None = None
    while True:
        page = await retry_until(
            functools.partial(files.list, catalog.prefix, offset=offset, limit=LIST_PAGE_MAX),
            what=f"list {catalog.prefix}",
            clock=catalog.clock,
            deadline=deadline,
        )
        found.extend(
            CatalogFile(name=meta.key, size=meta.size, e_tag=meta.e_tag)
            for meta in page
            if not meta.key.endswith("/")
        )
        if len(page) < LIST_PAGE_MAX:
            break
        offset = page[-1].key
    new = [file for file in found if file.name not in catalog.names]
    added = 0
    while new:
        added += await catalog.append(new, deadline=deadline)
        new = [file for file in new if file.name not in catalog.names]
    return added

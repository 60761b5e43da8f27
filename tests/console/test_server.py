"""The console's server (console/server.py) over real HTTP: the page and its two files from the
package, the JSON document, 404 elsewhere; the store is read at most once per refresh interval
however many requests come; and the feed on an empty store."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from laminar_cluster.clock import RealClock, SimulatedClock
from laminar_cluster.console import CachedFeed, start_console
from laminar_cluster.store import open_store
from laminar_cluster.views.console_feed import ConsoleFeed


class CountingFeed:
    """A feed that counts its reads (the `ConsoleFeed` interface `CachedFeed` uses)."""

    def __init__(self) -> None:
        self.reads = 0

    async def read(self) -> dict[str, Any]:
        self.reads += 1
        return {"read": self.reads}


async def _get(url: str) -> tuple[int, str, bytes]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.headers["Content-Type"], await response.read()


def test_page_files_document_and_404() -> None:
    async def main() -> None:
        feed = CountingFeed()
        cached = CachedFeed(feed, RealClock(), refresh_s=60.0)
        server = await start_console(cached, "127.0.0.1", 0)
        try:
            base = server.url
            status, kind, body = await _get(base)
            assert (status, kind) == (200, "text/html")
            assert b'<script src="/static/console.js">' in body
            for name, expected in (("console.js", "text/javascript"), ("console.css", "text/css")):
                status, kind, body = await _get(f"{base}static/{name}")
                assert (status, kind) == (200, expected) and len(body) > 500
            status, kind, body = await _get(f"{base}api/cluster")
            assert (status, kind, body) == (200, "application/json; charset=utf-8", b'{"read": 1}')
            for path in ("static/index.html", "static/../server.py", "static/x.js", "api", "x"):
                assert (await _get(f"{base}{path}"))[0] == 404, path
        finally:
            await server.close()

    asyncio.run(main())


def test_the_store_is_read_at_most_once_per_refresh_interval() -> None:
    async def main() -> None:
        clock = SimulatedClock(seed=1)
        feed = CountingFeed()
        cached = CachedFeed(feed, clock, refresh_s=1.0)
        documents = await asyncio.gather(*(cached.latest() for _ in range(20)))
        assert feed.reads == 1 and all(doc == {"read": 1} for doc in documents)
        clock.advance(0.9)
        assert await cached.latest() == {"read": 1}
        clock.advance(0.1)
        assert await cached.latest() == {"read": 2}
        assert feed.reads == cached.refreshes == 2

    asyncio.run(main())


def test_the_feed_of_an_empty_store_has_every_section_and_no_write() -> None:
    async def main() -> dict[str, Any]:
        store = open_store("memory://")
        try:
            return await ConsoleFeed(store, RealClock()).read()
        finally:
            await store.close()

    document = asyncio.run(main())
    assert document["leader"] is None and document["members"] == []
    assert document["vnodes"] is None and document["assignment"] is None
    assert document["history"] == {"terms": [], "checkpoints": [], "decisions": []}
    assert document["rates"]["total_per_s"] == dict.fromkeys(document["rates"]["kinds"], 0)
    assert document["ok"] is True
    assert document["cost"]["total"] == sum(document["cost"]["requests"].values()) > 0
    assert set(document["cost"]["requests"]) <= {"get", "head", "list"}

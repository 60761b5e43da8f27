"""The console's web server (issue 17): a read-only page per cluster, served by aiohttp.

Routes:

* `GET /`: the page (`static/index.html`), plain HTML with `console.css` and `console.js`
  served from the package (no build step, nothing fetched from elsewhere);
* `GET /static/{name}`: those two files;
* `GET /api/cluster`: the latest `views.console_feed` document as JSON.

The page polls `/api/cluster` every second. The server reads the store only when asked and at
most once per `refresh_s`: every request within that interval gets the cached document, so any
number of open pages cost one refresh per interval, and an unwatched console reads nothing.
Refreshes are serialized by a lock (one read in flight at a time).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final, Protocol

from aiohttp import web

from laminar_cluster.clock import Clock
from laminar_cluster.metrics.server import start_site

REFRESH_S_DEFAULT: Final = 1.0
STATIC_FILES: Final = {
    "index.html": "text/html",
    "console.css": "text/css",
    "console.js": "text/javascript",
}


class Feed(Protocol):
    """What the server reads documents from (`views.console_feed.ConsoleFeed`)."""

    async def read(self) -> dict[str, Any]: ...


@dataclass
class CachedFeed:
    """The feed behind a lock, refreshed at most once per `refresh_s`."""

    feed: Feed
    clock: Clock
    refresh_s: float = REFRESH_S_DEFAULT
    document: dict[str, Any] | None = None
    read_at_s: float | None = None
    refreshes: int = 0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def latest(self) -> dict[str, Any]:
        async with self._lock:
            now = self.clock.monotonic()
            fresh = self.read_at_s is not None and now - self.read_at_s < self.refresh_s
            if self.document is None or not fresh:
                self.document = await self.feed.read()
                self.read_at_s = self.clock.monotonic()
                self.refreshes += 1
            return self.document


def _static(name: str) -> bytes:
    return resources.files("laminar_cluster.console").joinpath("static", name).read_bytes()


def console_app(cached: CachedFeed) -> web.Application:
    """The routes of the module docstring."""

    async def page(_: web.Request) -> web.Response:
        return web.Response(body=_static("index.html"), content_type="text/html")

    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        content_type = STATIC_FILES.get(name)
        if content_type is None or name == "index.html":
            raise web.HTTPNotFound()
        return web.Response(body=_static(name), content_type=content_type)

    async def cluster(_: web.Request) -> web.Response:
        document = await cached.latest()
        return web.Response(
            text=json.dumps(document), content_type="application/json", charset="utf-8"
        )

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/static/{name}", static)
    app.router.add_get("/api/cluster", cluster)
    return app


@dataclass(slots=True)
class ConsoleServer:
    """A running console; `url` names its page."""

    host: str
    port: int
    runner: web.AppRunner

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    async def close(self) -> None:
        await self.runner.cleanup()


async def start_console(cached: CachedFeed, host: str, port: int) -> ConsoleServer:
    """Serve the console on `host:port` (0: a free port) until `close()`."""
    runner, bound = await start_site(console_app(cached), host, port, "console")
    return ConsoleServer(host=host, port=bound, runner=runner)

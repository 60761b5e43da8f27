"""`serve`: the HTTP endpoint of one node process (`--metrics-port`, `--metrics-host`).

An aiohttp server on the node's own event loop, with three paths and nothing else:

* `GET /metrics`: the Prometheus text format of the `NodeMetrics` registry;
* `GET /livez`: 200 `ok` while the process's event loop answers (a wedged loop answers
  nothing, which is what a liveness probe must see);
* `GET /readyz`: 200 `ready`, or 503 with `not ready: <one-line reason>` from the readiness
  callback (metrics.health.node_readiness for a node);

every other path is 404. Port 0 asks the kernel for a free port; the returned `MetricsServer`
reports the bound one and `close()` frees it (idempotent). The default address is the loopback
interface: exposing the endpoint beyond the machine is an explicit choice (`--metrics-host
0.0.0.0`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.metrics.node_metrics import NodeMetrics

DEFAULT_HOST: Final = "127.0.0.1"
PORT_MAX: Final = 65_535
PLAIN_TEXT: Final = "text/plain; charset=utf-8"
# None: ready; else why not, in one line.
Readiness = Callable[[], str | None]


def always_ready() -> str | None:
    """The readiness of a process with nothing to wait for."""
    return None


@dataclass(slots=True)
class MetricsServer:
    """A running endpoint; `port` is the bound port (never 0)."""

    host: str
    port: int
    _runner: web.AppRunner
    _closed: bool = field(default=False)

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def url(self) -> str:
        """The metrics path (what a scraper is given)."""
        return f"{self.base_url}/metrics"

    async def close(self) -> None:
        """Stop serving and release the socket; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        await self._runner.cleanup()

    async def __aenter__(self) -> MetricsServer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


def metrics_app(metrics: NodeMetrics, readiness: Readiness = always_ready) -> web.Application:
    """The three routes (module docstring); aiohttp answers 404 for every other path."""

    async def metrics_page(_: web.Request) -> web.Response:
        return web.Response(
            body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def livez(_: web.Request) -> web.Response:
        return web.Response(text="ok\n", headers={"Content-Type": PLAIN_TEXT})

    async def readyz(_: web.Request) -> web.Response:
        reason = readiness()
        if reason is None:
            return web.Response(text="ready\n", headers={"Content-Type": PLAIN_TEXT})
        line = " ".join(reason.split())  # one line, whatever the reason holds
        return web.Response(
            status=503, text=f"not ready: {line}\n", headers={"Content-Type": PLAIN_TEXT}
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics_page)
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    return app


async def serve(
    metrics: NodeMetrics,
    port: int,
    host: str = DEFAULT_HOST,
    *,
    readiness: Readiness = always_ready,
) -> MetricsServer:
    """Serve `metrics` and the health paths on `host:port` (0: a free port) until `close()`."""
    runner, bound = await start_site(metrics_app(metrics, readiness), host, port, "metrics")
    return MetricsServer(host=host, port=bound, _runner=runner)


async def start_site(
    app: web.Application, host: str, port: int, what: str
) -> tuple[web.AppRunner, int]:
    """Serve `app` on `host:port` (0: a free port): its runner and the bound port. An address
    that cannot be bound is an InvalidArgument naming `what` (the caller picks another)."""
    if not 0 <= port <= PORT_MAX:
        raise InvalidArgument(f"{what} port must be within 0..{PORT_MAX}, not {port}")
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as error:
        await runner.cleanup()
        raise InvalidArgument(f"{what} endpoint {host}:{port}: cannot listen: {error}") from error
    return runner, int(runner.addresses[0][1])

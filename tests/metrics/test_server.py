"""`serve` (metrics/server.py): the Prometheus text format, `/livez` and `/readyz` over real HTTP
on a free port; every other path 404."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import aiohttp
import pytest

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.metrics import NodeMetrics, serve


async def _get(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, response.headers["Content-Type"], await response.text()


def test_serves_the_text_format_on_a_free_port_until_closed() -> None:
    async def main() -> str:
        metrics = NodeMetrics()
        metrics.rotated()
        server = await serve(metrics, 0)
        try:
            assert server.port != 0 and server.host == "127.0.0.1"
            status, content_type, body = await _get(server.url)
            assert status == 200
            assert content_type.startswith("text/plain")
            assert "# TYPE laminar_leader gauge" in body
            assert "laminar_rotations_total 1.0" in body
            assert "laminar_placement_blast_radius_ratio" in body
            metrics.rotated()  # served live, not a snapshot
            assert "laminar_rotations_total 2.0" in (await _get(server.url))[2]
        finally:
            await server.close()
        await server.close()  # idempotent
        return server.url

    url = asyncio.run(main())
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=2)


def test_livez_readyz_and_404_for_every_other_path() -> None:
    reason: list[str | None] = ["the process lease is not held\n(fenced)"]

    async def main() -> None:
        async with await serve(NodeMetrics(), 0, readiness=lambda: reason[0]) as server:
            base = server.base_url
            assert await _get(f"{base}/livez") == (200, "text/plain; charset=utf-8", "ok\n")
            status, _, body = await _get(f"{base}/readyz")
            assert (status, body) == (503, "not ready: the process lease is not held (fenced)\n")
            reason[0] = None
            assert (await _get(f"{base}/readyz"))[::2] == (200, "ready\n")
            for path in ("/", "/metrics/x", "/health", "/readyz/", "/favicon.ico"):
                assert (await _get(f"{base}{path}"))[0] == 404, path

    asyncio.run(main())


def test_metrics_host_is_the_address_bound() -> None:
    async def main() -> None:
        async with await serve(NodeMetrics(), 0, "127.0.0.2") as server:
            assert server.url == f"http://127.0.0.2:{server.port}/metrics"
            assert (await _get(server.url))[0] == 200
            with pytest.raises(aiohttp.ClientConnectionError):  # not on another address
                await _get(f"http://127.0.0.1:{server.port}/metrics")

    asyncio.run(main())


def test_a_port_in_use_or_out_of_range_is_an_invalid_argument() -> None:
    async def main() -> None:
        metrics = NodeMetrics()
        async with await serve(metrics, 0) as first:
            with pytest.raises(InvalidArgument, match="cannot listen"):
                await serve(metrics, first.port)
        with pytest.raises(InvalidArgument):
            await serve(metrics, 70_000)

    asyncio.run(main())

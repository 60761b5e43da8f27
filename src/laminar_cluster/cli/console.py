"""`laminar-cluster console --store URL [--host H] [--port P]`: the cluster's web page
(issue 17; docs/console.md), read-only and live, until Ctrl-C.

It prints one line, `console for <store> at <url>`, once it listens (port 0: a free port, named
there), then serves until interrupted; exit 0 on Ctrl-C or SIGTERM, 2 when the address cannot
be bound or the store URL is invalid. It reads only the store (views.console_feed), so it runs
anywhere the bucket is reachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

from laminar_cluster.clock import RealClock
from laminar_cluster.console import CachedFeed, start_console
from laminar_cluster.store import open_store
from laminar_cluster.views.console_feed import ConsoleFeed


def run_console(url: str, *, host: str, port: int, refresh_s: float) -> int:
    """Serve the console of the store at `url` on `host:port` until interrupted."""
    clock = RealClock()

    async def main() -> int:
        store = open_store(url)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        try:
            cached = CachedFeed(ConsoleFeed(store, clock), clock, refresh_s=refresh_s)
            server = await start_console(cached, host, port)
            try:
                # One unwrapped line on stdout, flushed: a script (or a test) reads the URL.
                sys.stdout.write(f"console for {store.url} at {server.url}\n")
                sys.stdout.flush()
                await stop.wait()
            finally:
                await server.close()
        finally:
            await store.close()
        return 0

    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(main())
    return 0

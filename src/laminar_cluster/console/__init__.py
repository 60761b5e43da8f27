"""The cluster console: a read-only web page per cluster, live from the store alone
(issue 17; docs/console.md). `server` serves the page and its JSON; the data comes from
`views.console_feed`."""

from laminar_cluster.console.server import CachedFeed, ConsoleServer, console_app, start_console

__all__ = ["CachedFeed", "ConsoleServer", "console_app", "start_console"]

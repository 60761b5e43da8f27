"""`serve`: the Prometheus HTTP exposition of one `NodeMetrics` (`--metrics-port`).

prometheus_client's `start_http_server` on the metrics' own registry: a WSGI server in a daemon
thread answering every path with the text format. Port 0 asks the kernel for a free port; the
returned `MetricsServer` reports the bound one and `close()` stops the thread and frees the
socket (idempotent). The default address is the loopback interface: exposing metrics beyond
the machine is an explicit choice (`host="0.0.0.0"`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.metrics.node_metrics import NodeMetrics

DEFAULT_HOST: Final = "127.0.0.1"
PORT_MAX: Final = 65_535
CLOSE_JOIN_S: Final = 5.0


@dataclass(slots=True)
class MetricsServer:
    """A running exposition endpoint; `port` is the bound port (never 0)."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread
    _closed: bool = field(default=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the socket; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(CLOSE_JOIN_S)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def serve(metrics: NodeMetrics, port: int, host: str = DEFAULT_HOST) -> MetricsServer:
    """Serve `metrics.registry` on `host:port` (0: a free port) until `close()`."""
    if not 0 <= port <= PORT_MAX:
        raise InvalidArgument(f"metrics port must be within 0..{PORT_MAX}, not {port}")
    try:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as error:
        # The address is in use or not ours: the caller picks another one.
        raise InvalidArgument(f"metrics endpoint {host}:{port}: cannot listen: {error}") from error
    return MetricsServer(host=host, port=server.server_port, _server=server, _thread=thread)

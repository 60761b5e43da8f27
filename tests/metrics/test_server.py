"""`serve` (metrics/server.py): the Prometheus text format over HTTP on a free port."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from laminar_cluster.errors import InvalidArgument
from laminar_cluster.metrics import NodeMetrics, serve


def test_serves_the_text_format_on_a_free_port_until_closed() -> None:
    metrics = NodeMetrics()
    metrics.rotated()
    server = serve(metrics, 0)
    try:
        assert server.port != 0 and server.host == "127.0.0.1"
        with urllib.request.urlopen(server.url, timeout=5) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            body = response.read().decode()
        assert "# TYPE laminar_leader gauge" in body
        assert "laminar_rotations_total 1.0" in body
        assert "placement_blast_radius_ratio" in body
        metrics.rotated()  # served live, not a snapshot
        with urllib.request.urlopen(server.url, timeout=5) as response:
            assert "laminar_rotations_total 2.0" in response.read().decode()
    finally:
        server.close()
    server.close()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url, timeout=2)


def test_a_port_in_use_or_out_of_range_is_an_invalid_argument() -> None:
    metrics = NodeMetrics()
    with serve(metrics, 0) as first, pytest.raises(InvalidArgument, match="cannot listen"):
        serve(metrics, first.port)
    with pytest.raises(InvalidArgument):
        serve(metrics, 70_000)

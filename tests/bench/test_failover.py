"""`run_bench_failover` with a short TTL and two rounds on file://: the JSON figures' shape,
LA-8 on every kill (the new term was granted after the killed leader's last deadline), and
the namespace cleaned up afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from laminar_cluster.bench.failover import run_bench_failover
from laminar_cluster.errors import InvalidArgument

TTL_S = 1.0
RENEW_S = 0.3

EXPECTED_KEYS = {
    "store",
    "namespace",
    "rounds",
    "contenders",
    "ttl_s",
    "renew_interval_s",
    "failover_s",
    "failover_p50_s",
    "failover_p99_s",
    "failover_min_s",
    "failover_max_s",
    "failover_ttl_ratio_p50",
    "failover_ttl_ratio_p99",
    "floor_s",
    "p50_above_floor_s",
    "s8_margin_min_s",
    "requests_per_renewal",
    "renewals_measured",
    "target_p50_above_floor_s",
    "target_requests_per_renewal",
    "meets_failover_target",
    "meets_request_target",
}


@pytest.mark.processes
def test_bench_failover_figures_file(tmp_path: Path) -> None:
    root = tmp_path / "store"
    figures = run_bench_failover(
        f"file://{root}?fsync=false", rounds=2, ttl_s=TTL_S, renew_interval_s=RENEW_S
    )
    assert json.loads(json.dumps(figures)) == figures  # JSON-ready
    assert set(figures) == EXPECTED_KEYS
    assert (figures["rounds"], figures["contenders"]) == (2, 3)
    assert (figures["ttl_s"], figures["renew_interval_s"]) == (TTL_S, RENEW_S)
    samples = figures["failover_s"]
    assert len(samples) == 2
    assert figures["failover_min_s"] == min(samples)
    assert figures["failover_max_s"] == max(samples)
    assert figures["failover_min_s"] <= figures["failover_p50_s"] <= figures["failover_p99_s"]
    assert figures["failover_ttl_ratio_p50"] == round(figures["failover_p50_s"] / TTL_S, 4)
    assert figures["floor_s"] == TTL_S - RENEW_S / 2
    # LA-8: the new term was granted only after the killed leader's last deadline.
    assert figures["s8_margin_min_s"] > 0
    # Each kill waited for 3 renewals of a steady leader. A steady renewal starts from the
    # head its process last published: the record create and the pointer update, 2 requests
    # (a renewal right after a takeover or a foreign append reads the head first).
    assert figures["renewals_measured"] >= 2 * 3
    assert 2.0 <= figures["requests_per_renewal"] <= 3.0
    assert figures["meets_request_target"] is True
    # The namespace was removed.
    assert figures["namespace"].startswith(f"{root}/bench-failover-")
    assert not Path(figures["namespace"]).exists()


def test_bench_failover_refuses_memory_and_bad_arguments() -> None:
    with pytest.raises(InvalidArgument, match="memory:// lives in one process"):
        run_bench_failover("memory://", rounds=1, ttl_s=TTL_S, renew_interval_s=RENEW_S)
    with pytest.raises(InvalidArgument, match="rounds must be at least 1"):
        run_bench_failover("file:///tmp/x", rounds=0)
    with pytest.raises(InvalidArgument, match="renew interval"):
        run_bench_failover("file:///tmp/x", rounds=1, ttl_s=1.0, renew_interval_s=1.0)

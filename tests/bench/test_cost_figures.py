"""The arithmetic of `bench cost` (bench/cost_figures.py): purposes grouped by protocol, counts
differenced per node, rates over each node's own window, prices from the kinds' list prices."""

from __future__ import annotations

import pytest

from laminar_cluster.bench.cost_figures import (
    KINDS,
    MONTH_S,
    PROTOCOLS,
    NodeWindow,
    Prices,
    by_protocol,
    difference,
    phase_figures,
    targets,
)
from laminar_cluster.errors import InvalidArgument


def test_prices_are_s3_list_prices_and_a_delete_is_a_post() -> None:
    prices = Prices()
    assert prices.per_request("put") == prices.per_request("list") == 0.005 / 1000
    assert prices.per_request("delete") == 0.005 / 1000
    assert prices.per_request("get") == prices.per_request("head") == 0.0004 / 1000
    assert MONTH_S == 30 * 24 * 3600
    with pytest.raises(InvalidArgument, match="kind"):
        prices.per_request("copy")
    with pytest.raises(InvalidArgument, match="put_per_1000"):
        Prices(put_per_1000=-1.0)


def test_purposes_group_by_protocol_and_unknown_ones_are_other() -> None:
    table = by_protocol(
        {
            "leadership": {"put": 2, "get": 1},
            "lease": {"put": 3},
            "membership": {"list": 1, "get": 2},
            "participant": {"put": 4},
            "duties": {"get": 1},
            "restore": {"get": 5},
            "engine": {"list": 7},
            "retention": {"delete": 2},
            "rebalance": {"get": 1},
            "something new": {"head": 1},
        }
    )
    assert list(table) == list(PROTOCOLS)
    assert table["lease"] == {"get": 1, "head": 0, "put": 2, "list": 0, "delete": 0}
    assert table["membership"] == {"get": 2, "head": 0, "put": 3, "list": 1, "delete": 0}
    assert table["checkpoint"] == {"get": 6, "head": 0, "put": 4, "list": 0, "delete": 0}
    assert table["engine source"]["list"] == 7
    assert table["retention"]["delete"] == 2
    assert table["other"] == {"get": 1, "head": 1, "put": 0, "list": 0, "delete": 0}
    with pytest.raises(InvalidArgument, match="kind"):
        by_protocol({"lease": {"copy": 1}})


def test_difference_refuses_counts_that_went_down() -> None:
    before = {"lease": {"put": 3}, "engine": {"list": 10}}
    after = {"lease": {"put": 5}, "engine": {"list": 10}, "watcher": {"get": 1}}
    assert difference(after, before) == {"lease": {"put": 2}, "watcher": {"get": 1}}
    with pytest.raises(InvalidArgument, match="went down"):
        difference(before, after)


def test_phase_figures_rates_prices_and_requests_per_checkpoint() -> None:
    windows = [
        NodeWindow(
            node=1,
            window_s=10.0,
            counts={"leadership": {"put": 20}, "duties": {"get": 50}},
            objects={"control": {"put": 20, "get": 38}, "checkpoints": {"get": 12}},
        ),
        NodeWindow(
            node=2,
            window_s=20.0,
            counts={"lease": {"put": 40}, "participant": {"put": 30}},
            objects={"membership": {"put": 40}, "checkpoints": {"put": 30}},
        ),
    ]
    prices = Prices(put_per_1000=5.0, get_per_1000=1.0)  # $0.005 a put, $0.001 a get
    figures = phase_figures(windows, prices, checkpoints=4)
    assert figures["requests"]["total"] == 140
    assert figures["requests"]["by_kind"] == {
        "get": 50,
        "head": 0,
        "put": 90,
        "list": 0,
        "delete": 0,
    }
    assert figures["requests"]["by_protocol"]["checkpoint"]["put"] == 30
    # Rates are each node's count over its own window, summed.
    assert figures["per_s"]["by_protocol"]["lease"] == 2.0  # 20 / 10 s
    assert figures["per_s"]["by_protocol"]["membership"] == 2.0  # 40 / 20 s
    assert figures["per_s"]["by_protocol"]["checkpoint"] == 6.5  # 50 / 10 + 30 / 20
    assert figures["per_s"]["by_kind"] == {
        "get": 5.0,
        "head": 0.0,
        "put": 5.5,
        "list": 0.0,
        "delete": 0.0,
    }
    assert figures["per_s"]["total"] == 10.5
    usd_per_s = 5.0 * 0.001 + 5.5 * 0.005
    assert figures["usd_per_node_month"]["total"] == pytest.approx(
        usd_per_s * MONTH_S / 2, abs=1e-3
    )
    assert figures["usd_per_node_month"]["by_protocol"]["lease"] == pytest.approx(
        2.0 * 0.005 * MONTH_S / 2, abs=1e-3
    )
    node_1, node_2 = figures["nodes"]
    assert node_1["requests"] == 70 and node_1["per_s"]["get"] == 5.0
    assert node_1["usd_per_month"] == pytest.approx((2 * 0.005 + 5 * 0.001) * MONTH_S, abs=1e-3)
    assert node_2["requests"] == 70 and node_2["per_s"]["put"] == 3.5
    checkpoints = figures["checkpoints"]
    assert checkpoints["requests_per_checkpoint"] == 20.0  # (50 + 30) / 4
    assert checkpoints["requests_per_checkpoint_with_retention"] == 20.0
    assert checkpoints["checkpoint_objects_per_checkpoint"] == 10.5  # (12 + 30) / 4
    by_object = figures["requests"]["by_object"]
    assert list(by_object) == ["checkpoints", "control", "membership"]
    assert by_object["checkpoints"] == {"get": 12, "head": 0, "put": 30, "list": 0, "delete": 0}
    assert set(figures["per_s"]["by_protocol_kind"]["lease"]) == set(KINDS)


def test_phase_figures_without_a_checkpoint_has_no_per_checkpoint_figure() -> None:
    window = NodeWindow(node=1, window_s=5.0, counts={"lease": {"put": 5}})
    figures = phase_figures([window], Prices(), checkpoints=0)
    assert figures["checkpoints"]["requests_per_checkpoint"] is None
    with pytest.raises(InvalidArgument, match="window"):
        NodeWindow(node=1, window_s=0.0, counts={})


def test_targets_are_issue_15s_bounds() -> None:
    def phase(usd: float, per_checkpoint: float | None) -> dict[str, object]:
        return {
            "usd_per_node_month": {"total": usd},
            "checkpoints": {"checkpoint_objects_per_checkpoint": per_checkpoint},
        }

    met = targets(phase(19.9, None), phase(40.0, 19.0), nodes=3)
    assert met == {
        "idle_usd_per_node_month": {"value": 19.9, "max": 20.0, "met": True},
        "busy_usd_per_node_month": {"value": 40.0, "max": 40.0, "met": True},
        "checkpoint_objects_per_checkpoint": {"value": 19.0, "max": 19, "met": True},
    }
    missed = targets(phase(20.1, None), phase(41.0, None), nodes=4)
    assert [row["met"] for row in missed.values()] == [False, False, None]
    assert missed["checkpoint_objects_per_checkpoint"]["max"] == 22

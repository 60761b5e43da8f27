"""Store request rates from the nodes' reports (views/request_rates.py): over the interval
between two reports of one incarnation, the average since start for a first report or a new
incarnation, nothing for a member that is dead or left."""

from __future__ import annotations

from laminar_cluster.lease.records import ProcessLease
from laminar_cluster.membership.discovery import Member, ObservedState
from laminar_cluster.membership.records import (
    NodeLeaseRecord,
    NodeState,
    StoreRequestCounts,
    node_report,
)
from laminar_cluster.views.request_rates import RequestRates

BOOT = "00000000-0000-4000-8000-000000000001"


def _member(
    node: int, counts: dict[str, int], counted_s: float, *, term: int = 1, state: str = "active"
) -> Member:
    record = NodeLeaseRecord(
        version=2,
        lease=ProcessLease(node=node, owner=BOOT, term=term, seq=1, expires_at_ms=0),
        state=NodeState.ACTIVE,
        ttl_ms=2000,
        nonce=BOOT,
        failure_domain=None,
        takeovers=(),
        report=node_report(counts, counted_s, 1, ()),
    )
    return Member(node=node, state=ObservedState(state), record=record, unchanged_s=0.0)


def test_rates_over_the_interval_between_two_reports_of_one_incarnation() -> None:
    rates = RequestRates()
    first = rates.observe([_member(1, {"get": 100, "put": 10}, 10.0)])
    assert first["nodes"][0]["basis"] == "since start"
    assert first["nodes"][0]["per_s"] == {
        "get": 10.0,
        "head": 0.0,
        "put": 1.0,
        "list": 0.0,
        "delete": 0.0,
    }
    same = rates.observe([_member(1, {"get": 100, "put": 10}, 10.0)])  # no renewal since
    assert same == first
    later = rates.observe([_member(1, {"get": 160, "put": 12, "list": 3}, 12.0)])
    row = later["nodes"][0]
    assert (row["basis"], row["span_ms"]) == ("interval", 2000)
    assert row["per_s"] == {"get": 30.0, "head": 0.0, "put": 1.0, "list": 1.5, "delete": 0.0}
    assert later["total_per_s"] == row["per_s"]


def test_a_restart_starts_over_and_dead_or_left_members_are_not_counted() -> None:
    rates = RequestRates()
    rates.observe([_member(1, {"get": 100}, 10.0), _member(2, {"get": 50}, 5.0)])
    restarted = rates.observe(
        [_member(1, {"get": 4}, 2.0, term=2), _member(2, {"get": 70}, 6.0, state="dead")]
    )
    assert [row["node"] for row in restarted["nodes"]] == [1]
    assert restarted["nodes"][0]["basis"] == "since start"
    assert restarted["total_per_s"]["get"] == 2.0
    left = rates.observe([_member(1, {"get": 8}, 4.0, term=2, state="left")])
    assert left["nodes"] == [] and left["total_per_s"]["get"] == 0


def test_counts_carry_the_five_kinds() -> None:
    counts = {"get": 1, "head": 2, "put": 3, "list": 4, "delete": 5}
    member = _member(3, counts, 1.0)
    assert member.record.report is not None
    assert member.record.report.requests == StoreRequestCounts(**counts, counted_ms=1000)
    rates = RequestRates().observe([member])
    assert rates["kinds"] == ["get", "head", "put", "list", "delete"]
    assert rates["total_per_s"] == {"get": 1.0, "head": 2.0, "put": 3.0, "list": 4.0, "delete": 5.0}

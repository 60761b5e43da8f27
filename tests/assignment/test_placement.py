"""AS §3.2 successor roster and AS §3.4 locality metrics (RB-T22, RB-T23)."""

from __future__ import annotations

import uuid

import pytest

from laminar_cluster.assignment.placement import (
    Locality,
    owners_per_domain,
    placement_metrics,
    successor_participant_ids,
    successor_participants,
)
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.fencing import FenceParticipant


def test_rb_t22_locality_parse() -> None:
    full = Locality.parse("region=us-east-1;zone=us-east-1a;rack=r17")
    assert full.tiers == ("us-east-1", "us-east-1a", "r17")
    assert full.domain_at(0) == "us-east-1"
    assert full.domain_at(1) == "us-east-1;us-east-1a"
    assert full.domain_at(99) == "us-east-1;us-east-1a;r17"
    assert Locality.parse("rack17").domain_at(0) == "rack17"
    assert Locality.parse("").domain_at(3) == ""
    assert Locality.parse(" ; zone = z1 ;;bare ").tiers == ("z1", "bare")


def test_rb_t23_placement_metrics() -> None:
    nodes = [(1, Locality.parse("region=r;zone=z1")), (2, Locality.parse("region=r;zone=z2"))]
    metrics = placement_metrics([1, 1, 2, 0], nodes, 1)
    assert metrics.vnodes_per_domain == {"r;z1": 2, "r;z2": 1, "unknown": 1}
    assert metrics.blast_radius_ratio == 0.5
    # The values are the complete series set: a domain gone from the roster disappears.
    later = placement_metrics([2, 2, 2, 2], nodes[1:], 1)
    assert later.vnodes_per_domain == {"r;z2": 4}
    assert later.blast_radius_ratio == 1.0
    assert placement_metrics([], nodes, 0).blast_radius_ratio == 0.0
    assert list(owners_per_domain([2, 1], nodes, 0)) == ["r"]


def test_successor_roster() -> None:
    boot = {
        n: FenceParticipant(node_id=n, boot_incarnation=str(uuid.UUID(int=n * 11)))
        for n in (1, 2, 3)
    }
    assert successor_participant_ids([3, 1, 3]) == [1, 3]
    assert successor_participants([3, 1], [boot[3], boot[2], boot[1]]) == [boot[1], boot[3]]
    with pytest.raises(InvalidArgument, match="lost a lease-validated process identity"):
        successor_participants([1, 4], [boot[1]])

"""Rendezvous placement (AS §3.1-§3.3, RB-T17 .. RB-T21): the vectors of AS §3.1
and AS §3.3, and the
minimal-movement properties."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar_cluster.assignment.rendezvous import (
    moved_vnodes,
    rendezvous_assignment,
    retain_recovery_predecessors,
    successor_participants,
    vnodes_per_node,
    weight,
)
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.fencing import FenceParticipant


def test_rb_t18_weight_vectors() -> None:
    assert weight(0, 3) == 0xA9C537F75B27A974
    assert weight(0, 5) == 0xACE144D934729048
    assert weight(0, 7) == 0xA19E70708438A272


@pytest.mark.parametrize(
    ("count", "peers", "expected"),
    [
        (2, [3, 5, 7], [5, 7]),
        (8, [1, 2, 3], [3, 3, 1, 2, 1, 2, 2, 1]),
        (8, [1, 2], [2, 1, 1, 2, 1, 2, 2, 1]),
        (8, [7, 3, 5], [5, 7, 3, 5, 5, 7, 5, 5]),
    ],
)
def test_rb_t18_rendezvous_vectors(count: int, peers: list[int], expected: list[int]) -> None:
    assert rendezvous_assignment(count, peers) == expected


def test_rb_t19_rendezvous_minimal_movement() -> None:
    before = rendezvous_assignment(256, [1, 2, 3])
    after = rendezvous_assignment(256, [1, 2, 3, 4])
    assert vnodes_per_node(before) == {1: 91, 2: 72, 3: 93}
    assert vnodes_per_node(after) == {1: 65, 2: 59, 3: 68, 4: 64}
    moved = moved_vnodes(before, after)
    assert len(moved) == 64 and all(after[v] == 4 for v in moved)


def test_rb_t17_rendezvous_order_independent() -> None:
    assert rendezvous_assignment(64, [9, 2, 5, 2]) == rendezvous_assignment(64, [2, 5, 9])


def test_rb_t20_rendezvous_single_and_empty() -> None:
    assert rendezvous_assignment(256, [42]) == [42] * 256
    with pytest.raises(InvalidArgument):
        rendezvous_assignment(4, [])
    with pytest.raises(InvalidArgument):
        rendezvous_assignment(4, [0, 1])


node_sets = st.sets(st.integers(min_value=1, max_value=2**64 - 1), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(nodes=node_sets, newcomer=st.integers(min_value=1, max_value=2**64 - 1))
def test_adding_a_node_moves_only_vnodes_to_it(nodes: set[int], newcomer: int) -> None:
    if newcomer in nodes:
        return
    before = rendezvous_assignment(256, nodes)
    after = rendezvous_assignment(256, nodes | {newcomer})
    moved = moved_vnodes(before, after)
    assert all(after[v] == newcomer for v in moved)
    # About 256 / (n + 1) move: the hash spreads them; allow wide statistical slack.
    expected = 256 / (len(nodes) + 1)
    assert expected / 3 - 8 <= len(moved) <= expected * 2 + 8


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.sets(st.integers(min_value=1, max_value=2**64 - 1), min_size=2, max_size=12),
    data=st.data(),
)
def test_removing_a_node_moves_only_its_vnodes(nodes: set[int], data: st.DataObject) -> None:
    leaver = data.draw(st.sampled_from(sorted(nodes)))
    before = rendezvous_assignment(256, nodes)
    after = rendezvous_assignment(256, nodes - {leaver})
    moved = moved_vnodes(before, after)
    assert sorted(moved) == [v for v, owner in enumerate(before) if owner == leaver]
    assert leaver not in after


def participant(node: int, boot: int) -> FenceParticipant:
    return FenceParticipant(node_id=node, boot_incarnation=str(uuid.UUID(int=boot)))


def test_rb_t21_retain_healthy_predecessor() -> None:
    assignment = rendezvous_assignment(2, [3, 5, 7])
    assert assignment == [5, 7]
    predecessors = [participant(3, 33), participant(9, 99)]
    successors = [participant(3, 33), participant(5, 55), participant(7, 77)]
    retain_recovery_predecessors(assignment, predecessors, successors)
    assert assignment == [3, 7]


def test_rb_t21_retain_without_a_donor_raises() -> None:
    assignment = [1]
    with pytest.raises(InvalidArgument, match="cannot retain healthy predecessor 2"):
        retain_recovery_predecessors(
            assignment,
            [participant(1, 1), participant(2, 2)],
            [participant(1, 1), participant(2, 2)],
        )


def test_successor_participants_requires_every_owner() -> None:
    available = [participant(2, 2), participant(1, 1), participant(9, 9)]
    assert [p.node_id for p in successor_participants([2, 1, 2], available)] == [1, 2]
    with pytest.raises(InvalidArgument, match="lost a lease-validated"):
        successor_participants([1, 3], available)

"""Leader candidacy of a rebalance node (`node_leadership.leader_eligible`)."""

from __future__ import annotations

from laminar_cluster.rebalance.node.leadership import leader_eligible


def test_a_node_that_runs_no_assignment_yet_may_lead() -> None:
    assert leader_eligible(5, (), (1, 2, 5))


def test_an_owner_may_lead() -> None:
    assert leader_eligible(2, (1, 2, 1, 2), (1, 2, 3))


def test_a_joiner_outside_the_roster_may_not_lead_while_an_owner_lives() -> None:
    assert not leader_eligible(3, (1, 2, 1, 2), (1, 2, 3))
    assert not leader_eligible(3, (1, 2, 1, 2), (2, 3))


def test_a_joiner_may_lead_once_every_owner_is_gone() -> None:
    assert leader_eligible(3, (1, 2, 1, 2), (3, 4))

"""RB-11 at RB §4.3 step 12: the leader adopts a lagging committed head only over its exact edge
(local + 1) or when its registry owns no vnode; a jump over drains past vnodes it still holds is
refused (found by the simulation: seed 6978, checker 4)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from laminar_cluster.errors import Refused
from laminar_cluster.rebalance.interfaces import RegistrySnapshot
from laminar_cluster.rebalance.refusals import Refusal, refused_because
from laminar_cluster.rebalance.rotation.planner import require_exact_lagging_edge

ME = 3


def head(version: int) -> Any:
    return cast(Any, SimpleNamespace(assignment_version=version))


def test_rb11_a_lagging_head_two_versions_ahead_is_refused_while_local_vnodes_are_held() -> None:
    holding = RegistrySnapshot(version=2, owners=(2, ME, 4, ME))
    with pytest.raises(Refused) as raised:
        require_exact_lagging_edge(head(4), holding, ME)
    assert refused_because(raised.value, Refusal.NOT_EXACT_SUCCESSOR)


@pytest.mark.parametrize(
    ("version", "owners"),
    [
        (3, (2, ME, 4, ME)),  # the exact edge: local + 1
        (9, (2, 2, 4, 4)),  # owns no vnode: nothing of its own to skip
        (9, ()),  # a new boot before its first adoption
    ],
)
def test_rb11_a_lagging_head_is_adopted_over_its_exact_edge_or_without_local_vnodes(
    version: int, owners: tuple[int, ...]
) -> None:
    local = RegistrySnapshot(version=2 if owners else 0, owners=owners)
    require_exact_lagging_edge(head(version), local, ME)  # no error

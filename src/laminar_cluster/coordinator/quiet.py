"""Quiet checkpoints: an idle cluster does not checkpoint (docs/protocols/distributed-checkpoint.md,
DC-21; issue 15).

A periodic checkpoint of a cluster where nothing changed since the last Commit would commit the
same cut again: the same slices (every vnode a reference, DC-16), the same offsets and no
output, for about one PUT a second of prepares, pointers, manifests, outcomes and retention.
So the leader skips it while it knows every participant of the fence has nothing to capture:

* the checkpointer's last call was a periodic Commit (no drain transition) it recorded under
  this fence, with the leader proof's fencing token it holds now (`QuietBasis`): a new leader's
  first checkpoint, one after an Abort or a failed call, or one under another fence is never
  skipped, and a pre-rotation checkpoint never asks;
* the leader itself (its own engine, read directly) and every other participant of the fence
  report `quiescent_through` equal to that Commit's checkpoint id: the participant resolved that
  cut as committed and nothing changed since (`CutKeeper.quiescent_through`). Another
  participant's report is the one in its latest node record as this node's membership view
  shows it, from the boot the fence names, while the view holds it live (not suspected, dead or
  left); anything else (no record, no report, another boot, an older id, None) checkpoints.

Skipping is liveness only: it never writes anything and never changes what a later Commit
holds; the next checkpoint cuts whatever changed since the last Commit, as it would have.
A participant that becomes busy reports it at its next renewal, so the leader checkpoints at
most a renewal interval plus a discovery poll plus a duties tick after that (DC-21's bound).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from laminar_cluster.fencing import CheckpointAssignmentFence, LeaderProof
from laminar_cluster.membership.discovery import MembershipView


@dataclass(frozen=True, slots=True)
class QuietBasis:
    """The last periodic Commit a checkpointer recorded: its checkpoint id, under which fence
    and with which fencing token."""

    checkpoint_id: int
    fence: CheckpointAssignmentFence
    fencing_token: int


def quiet_refusal(
    basis: QuietBasis | None,
    fence: CheckpointAssignmentFence,
    proof: LeaderProof | None,
    local_through: int | None,
    view: MembershipView | None,
) -> str | None:
    """None when a periodic checkpoint under `fence` may be skipped (module docstring), else
    why not. `local_through`: this node's own `quiescent_through`; `view`: its membership view
    (its own member is not read: `local_through` is)."""
    if basis is None:
        return "no periodic Commit of this leader yet"
    if proof is None or proof.fencing_token != basis.fencing_token:
        return "the leader proof changed since the last Commit"
    if fence != basis.fence:
        return "the fence changed since the last Commit"
    through = basis.checkpoint_id
    if local_through != through:
        return f"this node is not quiescent through checkpoint {through}"
    if view is None:
        return "no membership view"
    for participant in fence.participants:
        if participant.node_id == proof.owner.node_id:
            continue
        member = view.member(participant.node_id)
        if member is None or not member.live or member.boot != participant.boot_incarnation:
            return f"participant {participant.node_id} is not live in the view as the fence's boot"
        report = member.record.report
        if report is None or report.quiescent_through != through:
            return f"participant {participant.node_id} does not report quiescence through {through}"
    return None


class QuietCheckpoints:
    """`skip(fence)`: whether the leader's periodic checkpoint under `fence` may be skipped now
    (`quiet_refusal` over the checkpointer's basis and proof, the local engine and the view)."""

    def __init__(
        self,
        basis: Callable[[], QuietBasis | None],
        proof: Callable[[], LeaderProof | None],
        local_through: Callable[[], int | None],
        view: Callable[[], MembershipView | None],
    ) -> None:
        self._basis, self._proof = basis, proof
        self._local_through, self._view = local_through, view
        self.skipped = 0  # periodic checkpoints skipped since start
        self.last_refusal: str | None = None  # why the last check did not skip

    def skip(self, fence: CheckpointAssignmentFence) -> bool:
        """Whether to skip now; counts the skips and keeps the last refusal."""
        refusal = quiet_refusal(
            self._basis(), fence, self._proof(), self._local_through(), self._view()
        )
        self.last_refusal = refusal
        self.skipped += refusal is None
        return refusal is None

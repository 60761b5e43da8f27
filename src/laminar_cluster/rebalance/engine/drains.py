"""Source-drain receipts of `BaseEngine`, one per drain round (spec_rebalance §2.8, §4.6,
§4.13, §4.18).

A round is *prepared* once (every local source stops at one cut; a repeat is a no-op) and later
*resolved* Commit or Abort (idempotent; the other verdict is Refused, DRAIN_RESOLVED_OTHERWISE).
At most one prepared round is open at a time: its sources are stopped (another round is Refused,
OTHER_DRAIN_OPEN). Resolution without a preparation is accepted,
because a replacement source generation after coordinated recovery, or a predecessor that never
acked, must still apply the durable verdict (§4.18). Entering stopped recovery turns the open
round into the *stopped* round (`stopped_terminal_round`) whose source tasks are gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from laminar_cluster.assignment.digest import AssignmentDrainId, drain_id
from laminar_cluster.errors import InvalidArgument, Refused
from laminar_cluster.fencing import CheckpointAssignmentFence
from laminar_cluster.lease.records import AssignmentDrainTransition
from laminar_cluster.rebalance.engine.rules import round_name
from laminar_cluster.rebalance.interfaces import SourceDrainOutcome
from laminar_cluster.rebalance.refusals import Refusal

# Resolved receipts kept for `owned_source_drain_resolved`; older resolved ones are forgotten.
MAX_DRAIN_RECEIPTS: Final = 64


@dataclass(slots=True)
class DrainReceipt:
    transition: AssignmentDrainTransition | None  # None when resolved without a preparation
    prepared: bool
    outcome: SourceDrainOutcome | None = None


class SourceDrainLedger:
    def __init__(self) -> None:
        self._receipts: dict[AssignmentDrainId, DrainReceipt] = {}
        self._open: AssignmentDrainId | None = None
        self._stopped: AssignmentDrainTransition | None = None

    def known(self, round_: AssignmentDrainId) -> bool:
        return round_ in self._receipts

    def receipt(self, round_: AssignmentDrainId) -> DrainReceipt | None:
        return self._receipts.get(round_)

    def open_round(self) -> AssignmentDrainId | None:
        """The prepared, unresolved round whose sources are stopped."""
        return self._open

    def open_transition(self) -> AssignmentDrainTransition | None:
        """The transition of `open_round` (a prepared round always has one)."""
        if self._open is None:
            return None
        return self._receipts[self._open].transition

    def prepare(self, round_: AssignmentDrainId, transition: AssignmentDrainTransition) -> None:
        if round_ in self._receipts:
            return  # idempotent per transition (the rotation and the watcher both call it)
        if self._open is not None:
            raise Refused(
                f"local sources are stopped for drain {round_name(self._open)}; cannot prepare "
                f"drain {round_name(round_)}",
                reason=Refusal.OTHER_DRAIN_OPEN,
            )
        self._receipts[round_] = DrainReceipt(transition=transition, prepared=True)
        self._open = round_
        self._forget_old()

    def resolve(self, round_: AssignmentDrainId, outcome: SourceDrainOutcome) -> None:
        if not round_.is_canonical():
            raise InvalidArgument(f"drain round {round_name(round_)} is not canonical")
        receipt = self._receipts.get(round_)
        if receipt is not None and receipt.outcome is not None:
            if receipt.outcome is outcome:
                return
            raise Refused(
                f"drain {round_name(round_)} was already resolved {receipt.outcome.value}, not "
                f"{outcome.value}",
                reason=Refusal.DRAIN_RESOLVED_OTHERWISE,
            )
        if self._open is not None and self._open != round_:
            raise Refused(
                f"local sources are stopped for drain {round_name(self._open)}, not "
                f"{round_name(round_)}",
                reason=Refusal.OTHER_DRAIN_OPEN,
            )
        if receipt is None:
            self._receipts[round_] = DrainReceipt(transition=None, prepared=False, outcome=outcome)
            self._forget_old()
        else:
            receipt.outcome = outcome
        if self._open == round_:
            self._open = None

    def resolved(self, round_: AssignmentDrainId, outcome: SourceDrainOutcome) -> bool:
        receipt = self._receipts.get(round_)
        return receipt is not None and receipt.outcome is outcome

    def stop_sources(self) -> None:
        """Coordinated recovery stopped the runtime: the open round becomes the stopped one."""
        if self._open is not None:
            self._stopped = self._receipts[self._open].transition
            self._open = None

    def clear_stopped(self) -> None:
        self._stopped = None

    def stopped_round(self, predecessor: CheckpointAssignmentFence) -> AssignmentDrainId | None:
        stopped = self._stopped
        if stopped is None or stopped.predecessor != predecessor:
            return None
        return drain_id(stopped)

    def _forget_old(self) -> None:
        excess = len(self._receipts) - MAX_DRAIN_RECEIPTS
        if excess <= 0:
            return
        resolved = [r for r, receipt in self._receipts.items() if receipt.outcome is not None]
        for round_ in resolved[:excess]:
            del self._receipts[round_]

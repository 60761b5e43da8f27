"""LA-T79 (the fault-inventory headroom) and a property test: random authority histories
built the way the writers build records (LA §3.3, LA §3.4, LA §4) are valid at every step and
round-trip through encode_record/decode_record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from laminar_cluster.checkpoint.records import CheckpointOutcome, RecoveryCapsuleRef
from laminar_cluster.codec import encode
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease import validate as v
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import (
    AssignmentDecisionLink,
    AssignmentDrainDecision,
    AssignmentDrainTransition,
    AssignmentRecoveryDecision,
    AssignmentSnapshotRef,
    AssignmentVerdict,
    AuthorityAssignmentDecisionFloor,
    AuthorityOutcomeFloor,
    AuthorityRecoveryReleaseCommit,
    LeaderAuthorityRecord,
    LeaderLease,
    LeaderLeaseOwner,
    OutcomeLink,
    ProcessLease,
    ProcessLeaseFence,
    RecoveryReleaseId,
    RecoveryReleaseLink,
)
from tests.lease.builders import (
    CATALOG,
    DEPLOYMENT,
    INVENTORY,
    RIVAL_PROOF,
    SHA,
    dlink,
    fence,
    olink,
    outcome,
    recovery,
    release_ref,
    replace,
    slot,
    uid,
)

# LA-T79: the fault-inventory headroom, on the heaviest record the rules allow.
U64_MAX, I64_MIN = 2**64 - 1, -(2**63)


def max_fence(version: int, boot_base: int) -> CheckpointAssignmentFence:
    """129 participants with 20-digit node ids; the last is the maximal owner's incarnation."""
    roster = [(U64_MAX - 128 + i, uid(boot_base + i)) for i in range(128)] + [(U64_MAX, uid(1))]
    return replace(
        fence(version, tuple(roster)), vnode_count=2**32 - 1, assignment_digest=(255,) * 32
    )


def max_lease_fence(node: int, boot: str, i: int) -> ProcessLeaseFence:
    before = ProcessLease(
        node=node, owner=boot, term=U64_MAX - 1, seq=U64_MAX - 1, expires_at_ms=I64_MIN
    )
    after = replace(before, owner=uid(3_000 + i), term=U64_MAX, seq=U64_MAX)
    return ProcessLeaseFence(predecessor=before, successor=after)


def maximal_record(
    slot_count: int, *, heavy: bool = True, active: bool = True
) -> LeaderAuthorityRecord:
    """Every integer at its widest, `slot_count` fault slots; with `heavy`, also an admitted
    Commit and floor anchors whose fences have 129 participants, and an assignment anchor that
    removes 129 processes (129 process fences)."""
    s = U64_MAX
    top = LeaderLease(
        seq=s,
        renewal_sequence=s,
        token=U64_MAX,
        owner=LeaderLeaseOwner(node=U64_MAX, boot=uid(1), process_term=U64_MAX),
        expires_at_ms=I64_MIN,
        catalog_manifest=replace(CATALOG, encoded_len=8_388_608, entry_count=4096),
    )
    terminal = replace(
        release_ref(2),
        encoded_len=262_144,
        release=RecoveryReleaseId(
            protocol_version=65_535,
            generation=U64_MAX,
            nonce=uid(9),
            driver=U64_MAX,
            epoch=U64_MAX,
            round_sha256=SHA,
        ),
    )
    slots = tuple(
        slot(
            U64_MAX - slot_count + 1 + i,
            s - 7 - i,
            active,
            term=U64_MAX,
            request_sequence=U64_MAX,
        )
        for i in range(slot_count)
    )
    record = replace(
        LeaderAuthorityRecord.initial(top),
        recovery_fault_revision=s - 7 if active else s - 6,
        recovery_fault_slots=slots,
        recovery_release_head=RecoveryReleaseLink(sequence=s - 6, terminal=terminal),
    )
    return _heavy(record) if heavy else record


def _heavy(record: LeaderAuthorityRecord) -> LeaderAuthorityRecord:
    s = e = U64_MAX
    proof = record.lease.proof()
    old = replace(proof, fencing_token=U64_MAX - 1)

    def heavy(epoch: int, commit: bool, by: LeaderProof) -> CheckpointOutcome:
        capsule = RecoveryCapsuleRef(epoch=epoch, checkpoint_id=epoch, sha256=SHA, len=8_388_608)
        return outcome(
            epoch,
            commit,
            by,
            assignment_fence=max_fence(U64_MAX, 10_000),
            recovery_capsule=capsule if commit else None,
        )

    predecessor, target = max_fence(U64_MAX - 2, 1_000), max_fence(U64_MAX - 1, 2_000)
    last = FenceParticipant(node_id=U64_MAX, boot_incarnation=uid(1_128))
    predecessor = replace(predecessor, participants=(*predecessor.participants[:-1], last))
    anchor = AssignmentRecoveryDecision(
        predecessor=predecessor,
        target=target,
        proposal=AssignmentSnapshotRef(version=U64_MAX - 1, sha256=SHA, encoded_len=8_388_608),
        removed_process_fences=tuple(
            max_lease_fence(p.node_id, p.boot_incarnation, i)
            for i, p in enumerate(predecessor.participants)
            if target.participant_incarnation(p.node_id) != p.boot_incarnation
        ),
        recovery_checkpoint=RecoveryCapsuleRef(
            epoch=e - 3, checkpoint_id=e - 3, sha256=SHA, len=8_388_608
        ),
        leader_proof=old,
    )
    return replace(
        record,
        checkpoint_outcome=heavy(e, True, proof),
        previous_outcome=olink(s - 2, e - 2),
        outcome_head=olink(s, e),
        previous_commit=olink(s - 3, e - 3),
        commit_head=olink(s, e),
        outcome_floor=AuthorityOutcomeFloor(
            deployment_id=DEPLOYMENT,
            artifact_before_epoch=e - 2,
            authority_before_epoch=e - 1,
            terminal_anchor=heavy(e - 2, False, old),
            terminal_anchor_link=olink(s - 2, e - 2),
            committed_anchor=heavy(e - 3, True, old),
            committed_anchor_link=olink(s - 3, e - 3),
        ),
        assignment_decision_head=dlink(s - 5, U64_MAX - 1),
        assignment_decision_floor=AuthorityAssignmentDecisionFloor(
            before_target_version=U64_MAX,
            terminal_anchor=anchor,
            terminal_anchor_link=dlink(s - 5, U64_MAX - 1),
        ),
    )


def test_la_t79_headroom() -> None:
    limit = 262_144 - 32_768
    for count in (129, 516):  # the spec's scenario: the lease and maximal slots
        record = maximal_record(count, heavy=False)
        body = v.encode_record(record)
        assert len(body) <= limit - 90_000, len(body)  # 516 slots: 129,701 bytes
        assert v.decode_record(body, record_path(U64_MAX), U64_MAX) == record
    # With every other field at its widest too: 129 active slots still leave the headroom...
    heavy_129 = maximal_record(129)
    assert 100_000 < len(v.encode_record(heavy_129)) <= limit
    # ...516 do not (239,696 bytes), so the append is refused before any I/O (fail closed),
    heavy_516 = maximal_record(516)
    v.validate_record(heavy_516)
    with pytest.raises(InvalidArgument, match="mandatory authority headroom only up to 229376"):
        v.encode_record(heavy_516)
    # ...while the same record with the slots settled (tombstones) fits the 256 KiB limit.
    settled = maximal_record(516, active=False)
    assert limit < len(v.encode_record(settled)) <= 262_144
    too_many = maximal_record(517, heavy=False)
    with pytest.raises(ShapeViolation, match=f"{INVENTORY}: 517 slots; maximum is 516"):
        v.validate_record(too_many)
    with pytest.raises(InvalidArgument, match="517 slots; maximum is 516"):
        v.encode_record(too_many)


# Hypothesis: random histories of the authority (LA §3.3 and LA §4's record transitions) give
# valid records at every step, and every one round-trips through encode_record/decode_record.
OWNERS = tuple(LeaderLeaseOwner(node=n, boot=uid(500 + n), process_term=n) for n in (3, 5, 8))
OPERATIONS = (
    "renew",
    "new_term",
    "takeover",
    "commit",
    "abort",
    "outcome_floor",
    "drain",
    "recovery",
    "assignment_floor",
    "fault",
    "release",
    "seal",
)


class History:
    """The authority's carried state as its writers build it (preserve_with_lease + one event)."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self.draw = draw
        first = LeaderLease(
            seq=1,
            renewal_sequence=1,
            token=1,
            owner=OWNERS[0],
            expires_at_ms=draw(I64S),
            catalog_manifest=None,
        )
        self.record = LeaderAuthorityRecord.initial(first)
        self.outcomes: list[tuple[OutcomeLink, CheckpointOutcome]] = []
        self.decisions: list[tuple[AssignmentDecisionLink, Any]] = []
        self.generation = 0

    def next_lease(self, *, renewal: int = 0, token: int = 0, **kw: Any) -> LeaderLease:
        lease_ = self.record.lease
        return replace(
            lease_,
            seq=lease_.seq + 1,
            renewal_sequence=lease_.renewal_sequence + renewal,
            token=lease_.token + token,
            **kw,
        )

    def step(self, operation: str) -> None:
        getattr(self, f"op_{operation}")()

    def op_renew(self) -> None:
        lease_ = self.next_lease(renewal=1, expires_at_ms=self.draw(I64S))
        self.record = self.record.preserve_with_lease(lease_)

    def op_new_term(self) -> None:
        self.record = self.record.preserve_with_lease(self.next_lease(renewal=1, token=1))

    def op_takeover(self) -> None:
        owner = self.draw(st.sampled_from([o for o in OWNERS if o != self.record.lease.owner]))
        self.record = self.record.preserve_with_lease(
            self.next_lease(renewal=1, token=1, owner=owner)
        )

    def _appended(self, **fields: Any) -> LeaderAuthorityRecord:
        return replace(self.record.preserve_with_lease(self.next_lease()), **fields)

    def _outcome(self, commit: bool) -> None:
        last = self.outcomes[-1][0].epoch if self.outcomes else 0
        epoch = last + self.draw(st.integers(1, 3))
        owner = self.record.lease.owner
        roster = tuple(sorted({(owner.node, owner.boot), (1000, uid(50))}))
        new = outcome(epoch, commit, self.record.lease.proof(), assignment_fence=fence(1, roster))
        link = olink(self.record.lease.seq + 1, epoch)
        fields: dict[str, Any] = {
            "checkpoint_outcome": new,
            "previous_outcome": self.record.outcome_head,
            "outcome_head": link,
        }
        if commit:
            fields.update(previous_commit=self.record.commit_head, commit_head=link)
        self.record = self._appended(**fields)
        self.outcomes.append((link, new))

    def op_commit(self) -> None:
        self._outcome(True)

    def op_abort(self) -> None:
        self._outcome(False)

    def op_outcome_floor(self) -> None:
        floor = self.record.outcome_floor
        last = self.outcomes[-1][0].epoch if self.outcomes else 0
        authority = self.draw(st.integers(floor.authority_before_epoch if floor else 1, last + 1))
        artifact = self.draw(st.integers(floor.artifact_before_epoch if floor else 0, authority))
        terminal = [(k, o) for k, o in self.outcomes if o.epoch < authority]
        committed = [(k, o) for k, o in self.outcomes if o.epoch < artifact and o.is_commit()]
        self.record = self._appended(
            outcome_floor=AuthorityOutcomeFloor(
                deployment_id=DEPLOYMENT,
                artifact_before_epoch=artifact,
                authority_before_epoch=authority,
                terminal_anchor=terminal[-1][1] if terminal else None,
                terminal_anchor_link=terminal[-1][0] if terminal else None,
                committed_anchor=committed[-1][1] if committed else None,
                committed_anchor_link=committed[-1][0] if committed else None,
            )
        )

    def _decision(self, build: Callable[[int, LeaderProof], Any]) -> None:
        last = self.decisions[-1][0].target_version if self.decisions else 1
        decision = build(last + self.draw(st.integers(1, 2)), self.record.lease.proof())
        link = dlink(self.record.lease.seq + 1, decision.target_version)
        self.record = self._appended(
            assignment_decision=decision,
            assignment_decision_head=link,
            previous_assignment_decision=self.record.assignment_decision_head,
        )
        self.decisions.append((link, decision))

    def op_drain(self) -> None:
        owner = self.record.lease.owner
        roster = tuple(sorted({(owner.node, owner.boot), (1000, uid(50))}))
        commit_ = self.draw(st.booleans())
        leader = self.record.lease.proof() if commit_ else RIVAL_PROOF
        self._decision(
            lambda target, proof: AssignmentDrainDecision(
                transition=AssignmentDrainTransition(
                    predecessor=fence(target - 1, roster),
                    target=fence(target, ((8, uid(2)), (1000, uid(50)))),
                    leader=leader,
                ),
                leader_proof=proof,
                verdict=AssignmentVerdict.COMMIT if commit_ else AssignmentVerdict.ABORT,
                handoff_checkpoint=(
                    RecoveryCapsuleRef(epoch=target, checkpoint_id=target, sha256=SHA, len=64)
                    if commit_
                    else None
                ),
            )
        )

    def op_recovery(self) -> None:
        self._decision(lambda target, proof: recovery(target, proof))

    def op_assignment_floor(self) -> None:
        floor = self.record.assignment_decision_floor
        last = self.decisions[-1][0].target_version if self.decisions else 1
        before = self.draw(st.integers(floor.before_target_version if floor else 1, last + 1))
        below = [(k, d) for k, d in self.decisions if d.target_version < before]
        self.record = self._appended(
            assignment_decision_floor=AuthorityAssignmentDecisionFloor(
                before_target_version=before,
                terminal_anchor=below[-1][1] if below else None,
                terminal_anchor_link=below[-1][0] if below else None,
            )
        )

    def op_fault(self) -> None:
        node = self.draw(st.integers(1, 6))
        seq = self.record.lease.seq + 1
        new = slot(node, seq, True, term=self.draw(st.integers(1, 3)), request_sequence=seq)
        kept = [
            s for s in self.record.recovery_fault_slots if s.publisher.participant.node_id != node
        ]
        slots = tuple(sorted([*kept, new], key=lambda s: s.publisher.participant.node_id))
        self.record = self._appended(recovery_fault_revision=seq, recovery_fault_slots=slots)

    def op_release(self) -> None:
        self.generation += 1
        ref, seq = release_ref(self.generation), self.record.lease.seq + 1
        slots = tuple(
            replace(s, active=False) for s in self.record.recovery_fault_slots if s.active
        )
        self.record = self._appended(
            recovery_fault_revision=seq,
            recovery_fault_slots=slots,
            recovery_release_commit=AuthorityRecoveryReleaseCommit(
                terminal=ref, leader_proof=self.record.lease.proof()
            ),
            recovery_release_head=RecoveryReleaseLink(sequence=seq, terminal=ref),
        )

    def op_seal(self) -> None:
        if self.record.lease.catalog_manifest is None:
            self.record = self.record.preserve_with_lease(self.next_lease(catalog_manifest=CATALOG))
        else:
            self.op_renew()


I64S = st.integers(I64_MIN, 2**63 - 1)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_valid_histories_round_trip(data: st.DataObject) -> None:
    history = History(data.draw)
    for operation in data.draw(st.lists(st.sampled_from(OPERATIONS), max_size=40)):
        history.step(operation)
        record = history.record
        seq = record.lease.seq
        body = v.encode_record(record)
        assert v.decode_record(body, record_path(seq), seq) == record
        assert encode(v.decode_record(body, record_path(seq), seq)) == body

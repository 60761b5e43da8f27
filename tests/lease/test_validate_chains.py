"""Leader authority record validation, part 2: LA §3.12 steps 6-11 (the fault
inventory, the outcome chain and its floor, the assignment-decision chain and its floor, the
recovery release), each rule broken alone on a valid record from `builders.py`.
"""

from __future__ import annotations

import pytest

from laminar_cluster.codec import encode
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.lease import validate as v
from laminar_cluster.lease.paths import record_path
from laminar_cluster.lease.records import (
    AuthorityRecoveryReleaseCommit,
    RecoveryReleaseLink,
)
from tests.lease.builders import (
    BASES,
    DECISION_BOUND,
    FAULT_SEQ,
    INVENTORY,
    LOCAL_ANCHOR,
    NIL,
    OLD_PROOF,
    OUTCOME_BOUND,
    OWNER,
    PROOF,
    RELEASE_BOUND,
    RIVAL_PROOF,
    SHA,
    Mutation,
    dlink,
    drain,
    expect_violation,
    olink,
    recovery,
    release_ref,
    replace,
    slot,
    uid,
    with_afloor,
    with_floor,
    with_lease,
    with_outcome,
)

CHAIN_RULES: list[tuple[str, str, Mutation, str]] = [
    # step 6
    (
        "slots_unsorted",
        "carried",
        lambda r: replace(r, recovery_fault_slots=(slot(11, 18, False), slot(9, 17, False))),
        f"{INVENTORY}: slots are not strictly ascending by node id (node 11 before 9)",
    ),
    (
        "slots_duplicate_node",
        "carried",
        lambda r: replace(r, recovery_fault_slots=(slot(9, 17, False), slot(9, 18, False))),
        f"{INVENTORY}: slots are not strictly ascending by node id (node 9 before 9)",
    ),
    (
        "revision_zero_with_slots",
        "carried",
        lambda r: replace(r, recovery_fault_revision=0, recovery_release_head=None),
        f"{INVENTORY}: revision 0 with 2 slots",
    ),
    (
        "revision_without_slots_or_head",
        "carried",
        lambda r: replace(r, recovery_fault_slots=(), recovery_release_head=None),
        f"{INVENTORY}: revision 19 with no slots needs the release head at that sequence, not none",
    ),
    (
        "revision_without_slots_other_head",
        "carried",
        lambda r: replace(r, recovery_fault_slots=(), recovery_fault_revision=18),
        "revision 18 with no slots needs the release head at that sequence, not sequence 19",
    ),
    (
        "revision_above_seq",
        "fault",
        lambda r: replace(r, recovery_fault_revision=41),
        f"{INVENTORY}: revision 41 exceeds lease seq 40",
    ),
    (
        "publisher_node",
        "fault",
        lambda r: replace(r, recovery_fault_slots=(slot(0, 40, True), slot(11, 18, False))),
        "recovery fault publisher node, boot, and process term must be nonzero: node 0",
    ),
    (
        "publisher_boot",
        "fault",
        lambda r: replace(
            r, recovery_fault_slots=(slot(9, 40, True, boot=NIL), slot(11, 18, False))
        ),
        "recovery fault publisher node, boot, and process term must be nonzero",
    ),
    (
        "publisher_term",
        "fault",
        lambda r: replace(r, recovery_fault_slots=(slot(9, 40, True, term=0), slot(11, 18, False))),
        "term 0",
    ),
    (
        "slot_request_zero",
        "fault",
        lambda r: replace(
            r, recovery_fault_slots=(slot(9, 40, True, request_sequence=0), slot(11, 18, False))
        ),
        "recovery fault request and authority sequence must be nonzero: request 0",
    ),
    (
        "slot_fault_zero",
        "fault",
        lambda r: replace(r, recovery_fault_slots=(slot(9, 0, True), slot(11, 18, False))),
        "recovery fault request and authority sequence must be nonzero: request 1, fault 0",
    ),
    (
        "fault_above_revision",
        "fault",
        lambda r: replace(r, recovery_fault_revision=39),
        f"{FAULT_SEQ}: fault_sequence 40 of node 9 exceeds revision 39 or lease seq 40",
    ),
    (
        "fault_repeated",
        "fault",
        lambda r: replace(r, recovery_fault_slots=(slot(9, 40, True), slot(11, 40, False))),
        f"{FAULT_SEQ}: fault_sequence 40 is repeated",
    ),
    (
        "two_domains",
        "commit",
        lambda r: replace(
            r,
            assignment_decision=drain(7),
            previous_assignment_decision=dlink(20, 6),
            assignment_decision_head=dlink(40, 7),
        ),
        "one authority sequence cannot admit two terminal domains",
    ),
    # step 7, an admitted outcome
    (
        "outcome_shape",
        "commit",
        lambda r: with_outcome(r, deployment_id="not-a-uuid"),
        "admitted checkpoint outcome is invalid: outcome deployment id",
    ),
    (
        "outcome_local",
        "abort",
        lambda r: replace(r, checkpoint_outcome=replace(LOCAL_ANCHOR, epoch=30, checkpoint_id=30)),
        "leader authority can only admit cluster checkpoint outcomes",
    ),
    (
        "outcome_proof_token",
        "commit",
        lambda r: with_lease(r, token=3),
        f"{OUTCOME_BOUND}: its leader proof does not match the lease",
    ),
    (
        "outcome_proof_owner",
        "commit",
        lambda r: with_lease(r, owner=replace(OWNER, process_term=4)),
        f"{OUTCOME_BOUND}: its leader proof does not match the lease",
    ),
    (
        "outcome_head_not_this",
        "abort",
        lambda r: replace(r, outcome_head=olink(39, 30)),
        f"{OUTCOME_BOUND}: outcome_head is not",
    ),
    (
        "previous_outcome_not_older_epoch",
        "abort",
        lambda r: replace(r, previous_outcome=olink(30, 30)),
        "cluster outcome link does not move backward in sequence and epoch",
    ),
    (
        "previous_outcome_not_older_seq",
        "abort",
        lambda r: replace(r, previous_outcome=olink(40, 25)),
        "cluster outcome link does not move backward in sequence and epoch",
    ),
    (
        "commit_head_not_this",
        "commit",
        lambda r: replace(r, commit_head=olink(27, 22)),
        "cluster Commit is not bound to its exact Commit-chain head",
    ),
    (
        "previous_commit_not_older",
        "commit",
        lambda r: replace(r, previous_commit=olink(41, 22)),
        "cluster Commit link does not move backward in sequence and epoch",
    ),
    (
        "previous_commit_crosses_artifact_floor",
        "commit",
        lambda r: replace(r, previous_commit=olink(8, 5)),
        "cluster Commit link crosses the artifact floor without its exact anchor",
    ),
    (
        "abort_with_previous_commit",
        "abort",
        lambda r: replace(r, previous_commit=olink(27, 22)),
        "cluster Abort carries a previous-Commit link",
    ),
    (
        "outcome_foreign_deployment",
        "commit",
        lambda r: with_outcome(r, deployment_id=uid(6)),
        "cluster outcome is below or outside its durable authority floor",
    ),
    (
        "outcome_below_floor",
        "abort",
        lambda r: replace(
            with_outcome(r, epoch=18, checkpoint_id=18),
            previous_outcome=None,
            outcome_head=olink(40, 18),
        ),
        "cluster outcome is below or outside its durable authority floor: epoch 18, floor 20",
    ),
    # step 7, no outcome and both cases
    (
        "carried_previous_outcome",
        "carried",
        lambda r: replace(r, previous_outcome=olink(29, 24)),
        "non-outcome authority record carries an outcome-chain link",
    ),
    (
        "carried_previous_commit",
        "carried",
        lambda r: replace(r, previous_commit=olink(26, 21)),
        "non-outcome authority record carries an outcome-chain link",
    ),
    (
        "outcome_head_ahead",
        "carried",
        lambda r: replace(r, outcome_head=olink(41, 25)),
        "authority outcome head is outside the durable sequence: sequence 41 at lease seq 40",
    ),
    (
        "commit_head_ahead",
        "carried",
        lambda r: replace(r, commit_head=olink(41, 22)),
        "authority Commit head is outside the durable sequence: sequence 41 at lease seq 40",
    ),
    (
        "commit_head_ahead_of_commit_record",
        "abort",
        lambda r: replace(r, commit_head=olink(41, 22)),
        "authority Commit head is outside the durable sequence: sequence 41 at lease seq 40",
    ),
    (
        "commit_head_newer_than_outcome_head",
        "carried",
        lambda r: replace(r, commit_head=olink(31, 22)),
        "authority Commit head is not ordered behind the terminal head",
    ),
    (
        "abort_commit_head_equal",
        "abort",
        lambda r: replace(r, commit_head=olink(40, 30)),
        "cluster Abort did not preserve a strictly older Commit head",
    ),
    (
        "commit_head_without_outcome_head",
        "carried",
        lambda r: replace(r, outcome_head=None, outcome_floor=None),
        "authority Commit head exists without terminal continuity",
    ),
    # step 8
    (
        "terminal_anchor_link_at_seq",
        "carried",
        lambda r: with_floor(r, terminal_anchor_link=olink(40, 15)),
        "outcome floor anchor is outside the authority sequence",
    ),
    (
        "outcome_head_below_floor",
        "terminal_floor",
        lambda r: replace(r, outcome_head=olink(14, 12)),
        "authority outcome head does not meet its durable compaction floor",
    ),
    (
        "no_outcome_head_with_anchor",
        "terminal_floor",
        lambda r: replace(r, outcome_head=None),
        "outcome floor anchor is disconnected from the authority head",
    ),
    (
        "commit_head_below_artifact_floor",
        "commit_floor",
        lambda r: replace(r, commit_head=olink(7, 5)),
        "authority Commit head does not meet its durable artifact floor",
    ),
    (
        "no_commit_head_with_anchor",
        "commit_floor",
        lambda r: replace(r, commit_head=None),
        "outcome floor Commit anchor is disconnected from the Commit head",
    ),
    # step 9
    (
        "decision_invalid",
        "drain",
        lambda r: replace(r, assignment_decision=drain(7, leader=RIVAL_PROOF)),
        "assignment drain decision is not canonical",
    ),
    (
        "decision_below_floor",
        "drain",
        lambda r: replace(r, assignment_decision=drain(4), assignment_decision_head=dlink(40, 4)),
        "assignment decision is below its durable authority floor: target 4, floor 5",
    ),
    (
        "decision_proof",
        "drain",
        lambda r: with_lease(r, token=3),
        f"{DECISION_BOUND}: its leader proof does not match the lease",
    ),
    (
        "recovery_decision_proof",
        "recovery",
        lambda r: replace(r, assignment_decision=recovery(7, proof=OLD_PROOF)),
        f"{DECISION_BOUND}: its leader proof does not match the lease",
    ),
    (
        "decision_head",
        "drain",
        lambda r: replace(r, assignment_decision_head=dlink(40, 8)),
        f"{DECISION_BOUND}: the head is not (sequence 40, target 7)",
    ),
    (
        "decision_previous_target",
        "drain",
        lambda r: replace(r, previous_assignment_decision=dlink(20, 7)),
        "assignment decision link does not move backward",
    ),
    (
        "decision_previous_seq",
        "recovery",
        lambda r: replace(r, previous_assignment_decision=dlink(40, 6)),
        "assignment decision link does not move backward",
    ),
    (
        "carried_previous_decision",
        "carried",
        lambda r: replace(r, previous_assignment_decision=dlink(19, 5)),
        "non-decision authority record carries a previous assignment-decision link",
    ),
    (
        "decision_head_ahead",
        "carried",
        lambda r: replace(r, assignment_decision_head=dlink(41, 6)),
        "authority assignment-decision head is outside the durable sequence",
    ),
    (
        "decision_head_target_zero",
        "carried",
        lambda r: replace(r, assignment_decision_head=dlink(20, 0), assignment_decision_floor=None),
        "authority assignment-decision head is outside the durable sequence",
    ),
    # step 10
    (
        "afloor_anchor_at_seq",
        "carried",
        lambda r: with_afloor(r, terminal_anchor_link=dlink(40, 4)),
        "assignment decision floor anchor is outside the authority sequence",
    ),
    (
        "decision_head_below_floor",
        "carried",
        lambda r: replace(r, assignment_decision_head=dlink(15, 3)),
        "authority assignment-decision head does not meet its durable floor",
    ),
    (
        "no_decision_head_with_anchor",
        "carried",
        lambda r: replace(r, assignment_decision_head=None),
        "assignment decision floor anchor is disconnected from the authority head",
    ),
    # step 11
    (
        "release_commit_ref",
        "release",
        lambda r: replace(
            r,
            recovery_release_commit=AuthorityRecoveryReleaseCommit(
                terminal=release_ref(3, encoded_len=0), leader_proof=PROOF
            ),
        ),
        "recovery release terminal reference is not canonical: encoded_len 0",
    ),
    (
        "release_commit_proof_not_canonical",
        "release",
        lambda r: replace(
            r,
            recovery_release_commit=AuthorityRecoveryReleaseCommit(
                terminal=release_ref(3), leader_proof=replace(PROOF, fencing_token=0)
            ),
        ),
        "recovery release commit has no canonical leader proof",
    ),
    (
        "release_commit_proof",
        "release",
        lambda r: with_lease(r, token=3),
        f"{RELEASE_BOUND} settled fault inventory: its leader proof does not match the lease",
    ),
    (
        "release_commit_head",
        "release",
        lambda r: replace(
            r, recovery_release_head=RecoveryReleaseLink(sequence=39, terminal=release_ref(3))
        ),
        "the release head is not this sequence and terminal",
    ),
    (
        "release_commit_revision",
        "release",
        lambda r: replace(r, recovery_fault_revision=39),
        f"{RELEASE_BOUND} settled fault inventory: revision 39 is not sequence 40",
    ),
    (
        "release_commit_active_slot",
        "release",
        lambda r: replace(r, recovery_fault_slots=(slot(9, 36, True), slot(11, 37, False))),
        f"{RELEASE_BOUND} settled fault inventory: a fault slot is still active",
    ),
    (
        "release_head_zero_seq",
        "fault",
        lambda r: replace(
            r, recovery_release_head=RecoveryReleaseLink(sequence=0, terminal=release_ref(2))
        ),
        "recovery release authority link has a zero sequence",
    ),
    (
        "release_head_ref",
        "carried",
        lambda r: replace(
            r,
            recovery_release_head=RecoveryReleaseLink(
                sequence=19, terminal=release_ref(2, sha256=SHA[:-1])
            ),
        ),
        "recovery release terminal reference is not canonical: sha256",
    ),
    (
        "release_head_at_seq",
        "fault",
        lambda r: replace(
            r, recovery_release_head=RecoveryReleaseLink(sequence=40, terminal=release_ref(2))
        ),
        "recovery release head is outside the durable authority sequence: sequence 40",
    ),
    (
        "settled_revision_not_release",
        "carried",
        lambda r: replace(r, recovery_fault_revision=25),
        "settled recovery fault inventory is not bound to its release head: revision 25",
    ),
]


@pytest.mark.parametrize(
    ("base", "mutate", "substring"),
    [case[1:] for case in CHAIN_RULES],
    ids=[case[0] for case in CHAIN_RULES],
)
def test_chain_rule(base: str, mutate: Mutation, substring: str) -> None:
    record = BASES[base]()
    v.validate_record(record)
    expect_violation(mutate(record), substring)


def test_decode_validates_after_reading() -> None:
    """The same rules run on every decode: a record read from the store that breaks one is a
    CorruptRecord naming its key (LA-11)."""
    key = record_path(40)
    for _, base, mutate, substring in CHAIN_RULES:
        with pytest.raises(CorruptRecord) as caught:
            v.decode_record(encode(mutate(BASES[base]())), key, 40)
        assert caught.value.key == key and substring in str(caught.value), str(caught.value)

"""Validation of decisions and references: LA §3.6 (drain and recovery decisions),
LA §8.2 (process-lease fences), LA §3.8 (release references), LA §8.8 (catalog manifest), and
LA-T65 (a successor may Abort, never Commit).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.lease import validate as v
from laminar_cluster.lease.records import (
    AssignmentDrainDecision,
    AssignmentSnapshotRef,
    CatalogManifest,
    CatalogManifestEntry,
    RecoveryReleaseTerminalRef,
)
from tests.lease.builders import (
    NIL,
    OLD_PROOF,
    PROOF,
    RIVAL_PROOF,
    SHA,
    cref,
    drain,
    fence,
    pfence,
    recovery,
    release_ref,
    replace,
    uid,
)

# LA §3.6 and LA §3.12 "Decision validation", on the decisions themselves.
DRAIN = "assignment drain decision is not canonical"
RECOVERY = "assignment recovery decision is not a canonical successor"
REMOVED = "assignment recovery decision requires the exact removed predecessor process set"
FENCES = "assignment recovery process fences are incomplete, unsorted, or unrelated"
ZERO_DIGEST = replace(fence(6), assignment_digest=(0,) * 32)
TWO_REMOVED: dict[str, Any] = {
    "predecessor": fence(6, ((7, uid(1)), (9, uid(3)), (10, uid(5)))),
    "target": fence(7, ((7, uid(1)), (11, uid(4)))),
}


def transition_of(decision: AssignmentDrainDecision, **kw: Any) -> AssignmentDrainDecision:
    return replace(decision, transition=replace(decision.transition, **kw))


DECISION_RULES: list[tuple[str, Callable[[], Any], str]] = [
    (
        "drain_fence",
        lambda: transition_of(drain(7), predecessor=ZERO_DIGEST),
        f"{DRAIN}: transition: a fence is not canonical",
    ),
    (
        "drain_vnodes",
        lambda: transition_of(drain(7), target=replace(fence(7), vnode_count=128)),
        "vnode count changes from 256 to 128",
    ),
    (
        "drain_version_gap",
        lambda: transition_of(drain(7), target=fence(8)),
        "target version 8 is not predecessor version 6 + 1",
    ),
    (
        "drain_transition_proof",
        lambda: transition_of(drain(7, commit=False), leader=replace(RIVAL_PROOF, fencing_token=0)),
        f"{DRAIN}: transition leader proof is not canonical",
    ),
    (
        "drain_leader_outside_fences",
        lambda: drain(7, commit=False, leader=RIVAL_PROOF),
        "transition leader node 8 boot",
    ),
    (
        "drain_proof",
        lambda: drain(7, commit=False, proof=replace(PROOF, fencing_token=0), leader=PROOF),
        f"{DRAIN}: leader proof is not canonical",
    ),
    (
        "drain_commit_by_successor",
        lambda: drain(7, proof=PROOF, leader=OLD_PROOF),
        f"{DRAIN}: a Commit requires leader_proof == transition.leader",
    ),
    (
        "drain_commit_without_handoff",
        lambda: replace(drain(7), handoff_checkpoint=None),
        f"{DRAIN}: a Commit requires a handoff checkpoint",
    ),
    (
        "drain_abort_with_handoff",
        lambda: replace(drain(7, commit=False), handoff_checkpoint=cref(6)),
        f"{DRAIN}: an Abort carries no handoff checkpoint",
    ),
    (
        "drain_handoff_attempt",
        lambda: replace(drain(7), handoff_checkpoint=replace(cref(6), checkpoint_id=5)),
        f"{DRAIN}: handoff checkpoint: recovery capsule reference epoch 6 checkpoint 5 is not",
    ),
    (
        "drain_handoff_zero",
        lambda: replace(drain(7), handoff_checkpoint=cref(0)),
        "handoff checkpoint: recovery capsule reference epoch 0 checkpoint 0 is not",
    ),
    (
        "drain_handoff_sha",
        lambda: replace(drain(7), handoff_checkpoint=replace(cref(6), sha256=SHA.upper())),
        "handoff checkpoint: recovery capsule digest 'ABAB",
    ),
    (
        "drain_handoff_len",
        lambda: replace(drain(7), handoff_checkpoint=replace(cref(6), len=0)),
        "handoff checkpoint: recovery capsule length 0 is outside 1..=",
    ),
    (
        "recovery_checkpoint_attempt",
        lambda: recovery(recovery_checkpoint=replace(cref(6), epoch=7)),
        f"{RECOVERY}: recovery checkpoint: recovery capsule reference epoch 7 checkpoint 6",
    ),
    (
        "recovery_checkpoint_sha",
        lambda: recovery(recovery_checkpoint=replace(cref(6), sha256="ab" * 31)),
        f"{RECOVERY}: recovery checkpoint: recovery capsule digest",
    ),
    (
        "recovery_checkpoint_len",
        lambda: recovery(recovery_checkpoint=replace(cref(6), len=0)),
        f"{RECOVERY}: recovery checkpoint: recovery capsule length 0",
    ),
    ("recovery_fence", lambda: recovery(predecessor=ZERO_DIGEST), f"{RECOVERY}: a fence"),
    (
        "recovery_vnodes",
        lambda: recovery(target=replace(recovery().target, vnode_count=64)),
        f"{RECOVERY}: vnode count changes from 256 to 64",
    ),
    (
        "recovery_version_gap",
        lambda: recovery(predecessor=replace(recovery().predecessor, assignment_version=5)),
        f"{RECOVERY}: target version 7 is not predecessor version 5 + 1",
    ),
    (
        "recovery_proof",
        lambda: recovery(proof=replace(PROOF, owner=replace(PROOF.owner, node_id=0))),
        f"{RECOVERY}: leader proof is not canonical",
    ),
    (
        "proposal_version",
        lambda: recovery(proposal=AssignmentSnapshotRef(version=1, sha256=SHA, encoded_len=1)),
        f"{RECOVERY}: proposal: assignment snapshot reference version 1 is below 2",
    ),
    (
        "proposal_sha",
        lambda: recovery(proposal=AssignmentSnapshotRef(version=7, sha256="x", encoded_len=1)),
        "assignment snapshot reference sha256 'x' is not 64 lowercase hex",
    ),
    (
        "proposal_len",
        lambda: recovery(proposal=AssignmentSnapshotRef(version=7, sha256=SHA, encoded_len=0)),
        "assignment snapshot reference encoded_len 0 is outside 1..=8388608",
    ),
    (
        "proposal_len_big",
        lambda: recovery(
            proposal=AssignmentSnapshotRef(version=7, sha256=SHA, encoded_len=8_388_609)
        ),
        "encoded_len 8388609 is outside",
    ),
    (
        "proposal_not_target",
        lambda: recovery(proposal=AssignmentSnapshotRef(version=8, sha256=SHA, encoded_len=1)),
        f"{RECOVERY}: proposal version 8 is not target version 7",
    ),
    (
        "nothing_removed",
        lambda: recovery(target=fence(7, ((7, uid(1)), (9, uid(3)))), removed_process_fences=()),
        f"{REMOVED}: 0 predecessor processes are removed, 0 process fences are given",
    ),
    (
        "fence_missing",
        lambda: recovery(removed_process_fences=()),
        f"{REMOVED}: 1 predecessor processes are removed, 0 process fences are given",
    ),
    (
        "fence_extra",
        lambda: recovery(removed_process_fences=(pfence(9, uid(3)), pfence(11, uid(4)))),
        f"{REMOVED}: 1 predecessor processes are removed, 2 process fences are given",
    ),
    (
        "fences_unsorted",
        lambda: recovery(
            **TWO_REMOVED, removed_process_fences=(pfence(10, uid(5)), pfence(9, uid(3)))
        ),
        f"{FENCES}: fence 0: fence names node 10 boot",
    ),
    (
        "fence_wrong_boot",
        lambda: recovery(removed_process_fences=(pfence(9, uid(8)),)),
        f"{FENCES}: fence 0: fence names node 9 boot {uid(8)}, removed process is node 9",
    ),
    (
        "fence_same_owner",
        lambda: recovery(removed_process_fences=(pfence(9, uid(3), succ={"owner": uid(3)}),)),
        "process fence of node 9 has one owner on both sides",
    ),
    (
        "fence_seq_gap",
        lambda: recovery(removed_process_fences=(pfence(9, uid(3), succ={"seq": 12}),)),
        "goes from (seq 10, term 4) to (seq 12, term 5), not +1 each",
    ),
    (
        "fence_term_gap",
        lambda: recovery(removed_process_fences=(pfence(9, uid(3), succ={"term": 4}),)),
        "goes from (seq 10, term 4) to (seq 11, term 4), not +1 each",
    ),
    (
        "fence_successor_node",
        lambda: recovery(removed_process_fences=(pfence(9, uid(3), succ={"node": 10}),)),
        "process lease node 10 is not the nonzero node 9",
    ),
    (
        "fence_owner_nil",
        lambda: recovery(removed_process_fences=(pfence(9, NIL),)),
        "process lease owner '00000000-0000-0000-0000-000000000000' is not a canonical",
    ),
    (
        "fence_term_zero",
        lambda: recovery(removed_process_fences=(pfence(9, uid(3), term=0),)),
        "process lease term 0 and seq 10 must be nonzero",
    ),
]


@pytest.mark.parametrize(
    ("build", "substring"),
    [case[1:] for case in DECISION_RULES],
    ids=[case[0] for case in DECISION_RULES],
)
def test_decision_rule(build: Callable[[], Any], substring: str) -> None:
    v.validate_drain_decision(drain(7))
    v.validate_drain_decision(drain(7, commit=False, leader=OLD_PROOF))
    v.validate_recovery_decision(recovery())
    v.validate_recovery_decision(
        recovery(**TWO_REMOVED, removed_process_fences=(pfence(9, uid(3)), pfence(10, uid(5))))
    )
    with pytest.raises(ShapeViolation) as caught:
        v.validate_assignment_decision(build())
    assert substring in str(caught.value), str(caught.value)


def test_la_t65_successor_can_abort_not_commit() -> None:
    """A replacement term may Abort its predecessor's transition, never Commit it (LA-15)."""
    v.validate_drain_decision(drain(7, commit=False, proof=RIVAL_PROOF, leader=PROOF))
    with pytest.raises(
        ShapeViolation, match=re.escape("a Commit requires leader_proof == transition.leader")
    ):
        v.validate_drain_decision(drain(7, commit=True, proof=RIVAL_PROOF, leader=PROOF))
    assert v.drain_transition_is_canonical(drain(7).transition)
    assert v.process_fence_is_canonical(pfence(9, uid(3)))
    assert not v.process_fence_is_canonical(pfence(9, uid(3), succ={"seq": 10}))


# LA §8.8: the catalog manifest.
def manifest(*entries: tuple[str, str]) -> CatalogManifest:
    return CatalogManifest(
        version=1,
        entries=tuple(
            CatalogManifestEntry(canonical_name=n, kind="table", ddl=d) for n, d in entries
        ),
    )


@pytest.mark.parametrize(
    ("bad", "substring"),
    [
        (manifest(("", "CREATE TABLE t (a INT)")), "entry name '' must be non-empty and trimmed"),
        (
            manifest((" t", "CREATE TABLE t (a INT)")),
            "entry name ' t' must be non-empty and trimmed",
        ),
        (manifest(("t\u00a0", "CREATE TABLE t (a INT)")), "must be non-empty and trimmed"),
        (manifest(("t", "CREATE TABLE t (a INT)"), ("t", "x")), "entry name 't' is not unique"),
        (manifest(("t", " \n\t")), "catalog manifest entry 't' has a blank DDL"),
        (manifest(("t", "")), "catalog manifest entry 't' has a blank DDL"),
        (manifest(*[(f"t{i}", "x") for i in range(4097)]), "has 4097 entries; maximum is 4096"),
        (replace(manifest(), version=2), "catalog manifest version 2 is not 1"),
    ],
)
def test_catalog_manifest_rule(bad: CatalogManifest, substring: str) -> None:
    v.validate_catalog_manifest(manifest())
    v.validate_catalog_manifest(manifest(*[(f"t{i}", "x") for i in range(4096)]))
    v.validate_catalog_manifest(manifest(("a b", " CREATE VIEW v AS SELECT 1 ")))
    with pytest.raises(ShapeViolation) as caught:
        v.validate_catalog_manifest(bad)
    assert substring in str(caught.value)


# LA §3.8: release references.
RELEASE = "recovery release terminal reference is not canonical"


def release_id_of(**kw: Any) -> RecoveryReleaseTerminalRef:
    return release_ref(2, release=replace(release_ref(2).release, **kw))


@pytest.mark.parametrize(
    ("bad", "substring"),
    [
        (release_id_of(protocol_version=0), f"{RELEASE}: recovery release id protocol_version 0"),
        (release_id_of(generation=0), "generation 0 and driver 7 must be nonzero"),
        (release_id_of(driver=0), "driver 0 must be nonzero"),
        (release_id_of(nonce=NIL), "recovery release id nonce"),
        (release_id_of(round_sha256="EF" * 32), "recovery release id round_sha256"),
        (release_ref(2, sha256="0" * 63), f"{RELEASE}: sha256 '{'0' * 63}' is not 64 lowercase"),
        (release_ref(2, encoded_len=0), f"{RELEASE}: encoded_len 0 is outside 1..=262144"),
        (release_ref(2, encoded_len=262_145), "encoded_len 262145 is outside 1..=262144"),
    ],
)
def test_release_ref_rule(bad: RecoveryReleaseTerminalRef, substring: str) -> None:
    v.validate_release_ref(release_ref(2))
    v.validate_release_ref(
        release_ref(2, encoded_len=262_144, release=release_id_of(epoch=0).release)
    )
    with pytest.raises(ShapeViolation) as caught:
        v.validate_release_ref(bad)
    assert substring in str(caught.value)

"""Leader authority record validation, part 1 (LA §2.3, LA §2.5, LA §3.2, LA §3.12 steps
1-5, LA §4.1.1) and LA-T16, LA-T28, LA-T38 (decode half) and LA-T39.

Every rule has a case that takes a valid record (`builders.py`), breaks exactly that rule, and
asserts the rule's message; the unbroken record is validated first, so a case cannot pass
vacuously.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from laminar_cluster.codec import encode
from laminar_cluster.codec.shape import ShapeViolation
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.lease import validate as v
from laminar_cluster.lease.paths import HEAD_PATH, record_path
from laminar_cluster.lease.records import (
    AuthorityHeadPointer,
    LeaderAuthorityRecord,
)
from laminar_cluster.store import CREATE, ObjectStore
from tests.lease.builders import (
    BAD_CATALOG,
    BASES,
    CATALOG,
    COMMITTED,
    DEPLOYMENT,
    FLOOR_,
    LINK,
    LOCAL_ANCHOR,
    NIL,
    OLD_PROOF,
    OWNER,
    PROOF,
    TERMINAL,
    Mutation,
    carried,
    commit,
    dlink,
    drain,
    expect_violation,
    fault_rec,
    lease,
    olink,
    outcome,
    release_rec,
    replace,
    uid,
    with_afloor,
    with_floor,
    with_lease,
)


def test_every_base_record_is_valid() -> None:
    for build in BASES.values():
        assert v.decode_record(v.encode_record(build()), "k", 40) == build()


# (case id, base record, the one mutation, the rule's message substring), in LA §3.12 step order.
RECORD_RULES: list[tuple[str, str, Mutation, str]] = [
    # step 1
    ("version", "carried", lambda r: replace(r, version=8), "authority record version 8 is unsupp"),
    # step 2 (LA §3.1, LA §3.2)
    ("owner_node", "carried", lambda r: with_lease(r, owner=replace(OWNER, node=0)), "node is 0"),
    ("owner_boot_nil", "carried", lambda r: with_lease(r, owner=replace(OWNER, boot=NIL)), "boot"),
    (
        "owner_boot_upper",
        "carried",
        lambda r: with_lease(r, owner=replace(OWNER, boot=uid(0xABC).upper())),
        "is not a canonical non-nil UUID",
    ),
    (
        "owner_term",
        "carried",
        lambda r: with_lease(r, owner=replace(OWNER, process_term=0)),
        "term",
    ),
    ("lease_seq", "carried", lambda r: with_lease(r, seq=0, renewal_sequence=0), "seq is 0"),
    ("lease_token", "carried", lambda r: with_lease(r, token=0), "token is 0"),
    (
        "catalog_version",
        "carried",
        lambda r: with_lease(r, catalog_manifest=replace(CATALOG, version=2)),
        f"{BAD_CATALOG}: catalog manifest reference version 2 is not 1",
    ),
    (
        "catalog_sha",
        "carried",
        lambda r: with_lease(r, catalog_manifest=replace(CATALOG, sha256="AB" * 32)),
        "is not 64 lowercase hex",
    ),
    (
        "catalog_len_zero",
        "carried",
        lambda r: with_lease(r, catalog_manifest=replace(CATALOG, encoded_len=0)),
        "encoded_len 0 is outside 1..=8388608",
    ),
    (
        "catalog_len_big",
        "carried",
        lambda r: with_lease(r, catalog_manifest=replace(CATALOG, encoded_len=8_388_609)),
        "encoded_len 8388609 is outside 1..=8388608",
    ),
    (
        "catalog_entries",
        "carried",
        lambda r: with_lease(r, catalog_manifest=replace(CATALOG, entry_count=4097)),
        "entry_count 4097 exceeds 4096",
    ),
    # step 3
    ("prev_outcome_seq", "commit", lambda r: replace(r, previous_outcome=olink(0, 25)), LINK),
    ("outcome_head_id", "carried", lambda r: replace(r, outcome_head=olink(30, 25, 26)), LINK),
    ("prev_commit_epoch", "commit", lambda r: replace(r, previous_commit=olink(27, 0)), LINK),
    ("commit_head_seq", "carried", lambda r: replace(r, commit_head=olink(0, 22)), LINK),
    # step 4
    (
        "floor_deployment_upper",
        "carried",
        lambda r: with_floor(r, deployment_id=DEPLOYMENT.upper()),
        f"{FLOOR_}: deployment_id",
    ),
    ("floor_deployment_nil", "carried", lambda r: with_floor(r, deployment_id=NIL), FLOOR_),
    (
        "floor_authority_zero",
        "terminal_floor",
        lambda r: with_floor(r, authority_before_epoch=0),
        "authority_before_epoch is 0",
    ),
    (
        "floor_artifact_above",
        "terminal_floor",
        lambda r: with_floor(r, artifact_before_epoch=21),
        "artifact_before_epoch 21 exceeds authority_before_epoch 20",
    ),
    (
        "floor_link",
        "carried",
        lambda r: with_floor(r, terminal_anchor_link=olink(0, 15)),
        f"{LINK} checkpoint ID: outcome floor terminal_anchor_link",
    ),
    (
        "anchor_shape",
        "carried",
        lambda r: with_floor(r, terminal_anchor=outcome(15, False, OLD_PROOF, checkpoint_id=16)),
        "outcome floor has an invalid terminal anchor: non-canonical checkpoint ID 16",
    ),
    (
        "anchor_scope",
        "carried",
        lambda r: with_floor(r, terminal_anchor=LOCAL_ANCHOR),
        "outcome floor has an invalid terminal anchor: scope is local",
    ),
    (
        "anchor_deployment",
        "carried",
        lambda r: with_floor(r, committed_anchor=outcome(8, True, OLD_PROOF, deployment_id=uid(5))),
        "outcome floor has an invalid committed anchor: deployment",
    ),
    (
        "terminal_anchor_without_link",
        "terminal_floor",
        lambda r: with_floor(r, terminal_anchor_link=None),
        f"{TERMINAL}: only one of anchor and link is present",
    ),
    (
        "terminal_link_without_anchor",
        "terminal_floor",
        lambda r: with_floor(r, terminal_anchor=None),
        f"{TERMINAL}: only one of anchor and link is present",
    ),
    (
        "terminal_anchor_not_below",
        "terminal_floor",
        lambda r: with_floor(r, authority_before_epoch=15),
        f"{TERMINAL}: anchor epoch 15 is not below authority_before_epoch 15",
    ),
    (
        "terminal_link_other_attempt",
        "terminal_floor",
        lambda r: replace(
            with_floor(r, terminal_anchor_link=olink(16, 14)), outcome_head=olink(16, 14)
        ),
        f"{TERMINAL}: the link names another attempt",
    ),
    (
        "committed_anchor_without_link",
        "carried",
        lambda r: with_floor(r, committed_anchor_link=None),
        f"{COMMITTED}: only one of anchor and link is present",
    ),
    (
        "committed_artifact_zero",
        "carried",
        lambda r: with_floor(r, artifact_before_epoch=0),
        f"{COMMITTED}: artifact_before_epoch is 0",
    ),
    (
        "committed_not_commit",
        "carried",
        lambda r: with_floor(r, committed_anchor=outcome(8, False, OLD_PROOF)),
        f"{COMMITTED}: the anchor is not a Commit",
    ),
    (
        "committed_not_below",
        "carried",
        lambda r: with_floor(r, artifact_before_epoch=8),
        f"{COMMITTED}: anchor epoch 8 is not below artifact_before_epoch 8",
    ),
    (
        "committed_link_other_attempt",
        "carried",
        lambda r: with_floor(r, committed_anchor_link=olink(9, 7)),
        f"{COMMITTED}: the link names another attempt",
    ),
    (
        "anchors_unordered",
        "carried",
        lambda r: with_floor(
            r,
            terminal_anchor=outcome(7, False, OLD_PROOF),
            terminal_anchor_link=olink(16, 7),
        ),
        "outcome floor anchors are not monotonically ordered",
    ),
    (
        "anchors_same_epoch_differ",
        "carried",
        lambda r: with_floor(
            r,
            terminal_anchor=outcome(8, False, OLD_PROOF),
            terminal_anchor_link=olink(16, 8),
        ),
        "outcome floor anchors are not monotonically ordered",
    ),
    (
        "anchor_links_unordered",
        "carried",
        lambda r: with_floor(r, committed_anchor_link=olink(17, 8)),
        "outcome floor anchor links are not ordered with their exact outcomes",
    ),
    (
        "equal_anchors_different_links",
        "commit_floor",
        lambda r: with_floor(r, committed_anchor_link=olink(8, 8)),
        "outcome floor anchor links are not ordered with their exact outcomes",
    ),
    (
        "committed_without_terminal",
        "carried",
        lambda r: with_floor(r, terminal_anchor=None, terminal_anchor_link=None),
        "outcome floor has a committed anchor without terminal continuity",
    ),
    # step 5
    (
        "afloor_zero",
        "carried",
        lambda r: with_afloor(r, before_target_version=0),
        "assignment decision floor requires a nonzero target version",
    ),
    (
        "afloor_anchor_without_link",
        "carried",
        lambda r: with_afloor(r, terminal_anchor_link=None),
        "assignment decision floor has an incomplete terminal anchor",
    ),
    (
        "afloor_link_without_anchor",
        "carried",
        lambda r: with_afloor(r, terminal_anchor=None),
        "assignment decision floor has an incomplete terminal anchor",
    ),
    (
        "afloor_anchor_invalid",
        "carried",
        lambda r: with_afloor(r, terminal_anchor=drain(4, proof=OLD_PROOF, leader=PROOF)),
        "assignment decision floor anchor is invalid: assignment drain decision is not canon",
    ),
    (
        "afloor_link_seq",
        "carried",
        lambda r: with_afloor(r, terminal_anchor_link=dlink(0, 4)),
        "assignment decision floor anchor does not match its exact authority link: link seq",
    ),
    (
        "afloor_link_target",
        "carried",
        lambda r: with_afloor(r, terminal_anchor_link=dlink(12, 3)),
        "link target 3 is not anchor target 4",
    ),
    (
        "afloor_anchor_not_below",
        "carried",
        lambda r: with_afloor(r, before_target_version=4),
        "anchor target 4 is not below 4",
    ),
]


@pytest.mark.parametrize(
    ("base", "mutate", "substring"),
    [case[1:] for case in RECORD_RULES],
    ids=[case[0] for case in RECORD_RULES],
)
def test_record_rule(base: str, mutate: Mutation, substring: str) -> None:
    record = BASES[base]()
    v.validate_record(record)
    expect_violation(mutate(record), substring)


def test_la_t16_invalid_renewal_sequence() -> None:
    v.validate_lease(lease(seq=5, renewal=5, token=1))
    v.validate_lease(lease(seq=5, renewal=1, token=1))
    for renewal in (0, 6):
        with pytest.raises(
            ShapeViolation, match=re.escape(f"renewal_sequence {renewal} is outside 1..=5")
        ):
            v.validate_lease(lease(seq=5, renewal=renewal, token=1))
        record = LeaderAuthorityRecord.initial(lease(seq=5, renewal=renewal, token=1))
        with pytest.raises(
            InvalidArgument, match=re.escape("renewal sequence must be within 1..=sequence")
        ):
            v.encode_record(record)
        with pytest.raises(
            CorruptRecord, match=re.escape("renewal sequence must be within 1..=sequence")
        ):
            v.decode_record(encode(record), record_path(5), 5)


# LA §2.3: the head pointer.
HEAD = "leader authority head has an unsupported version, zero sequence, or nil nonce"


def pointer(**kw: Any) -> AuthorityHeadPointer:
    fields: dict[str, Any] = {"version": 1, "sequence": 7, "nonce": uid(0xF00D)}
    fields.update(kw)
    return AuthorityHeadPointer(**fields)


@pytest.mark.parametrize(
    ("fields", "substring"),
    [
        ({"version": 2}, f"{HEAD}: version 2"),
        ({"sequence": 0}, f"{HEAD}: sequence is 0"),
        ({"nonce": NIL}, f"{HEAD}: nonce '{NIL}' is not a canonical non-nil UUID"),
        ({"nonce": uid(0xF00D).upper()}, "is not a canonical non-nil UUID"),
        ({"nonce": uid(0xF00D).replace("-", "")}, "is not a canonical non-nil UUID"),
    ],
)
def test_pointer_rule(fields: dict[str, Any], substring: str) -> None:
    v.validate_pointer(pointer())
    with pytest.raises(ShapeViolation, match=substring):
        v.validate_pointer(pointer(**fields))
    with pytest.raises(InvalidArgument, match=substring):
        v.encode_pointer(pointer(**fields))
    if "version" not in fields:  # a version other than 1 does not even parse (Literal[1])
        with pytest.raises(CorruptRecord, match=substring):
            v.decode_pointer(encode(pointer(**fields)), HEAD_PATH)


def test_pointer_round_trip_and_strict_decoding() -> None:
    body = v.encode_pointer(pointer(sequence=2**64 - 1))
    assert body == (
        b'{"version":1,"sequence":18446744073709551615,"nonce":"' + uid(0xF00D).encode() + b'"}'
    )
    assert len(body) <= 128
    assert v.decode_pointer(body) == pointer(sequence=2**64 - 1)
    good = v.encode_pointer(pointer())
    for bad in (
        b'{"version":1,"sequence":1}',  # LA-T24: the nonce is missing
        good[:-1] + b',"extra":1}',  # unknown field
        good.replace(b",", b", "),  # not canonical
        good + b"\n",
        b'{"version":1,"sequence":7,"nonce":"' + uid(0xF00D).encode() + b'","x":"' + b"y" * 80,
        b"",
    ):
        with pytest.raises(CorruptRecord) as caught:
            v.decode_pointer(bad, HEAD_PATH)
        assert caught.value.key == HEAD_PATH
    with pytest.raises(CorruptRecord, match="maximum is 128"):
        v.decode_pointer(good + b" " * (129 - len(good)), HEAD_PATH)


def test_la_t28_nonce_uniqueness() -> None:
    first, second = v.encode_pointer(pointer(nonce=uid(1))), v.encode_pointer(pointer(nonce=uid(2)))
    assert first != second
    assert v.decode_pointer(first).sequence == v.decode_pointer(second).sequence == 7


# Encoding and decoding (LA §2.5, LA §4.1.1, LA §4.1.6 step 1).
def test_la_t38_unknown_field() -> None:
    body = v.encode_record(carried())
    key = record_path(40)
    inner = body.replace(b'"catalog_manifest":', b'"extra":1,"catalog_manifest":', 1)
    top = body[:-1] + b',"extra":null}'
    for bad in (inner, top):
        assert bad != body
        with pytest.raises(CorruptRecord, match="extra") as caught:
            v.decode_record(bad, key, 40)
        assert caught.value.key == key


def test_la_t39_seq_mismatch() -> None:
    record = LeaderAuthorityRecord.initial(lease(seq=5, renewal=5, token=1))
    body = v.encode_record(record)
    assert v.decode_record(body, record_path(5), 5) == record
    key = record_path(4)
    with pytest.raises(
        CorruptRecord, match=re.escape("lease.seq must equal the path seq")
    ) as caught:
        v.decode_record(body, key, 4)
    assert caught.value.key == key
    assert "the body has 5, the path 4" in str(caught.value)


def test_decode_rejects_every_noncanonical_form() -> None:
    record = commit()
    body = v.encode_record(record)
    key = record_path(40)
    reordered = body.replace(b'{"version":9,"lease":', b'{"lease":', 1).replace(
        b',"checkpoint_outcome":', b',"version":9,"checkpoint_outcome":', 1
    )
    omitted = body.replace(b',"previous_assignment_decision":null', b"", 1)
    for bad in (
        body.replace(b",", b", "),  # pretty-printed
        body + b"\n",
        reordered,
        omitted,
        body.replace(b'"recovery_fault_revision":19', b'"recovery_fault_revision":19.0'),
        body.replace(b'"active":false', b'"active":0', 1),
        body.replace(b'{"version":9,', b'{"version":9,"version":9,', 1),  # duplicate key
        body.replace(DEPLOYMENT.encode(), DEPLOYMENT.upper().encode(), 1),
        b"",
        b'{"seq":40,"token":2,"owner":7,"expires_at_ms":0}',  # LA-T37: the early version
    ):
        with pytest.raises(CorruptRecord) as caught:
            v.decode_record(bad, key, 40)
        assert caught.value.key == key
    with pytest.raises(CorruptRecord, match="maximum is 262144"):
        v.decode_record(body + b" " * (262_145 - len(body)), key, 40)


def test_encode_refuses_invalid_and_oversized_records(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidArgument, match="one authority sequence cannot admit two"):
        v.encode_record(replace(commit(), assignment_decision=drain(7)))
    with pytest.raises(InvalidArgument, match="is not a valid LeaderAuthorityRecord"):
        v.encode_record(with_lease(carried(), expires_at_ms=2**63))
    size = len(v.encode_record(fault_rec()))
    monkeypatch.setattr(v, "ACTIVE_FAULT_RECORD_LIMIT_BYTES", size - 1)
    with pytest.raises(InvalidArgument, match="mandatory authority headroom") as caught:
        v.encode_record(fault_rec())
    assert f"candidate is {size} bytes" in str(caught.value)
    v.encode_record(carried())  # tombstones only: the headroom does not apply
    v.encode_record(release_rec())
    monkeypatch.setattr(v, "MAX_AUTHORITY_RECORD_BYTES", size - 1)
    with pytest.raises(InvalidArgument, match=f"record is {size} bytes; maximum is {size - 1}"):
        v.encode_record(fault_rec())


@pytest.mark.parametrize("base", ["commit", "recovery", "release"])
def test_records_round_trip_through_every_backend(store: ObjectStore, base: str) -> None:
    """encode_record's bytes survive each backend byte for byte; a hand edit is caught."""
    record = BASES[base]()
    key = record_path(40)

    async def scenario() -> None:
        await store.put(key, v.encode_record(record), CREATE)
        got = await store.get(key, end=262_145)
        assert v.decode_record(got.body, key, 40) == record
        edited = got.body.replace(b'"token":2', b'"token":3', 1)
        await store.put(record_path(41), edited, CREATE)
        tampered = await store.get(record_path(41))
        with pytest.raises(CorruptRecord, match="does not match the lease"):
            v.decode_record(tampered.body, record_path(41), 41)

    asyncio.run(scenario())

"""Paths (re-format and compare) and the checked reads of attempt objects (DC-3, DC-4, DC-16)."""

from __future__ import annotations

import asyncio
import dataclasses

import msgspec
import pytest

from laminar_cluster.authority.cluster_outcomes import cluster_outcome
from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.collect import Expected, verify_participant
from laminar_cluster.coordinator.objects import (
    EMPTY_STATE_SHA256,
    MANIFEST_VERSION,
    check_manifest_shape,
    encode_record,
)
from laminar_cluster.coordinator.participant import Refused
from laminar_cluster.coordinator.paths import (
    POINTER_PATH,
    after_attempt,
    attempt_prefix,
    before_attempt,
    manifest_path,
    parse_attempt_key,
    parse_manifest_path,
    parse_prepare_path,
    parse_state_path,
    prepare_path,
    state_path,
)
from laminar_cluster.coordinator.records import ParticipantManifest, SliceHolder, VnodeSlice
from laminar_cluster.coordinator.restore import committed_slices
from laminar_cluster.coordinator.slices import CommittedSlices
from laminar_cluster.errors import CorruptRecord, InvalidArgument, ObjectNotFound
from laminar_cluster.store import CREATE, OVERWRITE
from tests.assignment.snapshot_support import participant
from tests.coordinator.support import Cluster, make_cluster, write_prepare


def test_paths_round_trip() -> None:
    assert attempt_prefix(7) == "checkpoints/attempt=00000000000000000007/"
    assert prepare_path(7) == "checkpoints/attempt=00000000000000000007/prepare.json"
    assert state_path(7, 3) == (
        "checkpoints/attempt=00000000000000000007/state/node=00000000000000000003.bin"
    )
    assert manifest_path(7, 3) == (
        "checkpoints/attempt=00000000000000000007/manifest/node=00000000000000000003.json"
    )
    assert POINTER_PATH == "checkpoints/pointer.json"
    assert parse_prepare_path(prepare_path(7)) == 7
    assert parse_state_path(state_path(7, 3)) == (7, 3)
    assert parse_manifest_path(manifest_path(2**64 - 1, 2**64 - 1)) == (2**64 - 1, 2**64 - 1)
    assert parse_attempt_key(state_path(9, 1)) == 9


def test_listing_offsets_bracket_one_attempt() -> None:
    keys = [
        prepare_path(6),
        manifest_path(7, 1),
        prepare_path(7),
        state_path(7, 0),
        prepare_path(8),
    ]
    assert all(before_attempt(7) < key < after_attempt(7) for key in keys[1:4])
    assert prepare_path(6) < before_attempt(7) and after_attempt(7) < prepare_path(8)
    assert not POINTER_PATH.startswith("checkpoints/attempt=")  # never in an attempt listing


@pytest.mark.parametrize(
    "key",
    [
        "checkpoints/attempt=7/prepare.json",
        "checkpoints/attempt=00000000000000000000/prepare.json",
        "checkpoints/attempt=99999999999999999999/prepare.json",
        "checkpoints/attempt=0000000000000000000+/prepare.json",
        "checkpoints/attempt=00000000000000000007/prepare.json.tmp",
        "checkpoints/attempt=00000000000000000007/state/node=3.bin",
        "checkpoints/attempt=00000000000000000007/state/node=00000000000000000003.json",
        "checkpoints/attempt=00000000000000000007/manifest/node=3.json",
    ],
)
def test_non_canonical_paths_are_refused(key: str) -> None:
    for parse in (parse_prepare_path, parse_state_path, parse_manifest_path):
        with pytest.raises(CorruptRecord):
            parse(key)


def test_out_of_range_path_arguments_are_invalid() -> None:
    with pytest.raises(InvalidArgument):
        prepare_path(0)
    with pytest.raises(InvalidArgument):
        state_path(1, -1)
    with pytest.raises(InvalidArgument):
        manifest_path(1, -1)


def _slice(vnode: int, start: int, length: int, checkpoint_id: int = 5) -> VnodeSlice:
    holder = SliceHolder(
        checkpoint_id=checkpoint_id, participant=participant(2), start=start, length=length
    )
    return VnodeSlice(
        vnode=vnode, state_sha256=sha256_hex(b"x" * length), offsets={"3": 9}, holder=holder
    )


def test_dc16_a_manifest_must_be_well_formed() -> None:
    """Slices in vnode order, this attempt's back to back from 0 over exactly `state_bytes`,
    each this participant's; a reference to an earlier attempt only; a vnode cut empty with no
    holder and no offset; canonical partitions and output."""
    good = ParticipantManifest(
        version=MANIFEST_VERSION,
        attempt=CheckpointAttempt.canonical(5),
        participant=participant(2),
        prepare_sha256=sha256_hex(b"prepare"),
        slices=(
            _slice(1, 0, 4),
            _slice(2, 0, 7, checkpoint_id=3),  # a reference
            VnodeSlice(vnode=3, state_sha256=EMPTY_STATE_SHA256, offsets={}, holder=None),
            _slice(4, 4, 2),
        ),
        state_bytes=6,
        output_b64="b3V0",
    )
    check_manifest_shape(good, key="m")
    empty = VnodeSlice(vnode=3, state_sha256=EMPTY_STATE_SHA256, offsets={}, holder=None)
    foreign = msgspec.structs.replace(
        _slice(1, 0, 4),
        holder=SliceHolder(checkpoint_id=5, participant=participant(1), start=0, length=4),
    )
    wrong = {
        "not sorted and unique": (_slice(4, 0, 2), _slice(1, 2, 4)),
        "slice starts at 2": (_slice(1, 2, 4), _slice(4, 6, 2)),
        "foreign slice": (foreign, _slice(4, 4, 2)),
        "references a later attempt": (_slice(1, 0, 4), _slice(2, 0, 7, checkpoint_id=9)),
        "cut empty but has source offsets": (msgspec.structs.replace(empty, offsets={"1": 0}),),
        "empty with a holder": (msgspec.structs.replace(_slice(1, 0, 4), state_sha256="0" * 64),),
        "no holder": (msgspec.structs.replace(empty, state_sha256=sha256_hex(b"")),),
        "is not canonical": (msgspec.structs.replace(_slice(1, 0, 4), offsets={"03": 9}),),
    }
    for fact, slices in wrong.items():
        bad = msgspec.structs.replace(good, slices=slices, state_bytes=6)
        with pytest.raises(CorruptRecord, match=fact):
            check_manifest_shape(bad, key="m")
    with pytest.raises(CorruptRecord, match="cover 6 bytes; its state object is 7"):
        check_manifest_shape(msgspec.structs.replace(good, state_bytes=7), key="m")
    with pytest.raises(CorruptRecord, match="not canonical"):
        check_manifest_shape(msgspec.structs.replace(good, output_b64="b3V="), key="m")


async def _committed(cluster: Cluster, checkpoints: int) -> list[int]:
    """`checkpoints` Commits of hosts whose state never changes (every later vnode a
    reference)."""
    participants = [cluster.participant(cluster.host(n, vary=False)) for n in (1, 2, 3)]
    ids = []
    async with cluster.running(participants):
        for _ in range(checkpoints):
            result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline())
            assert result.success, result.error
            ids.append(result.checkpoint_id)
    return ids


def test_dc16_the_leader_refuses_a_reference_the_last_commit_does_not_hold(url: str) -> None:
    """DC-3, DC-16: the leader's check of a manifest: the prepare it answers, the vnodes of its
    node, and each reference exactly the last committed cut's slice."""

    async def main() -> None:
        cluster = await make_cluster(url)
        first, second = await _committed(cluster, 2)
        attempt = CheckpointAttempt.canonical(second)
        me = cluster.fence.participants[1]
        prepare_sha256 = sha256_hex((await cluster.store.get(prepare_path(second))).body)

        async def baseline() -> CommittedSlices:
            outcome = await cluster_outcome(cluster.authority, first)
            assert outcome is not None and outcome.recovery_capsule is not None
            return await committed_slices(
                cluster.store, cluster.decisions, outcome.recovery_capsule
            )

        expected = Expected(attempt, cluster.fence, cluster.owners, prepare_sha256, baseline)
        sealed = await verify_participant(cluster.store, expected, me)
        assert sealed is not None and all(
            s.holder is not None and s.holder.checkpoint_id == first for s in sealed.slices
        )  # every vnode unchanged: all references
        key = manifest_path(second, me.node_id)
        read = await cluster.store.get(key)
        manifest = msgspec.json.decode(read.body, type=ParticipantManifest)
        holder = manifest.slices[0].holder
        assert holder is not None
        moved = msgspec.structs.replace(
            manifest.slices[0], holder=msgspec.structs.replace(holder, start=1)
        )
        forged = msgspec.structs.replace(manifest, slices=(moved, *manifest.slices[1:]))
        await cluster.store.put(key, encode_record(forged, key=key), OVERWRITE)
        with pytest.raises(CorruptRecord, match="does not hold"):
            await verify_participant(cluster.store, expected, me)
        await cluster.store.put(key, read.body, OVERWRITE)
        other = dataclasses.replace(expected, prepare_sha256=sha256_hex(b"another prepare"))
        with pytest.raises(CorruptRecord, match="answers another prepare"):
            await verify_participant(cluster.store, other, me)
        fewer = dataclasses.replace(expected, owners=(*cluster.owners[:5], 3, 3, 3))
        with pytest.raises(CorruptRecord, match="manifest covers 3 vnodes"):
            await verify_participant(cluster.store, fewer, me)

    asyncio.run(main())


def test_dc4_a_participant_write_finding_other_bytes_refuses_the_cut(url: str) -> None:
    async def main() -> None:
        cluster = await make_cluster(url)
        host = cluster.host(2)
        p = cluster.participant(host, decision_timeout_s=0.2)
        attempt = await write_prepare(cluster)
        squatter = state_path(attempt.checkpoint_id, 2)
        await cluster.store.put(squatter, b"{}", CREATE)
        outcome = await p.step()
        assert isinstance(outcome, Refused) and "holds other bytes" in outcome.error
        assert host.resolutions == [(attempt, False)]  # no manifest: Abort at once
        with pytest.raises(ObjectNotFound):
            await cluster.store.head(manifest_path(attempt.checkpoint_id, 2))

    asyncio.run(main())

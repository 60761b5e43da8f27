"""The committed-output reader (runtime/output.py): an output is visible only under a cluster
Commit (real outcomes through a LeaderLeaseStore) or its sink commit marker (DC-12), from a
participant of the committed fence whose manifest (which holds the output) is the one the
recovery capsule names (DC-11). A store of the old layout is refused (DC-17)."""

from __future__ import annotations

import asyncio
import base64

import msgspec
import pytest

from laminar_cluster.authority.cluster_outcomes import (
    cluster_outcome,
    cluster_outcome_retention_boundary,
    cluster_outcomes,
    prune_cluster_outcomes_before,
    record_cluster_outcome,
)
from laminar_cluster.checkpoint.records import (
    CapsuleParticipant,
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointVerdict,
)
from laminar_cluster.clock import RealClock
from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.objects import MANIFEST_VERSION, encode_record
from laminar_cluster.coordinator.paths import manifest_path, sink_commit_path
from laminar_cluster.coordinator.records import ParticipantManifest, SliceHolder, VnodeSlice
from laminar_cluster.coordinator.sink_commits import sink_commit_from_outcome, write_sink_commit
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.fencing import FenceParticipant, LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.runtime.output import (
    AggregateRecord,
    CommittedOutput,
    aggregate_committed,
    check_aggregate_columns,
    decode_aggregate_records,
    encode_aggregate_records,
    encode_checked_aggregate_records,
    open_output_authority,
    read_committed_output,
)
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore, open_store
from tests.authority.test_cluster_outcome_helpers import deadline, elect, open_leader
from tests.checkpoint.test_capsule import BOOT_1, BOOT_2, FENCE, make_capsule
from tests.coordinator.support import make_cluster

NODE_1 = FenceParticipant(node_id=1, boot_incarnation=BOOT_1)
NODE_2 = FenceParticipant(node_id=2, boot_incarnation=BOOT_2)
NODE_3 = FenceParticipant(node_id=3, boot_incarnation="00000000-0000-4000-8000-000000000003")
VNODES = {1: (0, 1, 2, 3), 2: (4, 5, 6, 7), 3: (8,)}


def far() -> float:
    return RealClock().monotonic() + 60.0


def manifest_of(
    checkpoint_id: int, participant: FenceParticipant, records: list[AggregateRecord]
) -> ParticipantManifest:
    """A participant's manifest for an attempt: one 8-byte slice per vnode, and the output."""
    vnodes = VNODES[participant.node_id]
    slices = tuple(
        VnodeSlice(
            vnode=v,
            state_sha256=sha256_hex(b"state %d" % v),
            offsets={str(v): 1},
            holder=SliceHolder(
                checkpoint_id=checkpoint_id, participant=participant, start=8 * i, length=8
            ),
        )
        for i, v in enumerate(vnodes)
    )
    return ParticipantManifest(
        version=MANIFEST_VERSION,
        attempt=CheckpointAttempt.canonical(checkpoint_id),
        participant=participant,
        prepare_sha256=sha256_hex(b"prepare %d" % checkpoint_id),
        slices=slices,
        state_bytes=8 * len(vnodes),
        output_b64=base64.b64encode(encode_aggregate_records(records)).decode("ascii"),
    )


async def stage(
    store: ObjectStore,
    checkpoint_id: int,
    participant: FenceParticipant,
    records: list[AggregateRecord],
) -> str:
    """Write a participant's manifest (with its output) for an attempt; its SHA-256."""
    manifest = manifest_of(checkpoint_id, participant, records)
    manifest_key = manifest_path(checkpoint_id, participant.node_id)
    manifest_body = encode_record(manifest, key=manifest_key)
    await store.put(manifest_key, manifest_body, CREATE)
    return sha256_hex(manifest_body)


async def decide(
    leader: LeaderLeaseStore, proof: LeaderProof, epoch: int, manifests: dict[int, str] | None
) -> None:
    """Record the cluster outcome of `epoch`: Commit with a capsule naming `manifests` (node ->
    manifest SHA-256), or Abort when `manifests` is None."""
    ref = None
    if manifests is not None:
        decisions = leader.require_decisions()
        deployment_id = await decisions.load_or_create_deployment_id()
        participants = tuple(
            CapsuleParticipant(
                node_id=p.node_id,
                boot_incarnation=p.boot_incarnation,
                manifest_sha256=manifests[p.node_id],
                vnodes=VNODES[p.node_id],
            )
            for p in FENCE.participants
        )
        capsule = make_capsule(deployment_id, epoch, participants=participants)
        ref = await decisions.create_recovery_capsule(capsule)
    await record_cluster_outcome(
        leader,
        proof,
        epoch=epoch,
        checkpoint_id=epoch,
        assignment_fence=FENCE,
        verdict=CheckpointVerdict.ABORT if manifests is None else CheckpointVerdict.COMMIT,
        recovery_capsule=ref,
        deadline=deadline(leader),
    )


async def one_commit() -> ObjectStore:
    """A memory:// store where attempt 1 committed nodes 1 and 2's outputs."""
    store = open_store("memory://")
    leader = open_leader(store, 1)
    proof = await elect(leader)
    manifests = {
        1: await stage(store, 1, NODE_1, [(1, 1, 1)]),
        2: await stage(store, 1, NODE_2, [(2, 1, 1)]),
    }
    await decide(leader, proof, 1, manifests)
    return store


async def committed(store: ObjectStore) -> CommittedOutput[AggregateRecord]:
    authority = open_output_authority(store, RealClock())
    return await read_committed_output(authority, decode_aggregate_records, deadline=far())


def test_dc11_commit_shown_abort_and_unresolved_hidden_in_attempt_order() -> None:
    async def main() -> None:
        store = open_store("memory://")
        leader = open_leader(store, 1)
        proof = await elect(leader)
        one = {
            1: await stage(store, 1, NODE_1, [(5, 2, 7)]),
            2: await stage(store, 1, NODE_2, [(6, 1, 1)]),
        }
        await decide(leader, proof, 1, one)
        await stage(store, 2, NODE_1, [(5, 100, 100)])  # aborted: re-emitted in attempt 3
        await stage(store, 2, NODE_2, [(6, 100, 100)])
        await decide(leader, proof, 2, None)
        three = {
            1: await stage(store, 3, NODE_1, [(5, 3, -3), (9, 1, 4)]),
            2: await stage(store, 3, NODE_2, []),
        }
        await decide(leader, proof, 3, three)
        await stage(store, 4, NODE_1, [(5, 50, 50)])  # no outcome yet
        result = await committed(store)
        assert result.records == [(5, 2, 7), (6, 1, 1), (5, 3, -3), (9, 1, 4)]
        assert result.attempts == (1, 3)
        assert result.outputs == 4 and result.hidden == ()
        assert aggregate_committed(result.records) == {5: (5, 4), 6: (1, 1), 9: (1, 4)}

    asyncio.run(main())


def test_dc11_an_output_changed_after_the_commit_hides_it() -> None:
    """The output is inside the manifest the capsule names by SHA-256: other output bytes are
    another manifest, never shown."""

    async def main() -> None:
        store = await one_commit()
        key = manifest_path(1, 2)
        other = manifest_of(1, NODE_2, [(2, 5, 5)])
        await store.put(key, encode_record(other, key=key), OVERWRITE)
        result = await committed(store)
        assert result.records == [(1, 1, 1)]
        assert [(h.key, h.reason) for h in result.hidden] == [
            (manifest_path(1, 2), "manifest is not the one the recovery capsule names")
        ]

    asyncio.run(main())


def test_dc11_participant_outside_the_fence_is_hidden() -> None:
    async def main() -> None:
        store = open_store("memory://")
        leader = open_leader(store, 1)
        proof = await elect(leader)
        manifests = {
            1: await stage(store, 1, NODE_1, [(1, 1, 1)]),
            2: await stage(store, 1, NODE_2, [(2, 1, 1)]),
        }
        await stage(store, 1, NODE_3, [(3, 1, 1)])  # a node the committed fence does not hold
        await decide(leader, proof, 1, manifests)
        # A restarted node 2 (another boot incarnation) stages for attempt 2; 2 commits with
        # the capsule naming the fence's node 2 manifest it never wrote.
        restarted = FenceParticipant(node_id=2, boot_incarnation=NODE_3.boot_incarnation)
        two = {1: await stage(store, 2, NODE_1, [(1, 1, 1)]), 2: "cd" * 32}
        await stage(store, 2, restarted, [(2, 9, 9)])
        await decide(leader, proof, 2, two)
        result = await committed(store)
        assert result.records == [(1, 1, 1), (2, 1, 1), (1, 1, 1)]
        assert [(h.key, h.reason) for h in result.hidden] == [
            (manifest_path(1, 3), "participant is not in the committed fence"),
            (manifest_path(2, 2), "participant is not in the committed fence"),
        ]

    asyncio.run(main())


def test_dc11_manifest_the_capsule_does_not_name_or_missing_is_hidden() -> None:
    async def main() -> None:
        store = await one_commit()
        # Node 1's manifest replaced by other bytes (same output digest, other vnodes).
        key = manifest_path(1, 1)
        manifest = msgspec.json.decode((await store.get(key)).body, type=ParticipantManifest)
        edited = msgspec.structs.replace(manifest, slices=manifest.slices[:3], state_bytes=24)
        await store.put(key, encode_record(edited, key=key), OVERWRITE)
        await store.delete(manifest_path(1, 2))
        result = await committed(store)
        assert result.records == []
        assert [(h.key, h.reason) for h in result.hidden] == [
            (manifest_path(1, 1), "manifest is not the one the recovery capsule names"),
            (manifest_path(1, 2), "the manifest the capsule commits is missing"),
        ]

    asyncio.run(main())


def test_committed_output_missing_from_the_store_is_reported() -> None:
    async def main() -> None:
        store = await one_commit()
        await store.delete(manifest_path(1, 2))
        result = await committed(store)
        assert result.records == [(1, 1, 1)]
        assert [(h.key, h.reason) for h in result.hidden] == [
            (manifest_path(1, 2), "the manifest the capsule commits is missing")
        ]

    asyncio.run(main())


def test_malformed_output_of_a_committed_attempt_is_corrupt() -> None:
    async def main() -> None:
        store = await one_commit()
        await store.put(manifest_path(1, 1), b'{"version":2}', OVERWRITE)
        with pytest.raises(CorruptRecord):
            await committed(store)

    asyncio.run(main())


def test_dc17_a_store_of_the_old_layout_is_refused_by_the_reader() -> None:
    """A layout 1 object (a separate output, a per-vnode partial) or a version 1 manifest is
    InvalidArgument naming it, never read as layout 2."""

    async def main() -> None:
        for key, body in (
            (
                "checkpoints/attempt=00000000000000000001/output/node=00000000000000000001.json",
                b"{}",
            ),
            ("checkpoints/attempt=00000000000000000001/vnode=00003.json", b"{}"),
            (manifest_path(1, 1), b'{"version":1,"attempt":{}}'),
        ):
            store = await one_commit()
            await store.put(key, body, OVERWRITE)
            with pytest.raises(
                InvalidArgument, match=f"^{key}: written by the old checkpoint layout 1"
            ):
                await committed(store)

    asyncio.run(main())


def test_empty_store_has_no_committed_output() -> None:
    async def main() -> None:
        result = await committed(open_store("memory://"))
        assert (result.records, result.attempts, result.outputs, result.hidden) == ([], (), 0, ())

    asyncio.run(main())


def test_aggregate_record_format() -> None:
    records = [(0, 1, -5), (2**64 - 1, 3, 2**63 - 1), (7, 0, 0)]
    data = encode_aggregate_records(records)
    assert data == msgspec.msgpack.encode([list(r) for r in records])
    assert decode_aggregate_records(data) == records
    assert decode_aggregate_records(encode_aggregate_records([])) == []
    for bad in [[(-1, 1, 1)], [(1, 2**63, 1)], [(2**64, 1, 1)]]:
        with pytest.raises(InvalidArgument):
            encode_aggregate_records(bad)
    for data in [b"\xc1", msgspec.msgpack.encode([[1, 2]]), msgspec.msgpack.encode([[1, 2, "3"]])]:
        with pytest.raises(CorruptRecord):
            decode_aggregate_records(data)
    assert aggregate_committed([(1, 2, 3), (1, -1, 5), (0, 1, 1)]) == {0: (1, 1), 1: (1, 8)}


def test_aggregate_columns_are_checked_as_the_encoder_would() -> None:
    check_aggregate_columns([0, 2**64 - 1], [1, 2**63 - 1], [-(2**63), 5])
    check_aggregate_columns([], [], [])
    for keys, counts, sums in [
        ([-1], [1], [1]),
        ([2**64], [1], [1]),
        ([1], [2**63], [1]),
        ([1], [1], [-(2**63) - 1]),
    ]:
        with pytest.raises(InvalidArgument):
            check_aggregate_columns(keys, counts, sums)
    records = [(3, 1, -2), (1, 2, 5)]
    assert encode_checked_aggregate_records(records) == encode_aggregate_records(records)


def test_dc12_committed_output_survives_outcome_compaction_and_flooring() -> None:
    """72 real checkpoints (2 nodes, 2 vnodes, a fake host): the authority compacts its outcome
    history (a terminal floor), then its artifact floor is advanced past the first 60 Commits,
    which leave the live outcome list; their sink commit markers keep their output committed
    (DC-12), as retention kept their outputs and manifests (DC-13)."""

    async def main() -> None:
        cluster = await make_cluster("memory://", owners=(1, 2))
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2)]
        ids = []
        async with cluster.running(participants):
            for _ in range(72):
                result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline())
                assert result.success, result.error
                ids.append(result.checkpoint_id)
        expected = [f"out-{n}-{a}".encode() for a in ids for n in (1, 2)]

        async def committed_output() -> CommittedOutput[bytes]:
            return await read_committed_output(
                cluster.authority, lambda data: [data], deadline=cluster.deadline()
            )

        boundary = await cluster_outcome_retention_boundary(cluster.authority)
        assert boundary.terminal_before_epoch > ids[0]  # compacted at 64 live outcomes
        result = await committed_output()
        assert result.attempts == tuple(ids) and result.records == expected
        assert result.hidden == ()

        async def no_check(_: CheckpointOutcome) -> None:
            return None

        floor = await prune_cluster_outcomes_before(
            cluster.authority, cluster.proof, ids[60], no_check, deadline=cluster.deadline()
        )
        assert floor == ids[60]
        live = [o.checkpoint_id for o in await cluster_outcomes(cluster.authority)]
        assert ids[0] not in live and ids[59] not in live and ids[60] in live
        result = await committed_output()
        assert result.attempts == tuple(ids) and result.records == expected
        # Without its marker, a Commit below the floor is no longer known to the reader.
        await cluster.store.delete(sink_commit_path(ids[0]))
        result = await committed_output()
        assert result.attempts == tuple(ids[1:]) and result.records == expected[2:]

    asyncio.run(main())


def test_dc12_a_sink_commit_must_agree_with_the_authority_and_the_manifests() -> None:
    async def main() -> None:
        store = open_store("memory://")
        leader = open_leader(store, 1)
        proof = await elect(leader)
        manifests = {
            1: await stage(store, 1, NODE_1, [(1, 1, 1)]),
            2: await stage(store, 1, NODE_2, [(2, 1, 1)]),
        }
        await decide(leader, proof, 1, manifests)
        outcome = await cluster_outcome(leader, 1)
        assert outcome is not None
        marker = await sink_commit_from_outcome(store, leader.require_decisions(), outcome)
        await write_sink_commit(store, marker)
        result = await committed(store)  # the same, through the marker
        assert result.records == [(1, 1, 1), (2, 1, 1)] and result.attempts == (1,)
        # A marker naming another output than the manifest does.
        wrong = msgspec.structs.replace(
            marker,
            outputs=(
                marker.outputs[0],
                msgspec.structs.replace(marker.outputs[1], output_sha256="ab" * 32),
            ),
        )
        await store.put(sink_commit_path(1), encode_record(wrong, key="marker"), OVERWRITE)
        with pytest.raises(CorruptRecord, match="sink commit names another output of node 2"):
            await committed(store)
        await store.put(sink_commit_path(1), encode_record(marker, key="marker"), OVERWRITE)
        # A marker of an attempt the authority shows aborted (above the artifact floor).
        await stage(store, 2, NODE_1, [(1, 9, 9)])
        await stage(store, 2, NODE_2, [(2, 9, 9)])
        await decide(leader, proof, 2, None)
        forged = msgspec.structs.replace(
            marker,
            attempt=CheckpointAttempt.canonical(2),
            capsule=msgspec.structs.replace(marker.capsule, epoch=2, checkpoint_id=2),
        )
        await write_sink_commit(store, forged)
        with pytest.raises(CorruptRecord, match="sink commit of an attempt with no live Commit"):
            await committed(store)

    asyncio.run(main())

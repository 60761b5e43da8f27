"""Restoring vnodes from a committed distributed checkpoint (DC-10) and reading its committed
output (DC-11): only the partial of the participant the capsule lists, at the capsule's attempt,
matching that participant's manifest, itself matching the capsule. Anything else is refused. A
vnode cut empty has no partial and restores empty (DC-15).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from laminar_cluster.authority.cluster_outcomes import cluster_outcome
from laminar_cluster.checkpoint.records import CheckpointAttempt, RecoveryCapsuleRef
from laminar_cluster.coordinator.host import VnodeCut
from laminar_cluster.coordinator.objects import (
    EMPTY_PARTIAL_SHA256,
    encode_record,
    partial_of,
    read_manifest,
)
from laminar_cluster.coordinator.paths import manifest_path, partial_path
from laminar_cluster.coordinator.restore import load_cuts, load_outputs
from laminar_cluster.errors import CorruptRecord, InvalidArgument, ObjectNotFound
from laminar_cluster.store import OVERWRITE
from tests.coordinator.support import Cluster, expected_cut, make_cluster


def run(url: str, body: Callable[[Cluster, RecoveryCapsuleRef], Awaitable[None]]) -> None:
    """`body` gets a cluster with one committed checkpoint and its capsule reference."""

    async def main() -> None:
        cluster = await make_cluster(url)
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline())
        assert result.success, result.error
        outcome = await cluster_outcome(cluster.authority, result.checkpoint_id)
        assert outcome is not None and outcome.recovery_capsule is not None
        await body(cluster, outcome.recovery_capsule)

    asyncio.run(main())


def test_dc10_restore_every_vnode_from_a_committed_capsule(url: str) -> None:
    async def body(cluster: Cluster, ref: RecoveryCapsuleRef) -> None:
        store, decisions, _ = cluster.client()  # a restoring node's own client
        cuts = await load_cuts(store, decisions, ref, range(8), deadline=cluster.deadline())
        assert sorted(cuts) == list(range(8))
        for node in (1, 2, 3):
            expected = expected_cut(node, cluster.vnodes_of(node), ref.checkpoint_id)
            for vnode, cut in expected.vnodes.items():
                assert cuts[vnode] == cut
        # A handoff restores only the vnodes it acquires.
        some = await load_cuts(store, decisions, ref, [6, 3], deadline=cluster.deadline())
        assert sorted(some) == [3, 6] and some[6] == cuts[6]
        outputs = await load_outputs(store, decisions, ref, deadline=cluster.deadline())
        assert outputs == {n: f"out-{n}-{ref.checkpoint_id}".encode() for n in (1, 2, 3)}

    run(url, body)


def test_dc10_a_vnode_outside_the_capsule_is_an_invalid_argument(url: str) -> None:
    async def body(cluster: Cluster, ref: RecoveryCapsuleRef) -> None:
        with pytest.raises(InvalidArgument, match=r"vnode 8 is outside 0\.\.7"):
            await load_cuts(cluster.store, cluster.decisions, ref, [8], deadline=cluster.deadline())

    run(url, body)


def test_dc10_a_corrupt_partial_is_refused(url: str) -> None:
    async def body(cluster: Cluster, ref: RecoveryCapsuleRef) -> None:
        key = partial_path(ref.checkpoint_id, 4)
        # A well-formed partial of the right attempt, vnode and owner, with other state.
        attempt = CheckpointAttempt.canonical(ref.checkpoint_id)
        cut = expected_cut(2, [4], ref.checkpoint_id).vnodes[4]
        forged = partial_of(attempt, 4, cluster.fence.participants[1], cut.__class__(b"x", {}))
        await cluster.store.put(key, encode_record(forged, key=key), OVERWRITE)
        with pytest.raises(CorruptRecord, match="does not match its manifest digest"):
            await load_cuts(cluster.store, cluster.decisions, ref, [4], deadline=cluster.deadline())
        # Undamaged vnodes still restore.
        cuts = await load_cuts(
            cluster.store, cluster.decisions, ref, [3], deadline=cluster.deadline()
        )
        assert cuts[3] == expected_cut(2, [3], ref.checkpoint_id).vnodes[3]

    run(url, body)


def test_dc10_a_missing_partial_is_refused(url: str) -> None:
    async def body(cluster: Cluster, ref: RecoveryCapsuleRef) -> None:
        await cluster.store.delete(partial_path(ref.checkpoint_id, 0))
        with pytest.raises(CorruptRecord, match="vnode partial is missing"):
            await load_cuts(cluster.store, cluster.decisions, ref, [0], deadline=cluster.deadline())

    run(url, body)


def test_dc10_a_tampered_manifest_is_refused(url: str) -> None:
    async def body(cluster: Cluster, ref: RecoveryCapsuleRef) -> None:
        key = manifest_path(ref.checkpoint_id, 3)
        got = await cluster.store.get(key)
        digest_at = got.body.index(b'"output_sha256":"') + len(b'"output_sha256":"')
        tampered = got.body[:digest_at] + b"0" * 64 + got.body[digest_at + 64 :]
        await cluster.store.put(key, tampered, OVERWRITE)
        with pytest.raises(CorruptRecord, match="does not match the capsule's digest"):
            await load_cuts(cluster.store, cluster.decisions, ref, [7], deadline=cluster.deadline())
        with pytest.raises(CorruptRecord, match="does not match the capsule's digest"):
            await load_outputs(cluster.store, cluster.decisions, ref, deadline=cluster.deadline())

    run(url, body)


def test_dc15_a_vnode_cut_empty_has_no_partial_and_restores_empty(url: str) -> None:
    """A vnode cut without state (every offset 0) is named in the manifest by the empty digest,
    no partial object is written or read for it, the attempt commits, and it restores empty."""

    async def main() -> None:
        cluster = await make_cluster(url)
        hosts = {n: cluster.host(n) for n in (1, 2, 3)}
        hosts[2].empty = {3: {}, 4: {4: 0}}
        async with cluster.running([cluster.participant(h) for h in hosts.values()]):
            result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline())
        assert result.success, result.error
        checkpoint_id = result.checkpoint_id
        assert not await exists(cluster, partial_path(checkpoint_id, 3))
        assert not await exists(cluster, partial_path(checkpoint_id, 4))
        assert await exists(cluster, partial_path(checkpoint_id, 5))
        read = await read_manifest(
            cluster.store, CheckpointAttempt.canonical(checkpoint_id), node_id=2
        )
        assert read is not None
        assert read[0].partial_sha256[:2] == (EMPTY_PARTIAL_SHA256,) * 2
        assert read[0].partial_sha256[2] != EMPTY_PARTIAL_SHA256
        outcome = await cluster_outcome(cluster.authority, checkpoint_id)
        assert outcome is not None and outcome.recovery_capsule is not None
        store, decisions, _ = cluster.client()
        cuts = await load_cuts(
            store, decisions, outcome.recovery_capsule, [3, 4, 5], deadline=cluster.deadline()
        )
        assert cuts[3] == cuts[4] == VnodeCut(state=None, offsets={})
        assert cuts[5] == expected_cut(2, [5], checkpoint_id).vnodes[5]

    asyncio.run(main())


def test_dc15_a_cut_without_state_but_with_an_offset_is_refused(url: str) -> None:
    async def main() -> None:
        cluster = await make_cluster(url)
        hosts = {n: cluster.host(n) for n in (1, 2, 3)}
        hosts[3].empty = {6: {6: 5}}
        async with cluster.running([cluster.participant(h) for h in hosts.values()]):
            result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline(3.0))
        assert not result.success
        attempt = hosts[3].cuts[0]
        assert hosts[3].resolutions == [(attempt, False)]  # refused at once, before a manifest
        assert not await exists(cluster, manifest_path(attempt.checkpoint_id, 3))

    asyncio.run(main())


async def exists(cluster: Cluster, key: str) -> bool:
    try:
        await cluster.store.head(key)
    except ObjectNotFound:
        return False
    return True

"""Restoring vnodes from a committed distributed checkpoint (DC-10) and reading its committed
output (DC-11): only the slice the manifest of the participant the capsule lists names, matching
the manifest's digest, the manifest matching the capsule. Anything else is refused. A vnode cut
empty has no bytes and restores empty (DC-15); an unchanged vnode is a reference to the object
that holds its bytes, restored through it (DC-16).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from laminar_cluster.authority.cluster_outcomes import cluster_outcome
from laminar_cluster.checkpoint.records import CheckpointAttempt, RecoveryCapsuleRef
from laminar_cluster.coordinator.host import VnodeCut
from laminar_cluster.coordinator.objects import EMPTY_STATE_SHA256, read_manifest
from laminar_cluster.coordinator.paths import manifest_path, state_path
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


def test_dc10_a_corrupt_slice_is_refused(url: str) -> None:
    async def body(cluster: Cluster, ref: RecoveryCapsuleRef) -> None:
        # Node 2's state object holds vnodes 3, 4, 5 back to back: one byte of vnode 4 flipped.
        key = state_path(ref.checkpoint_id, 2)
        body = bytearray((await cluster.store.get(key)).body)
        at = body.index(b"n2v4")
        body[at] ^= 1
        await cluster.store.put(key, bytes(body), OVERWRITE)
        with pytest.raises(CorruptRecord, match="slice of vnode 4 does not match"):
            await load_cuts(cluster.store, cluster.decisions, ref, [4], deadline=cluster.deadline())
        # Undamaged vnodes of the same object still restore (their ranges only are read).
        cuts = await load_cuts(
            cluster.store, cluster.decisions, ref, [3, 5], deadline=cluster.deadline()
        )
        expected = expected_cut(2, [3, 5], ref.checkpoint_id).vnodes
        assert cuts == expected

    run(url, body)


def test_dc10_a_missing_or_short_state_object_is_refused(url: str) -> None:
    async def body(cluster: Cluster, ref: RecoveryCapsuleRef) -> None:
        await cluster.store.delete(state_path(ref.checkpoint_id, 1))
        with pytest.raises(CorruptRecord, match="state object a manifest names is missing"):
            await load_cuts(cluster.store, cluster.decisions, ref, [0], deadline=cluster.deadline())
        key = state_path(ref.checkpoint_id, 3)
        body = (await cluster.store.get(key)).body
        await cluster.store.put(key, body[:-1], OVERWRITE)
        with pytest.raises(CorruptRecord, match="its slices end at"):
            await load_cuts(cluster.store, cluster.decisions, ref, [7], deadline=cluster.deadline())

    run(url, body)


def test_dc10_a_tampered_manifest_is_refused(url: str) -> None:
    async def body(cluster: Cluster, ref: RecoveryCapsuleRef) -> None:
        key = manifest_path(ref.checkpoint_id, 3)
        got = await cluster.store.get(key)
        digest_at = got.body.index(b'"prepare_sha256":"') + len(b'"prepare_sha256":"')
        tampered = got.body[:digest_at] + b"0" * 64 + got.body[digest_at + 64 :]
        await cluster.store.put(key, tampered, OVERWRITE)
        with pytest.raises(CorruptRecord, match="does not match the capsule's digest"):
            await load_cuts(cluster.store, cluster.decisions, ref, [7], deadline=cluster.deadline())
        with pytest.raises(CorruptRecord, match="does not match the capsule's digest"):
            await load_outputs(cluster.store, cluster.decisions, ref, deadline=cluster.deadline())

    run(url, body)


def test_dc15_a_vnode_cut_empty_has_no_slice_and_restores_empty(url: str) -> None:
    """A vnode cut without state (every offset 0) is named in the manifest by the empty digest
    and no holder, no bytes are written or read for it, the attempt commits, and it restores
    empty."""

    async def main() -> None:
        cluster = await make_cluster(url)
        hosts = {n: cluster.host(n) for n in (1, 2, 3)}
        hosts[2].empty = {3: {}, 4: {4: 0}}
        async with cluster.running([cluster.participant(h) for h in hosts.values()]):
            result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline())
        assert result.success, result.error
        checkpoint_id = result.checkpoint_id
        state = (await cluster.store.get(state_path(checkpoint_id, 2))).body
        assert state == f"n2v5a{checkpoint_id}".encode()  # only vnode 5's bytes
        read = await read_manifest(
            cluster.store, CheckpointAttempt.canonical(checkpoint_id), node_id=2
        )
        assert read is not None
        slices = read[0].slices
        assert [s.state_sha256 for s in slices[:2]] == [EMPTY_STATE_SHA256] * 2
        assert slices[0].holder is None and slices[1].holder is None
        assert slices[2].state_sha256 != EMPTY_STATE_SHA256 and slices[2].holder is not None
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

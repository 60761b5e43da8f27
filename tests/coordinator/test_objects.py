"""Paths (re-format and compare) and the checked reads of attempt objects (DC-3, DC-4)."""

from __future__ import annotations

import asyncio

import pytest

from laminar_cluster.checkpoint.records import CheckpointAttempt
from laminar_cluster.codec import sha256_hex
from laminar_cluster.coordinator.collect import verify_participant
from laminar_cluster.coordinator.host import VnodeCut
from laminar_cluster.coordinator.objects import encode_record, partial_of, read_partial
from laminar_cluster.coordinator.participant import Refused
from laminar_cluster.coordinator.paths import (
    after_attempt,
    attempt_prefix,
    before_attempt,
    manifest_path,
    output_path,
    parse_attempt_key,
    parse_manifest_path,
    parse_output_path,
    parse_partial_path,
    parse_prepare_path,
    partial_path,
    prepare_path,
)
from laminar_cluster.errors import CorruptRecord, InvalidArgument, ObjectNotFound
from laminar_cluster.store import CREATE, OVERWRITE, open_store
from tests.assignment.snapshot_support import participant
from tests.coordinator.support import make_cluster, write_prepare


def test_paths_round_trip() -> None:
    assert attempt_prefix(7) == "checkpoints/attempt=00000000000000000007/"
    assert prepare_path(7) == "checkpoints/attempt=00000000000000000007/prepare.json"
    assert partial_path(7, 255) == "checkpoints/attempt=00000000000000000007/vnode=00255.json"
    assert output_path(7, 3) == (
        "checkpoints/attempt=00000000000000000007/output/node=00000000000000000003.json"
    )
    assert manifest_path(7, 3) == (
        "checkpoints/attempt=00000000000000000007/manifest/node=00000000000000000003.json"
    )
    assert parse_prepare_path(prepare_path(7)) == 7
    assert parse_partial_path(partial_path(7, 255)) == (7, 255)
    assert parse_output_path(output_path(7, 3)) == (7, 3)
    assert parse_manifest_path(manifest_path(2**64 - 1, 2**64 - 1)) == (2**64 - 1, 2**64 - 1)
    assert parse_attempt_key(partial_path(9, 1)) == 9


def test_listing_offsets_bracket_one_attempt() -> None:
    keys = [
        prepare_path(6),
        partial_path(7, 0),
        manifest_path(7, 1),
        prepare_path(7),
        prepare_path(8),
    ]
    assert all(before_attempt(7) < key < after_attempt(7) for key in keys[1:4])
    assert prepare_path(6) < before_attempt(7) and after_attempt(7) < prepare_path(8)


@pytest.mark.parametrize(
    "key",
    [
        "checkpoints/attempt=7/prepare.json",
        "checkpoints/attempt=00000000000000000000/prepare.json",
        "checkpoints/attempt=99999999999999999999/prepare.json",
        "checkpoints/attempt=0000000000000000000+/prepare.json",
        "checkpoints/attempt=00000000000000000007/prepare.json.tmp",
        "checkpoints/attempt=00000000000000000007/vnode=65535.json",
        "checkpoints/attempt=00000000000000000007/manifest/node=3.json",
    ],
)
def test_non_canonical_paths_are_refused(key: str) -> None:
    for parse in (parse_prepare_path, parse_partial_path, parse_manifest_path, parse_output_path):
        with pytest.raises(CorruptRecord):
            parse(key)


def test_out_of_range_path_arguments_are_invalid() -> None:
    with pytest.raises(InvalidArgument):
        prepare_path(0)
    with pytest.raises(InvalidArgument):
        partial_path(1, 65_535)
    with pytest.raises(InvalidArgument):
        manifest_path(1, -1)


def test_dc3_a_partial_must_name_its_attempt_vnode_and_participant() -> None:
    async def main() -> None:
        store = open_store("memory://")
        attempt = CheckpointAttempt.canonical(5)
        cut = VnodeCut(state=b"s", offsets={3: 9})

        async def check(written: object, match: str) -> None:
            key = partial_path(5, 3)
            body = encode_record(written, key=key)  # type: ignore[arg-type]
            await store.put(key, body, OVERWRITE)
            with pytest.raises(CorruptRecord, match=match):
                await read_partial(store, attempt, 3, participant(2), sha256_hex(body))

        other_attempt = CheckpointAttempt.canonical(4)
        await check(partial_of(other_attempt, 3, participant(2), cut), "names attempt 4/4")
        await check(partial_of(attempt, 2, participant(2), cut), "names vnode 2")
        await check(partial_of(attempt, 3, participant(1), cut), "names another participant")
        await check(partial_of(attempt, 3, participant(2, 99), cut), "names another participant")
        good = partial_of(attempt, 3, participant(2), cut)
        key = partial_path(5, 3)
        await store.put(key, encode_record(good, key=key), OVERWRITE)
        with pytest.raises(CorruptRecord, match="does not match its manifest digest"):
            await read_partial(store, attempt, 3, participant(2), sha256_hex(b"other"))

    asyncio.run(main())


def test_dc3_the_leader_refuses_a_partial_that_differs_from_its_manifest(url: str) -> None:
    async def main() -> None:
        cluster = await make_cluster(url)
        participants = [cluster.participant(cluster.host(n)) for n in (1, 2, 3)]
        async with cluster.running(participants):
            result = await cluster.leader(cluster.fence, None, deadline=cluster.deadline())
        assert result.success, result.error
        attempt = CheckpointAttempt.canonical(result.checkpoint_id)
        me = cluster.fence.participants[1]
        assert await verify_participant(cluster.store, attempt, me, (3, 4, 5)) is not None
        key = partial_path(attempt.checkpoint_id, 4)
        forged = partial_of(attempt, 4, me, VnodeCut(state=b"forged", offsets={}))
        await cluster.store.put(key, encode_record(forged, key=key), OVERWRITE)
        with pytest.raises(CorruptRecord, match="does not match its manifest digest"):
            await verify_participant(cluster.store, attempt, me, (3, 4, 5))
        with pytest.raises(CorruptRecord, match="manifest covers 3 vnodes"):
            await verify_participant(cluster.store, attempt, me, (3, 4))

    asyncio.run(main())


def test_dc4_a_participant_write_finding_other_bytes_refuses_the_cut(url: str) -> None:
    async def main() -> None:
        cluster = await make_cluster(url)
        host = cluster.host(2)
        p = cluster.participant(host, decision_timeout_s=0.2)
        attempt = await write_prepare(cluster)
        squatter = partial_path(attempt.checkpoint_id, 4)
        await cluster.store.put(squatter, b"{}", CREATE)
        outcome = await p.step()
        assert isinstance(outcome, Refused) and "holds other bytes" in outcome.error
        assert host.resolutions == [(attempt, False)]  # no manifest: Abort at once
        with pytest.raises(ObjectNotFound):
            await cluster.store.head(manifest_path(attempt.checkpoint_id, 2))

    asyncio.run(main())

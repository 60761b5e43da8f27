"""The sink-open witness (CD §3.8, CD §4.9, CD-10; CD-T52 to CD-T64, and CD-T6 for
the witness path).

Shared-mode tests run on memory, file and the S3 test server; lost responses, deferred puts and
blocked overwrites go through ScriptedStore; local-mode tests run on a local directory.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.limits import MAX_WITNESS_SLOT_BYTES, PIPELINE_IDENTITY_VERSION
from laminar_cluster.checkpoint.paths import WITNESS_PATH
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointSinkOpenWitness,
    CheckpointSinkOpenWitnessSlot,
    PipelineIdentity,
    WitnessClosed,
    WitnessOpen,
)
from laminar_cluster.clock import Clock
from laminar_cluster.codec import decode, encode, sha256_hex
from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
    ObjectAlreadyExists,
    ObjectNotFound,
    PreconditionFailed,
    Refused,
    StoreUnavailable,
)
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore
from laminar_cluster.store.file_backend import FileStore
from tests.support.scripted_store import ScriptedStore

PIPELINE = PipelineIdentity(
    canonical_version=PIPELINE_IDENTITY_VERSION, sha256=sha256_hex(b"pipeline")
)


async def open_witness(
    store: DecisionStore, checkpoint_id: int, sinks: tuple[str, ...] = ("a", "b")
) -> CheckpointSinkOpenWitness:
    return await store.create_sink_open_witness(
        pipeline_identity=PIPELINE,
        participant_id=0,
        attempt=CheckpointAttempt.canonical(checkpoint_id),
        sinks=sinks,
    )


async def stored_slot(store: ObjectStore) -> CheckpointSinkOpenWitnessSlot:
    got = await store.get(WITNESS_PATH)
    return decode(
        got.body, CheckpointSinkOpenWitnessSlot, key=WITNESS_PATH, max_bytes=MAX_WITNESS_SLOT_BYTES
    )


def hand_witness(deployment_id: str, checkpoint_id: int) -> CheckpointSinkOpenWitness:
    return CheckpointSinkOpenWitness(
        version=1,
        deployment_id=deployment_id,
        pipeline_identity=PIPELINE,
        participant_id=0,
        attempt=CheckpointAttempt.canonical(checkpoint_id),
        committable_sinks=("a",),
        create_token=str(uuid.uuid4()),
    )


def scripted_shared(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> tuple[ScriptedStore, DecisionStore, DecisionStore]:
    """Two shared instances over one ScriptedStore of the parametrized backend."""
    scripted = ScriptedStore(make_store())
    first, second = (DecisionStore.shared(scripted, clock=clock) for _ in range(2))
    return scripted, first, second


def test_cd_t52_witness_roundtrip_restart_clear(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    async def main() -> None:
        witness = await open_witness(open_shared(), 7)
        assert (witness.attempt.epoch, witness.committable_sinks) == (7, ("a", "b"))
        restarted = open_shared()
        assert await restarted.sink_open_witness() == witness
        await restarted.clear_sink_open_witness(witness)
        assert await restarted.sink_open_witness() is None
        assert await open_shared().sink_open_witness() is None
        slot = await stored_slot(shared_store)
        assert isinstance(slot.state, WitnessClosed) and slot.state.witness == witness
        await restarted.clear_sink_open_witness(witness)  # idempotent
        await open_shared().clear_sink_open_witness(witness)
        assert await stored_slot(shared_store) == slot  # an idempotent clear writes nothing

    asyncio.run(main())


def test_cd_t53_witness_malformed_body_and_input(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    async def main() -> None:
        store = open_shared()
        deployment_id = await store.load_or_create_deployment_id()
        slot = CheckpointSinkOpenWitnessSlot(
            version=1, state=WitnessOpen(witness=hand_witness(deployment_id, 3))
        )
        document = json.loads(encode(slot))
        document["extra"] = 1
        body = json.dumps(document, separators=(",", ":")).encode()
        await shared_store.put(WITNESS_PATH, body, CREATE)
        with pytest.raises(CorruptRecord, match="unknown field"):
            await store.sink_open_witness()

        other = open_shared()
        with pytest.raises(InvalidArgument, match="strictly sorted"):
            await open_witness(other, 4, ("b", "a"))
        with pytest.raises(InvalidArgument, match="strictly sorted"):
            await open_witness(other, 4, ("a", "a"))
        with pytest.raises(InvalidArgument, match="non-canonical sink name"):
            await open_witness(other, 4, (" a",))
        with pytest.raises(InvalidArgument, match="sinks"):
            await open_witness(other, 4, ())
        assert (await shared_store.get(WITNESS_PATH)).body == body  # nothing written

    asyncio.run(main())


def test_cd_t54_witness_oversized_input(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    async def main() -> None:
        with pytest.raises(InvalidArgument, match=f"maximum is {MAX_WITNESS_SLOT_BYTES}"):
            await open_witness(open_shared(), 5, ("x" * 65_536,))
        with pytest.raises(ObjectNotFound):
            await shared_store.head(WITNESS_PATH)

    asyncio.run(main())


def test_cd_t54_witness_open_fits_but_close_does_not(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    """The closed slot is longer than the open one: an open that fits only without its close
    tombstone is refused too (CD-10: an accepted open always has room for its close)."""

    async def main() -> None:
        store = open_shared()
        deployment_id = await store.load_or_create_deployment_id()
        probe = hand_witness(deployment_id, 5)
        open_slot = CheckpointSinkOpenWitnessSlot(version=1, state=WitnessOpen(witness=probe))
        open_len = len(encode(open_slot))
        name = "x" * (MAX_WITNESS_SLOT_BYTES - open_len + 1)  # open slot == maximum exactly
        with pytest.raises(InvalidArgument, match="maximum is"):
            await open_witness(store, 5, (name,))
        with pytest.raises(ObjectNotFound):
            await shared_store.head(WITNESS_PATH)

    asyncio.run(main())


def test_cd_t55_witness_foreign_deployment(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    async def main() -> None:
        store = open_shared()
        deployment_id = await store.load_or_create_deployment_id()
        foreign = str(uuid.uuid4())
        slot = CheckpointSinkOpenWitnessSlot(
            version=1,
            state=WitnessClosed(witness=hand_witness(foreign, 9), close_token=str(uuid.uuid4())),
        )
        await shared_store.put(WITNESS_PATH, encode(slot), CREATE)
        with pytest.raises(CorruptRecord, match="belongs to deployment") as caught:
            await store.sink_open_witness()
        assert foreign in str(caught.value) and deployment_id in str(caught.value)
        with pytest.raises(CorruptRecord, match="belongs to deployment"):
            await open_witness(store, 10)
        with pytest.raises(InvalidArgument, match="cannot clear sink-open witness from"):
            await store.clear_sink_open_witness(hand_witness(foreign, 9))

    asyncio.run(main())


def test_cd_t56_witness_concurrent_open(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        first, second = open_shared(), open_shared()
        await first.load_or_create_deployment_id()
        results = await asyncio.gather(
            open_witness(first, 12), open_witness(second, 13), return_exceptions=True
        )
        winners = [r for r in results if isinstance(r, CheckpointSinkOpenWitness)]
        losers = [r for r in results if not isinstance(r, CheckpointSinkOpenWitness)]
        assert len(winners) == 1 and len(losers) == 1
        assert isinstance(losers[0], Refused)
        assert "observed conflicting checkpoint" in str(losers[0])
        assert await open_shared().sink_open_witness() == winners[0]

    asyncio.run(main())


def test_cd_t57_witness_no_token_adoption(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        witness = await open_witness(open_shared(), 14)
        with pytest.raises(Refused, match="conflicting checkpoint 14"):
            await open_witness(open_shared(), 14)
        assert await open_shared().sink_open_witness() == witness

    asyncio.run(main())


def test_cd_t58_witness_lost_create_response(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        scripted, store, reader = scripted_shared(make_store, clock)
        await store.load_or_create_deployment_id()
        scripted.fail_next_put_after_apply(WITNESS_PATH)
        witness = await open_witness(store, 15)
        assert await reader.sink_open_witness() == witness
        # and a lost response on an update-if-match open after a close
        await store.clear_sink_open_witness(witness)
        scripted.fail_next_put_after_apply(WITNESS_PATH)
        successor = await open_witness(store, 16)
        assert await reader.sink_open_witness() == successor

    asyncio.run(main())


def test_cd_t59_witness_lost_close_response(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        scripted, store, reader = scripted_shared(make_store, clock)
        witness = await open_witness(store, 15)
        scripted.fail_next_put_after_apply(WITNESS_PATH)
        await store.clear_sink_open_witness(witness)
        assert await reader.sink_open_witness() is None
        slot = await stored_slot(scripted)
        assert isinstance(slot.state, WitnessClosed) and slot.state.witness == witness

    asyncio.run(main())


def test_cd_t60_stale_close_cannot_erase_successor(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        scripted, first, second = scripted_shared(make_store, clock)
        witness = await open_witness(first, 16)
        scripted.defer_next_put(WITNESS_PATH)
        with pytest.raises(StoreUnavailable, match="still open"):
            await first.clear_sink_open_witness(witness)
        assert await second.sink_open_witness() == witness
        await second.clear_sink_open_witness(witness)
        successor = await open_witness(second, 17)
        (deferred,) = scripted.deferred
        with pytest.raises((PreconditionFailed, ObjectAlreadyExists)):
            await deferred.apply()
        assert await first.sink_open_witness() == successor
        slot = await stored_slot(scripted)
        assert slot.state == WitnessOpen(witness=successor)

    asyncio.run(main())


def test_cd_t61_closed_slot_linearizes_successors(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        store = open_shared()
        witness = await open_witness(store, 18)
        await store.clear_sink_open_witness(witness)
        first, second = open_shared(), open_shared()
        results = await asyncio.gather(
            open_witness(first, 19), open_witness(second, 20), return_exceptions=True
        )
        winners = [r for r in results if isinstance(r, CheckpointSinkOpenWitness)]
        losers = [r for r in results if not isinstance(r, CheckpointSinkOpenWitness)]
        assert len(winners) == 1 and len(losers) == 1
        assert isinstance(losers[0], Refused)
        assert await open_shared().sink_open_witness() == winners[0]

    asyncio.run(main())


def test_cd_t62_local_reuse_closed_slot(open_local: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        store = open_local()
        witness = await open_witness(store, 21)
        await store.clear_sink_open_witness(witness)
        with pytest.raises(Refused, match="does not advance closed checkpoint 21"):
            await open_witness(store, 21)
        with pytest.raises(Refused, match="does not advance closed checkpoint 21"):
            await open_witness(open_local(), 20)
        successor = await open_witness(store, 22)
        restarted = open_local()
        assert await restarted.sink_open_witness() == successor
        with pytest.raises(Refused, match="observed conflicting checkpoint 22"):
            await open_witness(restarted, 23)

    asyncio.run(main())


def test_cd_t63_local_witness_rmw_ordered(local_root: Path, clock: Clock) -> None:
    async def main() -> None:
        scripted = ScriptedStore(FileStore(str(local_root), fsync=False))
        namespace = ("file", str(local_root))
        first = DecisionStore.local_single_writer(scripted, clock=clock, namespace=namespace)
        second = DecisionStore.local_single_writer(scripted, clock=clock, namespace=namespace)
        assert first.ctx.namespace_lock is second.ctx.namespace_lock
        witness = await open_witness(first, 23)
        blocked = scripted.block_next_overwrite(WITNESS_PATH)
        async with asyncio.TaskGroup() as group:
            closing = group.create_task(first.clear_sink_open_witness(witness))
            await blocked.reached.wait()
            lock = second.ctx.namespace_lock
            assert lock is not None and lock.locked()
            second_clear = group.create_task(second.clear_sink_open_witness(witness))
            for _ in range(5):
                await clock.sleep(0)
            assert not second_clear.done() and not closing.done()
            blocked.release.set()
        assert await second.sink_open_witness() is None
        successor = await open_witness(second, 24)
        assert await first.sink_open_witness() == successor
        # identity, open 23, one close (the second clear found it closed and wrote nothing), 24
        assert scripted.requests["put"] == 4

    asyncio.run(main())


def test_cd_t64_clear_missing_or_different(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        store = open_shared()
        deployment_id = await store.load_or_create_deployment_id()
        with pytest.raises(Refused, match="slot for checkpoint 30 is missing"):
            await store.clear_sink_open_witness(hand_witness(deployment_id, 30))
        witness = await open_witness(store, 30)
        impostor = msgspec.structs.replace(witness, create_token=str(uuid.uuid4()))
        with pytest.raises(Refused, match="different create identity"):
            await store.clear_sink_open_witness(impostor)
        with pytest.raises(Refused, match="different create identity"):
            await store.clear_sink_open_witness(hand_witness(deployment_id, 29))
        assert await store.sink_open_witness() == witness

    asyncio.run(main())


def test_cd_t06_oversized_witness_slot(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    async def main() -> None:
        store = open_shared()
        await store.load_or_create_deployment_id()
        await shared_store.put(WITNESS_PATH, b"x" * (MAX_WITNESS_SLOT_BYTES + 1), OVERWRITE)
        with pytest.raises(CorruptRecord, match=f"maximum is {MAX_WITNESS_SLOT_BYTES}"):
            await store.sink_open_witness()
        with pytest.raises(CorruptRecord, match="maximum is"):
            await open_witness(store, 1)

    asyncio.run(main())


def test_cd12_witness_shared_store_without_update_is_unavailable(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    """CD-12: NativeCas needs a real update-if-match; a store refusing it surfaces as unavailable,
    and the slot is left as it was."""

    async def main() -> None:
        scripted, store, _ = scripted_shared(make_store, clock)
        witness = await open_witness(store, 40)
        scripted.reject_updates = True
        with pytest.raises(StoreUnavailable, match="still open"):
            await store.clear_sink_open_witness(witness)
        assert await store.sink_open_witness() == witness

    asyncio.run(main())


def test_witness_shared_slot_requires_token(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        scripted, store, _ = scripted_shared(make_store, clock)
        await open_witness(store, 41)
        scripted.strip_tokens = True
        with pytest.raises(CorruptRecord, match="neither an ETag nor an object version"):
            await store.sink_open_witness()

    asyncio.run(main())

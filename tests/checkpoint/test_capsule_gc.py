"""Recovery capsule garbage collection (CD §3.11, CD §4.11, CD-11; scenarios
CD-T70 to CD-T74, and CD-T6/CD-T8 for the cursor path).

Runs on memory, file and the S3 test server; deferred creates, reversed listings, a cursor moved
mid-step and in-flight counts go through ScriptedStore over the parametrized store.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.capsule import encode_and_reference, reference_path
from laminar_cluster.checkpoint.capsule_gc import RecoveryCapsuleGcStep
from laminar_cluster.checkpoint.limits import MAX_CAPSULE_GC_CURSOR_BYTES
from laminar_cluster.checkpoint.paths import (
    CAPSULES_PREFIX,
    capsule_gc_cursor_path,
    capsule_path,
    quarantine_path,
)
from laminar_cluster.checkpoint.records import RecoveryCapsuleGcCursor
from laminar_cluster.clock import Clock
from laminar_cluster.codec import decode, encode, sha256_hex
from laminar_cluster.errors import CorruptRecord, StoreUnavailable
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore
from tests.checkpoint.test_capsule import exists, make_capsule, scripted

NO_STEP = RecoveryCapsuleGcStep(examined=0, deleted=0, quarantined=0, pending=False)


async def stored_cursor(store: ObjectStore, deployment_id: str) -> RecoveryCapsuleGcCursor:
    path = capsule_gc_cursor_path(deployment_id)
    body = (await store.get(path)).body
    return decode(body, RecoveryCapsuleGcCursor, key=path, max_bytes=MAX_CAPSULE_GC_CURSOR_BYTES)


def test_cd_t70_capsule_gc_late_visible(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        wrapped, store = scripted(make_store, clock)
        deployment_id = await store.load_or_create_deployment_id()
        capsule = make_capsule(deployment_id, 1)
        wrapped.defer_next_put(CAPSULES_PREFIX)
        with pytest.raises(StoreUnavailable, match=r"write failed .*; reconciliation failed"):
            await store.create_recovery_capsule(capsule)
        first = await store.sweep_recovery_capsules_step(2, frozenset())
        assert first == RecoveryCapsuleGcStep(examined=0, deleted=0, quarantined=0, pending=True)
        assert (await stored_cursor(wrapped, deployment_id)).offset is None  # created anyway
        (deferred,) = wrapped.deferred
        await deferred.apply()
        _, ref = encode_and_reference(capsule)
        assert await exists(wrapped, reference_path(ref))
        second = await store.sweep_recovery_capsules_step(2, frozenset())
        assert second == RecoveryCapsuleGcStep(examined=1, deleted=1, quarantined=0, pending=True)
        assert not await exists(wrapped, reference_path(ref))

    asyncio.run(main())


def test_cd_t71_capsule_gc_list_order(make_store: Callable[[], ObjectStore], clock: Clock) -> None:
    async def main() -> None:
        wrapped, store = scripted(make_store, clock)
        deployment_id = await store.load_or_create_deployment_id()
        ref = await store.create_recovery_capsule(make_capsule(deployment_id, 1))
        junk = [capsule_path(e, e, sha256_hex(b"junk %d" % e)) for e in range(2, 71)]
        for path in junk:
            await wrapped.put(path, b"junk", CREATE)
        wrapped.reverse_lists = True
        step = await store.sweep_recovery_capsules_step(2, frozenset())
        assert step == RecoveryCapsuleGcStep(examined=64, deleted=1, quarantined=0, pending=True)
        assert not await exists(wrapped, reference_path(ref))
        assert await exists(wrapped, junk[-1])  # the newest survives (not even examined)
        assert (await stored_cursor(wrapped, deployment_id)).offset == junk[62]  # epoch 64
        step = await store.sweep_recovery_capsules_step(2, frozenset())
        assert step == RecoveryCapsuleGcStep(examined=6, deleted=0, quarantined=0, pending=True)
        assert (await stored_cursor(wrapped, deployment_id)).offset is None  # the pass wrapped
        listed = await wrapped.list(CAPSULES_PREFIX)
        assert sorted(meta.key for meta in listed) == junk

    asyncio.run(main())


def test_cd_t72_capsule_gc_quarantine_and_retain(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        wrapped, store = scripted(make_store, clock)
        deployment_id = await store.load_or_create_deployment_id()
        malformed = f"{CAPSULES_PREFIX}epoch=1/junk"
        await wrapped.put(malformed, b"not a capsule", CREATE)
        foreign_body, foreign_ref = encode_and_reference(make_capsule(str(uuid.uuid4()), 1))
        foreign = reference_path(foreign_ref)
        await wrapped.put(foreign, foreign_body, CREATE)
        live = await store.create_recovery_capsule(make_capsule(deployment_id, 2))
        recent = await store.create_recovery_capsule(make_capsule(deployment_id, 3))
        step = await store.sweep_recovery_capsules_step(3, frozenset({live.sha256}))
        assert step == RecoveryCapsuleGcStep(examined=4, deleted=0, quarantined=2, pending=True)
        for original, body in ((malformed, b"not a capsule"), (foreign, foreign_body)):
            assert not await exists(wrapped, original)
            target = quarantine_path(original)
            assert target.startswith("checkpoint-recovery-capsule-quarantine/path-sha256=")
            assert (await wrapped.get(target)).body == body
        assert await store.load_recovery_capsule(live) == make_capsule(deployment_id, 2)
        assert await store.load_recovery_capsule(recent) == make_capsule(deployment_id, 3)

    asyncio.run(main())


def test_capsule_gc_quarantines_bad_references_and_bodies(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        wrapped, store = scripted(make_store, clock)
        deployment_id = await store.load_or_create_deployment_id()
        body, ref = encode_and_reference(make_capsule(deployment_id, 1))
        non_canonical = capsule_path(1, 2, ref.sha256)  # epoch != checkpoint
        plus_sign = f"{CAPSULES_PREFIX}epoch=+0000000000000000001/checkpoint={1:020d}/sha256=" + (
            ref.sha256
        )
        upper_hex = capsule_path(1, 1, ref.sha256.upper())
        tampered = reference_path(ref)
        for path in (non_canonical, plus_sign, upper_hex):
            await wrapped.put(path, body, CREATE)
        await wrapped.put(tampered, body.replace(b'"orders":41', b'"orders":49'), CREATE)
        # A copy left by an earlier, interrupted quarantine of the same object is fine.
        await wrapped.put(quarantine_path(upper_hex), body, CREATE)
        step = await store.sweep_recovery_capsules_step(5, frozenset())
        assert step == RecoveryCapsuleGcStep(examined=4, deleted=0, quarantined=4, pending=True)
        assert await wrapped.list(CAPSULES_PREFIX) == []
        for path in (non_canonical, plus_sign, upper_hex, tampered):
            assert await exists(wrapped, quarantine_path(path))

    asyncio.run(main())


def test_cd_t73_capsule_gc_noop_low_floor(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        wrapped, store = scripted(make_store, clock)
        assert await store.sweep_recovery_capsules_step(1, frozenset()) == NO_STEP
        assert await store.sweep_recovery_capsules_step(0, frozenset()) == NO_STEP
        assert sum(wrapped.requests.values()) == 0  # no I/O at all, not even the identity

    asyncio.run(main())


@pytest.mark.parametrize(
    "body_of",
    [
        lambda d: encode(RecoveryCapsuleGcCursor(version=1, deployment_id=d, offset="else/x")),
        lambda d: encode(
            RecoveryCapsuleGcCursor(version=1, deployment_id=d, offset=f"{CAPSULES_PREFIX}a//b")
        ),
        lambda d: encode(
            RecoveryCapsuleGcCursor(version=1, deployment_id=d, offset=f"{CAPSULES_PREFIX}../b")
        ),
        lambda d: encode(
            RecoveryCapsuleGcCursor(version=1, deployment_id=str(uuid.uuid4()), offset=None)
        ),
        lambda d: b"x" * (MAX_CAPSULE_GC_CURSOR_BYTES + 1),
        lambda d: b'{"version":1,"deployment_id":"%s","offset":null,"extra":1}' % d.encode(),
        lambda d: b'{"version":1, "deployment_id":"%s","offset":null}' % d.encode(),
    ],
    ids=["outside-prefix", "empty-segment", "dot-dot", "foreign", "oversized", "unknown", "spaced"],
)
def test_cd_t74_cursor_validation(
    open_shared: Callable[[], DecisionStore],
    shared_store: ObjectStore,
    body_of: Callable[[str], bytes],
) -> None:
    async def main() -> None:
        store = open_shared()
        deployment_id = await store.load_or_create_deployment_id()
        body = body_of(deployment_id)
        await shared_store.put(capsule_gc_cursor_path(deployment_id), body, CREATE)
        with pytest.raises(CorruptRecord) as caught:
            await store.sweep_recovery_capsules_step(2, frozenset())
        message = str(caught.value)
        assert any(
            fact in message
            for fact in (
                "does not match its path, deployment, or progress",
                f"maximum is {MAX_CAPSULE_GC_CURSOR_BYTES}",
                "unknown field",
                "canonical",
            )
        ), message

    asyncio.run(main())


def test_cd_t06_oversized_cursor(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    async def main() -> None:
        store = open_shared()
        deployment_id = await store.load_or_create_deployment_id()
        cursor = capsule_gc_cursor_path(deployment_id)
        await shared_store.put(cursor, b"x" * (MAX_CAPSULE_GC_CURSOR_BYTES + 1), CREATE)
        with pytest.raises(CorruptRecord, match=f"maximum is {MAX_CAPSULE_GC_CURSOR_BYTES}"):
            await store.sweep_recovery_capsules_step(2, frozenset())

    asyncio.run(main())


def test_cd_t08_capsule_gc_cursor_requires_token(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        wrapped, store = scripted(make_store, clock)
        await store.sweep_recovery_capsules_step(2, frozenset())  # creates the cursor
        wrapped.strip_tokens = True
        with pytest.raises(CorruptRecord, match="GC cursor has neither an ETag"):
            await store.sweep_recovery_capsules_step(2, frozenset())

    asyncio.run(main())


def test_capsule_gc_cursor_lost_race_is_pending(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    """Another sweeper moves the cursor while this step works: the step's CAS loses, it reports
    pending, and the winner's cursor stands."""

    async def main() -> None:
        wrapped, store = scripted(make_store, clock)
        deployment_id = await store.load_or_create_deployment_id()
        junk = [capsule_path(e, e, sha256_hex(b"%d" % e)) for e in range(1, 67)]
        for path in junk:
            await wrapped.put(path, b"junk", CREATE)
        first = await store.sweep_recovery_capsules_step(2, frozenset())
        assert first == RecoveryCapsuleGcStep(examined=64, deleted=0, quarantined=1, pending=True)
        assert (await stored_cursor(wrapped, deployment_id)).offset == junk[63]
        winner = RecoveryCapsuleGcCursor(
            version=1, deployment_id=deployment_id, offset=f"{CAPSULES_PREFIX}epoch=5"
        )

        async def move_cursor(key: str) -> None:
            if key.startswith(CAPSULES_PREFIX) and wrapped.before_get is not None:
                wrapped.before_get = None
                path = capsule_gc_cursor_path(deployment_id)
                await wrapped.inner.put(path, encode(winner), OVERWRITE)

        wrapped.before_get = move_cursor
        second = await store.sweep_recovery_capsules_step(70, frozenset())
        assert second == RecoveryCapsuleGcStep(examined=2, deleted=0, quarantined=2, pending=True)
        assert await stored_cursor(wrapped, deployment_id) == winner

    asyncio.run(main())


def test_capsule_gc_collects_every_expired_capsule_in_bounded_steps(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    """70 expired capsules: a step of 64 and a step of 6; at most 4 loads at once."""

    async def main() -> None:
        wrapped, store = scripted(make_store, clock)
        deployment_id = await store.load_or_create_deployment_id()
        refs = [
            await store.create_recovery_capsule(make_capsule(deployment_id, e))
            for e in range(1, 71)
        ]
        in_flight = peak = 0

        async def count(key: str) -> None:
            nonlocal in_flight, peak
            if not key.startswith(CAPSULES_PREFIX):
                return
            in_flight += 1
            peak = max(peak, in_flight)
            await clock.sleep(0.001)
            in_flight -= 1

        wrapped.before_get = count
        first = await store.sweep_recovery_capsules_step(100, frozenset())
        assert first == RecoveryCapsuleGcStep(examined=64, deleted=64, quarantined=0, pending=True)
        second = await store.sweep_recovery_capsules_step(100, frozenset())
        assert second == RecoveryCapsuleGcStep(examined=6, deleted=6, quarantined=0, pending=True)
        assert peak == 4
        assert await wrapped.list(CAPSULES_PREFIX) == []
        with pytest.raises(CorruptRecord, match="is missing"):
            await store.load_recovery_capsule(refs[0])

    asyncio.run(main())

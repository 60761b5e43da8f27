"""Outcomes and the outcome inventory (CD §4.4 to CD §4.6; CD-T26 to CD-T38, and
CD-T6/CD-T8 for the outcome and floor paths).

Shared-mode tests run on memory, file and the S3 test server through `open_shared`/`make_store`;
lost responses go through ScriptedStore wrapping the parametrized store.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable

import pytest

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.limits import MAX_FLOOR_BYTES, MAX_OUTCOME_BYTES
from laminar_cluster.checkpoint.paths import (
    FLOOR_PREFIX,
    OUTCOMES_PREFIX,
    floor_path,
    outcome_path,
    parse_outcome_path,
)
from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    CheckpointScope,
    CheckpointVerdict,
    Conflict,
    Created,
    OutcomeGcFloor,
    RecordOutcomeResult,
    RecoveryCapsuleRef,
    Unchanged,
)
from laminar_cluster.clock import Clock
from laminar_cluster.codec import encode
from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
    ObjectAlreadyExists,
    PreconditionFailed,
    Refused,
    StoreUnavailable,
)
from laminar_cluster.fencing import (
    CheckpointAssignmentFence,
    FenceParticipant,
    LeaderOwner,
    LeaderProof,
)
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore
from tests.checkpoint.conftest import deadline
from tests.support.scripted_store import ScriptedStore

COMMIT = CheckpointVerdict.COMMIT
ABORT = CheckpointVerdict.ABORT
LOCAL = CheckpointScope.LOCAL


async def record(ds: DecisionStore, epoch: int, verdict: CheckpointVerdict) -> RecordOutcomeResult:
    """A canonical local outcome (epoch == checkpoint ID)."""
    return await ds.record_outcome(epoch=epoch, checkpoint_id=epoch, scope=LOCAL, verdict=verdict)


async def commit_all(ds: DecisionStore, epochs: range | list[int]) -> None:
    for epoch in epochs:
        assert isinstance(await record(ds, epoch, COMMIT), Created)


def local_outcome(
    deployment_id: str, epoch: int, verdict: CheckpointVerdict, *, checkpoint_id: int | None = None
) -> CheckpointOutcome:
    return CheckpointOutcome(
        version=2,
        scope=LOCAL,
        epoch=epoch,
        checkpoint_id=epoch if checkpoint_id is None else checkpoint_id,
        deployment_id=deployment_id,
        assignment_fence=None,
        leader_proof=None,
        recovery_capsule=None,
        verdict=verdict,
    )


def fence_and_proof() -> tuple[CheckpointAssignmentFence, LeaderProof]:
    """A canonical fence (non-zero digest, sorted participants) and a proof by its node 1."""
    boot = str(uuid.uuid4())
    fence = CheckpointAssignmentFence(
        assignment_version=3,
        vnode_count=16,
        assignment_digest=tuple(range(1, 33)),
        participants=(
            FenceParticipant(node_id=1, boot_incarnation=boot),
            FenceParticipant(node_id=2, boot_incarnation=str(uuid.uuid4())),
        ),
    )
    proof = LeaderProof(owner=LeaderOwner(node_id=1, boot_id=boot, process_term=1), fencing_token=7)
    return fence, proof


def epochs_of(outcomes: list[CheckpointOutcome]) -> list[tuple[int, int]]:
    return [(outcome.epoch, outcome.checkpoint_id) for outcome in outcomes]


def result_outcome(result: RecordOutcomeResult) -> CheckpointOutcome:
    return result.winner if isinstance(result, Conflict) else result.outcome


def test_cd_t26_outcome_idempotent_and_conflict(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        ds = open_shared()
        created = await record(ds, 7, COMMIT)
        assert isinstance(created, Created)
        winner = created.outcome
        assert (winner.epoch, winner.checkpoint_id, winner.verdict) == (7, 7, COMMIT)
        assert winner.deployment_id == await ds.load_or_create_deployment_id()
        assert await record(ds, 7, COMMIT) == Unchanged(winner)
        assert await record(ds, 7, ABORT) == Conflict(winner)
        assert await ds.outcome(7) == winner
        assert await open_shared().outcome(7) == winner  # a restart reads the same winner

    asyncio.run(main())


def test_outcome_lost_create_response_is_unchanged(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    """CD §6.3: a create applied with its response lost is read back (CD-14)."""

    async def main() -> None:
        scripted = ScriptedStore(make_store())
        ds = DecisionStore.shared(scripted, clock=clock)
        await ds.load_or_create_deployment_id()
        scripted.fail_next_put_after_apply(outcome_path(3))
        result = await record(ds, 3, COMMIT)
        assert isinstance(result, Unchanged)
        assert result.outcome == await ds.outcome(3)
        assert result.outcome.verdict is COMMIT

    asyncio.run(main())


def test_cd_t27_recovery_abort_beats_delayed_commit(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        scripted = ScriptedStore(make_store())
        coordinator = DecisionStore.shared(scripted, clock=clock)
        await coordinator.load_or_create_deployment_id()
        scripted.defer_next_put(outcome_path(9))
        with pytest.raises(StoreUnavailable, match="nothing is stored"):
            await record(coordinator, 9, COMMIT)
        recovery = DecisionStore.shared(make_store(), clock=clock)
        aborted = await record(recovery, 9, ABORT)
        assert isinstance(aborted, Created)
        with pytest.raises((ObjectAlreadyExists, PreconditionFailed)):
            await scripted.deferred[0].apply()
        assert await coordinator.outcome(9) == aborted.outcome
        assert await recovery.outcome(9) == aborted.outcome

    asyncio.run(main())


def test_cd_t28_delayed_commit_beats_abort(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        scripted = ScriptedStore(make_store())
        coordinator = DecisionStore.shared(scripted, clock=clock)
        await coordinator.load_or_create_deployment_id()
        scripted.defer_next_put(outcome_path(9))
        with pytest.raises(StoreUnavailable):
            await record(coordinator, 9, COMMIT)
        await scripted.deferred[0].apply()
        recovery = DecisionStore.shared(make_store(), clock=clock)
        result = await record(recovery, 9, ABORT)
        assert isinstance(result, Conflict)
        assert result.winner.verdict is COMMIT
        assert result.winner == await coordinator.outcome(9)
        # The coordinator's own retry finds its commit durable.
        assert await record(coordinator, 9, COMMIT) == Unchanged(result.winner)

    asyncio.run(main())


def test_cd_t29_concurrent_commit_abort(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        await open_shared().load_or_create_deployment_id()
        for epoch in (8, 9, 10):
            a, b = open_shared(), open_shared()
            results = await asyncio.gather(record(a, epoch, COMMIT), record(b, epoch, ABORT))
            assert sum(isinstance(result, Created) for result in results) == 1
            durable = await open_shared().outcome(epoch)
            assert durable is not None
            assert all(result_outcome(result) == durable for result in results)
            assert all(not isinstance(result, Unchanged) for result in results)

    asyncio.run(main())


def test_cd_t30_restart_and_absence_not_abort(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        ds = open_shared()
        await record(ds, 4, COMMIT)
        await record(ds, 5, ABORT)
        restarted = open_shared()
        aborted = await restarted.outcome(5)
        assert aborted is not None and aborted.verdict is ABORT
        assert await restarted.outcome(6) is None  # unresolved, never "abort"
        live = await restarted.outcomes()
        assert epochs_of(live) == [(4, 4), (5, 5)]
        assert [outcome.epoch for outcome in live if outcome.is_commit()][-1] == 4

    asyncio.run(main())


def test_cd_t31_abort_after_commit(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        ds = open_shared()
        await record(ds, 4, COMMIT)
        await record(ds, 5, ABORT)
        highest = await ds.highest_terminal_outcome()
        assert highest is not None
        assert (highest.epoch, highest.verdict) == (5, ABORT)
        commits = [outcome for outcome in await ds.outcomes() if outcome.is_commit()]
        assert epochs_of(commits) == [(4, 4)]

    asyncio.run(main())


def test_cd_t32_cluster_scope_rejected_and_forged(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        scripted = ScriptedStore(make_store())
        ds = DecisionStore.shared(scripted, clock=clock)
        fence, proof = fence_and_proof()
        with pytest.raises(InvalidArgument, match="shared leader authority"):
            await ds.record_outcome(
                epoch=4,
                checkpoint_id=4,
                scope=CheckpointScope.CLUSTER,
                verdict=ABORT,
                assignment_fence=fence,
                leader_proof=proof,
            )
        assert sum(scripted.requests.values()) == 0  # refused before any I/O
        deployment_id = await ds.load_or_create_deployment_id()
        # A valid cluster abort (canonical fence and proof, no capsule) built by the authority.
        forged = await ds.canonical_outcome(
            epoch=4,
            checkpoint_id=4,
            scope=CheckpointScope.CLUSTER,
            verdict=ABORT,
            assignment_fence=fence,
            leader_proof=proof,
        )
        assert forged.deployment_id == deployment_id
        await scripted.put(outcome_path(4), encode(forged), CREATE)
        with pytest.raises(CorruptRecord, match="outside the shared leader authority"):
            await ds.outcome(4)

    asyncio.run(main())


def test_cd_t33_inventory_noncanonical_attempt(
    open_shared: Callable[[], DecisionStore],
) -> None:
    async def main() -> None:
        ds = open_shared()
        await record(ds, 3, COMMIT)
        deployment_id = await ds.load_or_create_deployment_id()
        forged = local_outcome(deployment_id, 9, COMMIT, checkpoint_id=79)
        await ds.store.put(outcome_path(9), encode(forged), CREATE)
        with pytest.raises(CorruptRecord, match="non-canonical checkpoint ID 79") as caught:
            await ds.outcomes()
        assert caught.value.key == outcome_path(9)

    asyncio.run(main())


def test_cd_t34_inventory_path_canonical(open_shared: Callable[[], DecisionStore]) -> None:
    assert parse_outcome_path("checkpoint-outcomes/epoch=5/outcome") == 5
    assert parse_outcome_path(f"checkpoint-outcomes/epoch={2**64 - 1}/outcome") == 2**64 - 1
    for bad in (
        "checkpoint-outcomes/epoch=5/other",
        "checkpoint-outcomes/epoch=0/outcome",
        "checkpoint-outcomes/epoch=05/outcome",
        "checkpoint-outcomes/epoch=+5/outcome",
        "checkpoint-outcomes/epoch=5//outcome",
        "checkpoint-outcomes/epoch= 5/outcome",
        "checkpoint-outcomes/epoch=5_0/outcome",
        f"checkpoint-outcomes/epoch={2**64}/outcome",
    ):
        with pytest.raises(CorruptRecord, match="malformed checkpoint outcome path"):
            parse_outcome_path(bad)

    async def main() -> None:
        ds = open_shared()
        await record(ds, 5, COMMIT)
        await ds.store.put("checkpoint-outcomes/epoch=05/outcome", b"{}", CREATE)
        with pytest.raises(CorruptRecord, match="malformed checkpoint outcome path"):
            await ds.outcomes()

    asyncio.run(main())


def test_cd_t35_stray_object_blocks_inventory(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        ds = open_shared()
        await record(ds, 1, COMMIT)
        await ds.store.put(f"{OUTCOMES_PREFIX}tmp", b"partial", CREATE)
        with pytest.raises(CorruptRecord, match="malformed checkpoint outcome path"):
            await ds.outcomes()
        with pytest.raises(CorruptRecord, match="malformed checkpoint outcome path"):
            await ds.highest_terminal_outcome()

    asyncio.run(main())


def test_cd_t36_foreign_deployment_outcome(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        ds = open_shared()
        current = await ds.load_or_create_deployment_id()
        foreign = str(uuid.uuid4())
        await ds.store.put(outcome_path(6), encode(local_outcome(foreign, 6, COMMIT)), CREATE)
        with pytest.raises(CorruptRecord, match="belongs to deployment") as caught:
            await ds.outcome(6)
        assert foreign in str(caught.value) and current in str(caught.value)
        with pytest.raises(CorruptRecord, match="belongs to deployment"):
            await record(ds, 6, COMMIT)  # the durable winner is foreign: never adopted

    asyncio.run(main())


def test_cd_t37_noncanonical_outcome_body(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        ds = open_shared()
        deployment_id = await ds.load_or_create_deployment_id()
        valid = encode(local_outcome(deployment_id, 2, COMMIT))
        pretty = json.dumps(json.loads(valid), indent=2).encode()
        await ds.store.put(outcome_path(2), pretty, CREATE)
        with pytest.raises(CorruptRecord, match="does not use the canonical body"):
            await ds.outcome(2)
        # Other non-canonical forms: a trailing newline, an omitted null, reordered keys.
        as_dict = json.loads(valid)
        del as_dict["recovery_capsule"]
        reordered = dict(reversed(list(json.loads(valid).items())))
        for epoch, body, message in (
            (3, encode(local_outcome(deployment_id, 3, COMMIT)) + b"\n", "canonical body"),
            (2, json.dumps(reordered, separators=(",", ":")).encode(), "canonical body"),
            # msgspec, unlike serde, refuses a missing Option field outright.
            (2, json.dumps(as_dict, separators=(",", ":")).encode(), "recovery_capsule"),
        ):
            await ds.store.put(outcome_path(epoch), body, OVERWRITE)
            with pytest.raises(CorruptRecord, match=message):
                await ds.outcome(epoch)
        version_3 = valid.replace(b'"version":2', b'"version":3')
        await ds.store.put(outcome_path(2), version_3, OVERWRITE)
        with pytest.raises(CorruptRecord, match="unsupported version 3"):
            await ds.outcome(2)

    asyncio.run(main())


def test_cd_t38_local_outcome_with_fence_or_capsule(
    open_shared: Callable[[], DecisionStore],
) -> None:
    async def main() -> None:
        ds = open_shared()
        fence, proof = fence_and_proof()
        ref = RecoveryCapsuleRef(epoch=5, checkpoint_id=5, sha256="ab" * 32, len=10)
        cases: list[tuple[dict[str, object], str]] = [
            ({"assignment_fence": fence}, "cannot carry an assignment fence or leader proof"),
            ({"leader_proof": proof}, "cannot carry an assignment fence or leader proof"),
            ({"recovery_capsule": ref}, "cannot carry a recovery capsule"),
        ]
        for extra, message in cases:
            with pytest.raises(InvalidArgument, match=message):
                await ds.record_outcome(
                    epoch=5,
                    checkpoint_id=5,
                    scope=LOCAL,
                    verdict=COMMIT,
                    **extra,  # type: ignore[arg-type]
                )
        for epoch, checkpoint_id, message in (
            (0, 0, "non-zero payload epoch"),
            (5, 6, "non-canonical checkpoint ID 6"),
            (-1, -1, "must be an int"),
            (2**64, 2**64, "must be an int"),
        ):
            with pytest.raises(InvalidArgument, match=message):
                await ds.record_outcome(
                    epoch=epoch, checkpoint_id=checkpoint_id, scope=LOCAL, verdict=COMMIT
                )
        assert await ds.store.list(OUTCOMES_PREFIX) == []  # nothing written

    asyncio.run(main())


def test_cd8_floor_published_during_create_wins(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    """CD §4.4 step 5: a floor published while the create is in flight wins; the object is inert."""

    async def main() -> None:
        scripted = ScriptedStore(make_store())
        ds = DecisionStore.shared(scripted, clock=clock)
        pruner = DecisionStore.shared(make_store(), clock=clock)
        await commit_all(ds, [5])
        deployment_id = await ds.load_or_create_deployment_id()
        floor_reads = 0

        async def publish_on_second_floor_read(key: str) -> None:
            nonlocal floor_reads
            if key == floor_path(deployment_id):
                floor_reads += 1
                if floor_reads == 2:  # after the create, before the second tombstone check
                    # A pruner's floor becomes durable; its sweep has not run yet.
                    floor = OutcomeGcFloor(
                        version=4,
                        deployment_id=deployment_id,
                        before_epoch=4,
                        terminal_anchor=None,
                        committed_anchor=None,
                    )
                    await scripted.inner.put(key, encode(floor), CREATE)

        scripted.before_get = publish_on_second_floor_read
        with pytest.raises(Refused, match="below durable outcome GC horizon 4"):
            await record(ds, 3, ABORT)
        scripted.before_get = None
        assert [meta.key for meta in await ds.store.list(OUTCOMES_PREFIX)] == [
            outcome_path(3),
            outcome_path(5),
        ]
        assert await ds.outcome(3) is None  # inert below the floor
        assert epochs_of(await ds.outcomes()) == [(5, 5)]
        assert await pruner.prune_outcomes_before(4, deadline=deadline(clock)) == 4
        assert [meta.key for meta in await ds.store.list(OUTCOMES_PREFIX)] == [outcome_path(5)]

    asyncio.run(main())


def test_cd_t6_oversized_outcome_and_floor(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        scripted = ScriptedStore(make_store())
        ds = DecisionStore.shared(scripted, clock=clock)
        deployment_id = await ds.load_or_create_deployment_id()
        await scripted.put(outcome_path(1), b" " * (MAX_OUTCOME_BYTES + 1), CREATE)
        with pytest.raises(
            CorruptRecord,
            match=f"checkpoint outcome for epoch 1 is {MAX_OUTCOME_BYTES + 1} bytes; "
            f"maximum is {MAX_OUTCOME_BYTES}",
        ):
            await ds.outcome(1)
        assert MAX_OUTCOME_BYTES + 1 in scripted.get_ends  # never an unbounded GET
        await scripted.put(floor_path(deployment_id), b"{" * (MAX_FLOOR_BYTES + 1), CREATE)
        with pytest.raises(
            CorruptRecord,
            match=f"outcome GC floor is {MAX_FLOOR_BYTES + 1} bytes; maximum is {MAX_FLOOR_BYTES}",
        ):
            await ds.outcome_gc_floor_horizon()
        assert MAX_FLOOR_BYTES + 1 in scripted.get_ends

    asyncio.run(main())


def test_cd_t8_native_cas_requires_token_floor(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        scripted = ScriptedStore(make_store())
        ds = DecisionStore.shared(scripted, clock=clock)
        await commit_all(ds, [1, 2])
        assert await ds.prune_outcomes_before(2, deadline=deadline(clock)) == 2
        scripted.strip_tokens = True
        with pytest.raises(CorruptRecord, match=r"outcome GC floor.*neither an ETag"):
            await ds.outcome_gc_floor_horizon()
        with pytest.raises(CorruptRecord, match="neither an ETag"):
            await ds.prune_outcomes_before(3, deadline=deadline(clock))
        scripted.strip_tokens = False
        assert await ds.outcome_gc_floor_horizon() == 2
        assert [meta.key for meta in await scripted.list(FLOOR_PREFIX)] == [
            floor_path(await ds.load_or_create_deployment_id())
        ]

    asyncio.run(main())

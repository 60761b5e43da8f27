"""Recovery capsules (CD §3.9, CD §4.10, CD-9; CD-T65 to CD-T69, CD-T6 for the
capsule path, and the capsule's own rules). Their garbage collection is in test_capsule_gc.py.

Shared-mode tests run on memory, file and the S3 test server; lost responses and request counts
go through ScriptedStore over the parametrized store.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.capsule import encode_and_reference, reference_path
from laminar_cluster.checkpoint.limits import (
    MAX_RECOVERY_CAPSULE_BYTES,
    PIPELINE_IDENTITY_VERSION,
)
from laminar_cluster.checkpoint.paths import (
    CAPSULES_PREFIX,
)
from laminar_cluster.checkpoint.records import (
    CapsuleParticipant,
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointScope,
    CheckpointVerdict,
    ClusterRecoveryCapsule,
    PipelineIdentity,
    RecoveryCapsuleRef,
)
from laminar_cluster.clock import Clock
from laminar_cluster.codec import sha256_digest32, sha256_hex
from laminar_cluster.errors import (
    CorruptRecord,
    InvalidArgument,
    ObjectNotFound,
)
from laminar_cluster.fencing import (
    CheckpointAssignmentFence,
    FenceParticipant,
    LeaderOwner,
    LeaderProof,
)
from laminar_cluster.store import CREATE, OVERWRITE, ObjectStore
from tests.support.scripted_store import ScriptedStore

PIPELINE = PipelineIdentity(
    canonical_version=PIPELINE_IDENTITY_VERSION, sha256=sha256_hex(b"pipeline")
)
BOOT_1 = "00000000-0000-4000-8000-000000000001"
BOOT_2 = "00000000-0000-4000-8000-000000000002"
FENCE = CheckpointAssignmentFence(
    assignment_version=3,
    vnode_count=8,
    assignment_digest=sha256_digest32(b"assignment 3"),
    participants=(
        FenceParticipant(node_id=1, boot_incarnation=BOOT_1),
        FenceParticipant(node_id=2, boot_incarnation=BOOT_2),
    ),
)
PROOF = LeaderProof(owner=LeaderOwner(node_id=1, boot_id=BOOT_1, process_term=1), fencing_token=1)


def make_capsule(deployment_id: str, epoch: int, **changes: Any) -> ClusterRecoveryCapsule:
    capsule = ClusterRecoveryCapsule(
        version=5,
        attempt=CheckpointAttempt.canonical(epoch),
        deployment_id=deployment_id,
        pipeline_identity=PIPELINE,
        assignment_fence=FENCE,
        participants=(
            CapsuleParticipant(
                node_id=1,
                boot_incarnation=BOOT_1,
                manifest_sha256=sha256_hex(b"manifest 1 %d" % epoch),
                vnodes=(0, 1, 2, 3),
            ),
            CapsuleParticipant(
                node_id=2,
                boot_incarnation=BOOT_2,
                manifest_sha256=sha256_hex(b"manifest 2 %d" % epoch),
                vnodes=(4, 5, 6, 7),
            ),
        ),
        source_offsets={"payments": 7, "orders": 40 + epoch},
        portable=True,
        predecessor=None,
    )
    return msgspec.structs.replace(capsule, **changes) if changes else capsule


def cluster_outcome(
    deployment_id: str, epoch: int, ref: RecoveryCapsuleRef | None, **changes: Any
) -> CheckpointOutcome:
    outcome = CheckpointOutcome(
        version=2,
        scope=CheckpointScope.CLUSTER,
        epoch=epoch,
        checkpoint_id=epoch,
        deployment_id=deployment_id,
        assignment_fence=FENCE,
        leader_proof=PROOF,
        recovery_capsule=ref,
        verdict=CheckpointVerdict.COMMIT,
    )
    return msgspec.structs.replace(outcome, **changes) if changes else outcome


def scripted(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> tuple[ScriptedStore, DecisionStore]:
    wrapped = ScriptedStore(make_store())
    return wrapped, DecisionStore.shared(wrapped, clock=clock)


async def exists(store: ObjectStore, key: str) -> bool:
    try:
        await store.head(key)
    except ObjectNotFound:
        return False
    return True


def test_cd_t65_capsule_create_idempotent_verified(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        wrapped, store = scripted(make_store, clock)
        deployment_id = await store.load_or_create_deployment_id()
        capsule = make_capsule(deployment_id, 4)
        body, expected = encode_and_reference(capsule)
        assert expected == RecoveryCapsuleRef(
            epoch=4, checkpoint_id=4, sha256=sha256_hex(body), len=len(body)
        )
        assert (
            body
            == json.dumps(
                msgspec.to_builtins(capsule), sort_keys=True, separators=(",", ":")
            ).encode()
        )
        wrapped.requests.clear()
        assert await store.create_recovery_capsule(capsule) == expected
        assert wrapped.requests["get"] == 0  # CD-9: an acknowledged create is not read back
        assert wrapped.requests["put"] == 1
        assert await store.create_recovery_capsule(capsule) == expected
        assert wrapped.requests["get"] > 0
        assert await store.load_recovery_capsule(expected) == capsule
        other = DecisionStore.shared(make_store(), clock=clock)
        assert await other.load_recovery_capsule(expected) == capsule
        longer = msgspec.structs.replace(expected, len=expected.len + 1)
        with pytest.raises(CorruptRecord, match=f"is {len(body)} bytes, expected {len(body) + 1}"):
            await store.load_recovery_capsule(longer)
        elsewhere = msgspec.structs.replace(expected, sha256=sha256_hex(b"another"))
        with pytest.raises(
            CorruptRecord, match=f"recovery capsule '{elsewhere.sha256}' is missing"
        ):
            await store.load_recovery_capsule(elsewhere)
        with pytest.raises(InvalidArgument, match="not 64 lowercase hex"):
            await store.load_recovery_capsule(msgspec.structs.replace(expected, sha256="ABC"))

    asyncio.run(main())


def test_cd_t66_capsule_lost_success(make_store: Callable[[], ObjectStore], clock: Clock) -> None:
    async def main() -> None:
        wrapped, store = scripted(make_store, clock)
        deployment_id = await store.load_or_create_deployment_id()
        capsule = make_capsule(deployment_id, 5)
        _, expected = encode_and_reference(capsule)
        wrapped.requests.clear()
        wrapped.fail_next_put_after_apply(CAPSULES_PREFIX)
        assert await store.create_recovery_capsule(capsule) == expected
        assert wrapped.requests["get"] > 0
        assert await exists(wrapped, reference_path(expected))

    asyncio.run(main())


def test_cd_t67_capsule_tampered_body(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    async def main() -> None:
        store = open_shared()
        deployment_id = await store.load_or_create_deployment_id()
        ref = await store.create_recovery_capsule(make_capsule(deployment_id, 6))
        path = reference_path(ref)
        body = (await shared_store.get(path)).body
        tampered = body.replace(b'"orders":46', b'"orders":47')
        assert tampered != body and len(tampered) == len(body)
        await shared_store.put(path, tampered, OVERWRITE)
        with pytest.raises(CorruptRecord, match="does not match its content-addressed reference"):
            await open_shared().load_recovery_capsule(ref)
        pretty = json.dumps(json.loads(body), sort_keys=True, indent=1).encode()
        await shared_store.put(path, pretty, OVERWRITE)
        with pytest.raises(CorruptRecord, match=f"is {len(pretty)} bytes, expected {ref.len}"):
            await store.load_recovery_capsule(ref)

    asyncio.run(main())


def test_cd_t68_outcome_capsule_rules(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        store = open_shared()
        deployment_id = await store.load_or_create_deployment_id()
        ref = await store.create_recovery_capsule(make_capsule(deployment_id, 4))
        common: dict[str, Any] = {"epoch": 4, "checkpoint_id": 4}
        cluster: dict[str, Any] = {
            **common,
            "scope": CheckpointScope.CLUSTER,
            "assignment_fence": FENCE,
            "leader_proof": PROOF,
        }
        messages = []
        for kwargs, substring in (
            ({**cluster, "verdict": CheckpointVerdict.COMMIT}, "requires a recovery capsule"),
            (
                {**cluster, "verdict": CheckpointVerdict.ABORT, "recovery_capsule": ref},
                "abort outcome epoch 4 cannot carry a recovery capsule",
            ),
            (
                {
                    **common,
                    "scope": CheckpointScope.LOCAL,
                    "verdict": CheckpointVerdict.COMMIT,
                    "recovery_capsule": ref,
                },
                "local outcome epoch 4 cannot carry a recovery capsule",
            ),
        ):
            with pytest.raises(InvalidArgument, match=substring) as caught:
                await store.canonical_outcome(**kwargs)
            messages.append(str(caught.value))
        assert len(set(messages)) == 3
        accepted = await store.canonical_outcome(
            **cluster, verdict=CheckpointVerdict.COMMIT, recovery_capsule=ref
        )
        assert accepted == cluster_outcome(deployment_id, 4, ref)
        await store.validate_recovery_capsule_for_outcome(accepted)
        # The same rules through the validator itself, on outcomes built by hand.
        local: dict[str, Any] = {
            "scope": CheckpointScope.LOCAL,
            "assignment_fence": None,
            "leader_proof": None,
        }
        abort = CheckpointVerdict.ABORT
        for outcome, substring in (
            (cluster_outcome(deployment_id, 4, None), "requires a recovery capsule"),
            (cluster_outcome(deployment_id, 4, ref, verdict=abort), "abort outcome epoch 4"),
            (cluster_outcome(deployment_id, 4, ref, **local), "local outcome epoch 4 cannot"),
            (cluster_outcome(deployment_id, 4, None, **local), "requires a recovery capsule"),
        ):
            with pytest.raises(InvalidArgument, match=substring):
                await store.validate_recovery_capsule_for_outcome(outcome)

    asyncio.run(main())


def test_cd_t69_outcome_capsule_mismatch(open_shared: Callable[[], DecisionStore]) -> None:
    async def main() -> None:
        store = open_shared()
        deployment_id = await store.load_or_create_deployment_id()
        ref4 = await store.create_recovery_capsule(make_capsule(deployment_id, 4))
        with pytest.raises(
            InvalidArgument, match=f"does not match recovery capsule '{ref4.sha256}'"
        ):
            await store.canonical_outcome(
                epoch=5,
                checkpoint_id=5,
                scope=CheckpointScope.CLUSTER,
                verdict=CheckpointVerdict.COMMIT,
                assignment_fence=FENCE,
                leader_proof=PROOF,
                recovery_capsule=ref4,
            )
        with pytest.raises(InvalidArgument, match="does not match recovery capsule"):
            await store.validate_recovery_capsule_for_outcome(
                cluster_outcome(deployment_id, 5, ref4)
            )
        other_fence = msgspec.structs.replace(FENCE, assignment_version=4)
        with pytest.raises(InvalidArgument, match="does not match recovery capsule"):
            await store.validate_recovery_capsule_for_outcome(
                cluster_outcome(deployment_id, 4, ref4, assignment_fence=other_fence)
            )
        missing = msgspec.structs.replace(ref4, sha256=sha256_hex(b"nothing"))
        with pytest.raises(CorruptRecord, match="is missing"):
            await store.validate_recovery_capsule_for_outcome(
                cluster_outcome(deployment_id, 4, missing)
            )

    asyncio.run(main())


def test_cd_t06_oversized_capsule(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    async def main() -> None:
        store = open_shared()
        deployment_id = await store.load_or_create_deployment_id()
        _, ref = encode_and_reference(make_capsule(deployment_id, 3))
        oversized = b"x" * (MAX_RECOVERY_CAPSULE_BYTES + 1)
        await shared_store.put(reference_path(ref), oversized, CREATE)
        with pytest.raises(CorruptRecord, match=f"maximum is {MAX_RECOVERY_CAPSULE_BYTES}"):
            await store.load_recovery_capsule(ref)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("changes", "substring"),
    [
        ({"participants": "drop-second"}, "cover the assignment fence exactly"),
        ({"participants": "swap"}, "cover the assignment fence exactly"),
        ({"participants": "unsorted-vnodes"}, "vnodes are not sorted"),
        ({"participants": "vnode-out-of-range"}, "below 8"),
        ({"participants": "bad-manifest"}, "invalid manifest digest"),
        ({"predecessor": "same-epoch"}, "predecessor is not older"),
        ({"predecessor": "invalid"}, "not a canonical attempt"),
        ({"source_offsets": {" orders": 1}}, "non-canonical source name"),
        ({"attempt": CheckpointAttempt(epoch=4, checkpoint_id=5)}, "attempt is not canonical"),
        ({"pipeline_identity": PipelineIdentity(canonical_version=5, sha256="0" * 64)}, "pipeline"),
        ({"deployment_id": "NOT-A-UUID"}, "not a UUID"),
    ],
)
def test_capsule_own_validation(changes: dict[str, Any], substring: str) -> None:
    deployment_id = str(uuid.uuid4())
    base = make_capsule(deployment_id, 4)
    first, second = base.participants
    participants = {
        "drop-second": (first,),
        "swap": (second, first),
        "unsorted-vnodes": (msgspec.structs.replace(first, vnodes=(1, 0)), second),
        "vnode-out-of-range": (msgspec.structs.replace(first, vnodes=(0, 8)), second),
        "bad-manifest": (msgspec.structs.replace(first, manifest_sha256="x" * 64), second),
    }
    _, older = encode_and_reference(make_capsule(deployment_id, 3))
    predecessors = {
        "same-epoch": msgspec.structs.replace(older, epoch=4, checkpoint_id=4),
        "invalid": msgspec.structs.replace(older, checkpoint_id=2),
    }
    resolved = dict(changes)
    if "participants" in resolved:
        resolved["participants"] = participants[resolved["participants"]]
    if "predecessor" in resolved:
        resolved["predecessor"] = predecessors[resolved["predecessor"]]
    with pytest.raises(InvalidArgument, match=substring):
        encode_and_reference(msgspec.structs.replace(base, **resolved))
    # an older predecessor is fine
    assert encode_and_reference(msgspec.structs.replace(base, predecessor=older))[1].epoch == 4


def test_capsule_create_refuses_foreign_and_invalid_before_writing(
    make_store: Callable[[], ObjectStore], clock: Clock
) -> None:
    async def main() -> None:
        wrapped, store = scripted(make_store, clock)
        deployment_id = await store.load_or_create_deployment_id()
        wrapped.requests.clear()
        with pytest.raises(InvalidArgument, match="recovery capsule belongs to deployment"):
            await store.create_recovery_capsule(make_capsule(str(uuid.uuid4()), 4))
        invalid = make_capsule(deployment_id, 4, participants=())
        with pytest.raises(InvalidArgument, match="cover the assignment fence"):
            await store.create_recovery_capsule(invalid)
        assert wrapped.requests["put"] == 0

    asyncio.run(main())


def test_capsule_load_foreign_deployment(
    open_shared: Callable[[], DecisionStore], shared_store: ObjectStore
) -> None:
    async def main() -> None:
        store = open_shared()
        await store.load_or_create_deployment_id()
        foreign = str(uuid.uuid4())
        body, ref = encode_and_reference(make_capsule(foreign, 2))
        await shared_store.put(reference_path(ref), body, CREATE)
        with pytest.raises(CorruptRecord, match=f"belongs to deployment {foreign}"):
            await store.load_recovery_capsule(ref)

    asyncio.run(main())

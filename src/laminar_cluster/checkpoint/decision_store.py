"""`DecisionStore`: the checkpoint decision store of one namespace
(docs/protocols/checkpoint-decisions.md).

Construction performs no I/O. Every operation first loads (or creates) the deployment identity.
The operations live in one module each; this class holds the instance state and names them.

| operation | module |
| --- | --- |
| `load_or_create_deployment_id` | identity |
| `allocate_checkpoint_id_at_least` | allocate (shared CAS head, local blocks) |
| `record_outcome`, `outcome`, `outcomes`, `highest_terminal_outcome` | outcome |
| `prune_outcomes_before`, horizon and boundary | retention |
| sink-open witness | witness |
| recovery capsules and their sweep | capsule, capsule_gc |
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Unpack

from laminar_cluster.checkpoint import (
    allocate,
    capsule,
    capsule_gc,
    identity,
    outcome,
    retention,
    witness,
)
from laminar_cluster.checkpoint.context import DecisionContext, namespace_lock
from laminar_cluster.checkpoint.outcome import OutcomeRequest
from laminar_cluster.checkpoint.records import (
    AllocatorMode,
    CheckpointAttempt,
    CheckpointOutcome,
    CheckpointSinkOpenWitness,
    ClusterRecoveryCapsule,
    PipelineIdentity,
    RecordOutcomeResult,
    RecoveryCapsuleRef,
)
from laminar_cluster.checkpoint.retention import OutcomeRetentionBoundary
from laminar_cluster.clock import Clock
from laminar_cluster.errors import StoreUnavailable
from laminar_cluster.store import ObjectStore
from laminar_cluster.store.record_cache import caching


class DecisionStore:
    """Deployment identity, checkpoint IDs, immutable outcomes, witness, capsules, retention."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        clock: Clock,
        mode: AllocatorMode = AllocatorMode.NATIVE_CAS,
        namespace: object | None = None,
    ) -> None:
        lock = None
        if mode is AllocatorMode.LOCAL_SINGLE_WRITER:
            lock = namespace_lock(namespace if namespace is not None else ("store", id(store)))
        # Content-addressed capsules are verified once per instance (`store.record_cache`).
        self.ctx = DecisionContext(
            store=caching(store), clock=clock, mode=mode, namespace_lock=lock
        )

    @classmethod
    def shared(cls, store: ObjectStore, *, clock: Clock) -> DecisionStore:
        """NativeCas mode, for a store shared by several processes or machines."""
        return cls(store, clock=clock, mode=AllocatorMode.NATIVE_CAS)

    @classmethod
    def local_single_writer(
        cls, store: ObjectStore, *, clock: Clock, namespace: object | None = None
    ) -> DecisionStore:
        """LocalSingleWriter mode over any store; the caller guarantees a single writer."""
        return cls(store, clock=clock, mode=AllocatorMode.LOCAL_SINGLE_WRITER, namespace=namespace)

    @classmethod
    def local_filesystem(
        cls, root: str | Path, *, clock: Clock, fsync: bool = True
    ) -> DecisionStore:
        """LocalSingleWriter mode on a local directory, created durably; the namespace lock is
        keyed by the directory's canonical path, so instances on one directory share it."""
        from laminar_cluster.store.file_backend import FileStore

        path = Path(root)
        try:
            path.mkdir(parents=True, exist_ok=True)
            if fsync:
                descriptor = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(descriptor)
                finally:
                    os.close(descriptor)
            canonical = os.path.realpath(path)
        except OSError as error:
            raise StoreUnavailable(
                f"{root}: cannot create the decision store directory: {error}"
            ) from error
        store = FileStore(canonical, fsync=fsync)
        return cls.local_single_writer(store, clock=clock, namespace=("file", canonical))

    @property
    def store(self) -> ObjectStore:
        return self.ctx.store

    @property
    def mode(self) -> AllocatorMode:
        return self.ctx.mode

    # identity and allocation

    async def load_or_create_deployment_id(self) -> str:
        return await identity.load_or_create_deployment_id(self.ctx)

    async def allocate_checkpoint_id_at_least(self, minimum: int, *, deadline: float) -> int:
        """A checkpoint ID never returned before in this deployment, at least `minimum`."""
        return await allocate.allocate_checkpoint_id_at_least(self.ctx, minimum, deadline=deadline)

    async def allocate_checkpoint_id(self, *, deadline: float) -> int:
        return await self.allocate_checkpoint_id_at_least(1, deadline=deadline)

    # outcomes

    async def record_outcome(self, **request: Unpack[OutcomeRequest]) -> RecordOutcomeResult:
        """Create the one local outcome of an epoch, or report the durable winner (CD §4.4)."""
        return await outcome.record_outcome(self.ctx, **request)

    async def canonical_outcome(self, **request: Unpack[OutcomeRequest]) -> CheckpointOutcome:
        """A validated outcome of this deployment (the leader authority builds cluster outcomes
        with this, and stores them in its own log)."""
        return await outcome.canonical_outcome(self.ctx, **request)

    async def outcome(self, epoch: int) -> CheckpointOutcome | None:
        """The outcome of `epoch`; None means unresolved or compacted, never abort."""
        return await outcome.outcome(self.ctx, epoch)

    async def outcomes(self) -> list[CheckpointOutcome]:
        """Live outcomes (at or above the floor), ascending, audited."""
        return await outcome.outcomes(self.ctx)

    async def audited_outcomes(self) -> list[CheckpointOutcome]:
        """The floor's anchors followed by the live outcomes, audited."""
        return await outcome.audited_outcomes(self.ctx)

    async def highest_terminal_outcome(self) -> CheckpointOutcome | None:
        return await outcome.highest_terminal_outcome(self.ctx)

    # retention

    async def outcome_gc_floor_horizon(self) -> int:
        return await retention.outcome_gc_floor_horizon(self.ctx)

    async def outcome_retention_boundary(self) -> OutcomeRetentionBoundary:
        return await retention.outcome_retention_boundary(self.ctx)

    async def prune_outcomes_before(self, before: int, *, deadline: float) -> int:
        return await retention.prune_outcomes_before(self.ctx, before, deadline=deadline)

    # sink-open witness

    async def sink_open_witness(self) -> CheckpointSinkOpenWitness | None:
        return await witness.sink_open_witness(self.ctx)

    async def create_sink_open_witness(
        self,
        *,
        pipeline_identity: PipelineIdentity,
        participant_id: int,
        attempt: CheckpointAttempt,
        sinks: list[str] | tuple[str, ...],
    ) -> CheckpointSinkOpenWitness:
        return await witness.create_sink_open_witness(
            self.ctx,
            pipeline_identity=pipeline_identity,
            participant_id=participant_id,
            attempt=attempt,
            sinks=tuple(sinks),
        )

    async def clear_sink_open_witness(self, expected: CheckpointSinkOpenWitness) -> None:
        await witness.clear_sink_open_witness(self.ctx, expected)

    # recovery capsules

    async def create_recovery_capsule(self, value: ClusterRecoveryCapsule) -> RecoveryCapsuleRef:
        return await capsule.create_recovery_capsule(self.ctx, value)

    async def load_recovery_capsule(self, ref: RecoveryCapsuleRef) -> ClusterRecoveryCapsule:
        return await capsule.load_recovery_capsule(self.ctx, ref)

    async def validate_recovery_capsule_for_outcome(self, value: CheckpointOutcome) -> None:
        await capsule.validate_recovery_capsule_for_outcome(self.ctx, value)

    async def sweep_recovery_capsules_step(
        self, before_epoch: int, known_live_digests: frozenset[str]
    ) -> capsule_gc.RecoveryCapsuleGcStep:
        return await capsule_gc.sweep_recovery_capsules_step(
            self.ctx, before_epoch, known_live_digests
        )

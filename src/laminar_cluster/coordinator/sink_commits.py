"""The sink's durable commit markers (docs/protocols/distributed-checkpoint.md, "Objects", DC-12;
DC §1.9).

`checkpoints/attempt={id:020}/committed.json` (`SinkCommit`) says, in the sink's own storage,
that attempt `id` committed: the capsule of its cluster Commit, the fence and each participant's
committed output digest (the SHA-256 of the output its verified manifest holds). The leader
writes it right after recording the Commit (`write_sink_commit`, create-only: identical bytes
already there are ours, other bytes are CorruptRecord), and at the start of each call repairs
the markers a crashed leader left missing (`repair_sink_commits`). The committed-output reader
takes the markers as the list of committed attempts, so committed output does not depend on the
authority keeping the attempt's outcome live.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import (
    CheckpointAttempt,
    CheckpointOutcome,
    RecoveryCapsuleRef,
)
from laminar_cluster.codec import is_sha256_hex, sha256_hex
from laminar_cluster.coordinator.objects import (
    SINK_COMMIT_VERSION,
    encode_record,
    gather_bounded,
    manifest_output,
    read_record,
)
from laminar_cluster.coordinator.paths import manifest_path, sink_commit_path
from laminar_cluster.coordinator.records import SinkCommit, SinkCommitOutput
from laminar_cluster.coordinator.restore import capsule_manifests
from laminar_cluster.errors import CorruptRecord, ObjectNotFound
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant
from laminar_cluster.store import CREATE, ObjectStore, put_resolved

REPAIR_COMMITS_MAX: Final = 16  # the newest live Commits above `marked` one repair looks at


def sink_commit_of(
    attempt: CheckpointAttempt,
    capsule: RecoveryCapsuleRef,
    fence: CheckpointAssignmentFence,
    outputs: Sequence[tuple[FenceParticipant, str]],
) -> SinkCommit:
    """The marker of a committed attempt; `outputs` in capsule (node) order."""
    return SinkCommit(
        version=SINK_COMMIT_VERSION,
        attempt=attempt,
        capsule=capsule,
        fence=fence,
        outputs=tuple(SinkCommitOutput(participant=p, output_sha256=d) for p, d in outputs),
    )


async def write_sink_commit(store: ObjectStore, commit: SinkCommit) -> None:
    """Create the marker; the same bytes already there are fine, other bytes CorruptRecord."""
    key = sink_commit_path(commit.attempt.checkpoint_id)
    body = encode_record(commit, key=key)
    resolution = await put_resolved(store, key, body, CREATE)
    if not resolution.ours:
        raise CorruptRecord(
            f"{key}: holds another sink commit marker ({resolution.state.value})", key=key
        )


async def sink_commit_from_outcome(
    store: ObjectStore, decisions: DecisionStore, outcome: CheckpointOutcome
) -> SinkCommit:
    """The marker of a cluster Commit, rebuilt from its capsule and the manifests it names."""
    ref, fence = outcome.recovery_capsule, outcome.assignment_fence
    if not outcome.is_commit() or ref is None or fence is None:
        raise CorruptRecord(f"cluster outcome {outcome.checkpoint_id} is not a Commit with capsule")
    capsule = await decisions.load_recovery_capsule(ref)
    if capsule.attempt != outcome.attempt or capsule.assignment_fence != fence:
        raise CorruptRecord(
            f"cluster Commit {outcome.checkpoint_id} does not match its recovery capsule"
        )
    manifests = await capsule_manifests(store, capsule)
    checkpoint_id = outcome.attempt.checkpoint_id
    outputs = [
        (
            m.participant,
            sha256_hex(manifest_output(m, key=manifest_path(checkpoint_id, m.participant.node_id))),
        )
        for m in manifests
    ]
    return sink_commit_of(outcome.attempt, ref, fence, outputs)


async def repair_sink_commits(
    store: ObjectStore,
    decisions: DecisionStore,
    outcomes: Sequence[CheckpointOutcome],
    *,
    marked: int | None,
    limit: int = REPAIR_COMMITS_MAX,
) -> tuple[int, ...]:
    """Write the missing markers of the newest `limit` live Commits above `marked` (a
    checkpoint ID up to which every Commit is known to have its marker): one HEAD each, then
    the missing ones in commit order. The IDs written."""
    commits = [
        o
        for o in outcomes
        if o.is_commit()
        and o.attempt.is_canonical()
        and (marked is None or o.checkpoint_id > marked)
    ][-limit:]

    def probe(outcome: CheckpointOutcome) -> Callable[[], Awaitable[bool]]:
        return lambda: _exists(store, sink_commit_path(outcome.checkpoint_id))

    found = await gather_bounded([probe(o) for o in commits])
    written: list[int] = []
    for outcome, exists in zip(commits, found, strict=True):
        if not exists:
            await write_sink_commit(
                store, await sink_commit_from_outcome(store, decisions, outcome)
            )
            written.append(outcome.checkpoint_id)
    return tuple(written)


async def read_sink_commit(store: ObjectStore, checkpoint_id: int) -> SinkCommit | None:
    """The marker of attempt `checkpoint_id` (shape checked), or None."""
    key = sink_commit_path(checkpoint_id)
    read = await read_record(store, key, SinkCommit)
    if read is None:
        return None
    commit = read[0]
    if commit.attempt != CheckpointAttempt.canonical(checkpoint_id):
        raise CorruptRecord(f"{key}: sink commit names another attempt", key=key)
    if (commit.capsule.epoch, commit.capsule.checkpoint_id) != (
        commit.attempt.epoch,
        commit.attempt.checkpoint_id,
    ):
        raise CorruptRecord(f"{key}: sink commit names the capsule of another attempt", key=key)
    nodes = [o.participant.node_id for o in commit.outputs]
    if nodes != sorted(set(nodes)) or not nodes:
        raise CorruptRecord(f"{key}: sink commit outputs are not in node order", key=key)
    if any(o.participant not in commit.fence.participants for o in commit.outputs):
        raise CorruptRecord(f"{key}: sink commit names a participant outside its fence", key=key)
    if not all(is_sha256_hex(o.output_sha256) for o in commit.outputs):
        raise CorruptRecord(f"{key}: sink commit holds a malformed digest", key=key)
    return commit


async def _exists(store: ObjectStore, key: str) -> bool:
    try:
        await store.head(key)
    except ObjectNotFound:
        return False
    return True


class SinkCommitWriter:
    """A leader's markers: the repair of missing ones at the start of each call, and the one of
    each Commit it records. `marked` is a checkpoint ID up to which every live Commit is known
    to have its marker, so a repair with nothing new costs no request; it advances past a
    Commit of ours only if this call's repair succeeded (no gap can hide below it)."""

    def __init__(self, store: ObjectStore, decisions: DecisionStore) -> None:
        self.store = store
        self.decisions = decisions
        self.marked: int | None = None
        self.repaired = 0  # markers written by repairs, over this instance's life
        self._clean = False  # the last repair succeeded and no write failed since

    async def repair(self, outcomes: Sequence[CheckpointOutcome]) -> tuple[int, ...]:
        """`repair_sink_commits` above `marked`; the IDs written."""
        self._clean = False
        written = await repair_sink_commits(
            self.store, self.decisions, outcomes, marked=self.marked
        )
        commits = [o.checkpoint_id for o in outcomes if o.is_commit()]
        if commits:
            self.marked = max(commits[-1], self.marked or 0)
        self.repaired += len(written)
        self._clean = True
        return written

    async def committed(
        self,
        outcome: CheckpointOutcome,
        outputs: Sequence[tuple[FenceParticipant, str]] | None,
    ) -> None:
        """The marker of a Commit just recorded: from the verified `outputs` (capsule order) of
        the call that built its capsule, else rebuilt from the capsule and the manifests."""
        clean, self._clean = self._clean, False
        ref, fence = outcome.recovery_capsule, outcome.assignment_fence
        if outputs is not None and ref is not None and fence is not None:
            commit = sink_commit_of(outcome.attempt, ref, fence, outputs)
        else:
            commit = await sink_commit_from_outcome(self.store, self.decisions, outcome)
        await write_sink_commit(self.store, commit)
        if clean:
            self.marked = max(outcome.checkpoint_id, self.marked or 0)
            self._clean = True

"""The references a cluster checkpoint outcome makes, checked by the views (issue 17 "Integrity
you can trust"): `authority`, `checkpoints` and `status` use this, so a view never says
"consistent" over a record whose references do not resolve.

For a cluster outcome admitted by authority record R (`where`):

* the deployment identity exists and R's outcome names it (`deployment_id`); else the problem
  names R (or the absent identity);
* a Commit names a recovery capsule, and the capsule resolves: present, its length and
  SHA-256 those of the reference, canonical bytes, of this deployment (a problem names the
  capsule object, `checkpoint.capsule.load_recovery_capsule`);
* the capsule describes R's attempt, assignment fence and deployment; else R names a capsule
  of another attempt: the problem names R, whose reference is the wrong one;
* with `manifests`, every participant manifest the capsule names (other than the empty digest
  of a control-plane-only checkpoint) resolves and hashes to the capsule's digest, for the
  same participant and vnodes (`coordinator.restore.verified_manifest`; the problem names the
  manifest object). Views check it for the newest Commit, the one recovery restores.

Read-only: the store is wrapped in `ReadOnlyStore`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.limits import MAX_IDENTITY_BYTES
from laminar_cluster.checkpoint.paths import IDENTITY_PATH
from laminar_cluster.checkpoint.reader import read_bytes
from laminar_cluster.checkpoint.records import (
    CheckpointOutcome,
    ClusterRecoveryCapsule,
    DeploymentIdentity,
)
from laminar_cluster.clock import Clock
from laminar_cluster.codec import decode, sha256_hex
from laminar_cluster.coordinator.restore import verified_manifest
from laminar_cluster.errors import CorruptRecord
from laminar_cluster.lease.paths import record_path
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.authority_audit import AuthorityAudit, Problem
from laminar_cluster.views.read_only import ReadOnlyStore

NO_STATE_MANIFEST_SHA256: Final = sha256_hex(b"")  # a control-plane-only participant


async def peek_identity(store: ObjectStore) -> DeploymentIdentity | None:
    """The deployment identity, strictly decoded, or None when absent (never created)."""
    read = await read_bytes(
        store, IDENTITY_PATH, what="deployment identity", max_bytes=MAX_IDENTITY_BYTES
    )
    if read is None:
        return None
    return decode(read[0], DeploymentIdentity, key=IDENTITY_PATH, max_bytes=MAX_IDENTITY_BYTES)


@dataclass
class ReferenceCheck:
    """Checks outcomes of one store against one deployment identity."""

    store: ObjectStore
    clock: Clock
    identity: DeploymentIdentity | None
    problems: list[Problem] = field(default_factory=list)

    @classmethod
    async def open(
        cls, store: ObjectStore, clock: Clock, *, identity: DeploymentIdentity | None = None
    ) -> ReferenceCheck:
        """A check of `store`'s outcomes against its deployment identity (read now, unless a
        reader that already read it passes it)."""
        read_only = ReadOnlyStore(store)
        check = cls(read_only, clock, identity)
        if identity is not None:
            return check
        try:
            check.identity = await peek_identity(read_only)
        except CorruptRecord as error:
            check.problems.append(Problem(object=error.key or IDENTITY_PATH, error=str(error)))
        return check

    def _problem(self, key: str, error: str) -> None:
        self.problems.append(Problem(object=key, error=error))

    def deployment(self, deployment_id: str, where: str, what: str) -> bool:
        """The record at `where` (its `what`) names this store's deployment; else a problem
        naming it. True without an identity to compare (that is reported elsewhere)."""
        if self.identity is None or deployment_id == self.identity.id:
            return True
        self._problem(
            where,
            f"{what} names deployment {deployment_id}; this store's deployment is "
            f"{self.identity.id}",
        )
        return False

    async def outcome(
        self, outcome: CheckpointOutcome, where: str, *, manifests: bool = False
    ) -> ClusterRecoveryCapsule | None:
        """Check one cluster outcome admitted by the record at `where`; its capsule when it is
        a Commit whose references all resolve, else None (the problems say why)."""
        what = f"cluster {outcome.verdict.value} of epoch {outcome.epoch}"
        identity = self.identity
        if identity is None:
            if not any(p.object == IDENTITY_PATH for p in self.problems):
                self._problem(IDENTITY_PATH, f"absent, yet {where} records a {what}")
            return None
        if not self.deployment(outcome.deployment_id, where, what):
            return None
        if not outcome.is_commit():
            return None
        ref = outcome.recovery_capsule
        if ref is None:
            self._problem(where, f"{what} names no recovery capsule")
            return None
        decisions = DecisionStore(self.store, clock=self.clock, mode=identity.allocator_mode)
        try:
            capsule = await decisions.load_recovery_capsule(ref)
        except CorruptRecord as error:
            self._problem(error.key or where, f"{error} (named by {where})")
            return None
        if capsule.attempt != outcome.attempt or capsule.assignment_fence != (
            outcome.assignment_fence
        ):
            self._problem(
                where,
                f"{what} names recovery capsule {ref.sha256[:16]}..., which is of attempt "
                f"{capsule.attempt.epoch}/{capsule.attempt.checkpoint_id} or another fence",
            )
            return None
        if manifests and not await self._manifests(capsule, where):
            return None
        return capsule

    async def _manifests(self, capsule: ClusterRecoveryCapsule, where: str) -> bool:
        ok = True
        for participant in capsule.participants:
            if participant.manifest_sha256 == NO_STATE_MANIFEST_SHA256:
                continue
            try:
                await verified_manifest(self.store, capsule, participant)
            except CorruptRecord as error:
                self._problem(error.key or where, f"{error} (capsule of {where})")
                ok = False
        return ok


async def check_authority_references(
    store: ObjectStore, clock: Clock, audit: AuthorityAudit
) -> None:
    """Every live outcome of an audited authority log, its references checked (the newest
    Commit's manifests too), and the head's outcome floor of this deployment; the problems
    join the audit's."""
    check = await ReferenceCheck.open(store, clock)
    newest = max((link.sequence for link in audit.live_commits), default=None)
    for link in sorted(audit.live_outcomes | audit.live_commits, key=lambda link: link.sequence):
        record = audit.records.get(link.sequence)
        outcome = None if record is None else record.checkpoint_outcome
        if outcome is not None:
            await check.outcome(
                outcome, record_path(link.sequence), manifests=link.sequence == newest
            )
    head, identity = audit.head, check.identity
    floor = None if head is None else head.outcome_floor
    if head is not None and floor is not None and identity is not None:
        check.deployment(floor.deployment_id, record_path(head.lease.seq), "outcome floor")
    audit.problems.extend(p for p in check.problems if p not in audit.problems)

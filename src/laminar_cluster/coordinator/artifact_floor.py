"""The leader's artifact floor upkeep (docs/protocols/distributed-checkpoint.md, DC-14, leader
step L10; LA §4.4.5, LA-14, LA-21).

The authority admits at most `live_commit_links_max` live Commit links (LA-21: 4,096), and a
Commit leaves the live list only when the artifact floor passes it. So after each Commit of its
own, once `trigger_commits` Commits are live, the leader moves the artifact floor up to keep the
newest `retained_commits`, but never past what a reader still needs (`floor_target`):

* the newest `retained_commits` (>= 1) Commits: the newest one is what a handoff restore, the
  restorer, recovery, the next capsule's predecessor, DC-9 and `status` read;
* the active assignment handoff pin's checkpoint (RB §2.9; the authority refuses a
  floor above it too);
* a Commit whose sink commit marker this leader has not read back, matching it (DC-12): below
  the floor the committed-output reader finds a Commit only through its marker. A missing
  marker is written (from the capsule and the manifests) and passed only in a later step;
* an attempt the retention walk has not handled yet (DC-13): below the floor the walk can no
  longer tell a committed attempt's sink data from an aborted one's.

The recovery cut (the greatest live Commit at or above the new floor: the newest Commit) passes
the authority's preflight: its capsule, and `validate_cut` here: every manifest it names
verifies and every vnode's partial is listed.

`floor_target` is the pure decision; `ArtifactFloorKeeper.step` does the I/O. The caller
(`upkeep.LeaderUpkeep`) treats every error as best effort: the floor then waits for the next
Commit. Nothing here deletes: the authority's history prune removes records below the floors
later, and no process runs the recovery capsule sweep (the reader loads the capsule a marker
names).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from laminar_cluster.authority.cluster_outcome_reads import cluster_outcome_inventory
from laminar_cluster.authority.cluster_outcomes import prune_cluster_outcomes_before
from laminar_cluster.authority.handoff_pins import assignment_handoff_pin
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import CheckpointOutcome
from laminar_cluster.coordinator.objects import EMPTY_PARTIAL_SHA256, gather_bounded
from laminar_cluster.coordinator.paths import (
    AttemptObject,
    attempt_prefix,
    parse_attempt_object,
    parse_partial_path,
    sink_commit_path,
)
from laminar_cluster.coordinator.restore import capsule_manifests
from laminar_cluster.coordinator.sink_commits import (
    read_sink_commit,
    sink_commit_from_outcome,
    write_sink_commit,
)
from laminar_cluster.errors import CorruptRecord, InvalidArgument
from laminar_cluster.fencing import LeaderProof
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.limits import MAX_LIVE_AUTHORITY_LINKS
from laminar_cluster.store import ObjectStore

RETAINED_COMMITS_DEFAULT: Final = 64
TRIGGER_COMMITS_DEFAULT: Final = 128
MARKERS_PER_STEP_MAX: Final = 256
CUT_LIST_PAGES_MAX: Final = 64  # pages of the cut's keys; a fence of 65,535 vnodes needs 66 KiB


@dataclass(frozen=True, slots=True)
class ArtifactFloorPolicy:
    """When the floor moves and what it keeps: with `trigger_commits` live Commits, keep the
    newest `retained_commits`; read back at most `markers_per_step_max` markers per step."""

    retained_commits: int = RETAINED_COMMITS_DEFAULT
    trigger_commits: int = TRIGGER_COMMITS_DEFAULT
    markers_per_step_max: int = MARKERS_PER_STEP_MAX

    def __post_init__(self) -> None:
        if not 1 <= self.retained_commits < self.trigger_commits <= MAX_LIVE_AUTHORITY_LINKS:
            raise InvalidArgument(
                f"artifact floor policy keeps {self.retained_commits} of "
                f"{self.trigger_commits} live Commits; it needs 1 <= kept < trigger <= "
                f"{MAX_LIVE_AUTHORITY_LINKS}"
            )
        if self.markers_per_step_max < 1:
            raise InvalidArgument(
                f"artifact floor policy reads {self.markers_per_step_max} markers per step; "
                "at least 1 is needed"
            )


DEFAULT_FLOOR_POLICY: Final = ArtifactFloorPolicy()


class HeldBy(enum.Enum):
    """What the floor target stops at (the lowest of the four bounds)."""

    RETAINED = "retained"  # the oldest of the newest `retained_commits`
    PIN = "pin"  # the handoff pin's checkpoint
    MARKERS = "markers"  # the first Commit whose marker is not read back yet
    RETENTION = "retention"  # the first attempt the retention walk has not handled


@dataclass(frozen=True, slots=True)
class FloorBounds:
    """The bounds besides the retained Commits, as epochs (canonical attempts: epoch == ID)."""

    pinned_epoch: int | None  # the active handoff pin's checkpoint
    marked_below: int  # every live Commit below it has its marker read back
    walked_below: int  # the retention walk handled every attempt below it


@dataclass(frozen=True, slots=True)
class FloorTarget:
    before_epoch: int
    held_by: HeldBy


def floor_target(
    commit_epochs: Sequence[int], floor: int, policy: ArtifactFloorPolicy, bounds: FloorBounds
) -> FloorTarget | None:
    """DC-14: the artifact floor to publish given the live Commits' epochs (ascending, all at or
    above `floor`): None below `trigger_commits`; else the lowest bound, which moves the floor
    only if it is above `floor`."""
    assert list(commit_epochs) == sorted(set(commit_epochs))
    assert not commit_epochs or commit_epochs[0] >= floor
    if len(commit_epochs) < policy.trigger_commits:
        return None
    bounds_by = [
        (commit_epochs[-policy.retained_commits], HeldBy.RETAINED),
        (bounds.marked_below, HeldBy.MARKERS),
        (bounds.walked_below, HeldBy.RETENTION),
    ]
    if bounds.pinned_epoch is not None:
        bounds_by.append((bounds.pinned_epoch, HeldBy.PIN))
    before_epoch, held_by = min(bounds_by, key=lambda bound: bound[0])  # ties: the first
    return FloorTarget(before_epoch, held_by)


@dataclass(frozen=True, slots=True)
class FloorStep:
    """What one step did: the floor in force after it, and what held the target."""

    artifact_before_epoch: int
    target: FloorTarget | None  # None: fewer than `trigger_commits` live Commits
    advanced: bool
    markers_read: int
    markers_written: int


class ArtifactFloorKeeper:
    """One leader instance's floor upkeep (module docstring). `verified_below`: every live Commit
    below this epoch has had its marker read back by this instance (in memory: a new leader
    reads them again, at most `markers_per_step_max` per step)."""

    def __init__(
        self,
        store: ObjectStore,
        decisions: DecisionStore,
        authority: LeaderLeaseStore,
        policy: ArtifactFloorPolicy,
        *,
        walked_below: Callable[[], int],
    ) -> None:
        if policy.trigger_commits > authority.live_commit_links_max:
            raise InvalidArgument(
                f"artifact floor trigger {policy.trigger_commits} is above the authority's "
                f"{authority.live_commit_links_max} live Commit links: Commits would stop first"
            )
        self.store = store
        self.decisions = decisions
        self.authority = authority
        self.policy = policy
        self.walked_below = walked_below
        self.verified_below = 0
        self.markers_written = 0  # over this instance's life

    async def step(self, proof: LeaderProof, *, deadline: float) -> FloorStep:
        """Move the artifact floor if DC-14 allows. Below the trigger: one (cached) inventory
        read and no other request."""
        inventory = await cluster_outcome_inventory(self.authority)
        floor = inventory.retention_boundary.artifact_before_epoch
        commits = [o for o in inventory.outcomes if o.is_commit()]
        if len(commits) < self.policy.trigger_commits:
            return FloorStep(floor, None, False, 0, 0)
        wanted = commits[-self.policy.retained_commits].epoch
        read, written = await self._verify_markers(commits, wanted)
        pin = await assignment_handoff_pin(self.authority)
        bounds = FloorBounds(
            pinned_epoch=None if pin is None else pin.checkpoint_epoch,
            marked_below=self.verified_below,
            walked_below=self.walked_below(),
        )
        target = floor_target([c.epoch for c in commits], floor, self.policy, bounds)
        assert target is not None  # the trigger was checked above
        if target.before_epoch <= floor:
            return FloorStep(floor, target, False, read, written)
        moved = await prune_cluster_outcomes_before(
            self.authority, proof, target.before_epoch, self.validate_cut, deadline=deadline
        )
        return FloorStep(moved, target, moved > floor, read, written)

    async def _verify_markers(
        self, commits: list[CheckpointOutcome], until_epoch: int
    ) -> tuple[int, int]:
        """DC-14 (DC-12): read back the markers of the live Commits in [verified_below,
        until_epoch), in order; write a missing one and stop there (it is passed only in a later
        step). A marker that disagrees with its Commit is CorruptRecord. (read, written)."""
        window = [c for c in commits if self.verified_below <= c.epoch < until_epoch]
        window = window[: self.policy.markers_per_step_max]
        found = await gather_bounded(
            functools.partial(read_sink_commit, self.store, c.checkpoint_id) for c in window
        )
        for commit, marker in zip(window, found, strict=True):
            if marker is None:
                rebuilt = await sink_commit_from_outcome(self.store, self.decisions, commit)
                await write_sink_commit(self.store, rebuilt)
                self.markers_written += 1
                self.verified_below = commit.epoch
                return len(window), 1
            if (marker.capsule, marker.fence) != (commit.recovery_capsule, commit.assignment_fence):
                key = sink_commit_path(commit.checkpoint_id)
                raise CorruptRecord(f"{key}: sink commit differs from its live Commit", key=key)
            self.verified_below = commit.epoch + 1
        if len(window) < self.policy.markers_per_step_max:
            self.verified_below = max(self.verified_below, until_epoch)  # every one below read
        return len(window), 0

    async def validate_cut(self, cut: CheckpointOutcome) -> None:
        """The authority preflight's artifact check of the recovery cut: every manifest its
        capsule names verifies (digest, participant, vnodes), and every vnode's partial is
        there (a vnode cut empty has none, DC-15). Raises CorruptRecord (the authority then
        refuses the floor)."""
        ref = cut.recovery_capsule
        if ref is None:
            raise CorruptRecord(f"cluster Commit {cut.checkpoint_id} names no recovery capsule")
        capsule = await self.decisions.load_recovery_capsule(ref)
        manifests = await capsule_manifests(self.store, capsule)
        wanted = {
            vnode
            for manifest in manifests
            for vnode, digest in zip(manifest.vnodes, manifest.partial_sha256, strict=True)
            if digest != EMPTY_PARTIAL_SHA256
        }
        listed = await self._listed_partials(cut.checkpoint_id)
        missing = sorted(wanted - listed)
        if missing:
            raise CorruptRecord(
                f"recovery cut {cut.checkpoint_id}: {len(missing)} partials are missing "
                f"(first vnode {missing[0]})"
            )

    async def _listed_partials(self, checkpoint_id: int) -> set[int]:
        prefix = attempt_prefix(checkpoint_id)
        vnodes: set[int] = set()
        offset = None
        for _ in range(CUT_LIST_PAGES_MAX):
            page = await self.store.list(prefix, offset=offset, limit=1_000)
            for meta in page:
                try:
                    kind = parse_attempt_object(meta.key)[1]
                except CorruptRecord:
                    continue  # a foreign key: never trusted
                if kind is AttemptObject.PARTIAL:
                    vnodes.add(parse_partial_path(meta.key)[1])
            if len(page) < 1_000:
                return vnodes
            offset = page[-1].key
        raise CorruptRecord(f"{prefix}: more than {CUT_LIST_PAGES_MAX} pages of keys", key=prefix)

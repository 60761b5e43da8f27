"""Why the rebalance plane refused a step: the `reason` its errors carry (errors.py).

The kind of an error says what the caller does next (Fenced: stop; Refused: re-read and decide
again; CorruptRecord: report, never trust; ...). The reason says which check refused, for the
callers and tests that branch on it; the message keeps the spec's wording for operators
(RB §9 "Logging") and is never branched on. A reason belongs to one check, or to a
few that refuse for the same cause; the same reason may travel with different kinds when the
same cause is a race in one place and durable inconsistency in another.
"""

from __future__ import annotations

import enum

from laminar_cluster.errors import Refused


class Refusal(enum.Enum):
    """Which rebalance check refused (module docstring)."""

    # -- membership and processes (cluster/) ---------------------------------------------------
    MEMBERS_WATCH_CLOSED = "members-watch-closed"  # the membership poll ended
    SELF_NOT_A_MEMBER = "self-not-a-member"  # the view lacks this node (RB §9)
    NO_LIVE_INCARNATION = "no-live-incarnation"  # a participant id has no live boot
    PROCESS_RENEWED = "process-renewed"  # the process to fence still renews its lease
    TAKEOVER_NEVER_OBSERVED = "takeover-never-observed"  # the boot to fence was never seen
    TAKEOVER_NOT_IMMEDIATE = "takeover-not-immediate"  # its successor is no immediate takeover
    PROCESS_LEASE_NOT_LIVE = "process-lease-not-live"  # this process's lease is not live now
    NEWER_PROCESS_TERM = "newer-process-term"  # a newer term of this node reported a fault
    SLOT_WRITTEN_BY_ANOTHER_PROCESS = "slot-written-by-another-process"
    NOT_A_PREDECESSOR_PARTICIPANT = "not-a-predecessor-participant"
    TRANSITION_DIFFERS = "transition-differs"  # the locally installed drain transition differs
    DRAIN_LEADER_SUPERSEDED = "drain-leader-superseded"  # the drain's leader term is gone

    # -- the local engine (engine/) -------------------------------------------------------------
    OWNERS_DIFFER = "owners-differ"  # the same version with another owner map than the registry
    ANOTHER_BOOT = "another-boot"  # it gives this node's vnodes (or certifies) another boot
    ENGINE_FAULTED = "engine-faulted"  # a faulted engine adopts only a recovery assignment
    COLD_BOOTSTRAP_REQUIRED = "cold-bootstrap-required"  # recovery needs a cold engine
    FENCE_NOT_LOCAL_REGISTRY = "fence-not-local-registry"  # the fence is not what runs here
    TRANSITION_NOT_AT_FENCE = "transition-not-at-fence"  # the drain starts elsewhere
    NOT_RUNNING_PREDECESSOR = "not-running-predecessor"  # the registry is not the drain's start
    OTHER_DRAIN_OPEN = "other-drain-open"  # local sources are stopped for another drain
    DRAIN_RESOLVED_OTHERWISE = "drain-resolved-otherwise"  # resolved with the other verdict
    SHUFFLE_NOT_READY = "shuffle-not-ready"  # adoption waits for a staged transition (RB §4.11 B)
    NO_FENCE_INSTALLED = "no-fence-installed"  # no checkpoint without an installed fence
    AUTHORITY_SUSPENDED = "authority-suspended"  # no checkpoint while authority is suspended
    ENGINE_NOT_RUNNING = "engine-not-running"  # no checkpoint unless the engine runs
    LEADER_NOT_A_PARTICIPANT = "leader-not-a-participant"  # a cluster outcome needs the leader
    OWNERS_UNKNOWN = "owners-unknown"  # no local owner map matches the fence

    # -- audits of assignment generations (audit/, node/selection.py) ---------------------------
    NOT_EXACT_SUCCESSOR = "not-exact-successor"  # not exactly local + 1
    HEAD_MOVED = "head-moved"  # the durable head is no longer the one this step began from
    PREDECESSOR_LOST = "predecessor-lost"  # v-1 is gone (pruned under a newer head)
    PREDECESSOR_NOT_BOUND = "predecessor-not-bound"  # v does not bind its exact predecessor
    RETAINED_PREDECESSOR_NOT_BOUND = "retained-predecessor-not-bound"  # startup (RB §4.17)
    NO_AUTHORITY_DECISION = "no-authority-decision"  # a committed v >= 2 no decision explains
    DECISION_MISMATCH = "decision-mismatch"  # a decision names another transition or proposal
    TERMINAL_MISMATCH = "terminal-mismatch"  # a terminal that contradicts its drain or verdict
    DRAIN_ALREADY_DECIDED = "drain-already-decided"  # the draining head already has a decision
    NO_AUTHORITY = "no-authority"  # a terminal cannot be audited without the authority
    NO_COMMITTED_CHECKPOINT = "no-committed-checkpoint"  # recovery needs a committed cut
    RECOVERY_PIN_MOVED = "recovery-pin-moved"  # the recovery checkpoint pin or head moved
    RECOVERY_CHECKPOINT_CHANGED = "recovery-checkpoint-changed"  # its outcome or index changed
    # validate_portable_recovery_cut: the outcome, reference and index as one Commit ...
    CUT_NOT_CLUSTER_COMMIT = "cut-not-cluster-commit"
    CUT_OTHER_INDEX = "cut-other-index"
    CUT_ATTEMPTS_DIFFER = "cut-attempts-differ"
    CUT_OTHER_DEPLOYMENT = "cut-other-deployment"
    CUT_FENCES_DIFFER = "cut-fences-differ"
    CUT_NO_LEADER_PROOF = "cut-no-leader-proof"
    # ... and the cut against the recovery predecessor
    CUT_NOT_PORTABLE = "cut-not-portable"
    CUT_FENCE_NOT_CANONICAL = "cut-fence-not-canonical"
    CUT_ORIGIN_NEWER = "cut-origin-newer"
    CUT_VNODE_COUNTS_DIFFER = "cut-vnode-counts-differ"
    CUT_ORIGIN_NOT_PREDECESSOR = "cut-origin-not-predecessor"

    # -- follower drain settlement (watcher/) ----------------------------------------------------
    DRAIN_SUPERSEDED = "drain-superseded"  # the durable terminal does not settle this drain
    TERMINAL_PRUNED = "terminal-pruned"  # the drain terminal is gone before local resolution
    NOT_AT_TERMINAL = "not-at-terminal"  # the local registry is not exactly the terminal

    # -- coordinated recovery (coordinated/) -----------------------------------------------------
    NO_HEAD = "no-head"  # there is no durable assignment head (the boot seed is missing)
    NOT_STOPPED = "not-stopped"  # this process is not the stopped, fenced recovery generation
    NOT_STOPPED_PREDECESSOR = "not-stopped-predecessor"  # not the round's stopped predecessor
    PREDECESSOR_SUPERSEDED = "predecessor-superseded"  # a later generation superseded it
    HANDOFF_PIN_LOST = "handoff-pin-lost"  # a Commit no longer holds its handoff pin
    INTAKE_OPEN = "intake-open"  # Release settlement needs closed intake while recovering
    RELEASE_ON_DRAINING_HEAD = "release-on-draining-head"  # Release met an unresolved drain

    # -- the leader's rotation (rotation/) -------------------------------------------------------
    YIELDED_TO_RECOVERY = "yielded-to-recovery"  # live finalization while recovering (RB-15)
    COMMIT_WINNER = "commit-winner"  # stopped recovery met a Commit winner: the round yields
    HEAD_REGRESSED = "head-regressed"  # the durable head is below the local registry
    NOT_ADOPTION_CERTIFICATE = "not-adoption-certificate"  # the published fence is not exact
    PUBLICATION_AUTHORITY_CHANGED = "publication-authority-changed"  # drain CAS landed late
    ACK_QUORUM_MISSED = "ack-quorum-missed"  # the drain ack quorum timed out (RB §4.6)
    HANDOFF_CHECKPOINT_FAILED = "handoff-checkpoint-failed"  # the pre-rotation checkpoint
    HANDOFF_NOT_PREDECESSOR_CUT = "handoff-not-predecessor-cut"  # it binds another cut
    ADOPTION_LAGS = "adoption-lags"  # a local adoption did not apply

    # -- the leader's recovery (recovery/) -------------------------------------------------------
    INFLIGHT_NOT_SETTLED = "inflight-not-settled"  # the predecessor's in-flight checkpoint moved
    INFLIGHT_FOREIGN = "inflight-foreign"  # an in-flight checkpoint of another fence or origin


def refused_because(error: BaseException, reason: Refusal) -> bool:
    """Is `error` a Refused for exactly `reason`?"""
    return isinstance(error, Refused) and error.reason is reason


def predecessor_lost(version: int) -> Refused:
    """Assignment `version - 1` is gone (pruned under a newer head): re-read and decide again."""
    return Refused(
        f"assignment {version}: lost predecessor {version - 1}", reason=Refusal.PREDECESSOR_LOST
    )

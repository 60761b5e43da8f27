"""Named limits of the checkpoint decision store (CD §2.3, CD §3)."""

from __future__ import annotations

from typing import Final

MAX_IDENTITY_BYTES: Final = 1_024
MAX_OUTCOME_BYTES: Final = 65_536
MAX_FLOOR_BYTES: Final = 262_144
MAX_WITNESS_SLOT_BYTES: Final = 65_536
MAX_RECOVERY_CAPSULE_BYTES: Final = 8_388_608
MAX_CAPSULE_GC_CURSOR_BYTES: Final = 1_024

IDENTITY_VERSION: Final = 2
OUTCOME_VERSION: Final = 2
FLOOR_VERSION: Final = 4
WITNESS_VERSION: Final = 1
WITNESS_SLOT_VERSION: Final = 1
RECOVERY_CAPSULE_VERSION: Final = 5
CAPSULE_GC_CURSOR_VERSION: Final = 1
PIPELINE_IDENTITY_VERSION: Final = 6

# Local mode: one create-once block object per this many IDs.
CHECKPOINT_ID_BLOCK_SIZE: Final = 65_536
U64_MAX: Final = 2**64 - 1

MAX_WITNESS_SINKS: Final = 1_024

# Stability retries of reads that race a concurrent GC floor advance (CD §4.5, CD §4.6).
OUTCOME_READ_ATTEMPTS: Final = 3
# Capsule GC: locations processed per step, and how many at once (CD §4.11).
CAPSULE_GC_BATCH: Final = 64
CAPSULE_GC_CONCURRENCY: Final = 4

# Bounds this port adds to loops the spec leaves unbounded (CD §10.2): each also takes a deadline.
ALLOCATION_ATTEMPTS_MAX: Final = 10_000
PRUNE_PUBLISH_ATTEMPTS_MAX: Final = 1_000
PRUNE_SWEEP_ROUNDS_MAX: Final = 1_000
LOCAL_BLOCK_CLAIM_ATTEMPTS_MAX: Final = 100_000

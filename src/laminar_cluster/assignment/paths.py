"""Paths of the assignment snapshot store's four namespaces (AS §2.11).

* `control/assignment-snapshots/v{N:020}.json`: AssignmentSnapshot (raw, draining or committed)
* `control/assignment-drain-finalizations/v{N:020}.json`: DrainFinalization
* `control/assignment-snapshots/recovery-materializations/v1/v{N:020}.json` (N >= 2):
  RecoveryMaterialization
* `control/assignment-recovery-proposals/v1/v{N:020}/sha256={hex}.json`: AssignmentSnapshot
  (committed, content addressed)
* `control/assignment-head/v1.json`: AssignmentHeadHint (overwritten; a change signal only)

Parsers match an explicit pattern and then re-format and compare.
"""

from __future__ import annotations

import re
from typing import Final

SNAPSHOTS_PREFIX: Final = "control/assignment-snapshots/"
MATERIALIZATIONS_PREFIX: Final = "control/assignment-snapshots/recovery-materializations/v1/"
FINALIZATIONS_PREFIX: Final = "control/assignment-drain-finalizations/"
PROPOSALS_PREFIX: Final = "control/assignment-recovery-proposals/v1/"
HEAD_HINT_PATH: Final = "control/assignment-head/v1.json"

_VERSION_NAME = re.compile(r"v([0-9]{20})\.json")


def snapshot_path(version: int) -> str:
    return f"{SNAPSHOTS_PREFIX}v{version:020d}.json"


def finalization_path(version: int) -> str:
    return f"{FINALIZATIONS_PREFIX}v{version:020d}.json"


def materialization_path(version: int) -> str:
    return f"{MATERIALIZATIONS_PREFIX}v{version:020d}.json"


def proposals_prefix(version: int) -> str:
    return f"{PROPOSALS_PREFIX}v{version:020d}/"


def proposal_path(version: int, sha256: str) -> str:
    return f"{proposals_prefix(version)}sha256={sha256}.json"


def parse_version_name(name: str) -> int | None:
    """The version of a `v{N:020}.json` file name, or None when `name` is not exactly that."""
    match = _VERSION_NAME.fullmatch(name)
    if match is None:
        return None
    version = int(match.group(1))
    return version if f"v{version:020d}.json" == name else None

"""The exactly-once check of the demo, the chaos test and `bench pipeline` (issue 7: "checks the
committed output against an independent computation of the expected aggregates: no event
lost, none counted twice").

The committed side is `runtime.output.read_committed_output`: the sink outputs of every
committed cluster checkpoint that the visibility rules show (DC-11). For the built-in integer
processor (`check_exactly_once`: the chaos test, `bench pipeline` without `--job`) they are
count and sum deltas, folded per key. For the demo's job, the reference `count_sum`
(`check_job_exactly_once`), they are the job's running totals: each flush emits a changed
key's current count and sum, so per key the record of the newest committed checkpoint is the
total. The expected side is `harness.workload.expected_aggregates`, computed straight from
the workload generator without the event log. They must be equal key by key; the first key
that differs (in key order) is named, with the totals of events lost (expected but not
committed) and counted twice (committed beyond the expected count).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from laminar_cluster.clock import Clock, within_deadline
from laminar_cluster.harness.workload import Aggregates, Workload, expected_aggregates
from laminar_cluster.jobs import MAIN, Emit
from laminar_cluster.runtime.job_processor import decode_output
from laminar_cluster.runtime.output import (
    CommittedOutput,
    aggregate_committed,
    decode_aggregate_records,
    open_output_authority,
    read_committed_output,
)
from laminar_cluster.store import ObjectStore

WRONG_KEYS_SHOWN: Final = 10


@dataclass(frozen=True, slots=True)
class WrongKey:
    key: int
    committed: tuple[int, int]  # (count, sum)
    expected: tuple[int, int]

    def describe(self) -> str:
        return (
            f"key {self.key}: committed count {self.committed[0]} sum {self.committed[1]}, "
            f"expected count {self.expected[0]} sum {self.expected[1]}"
        )


@dataclass(frozen=True, slots=True)
class CheckResult:
    expected_events: int
    committed_events: int
    keys: int  # distinct keys on either side
    lost: int  # events expected but not committed (summed over keys)
    duplicated: int  # events committed beyond the expected count (summed over keys)
    wrong: tuple[WrongKey, ...]  # the first WRONG_KEYS_SHOWN keys that differ, in key order
    wrong_keys: int  # how many keys differ
    attempts: int  # committed checkpoints read
    outputs: int  # visible sink outputs
    hidden: int  # staged outputs of committed attempts the rules keep hidden

    @property
    def passed(self) -> bool:
        return self.wrong_keys == 0

    def describe(self) -> str:
        if self.passed:
            return (
                f"exactly once: all {self.expected_events:,} events counted once over "
                f"{self.keys:,} keys (count and sum equal for every key; {self.outputs} outputs "
                f"of {self.attempts} committed checkpoints)"
            )
        return (
            f"NOT exactly once: {self.wrong_keys:,} keys differ, {self.lost:,} events lost, "
            f"{self.duplicated:,} counted twice; first: {self.wrong[0].describe()}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "expected_events": self.expected_events,
            "committed_events": self.committed_events,
            "keys": self.keys,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "wrong_keys": self.wrong_keys,
            "first_wrong": [
                {"key": w.key, "committed": list(w.committed), "expected": list(w.expected)}
                for w in self.wrong
            ],
            "committed_checkpoints": self.attempts,
            "outputs": self.outputs,
            "hidden_outputs": self.hidden,
        }


def compare(committed: Aggregates, expected: Aggregates) -> tuple[int, int, list[WrongKey], int]:
    """(lost, duplicated, the first wrong keys, wrong key count), key by key."""
    lost = duplicated = wrong_keys = 0
    wrong: list[WrongKey] = []
    for key in sorted(committed.keys() | expected.keys()):
        got, want = committed.get(key, (0, 0)), expected.get(key, (0, 0))
        if got == want:
            continue
        wrong_keys += 1
        lost += max(0, want[0] - got[0])
        duplicated += max(0, got[0] - want[0])
        if len(wrong) < WRONG_KEYS_SHOWN:
            wrong.append(WrongKey(key, got, want))
    return lost, duplicated, wrong, wrong_keys


async def check_exactly_once(
    store: ObjectStore,
    clock: Clock,
    workload: Workload,
    *,
    deadline: float,
    expected: Aggregates | None = None,
) -> CheckResult:
    """Read every committed output of `store` and compare it with `workload`'s aggregates
    (`expected`, when the caller computed them already)."""
    authority = open_output_authority(store, clock)
    result = await read_committed_output(authority, decode_aggregate_records, deadline=deadline)
    if expected is None:
        async with within_deadline(clock, deadline, "expected aggregates"):
            expected = await asyncio.to_thread(expected_aggregates, workload)
    return _result(aggregate_committed(result.records), expected, result)


async def check_job_exactly_once(
    store: ObjectStore,
    clock: Clock,
    workload: Workload,
    *,
    deadline: float,
    expected: Aggregates | None = None,
) -> CheckResult:
    """Read every committed output of the `count_sum` job on `store` and compare the newest
    count and sum of each key with `workload`'s aggregates (`expected`, when the caller
    computed them already)."""
    authority = open_output_authority(store, clock)
    result = await read_committed_output(
        authority, lambda data: decode_output(data, what="count_sum output"), deadline=deadline
    )
    if expected is None:
        async with within_deadline(clock, deadline, "expected aggregates"):
            expected = await asyncio.to_thread(expected_aggregates, workload)
    return _result(newest_totals(result.records), expected, result)


def newest_totals(emits: list[Emit]) -> Aggregates:
    """Per key the (count, sum) of its last main-stream record (committed outputs come in
    checkpoint order, a node's records in their order), keys ascending."""
    return record_totals(emit.record for emit in emits if emit.stream == MAIN)


def record_totals(records: Iterable[Mapping[str, Any]]) -> Aggregates:
    """Per key the (count, sum) of its last record of the count/sum job (running totals: a
    later record replaces an earlier one), keys ascending."""
    newest: Aggregates = {}
    for record in records:
        newest[int(record["key"])] = (int(record["count"]), int(record["sum"]))
    return dict(sorted(newest.items()))


def _result(
    committed: Aggregates, expected: Aggregates, result: CommittedOutput[Any]
) -> CheckResult:
    lost, duplicated, wrong, wrong_keys = compare(committed, expected)
    return CheckResult(
        expected_events=sum(count for count, _ in expected.values()),
        committed_events=sum(count for count, _ in committed.values()),
        keys=len(committed.keys() | expected.keys()),
        lost=lost,
        duplicated=duplicated,
        wrong=tuple(wrong),
        wrong_keys=wrong_keys,
        attempts=len(result.attempts),
        outputs=result.outputs,
        hidden=len(result.hidden),
    )

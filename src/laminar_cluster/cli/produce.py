"""`laminar-cluster produce` and `laminar-cluster output`: the reference workload in, the
committed aggregates out (issue 7).

`produce` appends the deterministic workload `(seed, events, partitions, keys)` to the event
log of a store (resuming after what each partition already holds) and prints progress and
events per second. `output` reads every committed sink output of the reference aggregation and
prints the totals: events counted, keys, committed attempts, hidden outputs. Given the
workload's parameters it also checks the totals against the expected aggregates, computed
independently from the generator, and exits 1 on any difference: an event lost or counted
twice, or, when the event log holds another number of events than the named workload, a
workload named wrongly (the counts disagree with what was asked, not with what was produced).
"""

from __future__ import annotations

from typing import Any

from laminar_cluster.clock import RealClock
from laminar_cluster.connectors.eventlog import EventLog
from laminar_cluster.harness.workload import Aggregates, Workload, expected_aggregates, produce
from laminar_cluster.runtime.output import (
    aggregate_committed,
    decode_aggregate_records,
    open_output_authority,
    read_committed_output,
)
from laminar_cluster.store import ObjectStore
from laminar_cluster.views.output import console as rich_console
from laminar_cluster.views.output import print_json, run_on_store

PROGRESS_INTERVAL_S = 1.0
MISMATCHES_SHOWN = 10


def say(text: str) -> None:
    """One line, never wrapped (scripts and tests match on it)."""
    rich_console.print(text, soft_wrap=True)


def run_produce(
    url: str,
    *,
    workload: Workload,
    batch_events: int,
    timeout_s: float,
    as_json: bool,
) -> int:
    """Append the workload; print progress (unless `as_json`) and the figures."""
    clock = RealClock()

    async def work(store: ObjectStore) -> dict[str, Any]:
        log = EventLog(store, clock=clock)
        started = clock.monotonic()
        shown = [started]

        def progress(done: int, total: int) -> None:
            now = clock.monotonic()
            if as_json or (now - shown[0] < PROGRESS_INTERVAL_S and done != total):
                return
            shown[0] = now
            say(
                f"produced {done:,} of {total:,} events ({100 * done / max(total, 1):.0f}%), "
                f"{done / max(now - started, 1e-9):,.0f} events/s"
            )

        report = await produce(
            log,
            workload,
            batch_events=batch_events,
            deadline=started + timeout_s,
            progress=progress,
        )
        elapsed_s = clock.monotonic() - started
        return {
            "store": store.url,
            "seed": workload.seed,
            "events": workload.events,
            "partitions": workload.partitions,
            "keys": workload.keys,
            "appended": report.appended,
            "skipped": report.skipped,
            "batches": report.batches,
            "elapsed_s": round(elapsed_s, 3),
            "events_per_s": round(report.appended / max(elapsed_s, 1e-9)),
        }

    figures = run_on_store(url, work)
    if as_json:
        print_json(figures)
    else:
        say(
            f"appended {figures['appended']:,} events in {figures['batches']:,} batches "
            f"({figures['skipped']:,} already in the log) in {figures['elapsed_s']:.2f} s: "
            f"{figures['events_per_s']:,} events/s"
        )
    return 0


def run_output(url: str, *, expect: Workload | None, timeout_s: float, as_json: bool) -> int:
    """Print the committed totals; with `expect`, check them (exit 1 on a difference)."""
    clock = RealClock()

    async def work(store: ObjectStore) -> dict[str, Any]:
        authority = open_output_authority(store, clock)
        deadline = clock.monotonic() + timeout_s
        result = await read_committed_output(authority, decode_aggregate_records, deadline=deadline)
        totals = aggregate_committed(result.records)
        figures: dict[str, Any] = {
            "store": store.url,
            "events": sum(count for count, _ in totals.values()),
            "keys": sum(1 for count, _ in totals.values() if count),
            "sum": sum(total for _, total in totals.values()),
            "attempts": len(result.attempts),
            "last_attempt": result.attempts[-1] if result.attempts else None,
            "outputs": result.outputs,
            "hidden": [{"key": h.key, "reason": h.reason} for h in result.hidden],
        }
        if expect is not None:
            figures["check"] = _check(totals, expected_aggregates(expect))
            figures["check"]["produced_events"] = await produced_events(store, clock, deadline)
        return figures

    figures = run_on_store(url, work, must_exist=True)
    check = figures.get("check")
    if as_json:
        print_json(figures)
    else:
        _print_output(figures)
    return 1 if check is not None and not check["passed"] else 0


async def produced_events(store: ObjectStore, clock: RealClock, deadline: float) -> int | None:
    """The events in the store's event log (the sum of its partitions' end offsets), or None
    when no partitions are declared."""
    log = EventLog(store, clock=clock)
    partitions = await log.partitions(deadline=deadline)
    if partitions is None:
        return None
    return sum((await log.end_offsets(range(partitions), deadline=deadline)).values())


def _check(totals: Aggregates, expected: Aggregates) -> dict[str, Any]:
    """Compare per key: events missing (lost) and extra (counted twice), and sums that differ."""
    lost = duplicated = 0
    mismatched: list[dict[str, Any]] = []
    for key in sorted(totals.keys() | expected.keys()):
        got, want = totals.get(key, (0, 0)), expected.get(key, (0, 0))
        if got == want:
            continue
        lost += max(0, want[0] - got[0])
        duplicated += max(0, got[0] - want[0])
        if len(mismatched) < MISMATCHES_SHOWN:
            mismatched.append({"key": key, "committed": list(got), "expected": list(want)})
    return {
        "passed": not mismatched,
        "expected_events": sum(count for count, _ in expected.values()),
        "lost": lost,
        "duplicated": duplicated,
        "mismatched_keys": mismatched,
    }


def _print_output(figures: dict[str, Any]) -> None:
    say(
        f"committed: {figures['events']:,} events over {figures['keys']:,} keys "
        f"(sum {figures['sum']:,}) in {figures['attempts']} attempts "
        f"(last {figures['last_attempt']}), {figures['outputs']} outputs"
    )
    for hidden in figures["hidden"]:
        say(f"  hidden {hidden['key']}: {hidden['reason']}")
    check = figures.get("check")
    if check is None:
        return
    if check["passed"]:
        say(f"[green]check passed[/green]: all {check['expected_events']:,} events once")
        return
    produced, expected = check["produced_events"], check["expected_events"]
    if produced is not None and produced != expected:
        say(
            f"[red]check failed[/red]: the counts disagree with what was asked: the event log "
            f"holds {produced:,} events, the workload named by --events/--seed/--keys/"
            f"--partitions has {expected:,}; committed {figures['events']:,}. Give the "
            "parameters `produce` was run with."
        )
        return
    in_log = "" if produced is None else ", as the event log holds"
    say(
        f"[red]check failed[/red]: {check['lost']:,} events lost, {check['duplicated']:,} "
        f"counted twice (expected {expected:,}{in_log})"
    )
    for row in check["mismatched_keys"]:
        say(f"  key {row['key']}: committed {row['committed']}, expected {row['expected']}")

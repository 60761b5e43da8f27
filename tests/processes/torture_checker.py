"""The checker of the election torture test: what the contender logs and the durable log must
prove (LA §4.9; LA-4, LA-5, LA-8).

1. No two believed-leader intervals of different terms overlap (LA-8). A term's belief in one
   process is [believed_from, min(ended.at, the last `until` logged)]: believed_from is when
   the acquiring response arrived (before the grant was published, so before anything could
   act on it); a process killed while leader contributes an interval ending at its last
   deadline.
2. Tokens only grow along the durable log, and each token belongs to exactly one owner (LA-4);
   every belief names a (boot, token) the durable log holds.
3. Every admitted cluster outcome carries a proof whose token (and owner) is the lease of the
   record that admitted it: no decision of a deposed term was admitted (LA-5). Every decision a
   contender logged as Created or Unchanged is admitted with its epoch and proof.
4. Enough takeovers happened for the run to mean something.

Logs are the contender's JSON lines (`laminar_cluster.harness.contender`), one file per node,
appended across restarts; each `start` event opens a new run (a new boot).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laminar_cluster.clock import RealClock
from laminar_cluster.lease.log import load_published_head, read_record
from laminar_cluster.lease.records import LeaderAuthorityRecord
from laminar_cluster.store import ObjectStore

ADMITTED_RESULTS = ("Created", "Unchanged")


@dataclass
class Run:
    """One process start: its owner and its events in order."""

    node: int
    boot: str
    process_term: int
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Belief:
    node: int
    boot: str
    token: int
    start: float
    end: float

    def describe(self) -> str:
        return (
            f"node {self.node} boot {self.boot[:8]} token {self.token} "
            f"[{self.start:.4f}, {self.end:.4f}]"
        )


@dataclass(frozen=True)
class Decision:
    node: int
    boot: str
    token: int
    epoch: int | None
    result: str
    at: float


def parse_runs(paths: Iterable[Path]) -> list[Run]:
    """Every run of every log. A line a kill cut short cannot exist (one `os.write` per line),
    so any unparsable line fails the check."""
    runs: list[Run] = []
    for path in paths:
        current: Run | None = None
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as error:
                raise AssertionError(f"{path}:{number}: unparsable log line {line!r}") from error
            if event["event"] == "start":
                current = Run(event["node"], event["boot"], event["process_term"])
                runs.append(current)
            elif event["event"] in ("refused", "stop") and current is None:
                continue
            else:
                assert current is not None, f"{path}:{number}: event before start: {line}"
                current.events.append(event)
    return runs


def beliefs_of(run: Run) -> list[Belief]:
    """The believed-leader intervals of one run, one per granted..ended span."""
    beliefs: list[Belief] = []
    token: int | None = None
    start = until = 0.0

    def close(end: float) -> None:
        beliefs.append(Belief(run.node, run.boot, token or 0, start, min(end, until)))

    for event in run.events:
        kind = event["event"]
        if kind == "granted":
            if token is not None:
                close(event["at"])
            token, start, until = event["token"], event["believed_from"], event["until"]
        elif kind == "renewed":
            assert token == event["token"], f"renewal of an unheld token: {event}"
            until = max(until, event["until"])
        elif kind == "ended" and token is not None:
            assert token == event["token"], f"end of an unheld token: {event}"
            close(event["at"])
            token = None
    if token is not None:
        close(float("inf"))  # killed while leader: the belief lasted until its deadline
    return beliefs


def decisions_of(run: Run) -> list[Decision]:
    return [
        Decision(run.node, run.boot, e["token"], e["epoch"], e["result"], e["at"])
        for e in run.events
        if e["event"] == "decision"
    ]


def check_beliefs_disjoint(beliefs: list[Belief]) -> None:
    """(1) LA-8: beliefs of different terms never overlap; believed tokens only grow in time."""
    ordered = sorted(beliefs, key=lambda belief: belief.start)
    latest: Belief | None = None  # the belief with the latest end so far
    for belief in ordered:
        if belief.end <= belief.start:
            continue  # logged after its own deadline passed: never believed in effect
        if latest is not None:
            same_term = (latest.boot, latest.token) == (belief.boot, belief.token)
            assert same_term or belief.start >= latest.end, (
                f"overlapping leaders: {latest.describe()} and {belief.describe()}"
            )
            assert belief.token >= latest.token, (
                f"a later belief has an older token: {latest.describe()} then {belief.describe()}"
            )
        if latest is None or belief.end > latest.end:
            latest = belief


async def read_durable_log(store: ObjectStore) -> list[LeaderAuthorityRecord]:
    """Every record from 1 to the published head (nothing is pruned in these runs)."""
    head = await load_published_head(store, RealClock())  # may repair the pointer: a nonce
    assert head is not None, "no authority head: nobody ever led"
    records = []
    for seq in range(1, head.record.lease.seq + 1):
        record = await read_record(store, seq)
        assert record is not None, f"authority record {seq} is missing (no prune ran)"
        records.append(record)
    return records


def check_durable_tokens(records: list[LeaderAuthorityRecord], beliefs: list[Belief]) -> int:
    """(2) LA-4: tokens never decrease, change whenever the owner does, and each names one owner;
    every belief is a durable term. Returns the number of owner changes (takeovers)."""
    owners: dict[int, tuple[int, str, int]] = {}
    takeovers = 0
    previous: LeaderAuthorityRecord | None = None
    for record in records:
        lease = record.lease
        owner = (lease.owner.node, lease.owner.boot, lease.owner.process_term)
        assert owners.setdefault(lease.token, owner) == owner, (
            f"token {lease.token} has two owners: {owners[lease.token]} and {owner}"
        )
        if previous is not None:
            before = previous.lease
            assert lease.token >= before.token, f"token regressed at seq {lease.seq}"
            assert lease.renewal_sequence >= before.renewal_sequence
            if lease.owner != before.owner:
                assert lease.token > before.token, f"owner changed, token kept at {lease.seq}"
                takeovers += 1
        previous = record
    for belief in beliefs:
        durable = owners.get(belief.token)
        assert durable is not None and durable[:2] == (belief.node, belief.boot), (
            f"belief without a durable term: {belief.describe()} (durable owner {durable})"
        )
    return takeovers


def check_decisions(records: list[LeaderAuthorityRecord], decisions: list[Decision]) -> int:
    """(3) LA-5: each admitted outcome was admitted under its own proof's term, epochs strictly
    grow, and every logged Created/Unchanged is admitted. Returns the admitted count."""
    admitted: dict[int, tuple[str, int]] = {}
    last_epoch = 0
    for record in records:
        outcome = record.checkpoint_outcome
        if outcome is None:
            continue
        proof = outcome.leader_proof
        assert proof is not None, f"cluster outcome without a proof at seq {record.lease.seq}"
        assert record.lease.token == proof.fencing_token, (
            f"seq {record.lease.seq} admitted epoch {outcome.epoch} of token "
            f"{proof.fencing_token} under token {record.lease.token}"
        )
        assert record.lease.owner.proof_owner() == proof.owner
        assert outcome.epoch > last_epoch, f"epoch {outcome.epoch} after {last_epoch}"
        last_epoch = outcome.epoch
        admitted[outcome.epoch] = (proof.owner.boot_id, proof.fencing_token)
    for decision in decisions:
        if decision.result not in ADMITTED_RESULTS:
            continue
        assert decision.epoch is not None
        assert admitted.get(decision.epoch) == (decision.boot, decision.token), (
            f"node {decision.node} logged {decision.result} for epoch {decision.epoch} token "
            f"{decision.token}; durable: {admitted.get(decision.epoch)}"
        )
    return len(admitted)


@dataclass(frozen=True)
class Verdict:
    runs: int
    beliefs: int
    records: int
    takeovers: int
    admitted: int
    decision_results: dict[str, int]


async def check_all(store: ObjectStore, log_paths: Iterable[Path]) -> Verdict:
    """Run every check; return the figures (assertions fail the test)."""
    runs = parse_runs(log_paths)
    crashes = [event for run in runs for event in run.events if event["event"] == "crash"]
    assert crashes == [], crashes
    beliefs = [belief for run in runs for belief in beliefs_of(run)]
    decisions = [decision for run in runs for decision in decisions_of(run)]
    check_beliefs_disjoint(beliefs)
    records = await read_durable_log(store)
    takeovers = check_durable_tokens(records, beliefs)
    admitted = check_decisions(records, decisions)
    return Verdict(
        runs=len(runs),
        beliefs=len(beliefs),
        records=len(records),
        takeovers=takeovers,
        admitted=admitted,
        decision_results=dict(Counter(decision.result for decision in decisions)),
    )

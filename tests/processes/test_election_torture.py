"""Election torture with real processes (LA §4.9, LA §6; invariants LA-4, LA-5, LA-8).

Contender processes (`laminar_cluster.harness.contender`, each its own interpreter) share one
store. A seeded chaos loop SIGSTOPs contenders (the current leader more often than not) for
0.2-3 s, SIGKILLs them and restarts them, while every leader records a cluster Abort every
0.3 s. At the end every process is stopped and `torture_checker` proves from the logs and the
durable log: believed-leader intervals never overlap (LA-8), tokens only grow and each names one
owner (LA-4), every admitted outcome was admitted under its own proof's term and every logged
Created outcome is durable (LA-5), and takeovers did happen.

The seed is printed; `TORTURE_SEED=<n>` replays the same chaos schedule (process timing is
the operating system's, so a replay is close, not exact). `TORTURE_SOAK_S` sets the soak length.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from laminar_cluster.harness import contender
from laminar_cluster.harness.contender import EXIT_OK, EXIT_STORE_REFUSED, run_contender
from laminar_cluster.harness.contender_fleet import ContenderFleet
from laminar_cluster.lease.records import LeaderAuthorityRecord, LeaderLeaseOwner
from laminar_cluster.store import open_store
from tests.lease.builders import OWNER, abort, lease, uid
from tests.processes.torture_checker import (
    Belief,
    Decision,
    Run,
    Verdict,
    beliefs_of,
    check_all,
    check_beliefs_disjoint,
    check_decisions,
    check_durable_tokens,
)
from tests.support.scripted_store import ScriptedStore

PAUSE_MIN_S, PAUSE_MAX_S = 0.2, 3.0
RESTART_DELAY_MAX_S = 1.0
ACTION_GAP_MIN_S, ACTION_GAP_MAX_S = 0.3, 1.2
DECISION_THINK_S = 0.2  # up to this long from taking a proof to recording with it
LEADER_BIAS = 0.7  # how often the chaos aims at the current leader
MID_DECISION_BIAS = 0.7  # how often a leader's SIGSTOP waits for a decision in flight


@dataclass
class Chaos:
    """The chaos schedule: which node is stopped until when, which killed node restarts when."""

    fleet: ContenderFleet
    rng: random.Random
    nodes: tuple[int, ...]
    paused_until: dict[int, float] = field(default_factory=dict)
    restart_at: dict[int, float] = field(default_factory=dict)
    actions: dict[str, int] = field(default_factory=dict)

    def active(self) -> list[int]:
        return [n for n in self.nodes if n not in self.paused_until and n not in self.restart_at]

    def due(self, now: float) -> None:
        for node, until in list(self.paused_until.items()):
            if now >= until:
                self.fleet.send(node, signal.SIGCONT)
                del self.paused_until[node]
        for node, at in list(self.restart_at.items()):
            if now >= at:
                self.fleet.start(node)
                del self.restart_at[node]

    def act(self, now: float) -> None:
        active = self.active()
        if len(active) < 2:
            return  # keep two contenders able to make progress
        self.fleet.refresh()
        leader = self.fleet.believer(now)
        target = self.rng.choice(active)
        if leader is not None and leader[0] in active and self.rng.random() < LEADER_BIAS:
            target = leader[0]
        action = self.rng.choices(("stop", "kill"), weights=(3, 2))[0]
        at_leader = leader is not None and target == leader[0]
        if action == "stop" and at_leader and self.rng.random() < MID_DECISION_BIAS:
            action = "stop_mid_decision" if self.await_open_decision(target) else action
        if action.startswith("stop"):
            self.fleet.send(target, signal.SIGSTOP)
            self.paused_until[target] = now + self.rng.uniform(PAUSE_MIN_S, PAUSE_MAX_S)
        else:
            self.fleet.kill(target)
            self.restart_at[target] = now + self.rng.uniform(0, RESTART_DELAY_MAX_S)
        name = f"{action}_leader" if at_leader and action in ("stop", "kill") else action
        self.actions[name] = self.actions.get(name, 0) + 1

    def await_open_decision(self, node: int, timeout_s: float = 1.0) -> bool:
        """Wait until `node` logged a `decide` without its `decision` yet: a SIGSTOP now lands
        between taking a proof and recording with it (the LA-5 race)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.fleet.refresh()
            run = [e for e in self.fleet.current_run(node) if e["event"] in ("decide", "decision")]
            if run and run[-1]["event"] == "decide":
                return True
            time.sleep(0.005)
        return False

    def run(self, duration_s: float) -> None:
        end = time.monotonic() + duration_s
        next_action = time.monotonic() + self.rng.uniform(ACTION_GAP_MIN_S, ACTION_GAP_MAX_S)
        while (now := time.monotonic()) < end:
            self.due(now)
            if now >= next_action:
                self.act(now)
                next_action = now + self.rng.uniform(ACTION_GAP_MIN_S, ACTION_GAP_MAX_S)
            time.sleep(0.02)
        self.due(float("inf"))  # continue every stopped node, restart every killed one


def torture(
    url: str,
    log_dir: Path,
    *,
    contenders: int,
    duration_s: float,
    ttl_s: float,
    renew_interval_s: float,
) -> Verdict:
    seed = int(os.environ.get("TORTURE_SEED", random.SystemRandom().randrange(2**32)))
    print(f"election torture seed {seed} (TORTURE_SEED={seed} replays the chaos schedule)")
    log_dir.mkdir(parents=True, exist_ok=True)
    nodes = tuple(range(1, contenders + 1))
    fleet = ContenderFleet(
        url,
        log_dir,
        ttl_s=ttl_s,
        renew_interval_s=renew_interval_s,
        decisions=True,
        decision_think_s=DECISION_THINK_S,
        stop_after_s=duration_s + 120,  # a safety net if this test dies; we stop them first
    )
    chaos = Chaos(fleet, random.Random(seed), nodes)
    with fleet:
        for node in nodes:
            fleet.start(node)
        chaos.run(duration_s)
        _await_started(fleet, nodes)  # a SIGTERM before its handler is installed would be -15
        time.sleep(2 * ttl_s)  # let the survivors settle a last term
        exit_codes = fleet.close()
    print(f"chaos actions {chaos.actions}; exit codes at the end {exit_codes}")
    # Processes the chaos did not kill stop on SIGTERM and exit 0 (no crash, no refusal).
    assert exit_codes == dict.fromkeys(exit_codes, 0), exit_codes
    verdict = asyncio.run(_check(url, [fleet.log_path(node) for node in nodes]))
    print(verdict)
    return verdict


def _await_started(fleet: ContenderFleet, nodes: tuple[int, ...], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        fleet.refresh()
        if all(any(e["event"] == "manager" for e in fleet.current_run(n)) for n in nodes):
            return
        time.sleep(0.05)
    raise AssertionError(f"contenders did not all start within {timeout_s} s")


async def _check(url: str, log_paths: list[Path]) -> Verdict:
    store = open_store(url)
    try:
        return await check_all(store, log_paths)
    finally:
        await store.close()


@pytest.mark.processes
def test_election_torture_five_contenders_file(tmp_path: Path) -> None:
    verdict = torture(
        f"file://{tmp_path / 'store'}?fsync=false",
        tmp_path / "logs",
        contenders=5,
        duration_s=60.0,
        ttl_s=1.0,
        renew_interval_s=0.3,
    )
    assert verdict.takeovers >= 5  # (4) the run was not vacuous
    assert verdict.admitted >= 20
    assert verdict.decision_results.get("Created", 0) >= 20
    # Leaders stopped mid-decision and deposed meanwhile were refused by the log (LA-5).
    assert verdict.decision_results.get("Fenced", 0) >= 1


@pytest.mark.s3
@pytest.mark.processes
def test_election_torture_three_contenders_s3(s3_url: str, tmp_path: Path) -> None:
    verdict = torture(
        s3_url,
        tmp_path / "logs",
        contenders=3,
        duration_s=20.0,
        ttl_s=1.0,
        renew_interval_s=0.3,
    )
    assert verdict.takeovers >= 2
    assert verdict.decision_results.get("Created", 0) >= 5


@pytest.mark.soak
@pytest.mark.processes
def test_election_torture_soak_file(tmp_path: Path) -> None:
    verdict = torture(
        f"file://{tmp_path / 'store'}?fsync=false",
        tmp_path / "logs",
        contenders=5,
        duration_s=float(os.environ.get("TORTURE_SOAK_S", "600")),
        ttl_s=1.0,
        renew_interval_s=0.3,
    )
    assert verdict.takeovers >= 20


@pytest.mark.soak
@pytest.mark.s3
@pytest.mark.processes
def test_election_torture_soak_s3(s3_url: str, tmp_path: Path) -> None:
    verdict = torture(
        s3_url,
        tmp_path / "logs",
        contenders=3,
        duration_s=float(os.environ.get("TORTURE_SOAK_S", "300")),
        ttl_s=1.0,
        renew_interval_s=0.3,
    )
    assert verdict.takeovers >= 10


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_contender_in_process_leads_decides_and_counts_terms(tmp_path: Path) -> None:
    """One contender alone on memory://: it starts, is granted token 1, renews, records Aborts
    with epochs 1, 2, ... (all Created), stops after its time and ends its belief; a second
    start on the same log takes process term 2."""
    log = tmp_path / "node-7.log"
    options: dict[str, Any] = {"ttl_s": 0.5, "renew_interval_s": 0.1, "decisions": True}
    options["log_path"] = str(log)
    assert run_contender("memory://", 7, stop_after_s=1.0, **options) == EXIT_OK
    events = _events(log)
    kinds = [event["event"] for event in events]
    assert kinds[:3] == ["start", "manager", "granted"]
    assert kinds[-2:] == ["stop", "ended"]
    assert (events[0]["node"], events[0]["process_term"]) == (7, 1)
    assert events[2]["token"] == 1
    assert events[2]["believed_from"] <= events[2]["at"] < events[2]["until"]
    assert kinds.count("renewed") >= 3
    decisions = [event for event in events if event["event"] == "decision"]
    assert decisions, kinds
    assert [d["epoch"] for d in decisions] == list(range(1, len(decisions) + 1))
    assert {d["result"] for d in decisions} == {"Created"}
    assert {d["token"] for d in decisions} == {1}
    assert run_contender("memory://", 7, stop_after_s=0.2, **options) == EXIT_OK
    starts = [event for event in _events(log) if event["event"] == "start"]
    assert [event["process_term"] for event in starts] == [1, 2]
    assert starts[0]["boot"] != starts[1]["boot"]  # LA-10: a restart is another owner


def test_contender_refuses_a_store_without_compare_and_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LA-12: a store that rejects conditional updates fails the contract probe: exit code 2,
    a `refused` event, and no leadership attempted."""

    def without_updates(url: str) -> ScriptedStore:
        store = ScriptedStore(open_store(url))
        store.reject_updates = True
        return store

    monkeypatch.setattr(contender, "open_store", without_updates)
    log = tmp_path / "node-3.log"
    code = run_contender(
        "memory://",
        3,
        ttl_s=0.5,
        renew_interval_s=0.1,
        log_path=str(log),
        decisions=True,
        stop_after_s=1.0,
    )
    assert code == EXIT_STORE_REFUSED
    events = _events(log)
    assert [event["event"] for event in events] == ["refused"]
    assert "update_if_match" in str(events[0]["reason"])


# The checker itself must catch what it is for: overlaps, token reuse, deposed admissions.


def _run(node: int, boot: str, *events: tuple[str, float, int, float]) -> Run:
    run = Run(node=node, boot=boot, process_term=1)
    for kind, at, token, until in events:
        event = {"event": kind, "at": at, "token": token, "until": until, "believed_from": at}
        run.events.append(event)
    return run


def test_checker_belief_intervals_and_overlaps() -> None:
    leader = _run(1, uid(1), ("granted", 10.0, 1, 11.0), ("renewed", 10.5, 1, 11.5))
    killed = beliefs_of(leader)  # no `ended`: a kill; the belief lasts to its last deadline
    assert killed == [Belief(1, uid(1), 1, 10.0, 11.5)]
    ended = beliefs_of(_run(1, uid(1), ("granted", 10.0, 1, 11.0), ("ended", 10.2, 1, 11.0)))
    assert ended == [Belief(1, uid(1), 1, 10.0, 10.2)]
    late = beliefs_of(_run(1, uid(1), ("granted", 10.0, 1, 11.0), ("ended", 12.0, 1, 11.0)))
    assert late == [Belief(1, uid(1), 1, 10.0, 11.0)]  # min(ended, deadline)
    successor = Belief(2, uid(2), 2, 11.5, 13.0)
    check_beliefs_disjoint([*killed, successor])  # touching is not overlapping
    with pytest.raises(AssertionError, match="overlapping leaders"):
        check_beliefs_disjoint([*killed, Belief(2, uid(2), 2, 11.4, 13.0)])
    with pytest.raises(AssertionError, match="older token"):
        check_beliefs_disjoint([*killed, Belief(2, uid(2), 0, 12.0, 13.0)])


def _records(*terms: tuple[int, LeaderLeaseOwner]) -> list[LeaderAuthorityRecord]:
    return [
        LeaderAuthorityRecord.initial(lease(seq=seq, renewal=seq, token=token, owner=owner))
        for seq, (token, owner) in enumerate(terms, start=1)
    ]


def test_checker_durable_tokens() -> None:
    rival = LeaderLeaseOwner(node=8, boot=uid(2), process_term=1)
    good = _records((1, OWNER), (1, OWNER), (2, rival), (3, OWNER))
    beliefs = [Belief(8, uid(2), 2, 1.0, 2.0)]
    assert check_durable_tokens(good, beliefs) == 2
    with pytest.raises(AssertionError, match="token 2 has two owners"):
        check_durable_tokens(_records((1, OWNER), (2, OWNER), (2, rival)), [])
    with pytest.raises(AssertionError, match="token regressed"):
        check_durable_tokens(_records((2, OWNER), (1, OWNER)), [])
    with pytest.raises(AssertionError, match="belief without a durable term"):
        check_durable_tokens(good, [Belief(8, uid(2), 3, 1.0, 2.0)])


def test_checker_decisions_admitted_under_their_own_term() -> None:
    record = abort()  # epoch 30 admitted at token 2 with a token-2 proof
    proof_boot = OWNER.boot
    assert check_decisions([record], [Decision(7, proof_boot, 2, 30, "Created", 1.0)]) == 1
    deposed = replace(record, lease=replace(record.lease, token=3))
    with pytest.raises(AssertionError, match="admitted epoch 30 of token 2 under token 3"):
        check_decisions([deposed], [])
    with pytest.raises(AssertionError, match="logged Created for epoch 31"):
        check_decisions([record], [Decision(7, proof_boot, 2, 31, "Created", 1.0)])
    # Fenced or failed attempts need not be durable.
    assert check_decisions([record], [Decision(7, proof_boot, 2, 31, "Fenced", 1.0)]) == 1

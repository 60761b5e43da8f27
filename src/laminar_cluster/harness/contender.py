"""A leader-election contender process: the lease manager on a real store, logging every
interval it believed it led and every decision it tried (LA §4.9, LA §6; LA-4, LA-5,
LA-8, LA-10). The election torture test and `bench failover` spawn several on one store (`python -m
laminar_cluster.harness.contender`, or the spawn target `contender_process`).

Each start is a new owner (LA-10): the node id, a fresh boot uuid4, and a process term one above
the last start's (a counter file next to the log). A store failing the contract probe (LA §4.2,
LA-12) is refused with exit code 2.

The log is JSON lines (one `os.write` each, O_APPEND); `at` is monotonic (RealClock's
`time.monotonic`, shared by the processes of one host). Events: `start` (pid, node, boot,
process_term, ttl_s), `manager`, `granted` (token, seq, until, believed_from: when the acquiring
response arrived), `renewed` (token, seq, until), `ended` (token, until; none when killed),
`decide`/`decision` (token, epoch, result), `requests` (total, leader: every renewal interval),
`stop`, `refused`, `crash`. `until` is the manager's LeaseDeadline (LA-8: anchored at the
attempt start); a belief holds on [believed_from, min(until, ended)]. Decisions log through
`believe()` first, so no act rests on an unlogged belief. `requests` counts this process's
store requests (`CountingStore`) for the bench.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from laminar_cluster.authority.cluster_outcomes import record_cluster_outcome
from laminar_cluster.checkpoint import DecisionStore
from laminar_cluster.checkpoint.records import CheckpointVerdict
from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.errors import LaminarError
from laminar_cluster.fencing import CheckpointAssignmentFence, FenceParticipant, LeaderProof
from laminar_cluster.lease.candidacy import CandidacyWatch
from laminar_cluster.lease.lease_store import LeaderLeaseStore
from laminar_cluster.lease.manager import LeaderLeaseManager, LeaseManagerConfig
from laminar_cluster.lease.outcomes import Acquired, LeaderLeaseObservation, LeaseOutcome
from laminar_cluster.lease.records import LeaderLease, LeaderLeaseOwner
from laminar_cluster.store import open_store
from laminar_cluster.store.counting import CountingStore
from laminar_cluster.store.probe import verify_store_contract

EXIT_OK: Final = 0
EXIT_STORE_REFUSED: Final = 2

DECISION_INTERVAL_S: Final = 0.3
PROBE_TIMEOUT_S: Final = 10.0
BELIEF_POLL_S: Final = 0.05
MANAGER_RESTARTS_MAX: Final = 100_000
Owner = LeaderLeaseOwner
FENCE_DIGEST: Final = tuple(range(1, 33))  # of the one-participant fence each Abort names


@dataclass(frozen=True, slots=True)
class ContenderConfig:
    store_url: str
    node_id: int
    ttl_s: float
    renew_interval_s: float
    log_path: str
    decisions: bool
    stop_after_s: float
    decision_think_s: float = 0.0
    decision_interval_s: float = DECISION_INTERVAL_S


class EventLog:
    """JSON lines appended with one `os.write` each (a kill never tears a line)."""

    def __init__(self, path: str, clock: Clock) -> None:
        self._clock = clock
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            os.write(self._fd, b"\n")  # never glue our first line to a foreign partial one

    def write(self, event: str, **fields: Any) -> None:
        line = {"event": event, "at": self._clock.monotonic(), **fields}
        os.write(self._fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def next_process_term(counter_path: str) -> int:
    """One above the term of the last start on this node (1 at first), made durable by rename."""
    path = Path(counter_path)
    text = path.read_text(encoding="ascii").strip() if path.exists() else "0"
    if not text.isdigit():
        raise ValueError(f"{counter_path}: process term counter {text[:40]!r} is not a number")
    scratch = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    scratch.write_text(f"{int(text) + 1}\n", encoding="ascii")
    os.replace(scratch, path)
    return int(text) + 1


class _TimedAuthority:
    """The manager's lease operations, noting when each term's first grant arrived."""

    def __init__(self, inner: LeaderLeaseStore, clock: Clock) -> None:
        self.inner, self._clock, self.ttl_s = inner, clock, inner.ttl_s
        self.granted_at: dict[int, float] = {}

    def _noted(self, outcome: LeaseOutcome) -> LeaseOutcome:
        if isinstance(outcome, Acquired):
            self.granted_at.setdefault(outcome.lease.token, self._clock.monotonic())
        return outcome

    async def load(self) -> LeaderLease | None:
        return await self.inner.load()

    async def observe(self, *, successor: bool = False) -> LeaderLease | None:
        return await self.inner.observe(successor=successor)

    async def begin_new_term(self, owner: LeaderLeaseOwner, *, deadline: float) -> LeaseOutcome:
        return self._noted(await self.inner.begin_new_term(owner, deadline=deadline))

    async def renew_exact(self, owner: Owner, token: int, *, deadline: float) -> LeaseOutcome:
        return self._noted(await self.inner.renew_exact(owner, token, deadline=deadline))

    def observe_rival(self, owner: Owner, lease: LeaderLease) -> LeaderLeaseObservation:
        return self.inner.observe_rival(owner, lease)

    async def try_takeover(
        self, owner: Owner, observation: LeaderLeaseObservation, *, deadline: float
    ) -> LeaseOutcome:
        return self._noted(await self.inner.try_takeover(owner, observation, deadline=deadline))


@dataclass
class _Contender:
    """One process's running state, shared by its tasks, and what it believes about its
    leadership, logged on every change (LA-8)."""

    config: ContenderConfig
    clock: Clock
    log: EventLog
    timed: _TimedAuthority  # the authority, timing grants for the manager
    owner: LeaderLeaseOwner
    requests: CountingStore
    shutdown: asyncio.Event = field(default_factory=asyncio.Event)
    manager: LeaderLeaseManager | None = None
    stop_at: float = 0.0
    token: int | None = None  # of the believed term
    until: float | None = None  # its deadline, as last logged
    deciding: bool = False  # a decision attempt is in flight (`_decide_once`)
    stop_reason: str | None = None  # a stop that waits for that attempt's result

    def running(self) -> bool:
        return (
            not self.shutdown.is_set()
            and self.stop_reason is None
            and self.clock.monotonic() < self.stop_at
        )

    async def pause(self, seconds: float) -> None:
        """Sleep `seconds`, or less when shutdown comes first."""
        with contextlib.suppress(TimeoutError):
            async with self.clock.timeout_at(self.clock.monotonic() + seconds):
                await self.shutdown.wait()

    def believe(self, manager: LeaderLeaseManager) -> LeaderProof | None:
        """The proof the manager grants now (None unless `lease_grants_proof` holds), after
        logging any change of belief since the last call."""
        proof, lease = manager.proof(), manager.lease_watch.current()
        until = manager.deadline.valid_until
        if proof is None or until is None or lease is None:
            self.end_belief()
            return None
        token = proof.fencing_token
        kind = "renewed" if token == self.token else "granted"
        if kind == "granted":
            self.end_belief()
        if kind == "granted" or until != self.until:
            fields: dict[str, Any] = {"seq": lease.seq, "until": until}
            if kind == "granted":
                fields["believed_from"] = self.timed.granted_at[token]
            self.log.write(kind, token=token, requests=self.requests.total, **fields)
        self.token, self.until = token, until
        return proof

    def end_belief(self) -> None:
        if self.token is not None:
            self.log.write("ended", token=self.token, until=self.until)
        self.token, self.until = None, None


async def _lead(contender: _Contender) -> None:
    """Run lease managers back to back: a fenced manager is replaced by a new one, which begins
    a new term with a new token (LA §4.9.3, LA-9)."""
    config = contender.config
    manager_config = LeaseManagerConfig(config.ttl_s, config.renew_interval_s)
    for generation in range(1, MANAGER_RESTARTS_MAX + 1):
        if not contender.running():
            return
        manager = LeaderLeaseManager(
            contender.timed, contender.owner, manager_config, contender.clock
        )
        contender.manager = manager
        contender.log.write("manager", generation=generation)
        await manager.run(CandidacyWatch(eligible=True), contender.shutdown)
        contender.believe(manager)  # fenced: the belief ends now
        await contender.pause(config.renew_interval_s)
    _stop(contender, f"{MANAGER_RESTARTS_MAX} managers fenced")


async def _watch_beliefs(contender: _Contender) -> None:
    """Log each grant, renewal and loss as soon as the manager publishes it."""
    while contender.running():
        manager = contender.manager
        if manager is None:
            await contender.pause(BELIEF_POLL_S)
            continue
        contender.believe(manager)
        seen = manager.lease_watch.version
        with contextlib.suppress(TimeoutError):
            async with contender.clock.timeout_at(contender.clock.monotonic() + BELIEF_POLL_S):
                await manager.lease_watch.wait_changed(seen)


async def _log_requests(contender: _Contender) -> None:
    """Every renewal interval, this process's running request total and whether it believed
    it led (`requests`): the failover bench's per-follower and per-leader request rates."""
    while contender.running():
        await contender.pause(contender.config.renew_interval_s)
        if not contender.running():
            return  # stopped while pausing: the log ends with `stop` and `ended`
        leading = contender.token is not None
        contender.log.write("requests", total=contender.requests.total, leader=leading)


async def _decide(contender: _Contender) -> None:
    """While leader, record a cluster Abort with the next epoch every decision interval."""
    interval_s = contender.config.decision_interval_s
    while contender.running():
        await contender.pause(interval_s)
        manager = contender.manager
        if manager is None or not contender.running():
            continue
        proof = contender.believe(manager)  # logged before it is acted on
        if proof is not None:
            await _decide_once(contender, proof)


async def _decide_once(contender: _Contender, proof: LeaderProof) -> None:
    """One Abort attempt under `proof`, logged with its result (LA-5 is checked on the log)."""
    contender.deciding = True
    try:
        await _attempt_decision(contender, proof)
    finally:
        contender.deciding = False
        if contender.stop_reason is not None:  # a stop came meanwhile: it follows the result
            _stop(contender, contender.stop_reason)


async def _attempt_decision(contender: _Contender, proof: LeaderProof) -> None:
    """The attempt itself: read the head, think, record; its result logged."""
    clock, log, token = contender.clock, contender.log, proof.fencing_token
    budget_s = contender.config.ttl_s
    epoch: int | None = None
    try:
        async with clock.timeout_at(clock.monotonic() + budget_s):
            head = await contender.timed.inner.load_record()
        last = None if head is None else head.outcome_head
        epoch = 1 if last is None else last.epoch + 1
        log.write("decide", token=token, epoch=epoch)
        # A leader's work between checking its proof and recording (a barrier, say). The proof
        # is deliberately not re-checked afterwards, and the record gets a fresh budget: a
        # resumed, deposed leader must be refused by the log alone (LA-5).
        await contender.pause(clock.random.uniform(0, contender.config.decision_think_s))
        result: object = await record_cluster_outcome(
            contender.timed.inner,
            proof,
            epoch=epoch,
            checkpoint_id=epoch,
            assignment_fence=_fence(proof),
            verdict=CheckpointVerdict.ABORT,
            recovery_capsule=None,
            deadline=clock.monotonic() + budget_s,
        )
        name, detail = type(result).__name__, ""
    except TimeoutError:
        name, detail = "DeadlineExceeded", "decision deadline passed"
    except LaminarError as error:
        name, detail = type(error).__name__, str(error)[:300]
    log.write("decision", token=token, epoch=epoch, result=name, detail=detail)


def _fence(proof: LeaderProof) -> CheckpointAssignmentFence:
    """A canonical fence whose roster holds the proof's node and boot (the outcome shape rule)."""
    roster = (FenceParticipant(node_id=proof.owner.node_id, boot_incarnation=proof.owner.boot_id),)
    return CheckpointAssignmentFence(
        assignment_version=1, vnode_count=256, assignment_digest=FENCE_DIGEST, participants=roster
    )


async def _stop_later(contender: _Contender) -> None:
    await contender.pause(contender.stop_at - contender.clock.monotonic())
    _stop(contender, f"ran {contender.config.stop_after_s} s")


def _stop(contender: _Contender, reason: str) -> None:
    """Stop: log `stop` and shut down; while a decision attempt is in flight, only once its
    result is logged (so a log ends with `stop` and `ended`, every attempt's result before)."""
    if contender.shutdown.is_set():
        return
    if contender.deciding:
        contender.stop_reason = reason
        return
    contender.log.write("stop", reason=reason)
    contender.shutdown.set()


async def _contend(config: ContenderConfig) -> int:
    clock = RealClock()
    log = EventLog(config.log_path, clock)
    try:
        requests = CountingStore(open_store(config.store_url))
    except LaminarError as error:  # a malformed URL: refused like a failing store
        return _refuse(config, log, error)
    try:
        return await _run(config, clock, log, requests)
    finally:
        await requests.close()
        log.close()


def _refuse(config: ContenderConfig, log: EventLog, error: LaminarError) -> int:
    """Refuse a store that cannot be opened or fails its contract probe (LA-12): exit 2."""
    log.write("refused", reason=str(error)[:1000])
    print(f"contender {config.node_id}: refusing the store: {error}", file=sys.stderr, flush=True)
    return EXIT_STORE_REFUSED


async def _run(config: ContenderConfig, clock: Clock, log: EventLog, store: CountingStore) -> int:
    try:
        await verify_store_contract(store, clock, timeout_s=PROBE_TIMEOUT_S)  # LA-12
    except LaminarError as error:
        return _refuse(config, log, error)
    owner = LeaderLeaseOwner(
        node=config.node_id,
        boot=str(clock.uuid4()),
        process_term=next_process_term(f"{config.log_path}.process-term"),
    )
    decisions = DecisionStore.shared(store, clock=clock)
    timed = _TimedAuthority(
        LeaderLeaseStore(store, clock=clock, ttl_s=config.ttl_s, decisions=decisions), clock
    )
    contender = _Contender(
        config=config,
        clock=clock,
        log=log,
        timed=timed,
        owner=owner,
        requests=store,
        stop_at=clock.monotonic() + config.stop_after_s,
    )
    fields = {"pid": os.getpid(), "node": owner.node, "boot": owner.boot}
    log.write("start", process_term=owner.process_term, ttl_s=config.ttl_s, **fields)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _stop, contender, signum.name)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(_lead(contender))
            group.create_task(_watch_beliefs(contender))
            group.create_task(_stop_later(contender))
            group.create_task(_log_requests(contender))
            if config.decisions:
                group.create_task(_decide(contender))
    except Exception as error:  # a bug: log it where the checker looks, then fail loudly
        log.write("crash", error=repr(error)[:2000])
        raise
    contender.end_belief()
    return EXIT_OK


def run_contender(
    store_url: str,
    node_id: int,
    *,
    ttl_s: float,
    renew_interval_s: float,
    log_path: str,
    decisions: bool,
    stop_after_s: float,
    decision_think_s: float = 0.0,
) -> int:
    """Contend for leadership on `store_url` until `stop_after_s` passes or SIGTERM/SIGINT
    arrives; return the exit code (0, or 2 when the store is refused). `decision_think_s`: a
    random pause of up to this long between taking a proof and recording with it (a leader's
    work between the two), which widens the window a SIGSTOP can land in."""
    config = ContenderConfig(
        store_url, node_id, ttl_s, renew_interval_s, log_path, decisions, stop_after_s
    )
    return asyncio.run(_contend(replace(config, decision_think_s=decision_think_s)))


def contender_process(store_url: str, node_id: int, **options: Any) -> None:
    """A multiprocessing (spawn) target: `run_contender`, its result as the exit code."""
    sys.exit(run_contender(store_url, node_id, **options))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m laminar_cluster.harness.contender")
    parser.add_argument("--store", required=True)
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--ttl", type=float, required=True)
    parser.add_argument("--renew", type=float, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--stop-after", type=float, required=True)
    parser.add_argument("--decisions", action="store_true", help="record Aborts while leader")
    parser.add_argument("--think", type=float, default=0.0, help="max s from proof to record")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    contender_process(
        args.store,
        args.node,
        ttl_s=args.ttl,
        renew_interval_s=args.renew,
        log_path=args.log,
        decisions=args.decisions,
        stop_after_s=args.stop_after,
        decision_think_s=args.think,
    )


if __name__ == "__main__":
    main()

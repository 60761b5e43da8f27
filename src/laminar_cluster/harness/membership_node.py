"""A minimal node process for the membership protocol (ML §1.3;
docs/protocols/membership.md), used by the real-process tests.

    python -m laminar_cluster.harness.membership_node --store URL --node-id N --ttl S --log PATH

It acquires the node's process lease (a new term), goes active, renews, polls discovery and
appends one JSON line to the log per event and per change of the view (`t_mono` is this host's
monotonic clock). SIGTERM leaves gracefully: draining, no vnodes owned (none yet: there is no
assignment in this process), left, exit 0. When a newer start of the same node id fences it,
it prints the newer term to stderr and exits 3 (ML-2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any, Final, TextIO

from laminar_cluster.clock import Clock, RealClock
from laminar_cluster.errors import DeadlineExceeded, StoreUnavailable
from laminar_cluster.membership.discovery import Discovery, MembershipView
from laminar_cluster.membership.leave import activate, keep_renewed, leave
from laminar_cluster.membership.process_lease import ProcessFenced, ProcessLeaseHolder
from laminar_cluster.membership.records import NodeState
from laminar_cluster.store import open_store

EXIT_FENCED: Final = 3
LEAVE_TIMEOUT_S: Final = 30.0


class _Log:
    def __init__(self, stream: TextIO, clock: Clock, node: int) -> None:
        self._stream, self._clock, self._node = stream, clock, node

    def write(self, event: str, **fields: Any) -> None:
        line = {"t_mono": self._clock.monotonic(), "node": self._node, "event": event, **fields}
        self._stream.write(json.dumps(line, sort_keys=True) + "\n")
        self._stream.flush()


def _view_fields(view: MembershipView) -> dict[str, Any]:
    members = [
        {"node": m.node, "state": m.state.value, "term": m.term, "boot": m.boot}
        for m in view.members
    ]
    return {"members": members, "problems": list(view.problems)}


async def _discover(
    holder: ProcessLeaseHolder, discovery: Discovery, log: _Log, *, poll_s: float
) -> None:
    last: object = None
    while not holder.released:
        try:
            view = await discovery.poll(deadline=discovery.clock.monotonic() + 10 * poll_s)
        except (StoreUnavailable, DeadlineExceeded) as error:
            log.write("poll_failed", error=str(error))
        else:
            if view.signature() != last:
                last = view.signature()
                log.write("view", **_view_fields(view))
        await discovery.clock.sleep(poll_s)


async def _leave_on_request(
    holder: ProcessLeaseHolder, clock: Clock, requested: asyncio.Event, log: _Log
) -> None:
    await requested.wait()
    log.write("leaving")

    async def owns_vnodes() -> bool:
        return False  # no assignment in this process yet

    def on_state(state: NodeState) -> None:
        log.write(state.value, term=holder.record.lease.term)

    deadline = clock.monotonic() + LEAVE_TIMEOUT_S
    await leave(holder, owns_vnodes, clock=clock, deadline=deadline, on_state=on_state)


async def run_node(args: argparse.Namespace, stream: TextIO) -> int:
    clock = RealClock()
    store = open_store(args.store)
    log = _Log(stream, clock, args.node_id)
    holder = ProcessLeaseHolder(store, clock, args.node_id, ttl_s=args.ttl)
    acquired = await holder.acquire(deadline=clock.monotonic() + LEAVE_TIMEOUT_S)
    predecessor = acquired.predecessor
    log.write(
        "acquired",
        term=acquired.record.lease.term,
        boot=acquired.record.lease.owner,
        predecessor_term=None if predecessor is None else predecessor.lease.term,
    )
    await activate(holder, deadline=clock.monotonic() + args.ttl)
    requested = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, requested.set)
    discovery = Discovery(store, clock)
    fenced: ProcessFenced | None = None
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(keep_renewed(holder, clock, interval_s=args.renew))
            group.create_task(_discover(holder, discovery, log, poll_s=args.poll))
            group.create_task(_leave_on_request(holder, clock, requested, log))
    except* ProcessFenced as group_error:
        first = group_error.exceptions[0]
        assert isinstance(first, ProcessFenced)
        fenced = first
    finally:
        await store.close()
    if fenced is not None:
        log.write("fenced", error=str(fenced))
        print(f"laminar node {args.node_id}: FENCED: {fenced}; stopping", file=sys.stderr)
        return EXIT_FENCED
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="laminar-cluster-node")
    parser.add_argument("--store", required=True)
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--ttl", type=float, default=2.0, help="process lease ttl, seconds")
    parser.add_argument("--renew", type=float, default=None, help="default ttl / 4")
    parser.add_argument("--poll", type=float, default=None, help="default ttl / 4")
    parser.add_argument("--log", type=Path, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.renew = args.renew or args.ttl / 4
    args.poll = args.poll or args.ttl / 4
    with args.log.open("a", encoding="utf-8") as stream:
        return asyncio.run(run_node(args, stream))


if __name__ == "__main__":
    sys.exit(main())

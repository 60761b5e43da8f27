"""`laminar-cluster demo`: the main job, grown issue by issue.

Today it shows, on a real store (a fresh local directory unless `--store` names one):
1. the store contract probe;
2. several processes that share one counter object only through conditional writes and end at
   exactly the expected count;
3. leader election: three contender processes, the leader SIGKILLed twice, the time until a new
   leader holds a proof, and the cost of a renewal.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import tempfile
import time
import uuid

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from laminar_cluster.cli.output import console, run_on_store
from laminar_cluster.cli.store_check import print_report
from laminar_cluster.clock import RealClock
from laminar_cluster.errors import PreconditionFailed
from laminar_cluster.store import CREATE, ObjectStore, open_store
from laminar_cluster.store.probe import probe_store_contract

COUNTER_KEY = "demo/counter.json"
PROCESSES = 4
INCREMENTS_PER_PROCESS = 250
ATTEMPTS_MAX = 100_000


def run_demo(store_url: str | None) -> int:
    if store_url is None:
        store_url = f"file://{tempfile.mkdtemp(prefix='laminar-demo-')}"
    console.rule("[bold]laminar-cluster demo")
    console.print(f"store: {store_url}")
    report = run_on_store(
        store_url, lambda store: probe_store_contract(store, RealClock(), timeout_s=30)
    )
    print_report(report)
    if not report.ok:
        return 1
    if _counter_demo(store_url) != 0:
        return 1
    return _election_demo(store_url)


def _election_demo(store_url: str) -> int:
    from laminar_cluster.cli.bench_failover import run_bench_failover

    ttl_s, renew_s = 2.0, 0.5
    console.print(
        f"\nleader election: 3 contender processes (TTL {ttl_s} s, renewal every {renew_s} s); "
        "the leader is SIGKILLed twice"
    )
    figures = run_bench_failover(store_url, rounds=2, ttl_s=ttl_s, renew_interval_s=renew_s)
    failovers = ", ".join(f"{sample:.2f} s" for sample in figures["failover_s"])
    console.print(
        f"a new leader held a proof {failovers} after each kill (the takeover rule's floor is "
        f"{figures['floor_s']:.2f} s); every new term was granted after the killed leader's "
        f"deadline (margin >= {figures['s8_margin_min_s']:.3f} s); "
        f"{figures['requests_per_renewal']} store requests per renewal"
    )
    if figures["s8_margin_min_s"] <= 0:
        console.print("[red]FAILED: a new leader was granted before the old one's deadline[/red]")
        return 1
    console.print("[green]one leader at a time, fenced by its token[/green]")
    return 0


def _counter_demo(store_url: str) -> int:
    total = PROCESSES * INCREMENTS_PER_PROCESS
    key = f"demo/{uuid.uuid4().hex}/counter.json"
    asyncio.run(open_store(store_url).put(key, _body(0), CREATE))
    console.print(
        f"\n{PROCESSES} processes each add {INCREMENTS_PER_PROCESS} to one counter object, "
        "sharing nothing but conditional writes to the store"
    )
    context = multiprocessing.get_context("spawn")  # obstore is not fork-safe
    started = time.monotonic()
    with context.Pool(PROCESSES) as pool:
        pending = pool.starmap_async(
            increment_worker, [(store_url, key, INCREMENTS_PER_PROCESS)] * PROCESSES
        )
        with Progress(
            TextColumn("counter"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            task = progress.add_task("counter", total=total)
            while not pending.ready():
                progress.update(task, completed=asyncio.run(_read_counter(store_url, key)))
                pending.wait(0.2)
            progress.update(task, completed=asyncio.run(_read_counter(store_url, key)))
        conflicts = sum(pending.get())
    elapsed = time.monotonic() - started
    final = asyncio.run(_read_counter(store_url, key))
    console.print(
        f"final value {final} (expected {total}); {conflicts} lost compare-and-swap races retried; "
        f"{total / elapsed:.0f} increments/s"
    )
    if final != total:
        console.print("[red]FAILED: the counter does not match[/red]")
        return 1
    console.print("[green]exact: no increment lost, none applied twice[/green]")
    return 0


def increment_worker(store_url: str, key: str, increments: int) -> int:
    """Add `increments` to the counter by read, then update-if-match; return conflicts seen."""
    return asyncio.run(_increment(open_store(store_url), key, increments))


async def _increment(store: ObjectStore, key: str, increments: int) -> int:
    done = conflicts = 0
    for _ in range(ATTEMPTS_MAX):
        if done == increments:
            return conflicts
        current = await store.get(key)
        value = json.loads(current.body)["value"]
        try:
            await store.put(key, _body(value + 1), current.meta.token)
        except PreconditionFailed:
            conflicts += 1
            continue
        done += 1
    raise RuntimeError(f"{key}: {increments - done} increments left after {ATTEMPTS_MAX} attempts")


async def _read_counter(store_url: str, key: str) -> int:
    return int(json.loads((await open_store(store_url).get(key)).body)["value"])


def _body(value: int) -> bytes:
    return json.dumps({"value": value, "nonce": uuid.uuid4().hex}).encode()

"""The `laminar-cluster` command line."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Annotated

import typer

from laminar_cluster.errors import InvalidArgument, LaminarError
from laminar_cluster.views.output import console, error_console, print_json

app = typer.Typer(
    name="laminar-cluster",
    help="Cluster control plane for exactly-once stream processing over an object store.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Benchmarks: each prints its figures (JSON with --json).")
app.add_typer(bench_app, name="bench")

StoreOption = Annotated[
    str,
    typer.Option(
        "--store",
        help="Store URL: memory://, file:///abs/path, s3://bucket/prefix?endpoint=..., gs://, az://",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


@app.command("store-check")
def store_check(
    url: Annotated[str, typer.Argument(help="Store URL to probe.")],
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds for the probe.")] = 30.0,
    as_json: JsonOption = False,
) -> None:
    """Probe a store for the properties the control plane needs; exit 1 if any fails."""
    from laminar_cluster.cli.store_check import run_store_check

    raise typer.Exit(_guard(lambda: run_store_check(url, timeout_s=timeout_s, as_json=as_json)))


@bench_app.command("store")
def bench_store(
    store: StoreOption,
    ops: Annotated[int, typer.Option("--ops", min=1, help="Requests per operation kind.")] = 500,
    as_json: JsonOption = False,
) -> None:
    """Operations per second and p50/p99 latency of create, get and conditional update."""
    from laminar_cluster.bench.store import run_bench_store

    def run() -> int:
        figures = run_bench_store(store, ops=ops)
        if as_json:
            print_json(figures)
        else:
            console.print(f"store {figures['store']}, {figures['payload_bytes']}-byte bodies")
            for name, row in figures["results"].items():
                console.print(
                    f"  {name:<20} {row['ops_per_s']:>10.1f} ops/s   "
                    f"p50 {row['p50_ms']:8.3f} ms   p99 {row['p99_ms']:8.3f} ms"
                )
        return 0

    raise typer.Exit(_guard(run))


@app.command("checkpoints")
def checkpoints(store: StoreOption, as_json: JsonOption = False) -> None:
    """The checkpoint decision store, audited: identity, mode, floor, outcomes; exit 1 on a bad
    record (never creates anything)."""
    from laminar_cluster.cli.checkpoints import run_checkpoints

    raise typer.Exit(_guard(lambda: run_checkpoints(store, as_json=as_json)))


@app.command("lease")
def lease(store: StoreOption, as_json: JsonOption = False) -> None:
    """The leader lease: owner, token, renewal sequence, sequence, age and (diagnostic) validity.
    Read-only."""
    from laminar_cluster.cli.lease_view import run_lease

    raise typer.Exit(_guard(lambda: run_lease(store, as_json=as_json)))


@app.command("authority")
def authority(store: StoreOption, as_json: JsonOption = False) -> None:
    """Audit the whole leader authority log and print its decisions; exit 1 naming the record on
    any violation. Read-only."""
    from laminar_cluster.cli.lease_view import run_authority

    raise typer.Exit(_guard(lambda: run_authority(store, as_json=as_json)))


@app.command("members")
def members(store: StoreOption, as_json: JsonOption = False) -> None:
    """Cluster members: node, state, term, boot, last renewal age. Read-only."""
    from laminar_cluster.cli.members import run_members

    raise typer.Exit(_guard(lambda: run_members(store, as_json=as_json)))


@app.command("assignment")
def assignment(
    store: StoreOption,
    version: Annotated[
        int | None, typer.Option("--version", min=1, help="A version (default: the current one).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """The vnode assignment: version, draining or committed, vnodes per node and a 256-cell map.
    Read-only; exit 1 naming the object on a bad record."""
    from laminar_cluster.cli.assignment_view import run_assignment

    raise typer.Exit(_guard(lambda: run_assignment(store, version=version, as_json=as_json)))


@app.command("status")
def status(
    store: StoreOption,
    as_json: JsonOption = False,
    watch: Annotated[bool, typer.Option("--watch", help="Redraw until Ctrl-C.")] = False,
    interval_s: Annotated[
        float, typer.Option("--interval", help="Seconds between redraws with --watch.")
    ] = 2.0,
) -> None:
    """Leader and token, members, assignment and vnodes per node, last committed checkpoint,
    source lag. Read-only."""
    from laminar_cluster.cli.status import run_status

    raise typer.Exit(
        _guard(lambda: run_status(store, as_json=as_json, watch=watch, interval_s=interval_s))
    )


@app.command("console")
def console_command(
    store: StoreOption,
    host: Annotated[str, typer.Option("--host", help="Address to serve the page on.")] = (
        "127.0.0.1"
    ),
    port: Annotated[
        int, typer.Option("--port", min=0, max=65_535, help="Port (0: a free one, printed).")
    ] = 8080,
    refresh_s: Annotated[
        float,
        typer.Option("--refresh", min=0.1, help="Read the store at most this often, seconds."),
    ] = 1.0,
) -> None:
    """A read-only web page of the cluster, live: leader and tokens, members, vnode heatmap,
    rotations, checkpoints, source lag, store request rates. Reads only the store."""
    from laminar_cluster.cli.console import run_console

    raise typer.Exit(_guard(lambda: run_console(store, host=host, port=port, refresh_s=refresh_s)))


SeedOption = Annotated[int, typer.Option("--seed", min=0, help="Workload seed.")]
KeysOption = Annotated[int, typer.Option("--keys", min=1, help="Distinct keys.")]


@app.command("produce")
def produce(
    store: StoreOption,
    events: Annotated[int, typer.Option("--events", min=0, help="Events in the workload.")],
    partitions: Annotated[int, typer.Option("--partitions", min=1, help="Log partitions.")],
    keys: KeysOption,
    seed: SeedOption,
    batch_events: Annotated[int, typer.Option("--batch-events", help="Events per batch.")] = 5000,
    concurrency: Annotated[int, typer.Option("--concurrency", help="Partitions at once.")] = 32,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds for it all.")] = 3600.0,
    as_json: JsonOption = False,
) -> None:
    """Append the deterministic workload to the event log (resumes after what is there)."""
    from laminar_cluster.cli.produce import run_produce
    from laminar_cluster.harness.workload import Workload

    raise typer.Exit(
        _guard(
            lambda: run_produce(
                store,
                workload=Workload(seed=seed, events=events, partitions=partitions, keys=keys),
                batch_events=batch_events,
                concurrency=concurrency,
                timeout_s=timeout_s,
                as_json=as_json,
            )
        )
    )


@app.command("output")
def output(
    store: StoreOption,
    events: Annotated[
        int | None, typer.Option("--events", min=0, help="Check against this workload.")
    ] = None,
    partitions: Annotated[int, typer.Option("--partitions", min=1)] = 64,
    keys: KeysOption = 10_000,
    seed: SeedOption = 0,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds for the read.")] = 300.0,
    as_json: JsonOption = False,
) -> None:
    """Committed totals of the reference aggregation (events, keys, attempts); with --events
    (and --seed/--keys/--partitions), exit 1 unless every event is counted exactly once."""
    from laminar_cluster.cli.produce import run_output
    from laminar_cluster.harness.workload import Workload

    def run() -> int:
        expect = None if events is None else Workload(seed, events, partitions, keys)
        return run_output(store, expect=expect, timeout_s=timeout_s, as_json=as_json)

    raise typer.Exit(_guard(run))


@bench_app.command("checkpoint-ids")
def bench_checkpoint_ids(
    store: StoreOption,
    local_ids: Annotated[int, typer.Option(min=1, help="Local-mode allocations.")] = 500_000,
    shared_ids: Annotated[int, typer.Option(min=1, help="Shared-mode allocations.")] = 300,
    outcomes: Annotated[int, typer.Option(min=1, help="Outcomes recorded.")] = 300,
    as_json: JsonOption = False,
) -> None:
    """Checkpoint ID allocation rates (local and shared mode), store requests per allocation,
    and outcome record latency."""
    from laminar_cluster.bench.checkpoint_ids import run_bench_checkpoint_ids

    def run() -> int:
        figures = run_bench_checkpoint_ids(
            store, local_ids=local_ids, shared_ids=shared_ids, outcomes=outcomes
        )
        if as_json:
            print_json(figures)
        else:
            for name, value in figures.items():
                console.print(f"{name:<40} {value}")
        return 0

    raise typer.Exit(_guard(run))


@bench_app.command("failover")
def bench_failover(
    store: StoreOption,
    rounds: Annotated[int, typer.Option(min=1, help="Leader kills to time.")] = 10,
    ttl_s: Annotated[float, typer.Option("--ttl", help="Lease TTL in seconds.")] = 3.0,
    renew_s: Annotated[float, typer.Option("--renew", help="Renewal interval in seconds.")] = 1.0,
    as_json: JsonOption = False,
) -> None:
    """SIGKILL the leader of 3 contender processes repeatedly; time each failover to the first
    proof granted to a new leader; store requests per renewal in steady state."""
    from laminar_cluster.bench.failover import run_bench_failover

    def run() -> int:
        figures = run_bench_failover(store, rounds=rounds, ttl_s=ttl_s, renew_interval_s=renew_s)
        if as_json:
            print_json(figures)
        else:
            for name, value in figures.items():
                if name != "failover_s":
                    console.print(f"{name:<32} {value}")
        return 0

    raise typer.Exit(_guard(run))


@app.command("node")
def node(
    store: StoreOption,
    node_id: Annotated[int, typer.Option("--node-id", min=1, help="This node's id.")],
    ttl_s: Annotated[
        float, typer.Option("--ttl", help="Process and leader lease ttl, seconds.")
    ] = 5.0,
    poll_s: Annotated[
        float, typer.Option("--poll", help="Discovery refresh and watcher tick, seconds.")
    ] = 2.0,
    debounce_s: Annotated[
        float, typer.Option("--debounce", help="Quiet period after a membership change.")
    ] = 5.0,
    checkpoint_interval_s: Annotated[
        float,
        typer.Option("--checkpoint-interval", help="Leader's periodic checkpoint, seconds."),
    ] = 1.0,
    checkpoint_timeout_s: Annotated[
        float,
        typer.Option("--checkpoint-timeout", help="Budget of one cluster checkpoint, seconds."),
    ] = 15.0,
    retry_delay_s: Annotated[
        float, typer.Option("--retry-delay", help="Pause after a failed rebalance attempt.")
    ] = 2.0,
    drain_ack_timeout_s: Annotated[
        float, typer.Option("--drain-ack-timeout", help="Wait for the drain ack quorum.")
    ] = 10.0,
    leave_timeout_s: Annotated[
        float, typer.Option("--leave-timeout", help="Graceful leave budget, seconds.")
    ] = 120.0,
    stats_interval_s: Annotated[
        float,
        typer.Option("--stats-interval", help="Log store request counters this often (0: off)."),
    ] = 0.0,
    checkpoint_poll_s: Annotated[
        float,
        typer.Option(
            "--checkpoint-poll",
            help="Participant's prepare and decision poll, leader's ack poll, seconds.",
        ),
    ] = 0.05,
    prepare_timeout_s: Annotated[
        float,
        typer.Option("--prepare-timeout", help="Participant: cut and writes of one attempt."),
    ] = 10.0,
    decision_timeout_s: Annotated[
        float,
        typer.Option("--decision-timeout", help="Participant: one wait for an outcome."),
    ] = 30.0,
    source_idle_s: Annotated[
        float,
        typer.Option(
            "--source-idle",
            help="Engine's wait before reading the event log again when it was caught up.",
        ),
    ] = 0.02,
    vnode_count: Annotated[
        int,
        typer.Option(
            "--vnodes",
            min=1,
            help="Vnodes of the cluster (every node of a store must use the same count).",
        ),
    ] = 256,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=0,
            help="Serve /metrics, /livez and /readyz on --metrics-host:PORT (0: a free port, "
            "logged).",
        ),
    ] = None,
    metrics_host: Annotated[
        str,
        typer.Option("--metrics-host", help="Address of the metrics and health endpoint."),
    ] = "127.0.0.1",
    fault_rate: Annotated[
        float,
        typer.Option(
            "--fault-rate",
            min=0.0,
            max=0.5,
            hidden=True,
            help="Development: each store request fails before (and each write also after) "
            "it applied with this probability.",
        ),
    ] = 0.0,
    fault_latency_ms: Annotated[
        float,
        typer.Option(
            "--fault-latency-ms",
            min=0.0,
            hidden=True,
            help="Development: each store request first waits up to this long.",
        ),
    ] = 0.0,
    fault_seed: Annotated[
        int, typer.Option("--fault-seed", min=0, hidden=True, help="Development: fault seed.")
    ] = 0,
    fault_outages: Annotated[
        list[str] | None,
        typer.Option(
            "--fault-outage",
            hidden=True,
            help="Development: START:END seconds after the start, every store request fails "
            "(repeatable).",
        ),
    ] = None,
    exit_on_fence: Annotated[
        bool,
        typer.Option(
            "--exit-on-fence",
            envvar="LAMINAR_EXIT_ON_FENCE",
            help="Exit 3 when fenced (for an outside supervisor) instead of rejoining with a new "
            "term once the store answers.",
        ),
    ] = False,
) -> None:
    """Run one node (control plane, distributed checkpoints, the reference engine over the
    event log) until SIGTERM/SIGINT (the first leaves gracefully, a second stops at once).
    JSON-lines events on stderr."""
    from laminar_cluster.cli.node import run_node_command
    from laminar_cluster.rebalance.node.rebalance_node import NodeConfig
    from laminar_cluster.runtime.engine_types import EngineConfig
    from laminar_cluster.runtime.node import StreamNodeConfig
    from laminar_cluster.store.faulty import FaultConfig

    def run() -> int:
        config = NodeConfig(
            node_id=node_id,
            ttl_s=ttl_s,
            poll_s=poll_s,
            debounce_s=debounce_s,
            checkpoint_interval_s=checkpoint_interval_s,
            retry_delay_s=retry_delay_s,
            drain_ack_timeout_s=drain_ack_timeout_s,
            checkpoint_timeout_s=checkpoint_timeout_s,
            leave_timeout_s=leave_timeout_s,
            stats_interval_s=stats_interval_s,
            vnode_count=vnode_count,
            exit_on_fence=exit_on_fence,
        )
        faults = None
        outages = tuple(_outage(text) for text in fault_outages or ())
        if fault_rate > 0 or fault_latency_ms > 0 or outages:
            faults = FaultConfig(
                error_before_rate=fault_rate,
                error_after_rate=fault_rate,
                latency_s_max=fault_latency_ms / 1000,
                outages=outages,
            )
        stream = StreamNodeConfig(
            engine=EngineConfig(idle_s=source_idle_s),
            checkpoint_poll_s=checkpoint_poll_s,
            prepare_timeout_s=prepare_timeout_s,
            decision_timeout_s=decision_timeout_s,
        )
        return run_node_command(
            store,
            config,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            stream=stream,
            faults=faults,
            fault_seed=fault_seed,
        )

    raise typer.Exit(_guard(run))


@bench_app.command("rebalance")
def bench_rebalance(
    store: Annotated[
        str | None,
        typer.Option("--store", help="Store URL (default: a fresh local directory)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """A join (4 -> 5 nodes) and a graceful leave (5 -> 4) of real node processes: vnodes moved
    against the rendezvous minimum, time to every node running the new assignment, store
    requests per rotation."""
    from laminar_cluster.bench.rebalance import print_figures, run_bench_rebalance

    def run() -> int:
        figures = run_bench_rebalance(store)
        print_figures(figures, as_json=as_json)
        return 0

    raise typer.Exit(_guard(run))


@bench_app.command("pipeline")
def bench_pipeline(
    events: Annotated[int, typer.Option("--events", min=1, help="Events per run.")] = 1_000_000,
    partitions: Annotated[int, typer.Option("--partitions", min=1)] = 64,
    keys: Annotated[int, typer.Option("--keys", min=1)] = 10_000,
    nodes: Annotated[
        str, typer.Option("--nodes", help="Node counts to run, comma-separated.")
    ] = "1,2,4",
    fsync: Annotated[bool, typer.Option("--fsync/--no-fsync", help="fsync the file store.")] = True,
    as_json: JsonOption = False,
) -> None:
    """Real node processes on file://: committed events per second for 1, 2 and 4 nodes,
    checkpoint duration p50/p99, store requests per checkpoint, recovery time after a SIGKILL."""
    from laminar_cluster.bench.pipeline import print_pipeline, run_bench_pipeline

    def run() -> int:
        try:
            counts = tuple(int(part) for part in nodes.split(","))
        except ValueError:
            raise InvalidArgument(f"--nodes {nodes!r}: not comma-separated integers") from None
        figures = run_bench_pipeline(
            events=events, partitions=partitions, keys=keys, node_counts=counts, fsync=fsync
        )
        print_pipeline(figures, as_json=as_json)
        return 0

    raise typer.Exit(_guard(run))


@bench_app.command("cost")
def bench_cost(
    store: StoreOption,
    idle_s: Annotated[
        float, typer.Option("--idle-s", min=0.1, help="Seconds of the idle phase.")
    ] = 60.0,
    busy_s: Annotated[
        float, typer.Option("--busy-s", min=0.1, help="Seconds of the busy phase.")
    ] = 60.0,
    checkpoint_interval_s: Annotated[
        float,
        typer.Option("--checkpoint-interval", min=0.1, help="The nodes' checkpoint interval."),
    ] = 10.0,
    partitions: Annotated[
        int, typer.Option("--partitions", min=1, help="Event log partitions (p feeds p % 256).")
    ] = 256,
    events_per_s: Annotated[
        int, typer.Option("--events-per-s", min=1, help="Busy phase: events appended per second.")
    ] = 1_000,
    batch_s: Annotated[
        float,
        typer.Option("--batch-s", min=0.1, help="Busy phase: one batch per partition this often."),
    ] = 5.0,
    put_price: Annotated[
        float,
        typer.Option(
            "--put-price", min=0.0, help="Dollars per 1,000 PUT, POST, LIST (and delete)."
        ),
    ] = 0.005,
    get_price: Annotated[
        float, typer.Option("--get-price", min=0.0, help="Dollars per 1,000 GET and HEAD.")
    ] = 0.0004,
    node_options: Annotated[
        list[str] | None,
        typer.Option(
            "--node-option",
            help="One more `node` flag or value for every node (repeat: --node-option=--ttl "
            "--node-option=10).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """3 real node processes on an empty store: store requests per second by kind and protocol
    and the monthly price per node, idle and busy, and requests per checkpoint."""
    from laminar_cluster.bench.cost import CostPlan, print_cost, run_bench_cost
    from laminar_cluster.bench.cost_figures import Prices

    def run() -> int:
        prices = Prices(put_per_1000=put_price, get_per_1000=get_price)
        plan = CostPlan(idle_s, busy_s, checkpoint_interval_s, partitions, events_per_s, batch_s)
        plan = dataclasses.replace(plan, prices=prices, node_options=tuple(node_options or ()))
        print_cost(run_bench_cost(store, plan), as_json=as_json)
        return 0

    raise typer.Exit(_guard(run))


@app.command("demo")
def demo(
    store: Annotated[
        str | None,
        typer.Option("--store", help="Store URL (default: a fresh local directory)."),
    ] = None,
    events: Annotated[int, typer.Option("--events", min=1, help="Events in the workload.")] = (
        1_000_000
    ),
    partitions: Annotated[
        int, typer.Option("--partitions", min=1, help="Event log partitions.")
    ] = 64,
    keys: Annotated[int, typer.Option("--keys", min=1, help="Distinct keys.")] = 10_000,
    vnode_count: Annotated[
        int,
        typer.Option(
            "--vnodes",
            min=1,
            help="Vnodes of the demo cluster. A checkpoint writes and verifies one partial per "
            "vnode: fewer suit a slow store (the moto S3 test server).",
        ),
    ] = 256,
    as_json: JsonOption = False,
) -> None:
    """The main job: 3 stream nodes, a known workload, a join, a SIGKILLed leader and a graceful
    leave; exit 0 only if every event is committed exactly once."""
    from laminar_cluster.cli.demo import run_demo

    raise typer.Exit(
        _guard(
            lambda: run_demo(
                store,
                events=events,
                partitions=partitions,
                keys=keys,
                vnode_count=vnode_count,
                as_json=as_json,
            )
        )
    )


def _outage(text: str) -> tuple[float, float]:
    """`START:END` seconds as a window (InvalidArgument unless 0 <= START < END)."""
    start, _, end = text.partition(":")
    try:
        window = (float(start), float(end))
    except ValueError:
        raise InvalidArgument(f"--fault-outage {text!r}: not START:END in seconds") from None
    if not 0 <= window[0] < window[1] < math.inf:
        raise InvalidArgument(f"--fault-outage {text!r}: needs 0 <= START < END")
    return window


def _guard(action: Callable[[], int]) -> int:
    """Run a command body; report our own errors as one line and exit 2."""
    try:
        return action()
    except InvalidArgument as error:
        error_console.print(f"[red]invalid argument:[/red] {error}")
        return 2
    except LaminarError as error:
        error_console.print(f"[red]{type(error).__name__}:[/red] {error}")
        return 2


def main() -> None:
    app()

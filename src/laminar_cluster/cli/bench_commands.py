"""The `laminar-cluster bench ...` commands: each prints its figures (JSON with --json)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer

from laminar_cluster.cli.app import (
    KEYS_DEFAULT,
    PARTITIONS_DEFAULT,
    JsonOption,
    KeysOption,
    PartitionsOption,
    StoreOption,
    bench_app,
    guard,
)
from laminar_cluster.cli.config import ConfigOption, option
from laminar_cluster.errors import InvalidArgument
from laminar_cluster.views.output import console, print_json


@bench_app.command("store")
def bench_store(
    store: StoreOption,
    ops: Annotated[int, option("--ops", min=1, help="Requests per operation kind.")] = 500,
    as_json: JsonOption = False,
    config: ConfigOption = None,
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

    raise typer.Exit(guard(run))


@bench_app.command("checkpoint-ids")
def bench_checkpoint_ids(
    store: StoreOption,
    local_ids: Annotated[int, option("--local-ids", min=1, help="Local-mode allocations.")] = (
        500_000
    ),
    shared_ids: Annotated[
        int, option("--shared-ids", min=1, help="Shared-mode allocations.")
    ] = 300,
    outcomes: Annotated[int, option("--outcomes", min=1, help="Outcomes recorded.")] = 300,
    as_json: JsonOption = False,
    config: ConfigOption = None,
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

    raise typer.Exit(guard(run))


@bench_app.command("failover")
def bench_failover(
    store: StoreOption,
    rounds: Annotated[int, option("--rounds", min=1, help="Leader kills to time.")] = 10,
    ttl_s: Annotated[float, option("--ttl", help="Lease TTL in seconds.")] = 3.0,
    renew_s: Annotated[float, option("--renew", help="Renewal interval in seconds.")] = 1.0,
    as_json: JsonOption = False,
    config: ConfigOption = None,
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

    raise typer.Exit(guard(run))


@bench_app.command("rebalance")
def bench_rebalance(
    store: Annotated[
        str | None, option("--store", help="Store URL (default: a fresh local directory).")
    ] = None,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """A join (4 -> 5 nodes) and a graceful leave (5 -> 4) of real node processes: vnodes moved
    against the rendezvous minimum, time to every node running the new assignment, store
    requests per rotation."""
    from laminar_cluster.bench.rebalance import print_figures, run_bench_rebalance

    def run() -> int:
        figures = run_bench_rebalance(store)
        print_figures(figures, as_json=as_json)
        return 0

    raise typer.Exit(guard(run))


@bench_app.command("pipeline")
def bench_pipeline(
    events: Annotated[int, option("--events", min=1, help="Events per run.")] = 1_000_000,
    partitions: PartitionsOption = PARTITIONS_DEFAULT,
    keys: KeysOption = KEYS_DEFAULT,
    nodes: Annotated[
        str | None,
        option("--nodes", help="Node counts to run, comma-separated (default 1,2,4; --job: 1)."),
    ] = None,
    fsync: Annotated[bool, option("--fsync/--no-fsync", help="fsync the file store.")] = True,
    job: Annotated[
        str | None,
        option(
            "--job",
            help="Run this job (count_sum, windowed, keyed_step or module:attribute) on nodes "
            "and Bytewax 0.21 on the same workload; print both and the ratio.",
        ),
    ] = None,
    bytewax: Annotated[
        bool, option("--bytewax/--no-bytewax", help="With --job: also measure Bytewax.")
    ] = True,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Real node processes on file://: committed events per second for 1, 2 and 4 nodes,
    checkpoint duration p50/p99, store requests per checkpoint, recovery time after a SIGKILL.
    With --job: a job on the nodes against Bytewax on the same workload, output verified."""

    def run() -> int:
        counts = _node_counts(nodes if nodes is not None else "1" if job else "1,2,4")
        if job is not None:
            from laminar_cluster.bench.pipeline_job import (
                print_pipeline_job,
                run_bench_pipeline_job,
            )

            figures = run_bench_pipeline_job(
                job,
                events=events,
                partitions=partitions,
                keys=keys,
                node_counts=counts,
                fsync=fsync,
                bytewax=bytewax,
            )
            print_pipeline_job(figures, as_json=as_json)
            return 0
        from laminar_cluster.bench.pipeline import print_pipeline, run_bench_pipeline

        figures = run_bench_pipeline(
            events=events, partitions=partitions, keys=keys, node_counts=counts, fsync=fsync
        )
        print_pipeline(figures, as_json=as_json)
        return 0

    raise typer.Exit(guard(run))


@bench_app.command("files")
def bench_files(
    files: Annotated[int, option("--files", min=1, help="Text files to count words in.")] = 32,
    lines: Annotated[int, option("--lines", min=1, help="Lines per file (5-15 words).")] = 8_000,
    nodes: Annotated[
        str, option("--nodes", help="Node counts to run, comma-separated (e.g. 1,2).")
    ] = "1",
    fsync: Annotated[bool, option("--fsync/--no-fsync", help="fsync the file store.")] = True,
    bytewax: Annotated[
        bool, option("--bytewax/--no-bytewax", help="Also measure Bytewax 0.21.")
    ] = True,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Word count over text files put into the store: the wordcount reference job on real
    node processes against Bytewax 0.21 over the same files, both verified; words/s and the
    ratio."""
    from laminar_cluster.bench.files_job import print_files, run_bench_files

    def run() -> int:
        figures = run_bench_files(
            files=files,
            lines=lines,
            node_counts=_node_counts(nodes),
            fsync=fsync,
            bytewax=bytewax,
        )
        print_files(figures, as_json=as_json)
        return 0

    raise typer.Exit(guard(run))


def _node_counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise InvalidArgument(f"--nodes {text!r}: not comma-separated integers") from None


def _positive(flag: str, text: str) -> Any:
    return option(flag, min=0.1, help=text)


IdleOption = Annotated[float, _positive("--idle-s", "Seconds of the idle phase.")]
BusyOption = Annotated[float, _positive("--busy-s", "Seconds of the busy phase.")]
CostCheckpointOption = Annotated[
    float, _positive("--checkpoint-interval", "The nodes' checkpoint interval, seconds.")
]
CostPartitionsOption = Annotated[
    int, option("--partitions", min=1, help="Event log partitions (partition p feeds p % 256).")
]
RateOption = Annotated[
    int, option("--events-per-s", min=1, help="Busy phase: events appended per second.")
]
BatchOption = Annotated[
    float, _positive("--batch-s", "Busy phase: one segment of every partition this often, seconds.")
]
PutPriceOption = Annotated[
    float, option("--put-price", min=0.0, help="Dollars per 1,000 PUT, POST, LIST (and delete).")
]
GetPriceOption = Annotated[
    float, option("--get-price", min=0.0, help="Dollars per 1,000 GET and HEAD.")
]
NodeOptionsOption = Annotated[
    list[str] | None,
    option(
        "--node-option",
        help="One more `node` flag or value for every node (repeat: --node-option=--ttl "
        "--node-option=10).",
    ),
]


@bench_app.command("cost")
def bench_cost(
    store: StoreOption,
    idle_s: IdleOption = 60.0,
    busy_s: BusyOption = 60.0,
    checkpoint_interval_s: CostCheckpointOption = 10.0,
    partitions: CostPartitionsOption = 256,
    events_per_s: RateOption = 1_000,
    batch_s: BatchOption = 5.0,
    put_price: PutPriceOption = 0.005,
    get_price: GetPriceOption = 0.0004,
    node_options: NodeOptionsOption = None,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """3 real node processes on an empty store: store requests per second by kind and protocol
    and the monthly price per node at S3 list prices, idle and busy, and requests per
    checkpoint."""
    from laminar_cluster.bench.cost import CostPlan, run_bench_cost
    from laminar_cluster.bench.cost_figures import Prices
    from laminar_cluster.bench.cost_report import print_cost

    def run() -> int:
        prices = Prices(put_per_1000=put_price, get_per_1000=get_price)
        plan = CostPlan(idle_s, busy_s, checkpoint_interval_s, partitions, events_per_s, batch_s)
        plan = dataclasses.replace(plan, prices=prices, node_options=tuple(node_options or ()))
        print_cost(run_bench_cost(store, plan), as_json=as_json)
        return 0

    raise typer.Exit(guard(run))

"""The read-only views, the workload commands and the demo of `laminar-cluster` (the node is
`cli.node_command`, the benchmarks `cli.bench_commands`)."""

from __future__ import annotations

from typing import Annotated

import typer

from laminar_cluster.cli.app import (
    KEYS_DEFAULT,
    PARTITIONS_DEFAULT,
    SEED_DEFAULT,
    JsonOption,
    KeysOption,
    PartitionsOption,
    SeedOption,
    StoreOption,
    app,
    guard,
    say_error,
)
from laminar_cluster.cli.config import ConfigOption, option
from laminar_cluster.connectors.eventlog_records import RECORD_PARTITIONS_DEFAULT

STORE_CHECK_POSITIONAL_NOTE = (
    "note: `store-check URL` is deprecated; write `store-check --store URL` like every other "
    "command"
)


@app.command("store-check")
def store_check(
    url: Annotated[
        str | None,
        typer.Argument(help="Deprecated: the store URL (use --store).", show_default=False),
    ] = None,
    store: Annotated[str | None, option("--store", help="Store URL to probe.")] = None,
    timeout_s: Annotated[float, option("--timeout", help="Seconds for the probe.")] = 30.0,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Probe a store for the properties the control plane needs; exit 1 if any fails."""
    from laminar_cluster.cli.store_check import run_store_check

    if url is not None and store is not None and url != store:
        say_error(f"two store URLs given: {url!r} and --store {store!r}; give one")
        raise typer.Exit(2)
    if url is not None:
        from laminar_cluster.views.output import error_console

        error_console.print(STORE_CHECK_POSITIONAL_NOTE, markup=False, soft_wrap=True)
    chosen = store or url
    if chosen is None:
        say_error("missing the store: give --store URL (or LAMINAR_STORE)")
        raise typer.Exit(2)
    raise typer.Exit(guard(lambda: run_store_check(chosen, timeout_s=timeout_s, as_json=as_json)))


@app.command("checkpoints")
def checkpoints(
    store: StoreOption, as_json: JsonOption = False, config: ConfigOption = None
) -> None:
    """The checkpoint outcomes, audited: cluster outcomes (in the leader authority log) and
    local ones (in the decision store), identity, floor; exit 1 on a bad record. Read-only."""
    from laminar_cluster.cli.checkpoints import run_checkpoints

    raise typer.Exit(guard(lambda: run_checkpoints(store, as_json=as_json)))


@app.command("lease")
def lease(store: StoreOption, as_json: JsonOption = False, config: ConfigOption = None) -> None:
    """The leader lease: owner, token, renewal sequence, sequence, age, and whether the head
    is stale (older than the lease ttl). Read-only."""
    from laminar_cluster.cli.lease_view import run_lease

    raise typer.Exit(guard(lambda: run_lease(store, as_json=as_json)))


@app.command("authority")
def authority(store: StoreOption, as_json: JsonOption = False, config: ConfigOption = None) -> None:
    """Audit the whole leader authority log and every reference its records make; print its
    decisions; exit 1 naming the bad object. Read-only."""
    from laminar_cluster.cli.lease_view import run_authority

    raise typer.Exit(guard(lambda: run_authority(store, as_json=as_json)))


@app.command("members")
def members(store: StoreOption, as_json: JsonOption = False, config: ConfigOption = None) -> None:
    """Cluster members: node, state (dead when not renewed within its ttl), term, boot, last
    renewal age. Read-only."""
    from laminar_cluster.cli.members import run_members

    raise typer.Exit(guard(lambda: run_members(store, as_json=as_json)))


@app.command("assignment")
def assignment(
    store: StoreOption,
    version: Annotated[
        int | None, option("--version", min=1, help="A version (default: the current one).")
    ] = None,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """The vnode assignment: version, draining or committed, vnodes per node and a 256-cell map.
    Read-only; exit 1 naming the object on a bad record."""
    from laminar_cluster.cli.assignment_view import run_assignment

    raise typer.Exit(guard(lambda: run_assignment(store, version=version, as_json=as_json)))


@app.command("status")
def status(
    store: StoreOption,
    as_json: JsonOption = False,
    watch: Annotated[bool, option("--watch", help="Redraw until Ctrl-C.")] = False,
    interval_s: Annotated[
        float, option("--interval", help="Seconds between redraws with --watch.")
    ] = 2.0,
    check: Annotated[
        bool,
        option("--check", help="Exit 1 (saying why) unless a live leader holds the cluster."),
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Leader and token (stale ones marked), members, assignment and vnodes per node, last
    committed checkpoint, source lag. Read-only; exit 1 on a bad record."""
    from laminar_cluster.cli.status import run_status

    raise typer.Exit(
        guard(
            lambda: run_status(
                store, as_json=as_json, watch=watch, interval_s=interval_s, check=check
            )
        )
    )


@app.command("console")
def console_command(
    store: StoreOption,
    host: Annotated[str, option("--host", help="Address to serve the page on.")] = "127.0.0.1",
    port: Annotated[
        int, option("--port", min=0, max=65_535, help="Port (0: a free one, printed).")
    ] = 8080,
    refresh_s: Annotated[
        float, option("--refresh", min=0.1, help="Read the store at most this often, seconds.")
    ] = 1.0,
    config: ConfigOption = None,
) -> None:
    """A read-only web page of the cluster, live: leader and tokens, members, vnode heatmap,
    rotations, checkpoints, source lag, store request rates. Reads only the store."""
    from laminar_cluster.cli.console import run_console

    raise typer.Exit(guard(lambda: run_console(store, host=host, port=port, refresh_s=refresh_s)))


ProducePartitionsOption = Annotated[
    int | None,
    option(
        "--partitions",
        min=1,
        help=f"Event log partitions (default {PARTITIONS_DEFAULT}; with --file "
        f"{RECORD_PARTITIONS_DEFAULT}, a multiple of 256).",
    ),
]


@app.command("produce")
def produce(
    store: StoreOption,
    events: Annotated[
        int | None, option("--events", min=0, help="Events in the workload (not with --file).")
    ] = None,
    partitions: ProducePartitionsOption = None,
    keys: KeysOption = KEYS_DEFAULT,
    seed: SeedOption = SEED_DEFAULT,
    batch_events: Annotated[
        int, option("--batch-events", help="Events per partition batch.")
    ] = 5000,
    file: Annotated[
        str | None,
        option("--file", help="Append the JSON objects of this JSON Lines file (- for stdin)."),
    ] = None,
    key_field: Annotated[
        str | None, option("--key", help="With --file: the field holding each event's key.")
    ] = None,
    from_line: Annotated[
        int, option("--from-line", min=1, help="With --file: skip the first N-1 lines.")
    ] = 1,
    timeout_s: Annotated[float, option("--timeout", help="Seconds for it all.")] = 3600.0,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Append the deterministic workload to the event log (resumes after what is there), or
    with --file the JSON objects of a JSON Lines file, keyed by the field --key."""
    if file is not None:
        if key_field is None or events is not None:
            say_error("--file needs --key FIELD, and takes no --events")
            raise typer.Exit(2)
        raise typer.Exit(
            guard(
                lambda: _produce_file(
                    store, file, key_field, partitions, from_line, timeout_s, as_json
                )
            )
        )
    if events is None:
        say_error("give --events N (the generated workload) or --file PATH --key FIELD")
        raise typer.Exit(2)
    from laminar_cluster.cli.produce import run_produce
    from laminar_cluster.harness.workload import Workload

    chosen = PARTITIONS_DEFAULT if partitions is None else partitions
    workload = Workload(seed=seed, events=events, partitions=chosen, keys=keys)
    raise typer.Exit(
        guard(
            lambda: run_produce(
                store,
                workload=workload,
                batch_events=batch_events,
                timeout_s=timeout_s,
                as_json=as_json,
            )
        )
    )


def _produce_file(
    store: str,
    file: str,
    key_field: str,
    partitions: int | None,
    from_line: int,
    timeout_s: float,
    as_json: bool,
) -> int:
    from laminar_cluster.cli.produce_file import run_produce_file

    return run_produce_file(
        store,
        path=file,
        key_field=key_field,
        partitions=RECORD_PARTITIONS_DEFAULT if partitions is None else partitions,
        from_line=from_line,
        timeout_s=timeout_s,
        as_json=as_json,
    )


@app.command("output")
def output(
    store: StoreOption,
    events: Annotated[
        int | None, option("--events", min=0, help="Check against this workload.")
    ] = None,
    partitions: PartitionsOption = PARTITIONS_DEFAULT,
    keys: KeysOption = KEYS_DEFAULT,
    seed: SeedOption = SEED_DEFAULT,
    timeout_s: Annotated[float, option("--timeout", help="Seconds for the read.")] = 300.0,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Committed totals of the reference aggregation (events, keys, attempts); with --events
    (and --seed/--keys/--partitions), exit 1 unless every event is counted exactly once."""
    from laminar_cluster.cli.produce import run_output
    from laminar_cluster.harness.workload import Workload

    def run() -> int:
        expect = None if events is None else Workload(seed, events, partitions, keys)
        return run_output(store, expect=expect, timeout_s=timeout_s, as_json=as_json)

    raise typer.Exit(guard(run))


@app.command("demo")
def demo(
    store: Annotated[
        str | None, option("--store", help="Store URL (default: a fresh local directory).")
    ] = None,
    events: Annotated[int, option("--events", min=1, help="Events in the workload.")] = 1_000_000,
    partitions: PartitionsOption = PARTITIONS_DEFAULT,
    keys: KeysOption = KEYS_DEFAULT,
    vnode_count: Annotated[
        int,
        option(
            "--vnodes",
            min=1,
            help="Vnodes of the demo cluster (a checkpoint writes one state object and one "
            "manifest per node, whatever the vnodes).",
        ),
    ] = 256,
    keep: Annotated[
        bool, option("--keep", help="Keep the scratch directory (node logs, local store).")
    ] = False,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """The main job: 3 stream nodes, a known workload, a join, a SIGKILLed leader and a graceful
    leave; exit 0 only if every event is committed exactly once."""
    from laminar_cluster.cli.demo import run_demo

    raise typer.Exit(
        guard(
            lambda: run_demo(
                store,
                events=events,
                partitions=partitions,
                keys=keys,
                vnode_count=vnode_count,
                keep=keep,
                as_json=as_json,
            )
        )
    )

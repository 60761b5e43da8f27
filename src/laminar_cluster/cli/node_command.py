"""`laminar-cluster node`: its options (each also `LAMINAR_<FLAG>` and a key of the config
file, `cli.config`) and the configs they build; the process itself is `cli.node`."""

from __future__ import annotations

from typing import Annotated, Any, Final

import typer

from laminar_cluster.checkpoint.limits import U64_MAX
from laminar_cluster.cli.app import StoreOption, app, guard
from laminar_cluster.cli.config import ConfigOption, option
from laminar_cluster.rebalance.node.config import CHECKPOINT_INTERVAL_S_DEFAULT, TTL_S_DEFAULT

NODE_ID_MAX: Final = U64_MAX  # node ids are nonzero u64 (DESIGN.md "Identity")


def _seconds(flag: str, text: str) -> Any:
    return option(flag, help=text)


NodeIdOption = Annotated[
    int,
    option("--node-id", min=1, max=NODE_ID_MAX, help="This node's id: 1 to 2^64 - 1."),
]
TtlOption = Annotated[float, _seconds("--ttl", "Process and leader lease ttl, seconds.")]
PollOption = Annotated[float, _seconds("--poll", "Discovery refresh and watcher tick, seconds.")]
DebounceOption = Annotated[
    float, _seconds("--debounce", "Quiet period after a membership change, seconds.")
]
CheckpointIntervalOption = Annotated[
    float, _seconds("--checkpoint-interval", "Leader's periodic checkpoint, seconds.")
]
CheckpointTimeoutOption = Annotated[
    float, _seconds("--checkpoint-timeout", "Budget of one cluster checkpoint, seconds.")
]
RetryDelayOption = Annotated[
    float, _seconds("--retry-delay", "Pause after a failed rebalance attempt, seconds.")
]
DrainAckTimeoutOption = Annotated[
    float, _seconds("--drain-ack-timeout", "Wait for the drain ack quorum, seconds.")
]
LeaveTimeoutOption = Annotated[
    float, _seconds("--leave-timeout", "Graceful leave budget, seconds.")
]
StatsIntervalOption = Annotated[
    float, _seconds("--stats-interval", "Log store request counters this often (0: off).")
]
CheckpointPollOption = Annotated[
    float,
    _seconds(
        "--checkpoint-poll", "Participant's prepare and decision poll, leader's ack poll, seconds."
    ),
]
PrepareTimeoutOption = Annotated[
    float, _seconds("--prepare-timeout", "Participant: cut and writes of one attempt, seconds.")
]
DecisionTimeoutOption = Annotated[
    float, _seconds("--decision-timeout", "Participant: one wait for an outcome, seconds.")
]
SourceIdleOption = Annotated[
    float,
    _seconds("--source-idle", "Engine's wait before reading a caught-up event log again."),
]
VnodesOption = Annotated[
    int,
    option(
        "--vnodes",
        min=1,
        help="Vnodes of the cluster (every node of a store must use the same count).",
    ),
]
MetricsPortOption = Annotated[
    int | None,
    option(
        "--metrics-port",
        min=0,
        help="Serve /metrics, /livez and /readyz on --metrics-host:PORT (0: a free port, logged).",
    ),
]
MetricsHostOption = Annotated[
    str, option("--metrics-host", help="Address of the metrics and health endpoint.")
]
ReplaceOption = Annotated[
    bool,
    option(
        "--replace",
        help="Start even when a live process holds this node id, fencing it (it exits 3).",
    ),
]
FaultRateOption = Annotated[
    float,
    option(
        "--fault-rate",
        min=0.0,
        max=0.5,
        hidden=True,
        help="Development: each store request fails before (and each write also after) it "
        "applied with this probability.",
    ),
]
FaultLatencyOption = Annotated[
    float,
    option(
        "--fault-latency-ms",
        min=0.0,
        hidden=True,
        help="Development: each store request first waits up to this long.",
    ),
]
FaultSeedOption = Annotated[
    int, option("--fault-seed", min=0, hidden=True, help="Development: fault seed.")
]
FaultOutageFileOption = Annotated[
    str | None,
    option(
        "--fault-outage-file",
        hidden=True,
        help="Development: while this file exists, every store request fails.",
    ),
]
FaultOutageOption = Annotated[
    list[str] | None,
    option(
        "--fault-outage",
        hidden=True,
        help="Development: START:END seconds after the start, every store request fails "
        "(repeatable).",
    ),
]
ExitOnFenceOption = Annotated[
    bool,
    option(
        "--exit-on-fence",
        help="Exit 3 when fenced (for an outside supervisor) instead of rejoining with a new "
        "term once the store answers.",
    ),
]
JobOption = Annotated[
    str | None,
    option(
        "--job",
        help="Run this job (module:attribute, e.g. my_jobs:clicks; the working directory is "
        "importable) instead of the reference count and sum.",
    ),
]
CloseIdleWindowsOption = Annotated[
    float | None,
    option(
        "--close-idle-windows",
        min=0.001,
        help="With --job: close a vnode's open windows once it saw no event for this many "
        "seconds (the end of a finite input); later events of those windows are late.",
    ),
]


@app.command("node")
def node(
    store: StoreOption,
    node_id: NodeIdOption,
    ttl_s: TtlOption = TTL_S_DEFAULT,
    poll_s: PollOption = 2.0,
    debounce_s: DebounceOption = 5.0,
    checkpoint_interval_s: CheckpointIntervalOption = CHECKPOINT_INTERVAL_S_DEFAULT,
    checkpoint_timeout_s: CheckpointTimeoutOption = 15.0,
    retry_delay_s: RetryDelayOption = 2.0,
    drain_ack_timeout_s: DrainAckTimeoutOption = 10.0,
    leave_timeout_s: LeaveTimeoutOption = 120.0,
    stats_interval_s: StatsIntervalOption = 0.0,
    checkpoint_poll_s: CheckpointPollOption = 0.05,
    prepare_timeout_s: PrepareTimeoutOption = 10.0,
    decision_timeout_s: DecisionTimeoutOption = 30.0,
    source_idle_s: SourceIdleOption = 0.02,
    vnode_count: VnodesOption = 256,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = "127.0.0.1",
    replace: ReplaceOption = False,
    fault_rate: FaultRateOption = 0.0,
    fault_latency_ms: FaultLatencyOption = 0.0,
    fault_seed: FaultSeedOption = 0,
    fault_outage_file: FaultOutageFileOption = None,
    fault_outages: FaultOutageOption = None,
    exit_on_fence: ExitOnFenceOption = False,
    job: JobOption = None,
    close_idle_windows_s: CloseIdleWindowsOption = None,
    config: ConfigOption = None,
) -> None:
    """Run one node (control plane, distributed checkpoints, the reference engine or --job
    over the event log) until SIGTERM/SIGINT (the first leaves gracefully, a second stops at once).
    Refuses to start while a live process holds the node id (unless --replace). JSON-lines
    events on stderr."""
    from laminar_cluster.cli.node import NodeFlags

    flags = NodeFlags.of(locals())
    raise typer.Exit(guard(lambda: flags.run(store)))

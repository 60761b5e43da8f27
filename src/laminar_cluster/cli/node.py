"""`laminar-cluster node --store URL --node-id N`: run one node process with the data plane on
(`runtime.node.StreamNode`: the rebalance control plane, distributed checkpoints and the reference
engine over the store's event log; RB §1, RB §4.2, RB §4.17; issue 7) until SIGTERM or
SIGINT. A node whose event log is empty idles until a producer declares its partitions.

Before anything starts: the store's first request (`store.diagnose`: a path under a regular
file, no credentials, no such bucket, ... as one line), the store contract probe, and the node
id: while a live process holds it (its lease renewed within a ttl, `cli.node_start`), the node
refuses to start naming that process, unless `--replace` is given (then the older process is
fenced and exits 3). Each refusal is a `refused` event and exit 2, as is a metrics port that
cannot be bound.

The first SIGTERM/SIGINT leaves gracefully (draining, drained, left; exit 0, or 4 when the
leave timeout passes first) and says at once why it waits and how to stop now; a second one
stops at once without leaving (exit 1). A node whose process lease lapsed (cut off from the
store for a ttl) or was taken over by a leader rejoins by itself once the store answers: a new
term and a cold restore in the same process, the metrics endpoint up and `/readyz` not ready
meanwhile, each attempt logged as `rejoining` (`rebalance.node.rejoin`). With
`--exit-on-fence` (`LAMINAR_EXIT_ON_FENCE`) it exits 3 instead, for an outside supervisor; a
newer start of the same node id by another process always ends this one (exit 3). A node that
cannot start within its startup deadline logs `startup_failed` and exits 5. Logs are JSON
lines on stderr, each with `ts` (ISO 8601 UTC) and `level` (`rebalance.node.log`), with the
library's warnings forwarded as `log` events (`LAMINAR_NODE_LOG_LEVEL=INFO` forwards info
records too, for reading a stalled run). Once the store passed its checks, the first event is
`started`, naming the metrics endpoint (`metrics_port`, `metrics_url`; null without
`--metrics-port`; port 0 picks a free one).

With a metrics port the node keeps a `NodeMetrics` (leader, token, assignment version, vnodes
owned and restoring, checkpoint durations and verdicts, the last commit's age, rotations,
events, source lag, store requests and errors by kind through `MetricsStore`, placement) served
on `--metrics-host` (default 127.0.0.1) at `/metrics`, beside `/livez` and `/readyz`
(metrics.server, metrics.health). The node's `log.problem` is the problem it keeps repeating
(None while it makes progress), for health reporting.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import math
import os
import signal
import sys
from dataclasses import asdict, dataclass
from typing import Any, Final

from laminar_cluster.cli.node_start import held_by_live_process
from laminar_cluster.clock import RealClock, retry_until
from laminar_cluster.errors import InvalidArgument, LaminarError
from laminar_cluster.metrics import MetricsServer, MetricsStore, NodeMetrics, serve
from laminar_cluster.metrics.health import node_readiness
from laminar_cluster.metrics.server import DEFAULT_HOST
from laminar_cluster.rebalance.node.log import JsonLogHandler, NodeLog
from laminar_cluster.rebalance.node.rebalance_node import NodeConfig
from laminar_cluster.runtime.checkpoint_guards import check_checkpoint_layout
from laminar_cluster.runtime.engine_types import EngineConfig
from laminar_cluster.runtime.job_node import JobRuntime, load_job
from laminar_cluster.runtime.node import StreamNode, StreamNodeConfig
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.diagnose import diagnose, one_line
from laminar_cluster.store.faulty import FaultConfig, FaultyStore
from laminar_cluster.store.probe import verify_store_contract
from laminar_cluster.store.read_retry import ReadRetryingStore

LOG_LEVEL_ENV: Final = "LAMINAR_NODE_LOG_LEVEL"
EXIT_STORE_REFUSED: Final = 2  # also a metrics port that cannot be bound, a node id in use
PROBE_TIMEOUT_S: Final = 10.0
# A probe stopped only by transient failures (StoreContractInconclusive) is run again, with a new
# probe object, at most this often and until this long after the first started.
PROBE_ATTEMPTS_MAX: Final = 4
PROBE_RETRY_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class NodeFlags:
    """The `node` command's flags (seconds unless named otherwise)."""

    node_id: int
    ttl_s: float
    poll_s: float
    debounce_s: float
    checkpoint_interval_s: float
    checkpoint_timeout_s: float
    retry_delay_s: float
    drain_ack_timeout_s: float
    leave_timeout_s: float
    stats_interval_s: float
    checkpoint_poll_s: float
    prepare_timeout_s: float
    decision_timeout_s: float
    source_idle_s: float
    vnode_count: int
    metrics_port: int | None
    metrics_host: str
    replace: bool
    fault_rate: float
    fault_latency_ms: float
    fault_seed: int
    fault_outage_file: str | None
    fault_outages: list[str] | None
    exit_on_fence: bool
    job: str | None
    close_idle_windows_s: float | None

    @classmethod
    def of(cls, values: dict[str, Any]) -> NodeFlags:
        """From the command's arguments (other names ignored)."""
        return cls(**{name: values[name] for name in cls.__dataclass_fields__})

    def node_config(self) -> NodeConfig:
        return NodeConfig(
            node_id=self.node_id,
            ttl_s=self.ttl_s,
            poll_s=self.poll_s,
            debounce_s=self.debounce_s,
            checkpoint_interval_s=self.checkpoint_interval_s,
            retry_delay_s=self.retry_delay_s,
            drain_ack_timeout_s=self.drain_ack_timeout_s,
            checkpoint_timeout_s=self.checkpoint_timeout_s,
            leave_timeout_s=self.leave_timeout_s,
            stats_interval_s=self.stats_interval_s,
            vnode_count=self.vnode_count,
            exit_on_fence=self.exit_on_fence,
        )

    def stream_config(self) -> StreamNodeConfig:
        return StreamNodeConfig(
            engine=EngineConfig(idle_s=self.source_idle_s),
            checkpoint_poll_s=self.checkpoint_poll_s,
            prepare_timeout_s=self.prepare_timeout_s,
            decision_timeout_s=self.decision_timeout_s,
        )

    def faults(self) -> FaultConfig | None:
        """The fault injector's settings; outages in seconds after the probe."""
        outages = tuple(_outage(text) for text in self.fault_outages or ())
        if (
            self.fault_rate <= 0
            and self.fault_latency_ms <= 0
            and not outages
            and self.fault_outage_file is None
        ):
            return None
        return FaultConfig(
            error_before_rate=self.fault_rate,
            error_after_rate=self.fault_rate,
            latency_s_max=self.fault_latency_ms / 1000,
            outage_file=self.fault_outage_file,
            outages=outages,
        )

    def job_runtime(self) -> JobRuntime | None:
        """The job `--job` names, loaded and compiled (InvalidArgument: one line)."""
        if self.job is None:
            if self.close_idle_windows_s is not None:
                raise InvalidArgument("--close-idle-windows needs --job")
            return None
        return JobRuntime.of(load_job(self.job), idle_close_s=self.close_idle_windows_s)

    def run(self, store_url: str) -> int:
        """`run_node_command` with these flags (the job loaded first)."""
        job = self.job_runtime()
        return run_node_command(
            store_url,
            self.node_config(),
            metrics_port=self.metrics_port,
            metrics_host=self.metrics_host,
            stream=self.stream_config(),
            faults=self.faults(),
            fault_seed=self.fault_seed,
            replace=self.replace,
            job=job,
        )


def run_node_command(
    store_url: str,
    config: NodeConfig,
    *,
    probe: bool = True,
    metrics_port: int | None = None,
    metrics_host: str = DEFAULT_HOST,
    stream: StreamNodeConfig | None = None,
    faults: FaultConfig | None = None,
    fault_seed: int = 0,
    replace: bool = False,
    job: JobRuntime | None = None,
) -> int:
    """Run the node in a fresh event loop; its exit code. `faults` (development and chaos
    tests only): after the probe, every store request goes through `store.faulty.FaultyStore`
    with these rates, seeded with `fault_seed`; its `outages` are seconds after the probe
    (every request in `[start, end)` fails before it is sent)."""
    settings = _Settings(
        probe, metrics_port, metrics_host, stream, faults, fault_seed, replace, job
    )
    return asyncio.run(_run(store_url, config, settings))


@dataclass(frozen=True, slots=True)
class _Settings:
    probe: bool
    metrics_port: int | None
    metrics_host: str
    stream: StreamNodeConfig | None
    faults: FaultConfig | None
    fault_seed: int
    replace: bool
    job: JobRuntime | None


async def _run(store_url: str, config: NodeConfig, settings: _Settings) -> int:
    clock = RealClock()
    log = NodeLog(sys.stderr, clock, config.node_id)
    level = _log_level()
    handler = JsonLogHandler(log, level)
    library = logging.getLogger("laminar_cluster")
    library.addHandler(handler)
    if level < logging.WARNING:
        library.setLevel(level)
    store: ObjectStore = open_store(store_url)
    server: MetricsServer | None = None
    try:
        if not await _store_usable(store, store_url, clock, log, settings):
            return EXIT_STORE_REFUSED
        store = _wrapped(store, clock, settings.faults, settings.fault_seed)
        metrics = None if settings.metrics_port is None else NodeMetrics(clock=clock)
        node = StreamNode(
            store,
            clock,
            config,
            log,
            stream=settings.stream,
            metrics=metrics,
            job=settings.job,
            store_wrapper=None
            if metrics is None
            else functools.partial(MetricsStore, metrics=metrics),
        )
        if metrics is not None and settings.metrics_port is not None:
            server = await _serve_metrics(metrics, settings, node, log)
            if server is None:
                return EXIT_STORE_REFUSED
        faults = settings.faults
        # The first event: the endpoint a scraper (or a test) reads the bound port from.
        log.write(
            "started",
            store=store.url,
            metrics_port=None if server is None else server.port,
            metrics_url=None if server is None else server.url,
            faults=None if faults is None else {"seed": settings.fault_seed, **asdict(faults)},
        )
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, _on_signal, node, config, log, signum)
        return await node.run()
    finally:
        if server is not None:
            await server.close()
        library.removeHandler(handler)
        await store.close()


async def _serve_metrics(
    metrics: NodeMetrics, settings: _Settings, node: StreamNode, log: NodeLog
) -> MetricsServer | None:
    """`/metrics`, `/livez` and `/readyz` of `node`; None (logged as `refused`) when the
    address cannot be bound."""
    assert settings.metrics_port is not None
    try:
        return await serve(
            metrics,
            settings.metrics_port,
            settings.metrics_host,
            readiness=functools.partial(node_readiness, node.node),
        )
    except InvalidArgument as error:
        log.write("refused", error=str(error))
        return None


async def _store_usable(
    store: ObjectStore, url: str, clock: RealClock, log: NodeLog, settings: _Settings
) -> bool:
    """The store answers (`store.diagnose`), holds no checkpoint of the old layout (before the
    probe writes anything), passes the contract probe, and no live process holds the node id
    (unless `--replace`); False after logging `refused` with one line."""
    problem = await diagnose(store, url, must_exist=False)
    if problem is None:
        problem = await _layout_problem(store, clock)
    if problem is None and settings.probe:
        problem = await _probe_problem(store, url, clock)
    if problem is None and not settings.replace:
        problem = await held_by_live_process(store, clock, log)
    if problem is not None:
        log.write("refused", error=problem)
        return False
    return True


async def _layout_problem(store: ObjectStore, clock: RealClock) -> str | None:
    """Why the store's checkpoints cannot be read (the old layout), or None."""
    try:
        await check_checkpoint_layout(store, clock)
    except LaminarError as error:
        return str(error)
    return None


async def _probe_problem(store: ObjectStore, url: str, clock: RealClock) -> str | None:
    """The store contract probe, retried while the store is unavailable: why the store fails
    it or never answers, as one line, or None."""
    try:
        await retry_until(
            lambda: verify_store_contract(store, clock, timeout_s=PROBE_TIMEOUT_S),
            what=f"{store.url}: store contract probe",
            clock=clock,
            deadline=clock.monotonic() + PROBE_RETRY_S,
            attempts_max=PROBE_ATTEMPTS_MAX,
        )
    except LaminarError as error:
        return one_line(error, url)
    return None


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


def _wrapped(
    store: ObjectStore, clock: RealClock, faults: FaultConfig | None, fault_seed: int
) -> ObjectStore:
    """The store the node uses: behind the fault injector when asked (after the probe, its
    outage windows counted from now), and with reads failed by StoreUnavailable sent again (at
    most 3 tries, under the caller's deadline; writes are never repeated here:
    store.read_retry)."""
    if faults is not None:
        now_s = clock.monotonic()
        outages = tuple((now_s + start, now_s + end) for start, end in faults.outages)
        config = dataclasses.replace(faults, outages=outages)
        store = FaultyStore(store, clock=clock, seed=fault_seed, config=config)
    return ReadRetryingStore(store, clock)


def _on_signal(node: StreamNode, config: NodeConfig, log: NodeLog, signum: signal.Signals) -> None:
    if node.leave_requested.is_set():
        message = "stopping now without leaving: peers see this node dead after its ttl"
        log.write("signal", signal=signum.name, action="stop", message=message)
        node.stop()
        return
    log.write("signal", signal=signum.name, action="leave", message=leave_message(node, config))
    node.request_leave()


def leave_message(node: StreamNode, config: NodeConfig) -> str:
    """What a graceful leave waits for, and how to stop at once."""
    controller = node.node.controller
    view = None if controller is None else controller.membership_view()
    others = [] if view is None else [n for n in view.live_nodes() if n != config.node_id]
    timeout = f"{config.leave_timeout_s:g} s (--leave-timeout)"
    if others:
        why = (
            f"waiting until node{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} "
            "took over this node's vnodes, "
            f"at most {timeout}"
        )
    else:
        why = (
            "no other live node can take over this node's vnodes, so the leave waits its "
            f"whole timeout, {timeout}, and then exits 4"
        )
    return f"leaving gracefully: {why}; send SIGTERM or SIGINT again to stop now without leaving"


def _log_level() -> int:
    """The forwarded records' level: WARNING, or `LAMINAR_NODE_LOG_LEVEL` (a level name)."""
    name = os.environ.get(LOG_LEVEL_ENV, "WARNING").upper()
    level = logging.getLevelName(name)
    if not isinstance(level, int):
        raise InvalidArgument(f"{LOG_LEVEL_ENV}={name!r} is not a logging level name")
    return level

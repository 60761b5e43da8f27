"""`laminar-cluster node --store URL --node-id N`: run one node process with the data plane on
(`runtime.node.StreamNode`: the rebalance control plane, distributed checkpoints and the reference
engine over the store's event log; spec_rebalance §1, §4.2, §4.17; issue 7) until SIGTERM or
SIGINT. A node whose event log is empty idles until a producer declares its partitions.

The first SIGTERM/SIGINT leaves gracefully (draining, drained, left; exit 0, or 4 when the
leave timeout passes first); a second one stops at once without leaving (exit 1). A node whose
process lease lapsed (cut off from the store for a ttl) or was taken over by a leader rejoins
by itself once the store answers: a new term and a cold restore in the same process, the
metrics endpoint up and `/readyz` not ready meanwhile, each attempt logged as `rejoining`
(`rebalance.node.rejoin`). With `--exit-on-fence` (or `LAMINAR_EXIT_ON_FENCE=1`) it exits 3
instead, for an outside supervisor; a newer start of the same node id by another process always
ends this one (exit 3). A store that fails the contract probe is refused
(exit 2; a probe stopped only by transient store errors is run again first), as is a metrics
port that cannot be bound; a node that cannot start within its startup deadline (its store
unavailable throughout, or an error no retry fixes) logs `startup_failed` and exits 5. Logs
are JSON lines on stderr, one event per line (`rebalance.node.log`), with the library's
warnings forwarded as `log` events (`LAMINAR_NODE_LOG_LEVEL=INFO` forwards info records too,
for reading a stalled run). Once the store passed its probe, the first event is `started`,
naming the metrics endpoint (`metrics_port`, `metrics_url`; null without `--metrics-port`;
port 0 picks a free one and logs the bound port).

With a metrics port the node keeps a `NodeMetrics` (leader, token, assignment version, vnodes
owned and restoring, checkpoint durations and verdicts, the last commit's age, rotations,
events, source lag, store requests and errors by kind through `MetricsStore`, placement) served
on `--metrics-host` (default 127.0.0.1) at `/metrics`, beside `/livez` and `/readyz`
(metrics.server, metrics.health).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import signal
import sys
from dataclasses import asdict
from typing import Final

from laminar_cluster.clock import RealClock, retry_until
from laminar_cluster.errors import InvalidArgument, LaminarError
from laminar_cluster.metrics import MetricsServer, MetricsStore, NodeMetrics, serve
from laminar_cluster.metrics.health import node_readiness
from laminar_cluster.metrics.server import DEFAULT_HOST
from laminar_cluster.rebalance.node.log import JsonLogHandler, NodeLog
from laminar_cluster.rebalance.node.rebalance_node import NodeConfig
from laminar_cluster.runtime.node import StreamNode, StreamNodeConfig
from laminar_cluster.store import ObjectStore, open_store
from laminar_cluster.store.faulty import FaultConfig, FaultyStore
from laminar_cluster.store.probe import verify_store_contract
from laminar_cluster.store.read_retry import ReadRetryingStore

LOG_LEVEL_ENV: Final = "LAMINAR_NODE_LOG_LEVEL"
EXIT_STORE_REFUSED: Final = 2  # also a metrics port that cannot be bound
PROBE_TIMEOUT_S: Final = 10.0
# A probe stopped only by transient failures (StoreContractInconclusive) is run again, with a new
# probe object, at most this often and until this long after the first started.
PROBE_ATTEMPTS_MAX: Final = 4
PROBE_RETRY_S: Final = 30.0


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
) -> int:
    """Run the node in a fresh event loop; its exit code. `faults` (development and chaos
    tests only): after the probe, every store request goes through `store.faulty.FaultyStore`
    with these rates, seeded with `fault_seed`; its `outages` are seconds after the probe
    (every request in `[start, end)` fails before it is sent)."""
    return asyncio.run(
        _run(
            store_url,
            config,
            probe=probe,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            stream=stream,
            faults=faults,
            fault_seed=fault_seed,
        )
    )


async def _run(
    store_url: str,
    config: NodeConfig,
    *,
    probe: bool,
    metrics_port: int | None,
    stream: StreamNodeConfig | None,
    metrics_host: str = DEFAULT_HOST,
    faults: FaultConfig | None = None,
    fault_seed: int = 0,
) -> int:
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
        if probe and not await _store_passes_probe(store, clock, log):
            return EXIT_STORE_REFUSED
        store = _wrapped(store, clock, faults, fault_seed)
        metrics = None if metrics_port is None else NodeMetrics(clock=clock)
        node = StreamNode(
            store,
            clock,
            config,
            log,
            stream=stream,
            metrics=metrics,
            store_wrapper=None
            if metrics is None
            else functools.partial(MetricsStore, metrics=metrics),
        )
        if metrics is not None and metrics_port is not None:
            server = await _serve_metrics(metrics, metrics_port, metrics_host, node, log)
            if server is None:
                return EXIT_STORE_REFUSED
        # The first event: the endpoint a scraper (or a test) reads the bound port from.
        log.write(
            "started",
            store=store.url,
            metrics_port=None if server is None else server.port,
            metrics_url=None if server is None else server.url,
            faults=None if faults is None else {"seed": fault_seed, **asdict(faults)},
        )
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, _on_signal, node, log, signum)
        return await node.run()
    finally:
        if server is not None:
            await server.close()
        library.removeHandler(handler)
        await store.close()


async def _serve_metrics(
    metrics: NodeMetrics, port: int, host: str, node: StreamNode, log: NodeLog
) -> MetricsServer | None:
    """`/metrics`, `/livez` and `/readyz` of `node`; None (logged as `refused`) when the
    address cannot be bound."""
    try:
        return await serve(
            metrics, port, host, readiness=functools.partial(node_readiness, node.node)
        )
    except InvalidArgument as error:
        log.write("refused", error=str(error))
        return None


async def _store_passes_probe(store: ObjectStore, clock: RealClock, log: NodeLog) -> bool:
    """The store contract probe, retried while the store is unavailable; False (logged as
    `refused`) when the store fails it or never answers."""
    try:
        await retry_until(
            lambda: verify_store_contract(store, clock, timeout_s=PROBE_TIMEOUT_S),
            what=f"{store.url}: store contract probe",
            clock=clock,
            deadline=clock.monotonic() + PROBE_RETRY_S,
            attempts_max=PROBE_ATTEMPTS_MAX,
        )
    except LaminarError as error:
        log.write("refused", error=str(error))
        return False
    return True


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


def _on_signal(node: StreamNode, log: NodeLog, signum: signal.Signals) -> None:
    if node.leave_requested.is_set():
        log.write("signal", signal=signum.name, action="stop")
        node.stop()
    else:
        log.write("signal", signal=signum.name, action="leave")
        node.request_leave()


def _log_level() -> int:
    """The forwarded records' level: WARNING, or `LAMINAR_NODE_LOG_LEVEL` (a level name)."""
    name = os.environ.get(LOG_LEVEL_ENV, "WARNING").upper()
    level = logging.getLevelName(name)
    if not isinstance(level, int):
        raise InvalidArgument(f"{LOG_LEVEL_ENV}={name!r} is not a logging level name")
    return level

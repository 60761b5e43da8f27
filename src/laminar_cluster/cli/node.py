"""`laminar-cluster node --store URL --node-id N`: run one node's rebalance control plane
(`rebalance.node.RebalanceNode`; spec_rebalance §1, §4.2, §4.17) until SIGTERM or SIGINT.

The first SIGTERM/SIGINT leaves gracefully (draining, drained, left; exit 0, or 4 when the
leave timeout passes first); a second one stops at once without leaving (exit 1). A newer start
of the same node id fences this one (exit 3); a store that fails the contract probe is refused
(exit 2). Logs are JSON lines on stderr, one event per line (`rebalance.node_log`), with the
library's warnings forwarded as `log` events.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Final

from laminar_cluster.clock import RealClock
from laminar_cluster.errors import LaminarError
from laminar_cluster.rebalance.node import NodeConfig, RebalanceNode
from laminar_cluster.rebalance.node_log import JsonLogHandler, NodeLog
from laminar_cluster.store import open_store
from laminar_cluster.store.probe import verify_store_contract

EXIT_STORE_REFUSED: Final = 2
PROBE_TIMEOUT_S: Final = 10.0


def run_node_command(store_url: str, config: NodeConfig, *, probe: bool = True) -> int:
    """Run the node in a fresh event loop; its exit code."""
    return asyncio.run(_run(store_url, config, probe=probe))


async def _run(store_url: str, config: NodeConfig, *, probe: bool) -> int:
    clock = RealClock()
    log = NodeLog(sys.stderr, clock, config.node_id)
    handler = JsonLogHandler(log)
    library = logging.getLogger("laminar_cluster")
    library.addHandler(handler)
    store = open_store(store_url)
    try:
        if probe:
            try:
                await verify_store_contract(store, clock, timeout_s=PROBE_TIMEOUT_S)
            except LaminarError as error:
                log.write("refused", error=str(error))
                return EXIT_STORE_REFUSED
        node = RebalanceNode(store, clock, config, log)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, _on_signal, node, log, signum)
        return await node.run()
    finally:
        library.removeHandler(handler)
        await store.close()


def _on_signal(node: RebalanceNode, log: NodeLog, signum: signal.Signals) -> None:
    if node.leave_requested.is_set():
        log.write("signal", signal=signum.name, action="stop")
        node.stop()
    else:
        log.write("signal", signal=signum.name, action="leave")
        node.request_leave()

"""The node command's data-plane options and the fleet's `NodeTimings.options`."""

from __future__ import annotations

import inspect

from laminar_cluster.cli import main
from laminar_cluster.harness.demo_run import REMOTE_TIMINGS, TIMINGS, timings_for
from laminar_cluster.harness.fleet import NodeTimings
from laminar_cluster.rebalance.node.config import VNODE_COUNT_DEFAULT
from laminar_cluster.runtime.engine_types import EngineConfig
from laminar_cluster.runtime.node import StreamNodeConfig


def test_node_option_defaults_are_the_library_defaults() -> None:
    params = inspect.signature(main.node).parameters
    stream = StreamNodeConfig()
    assert params["checkpoint_poll_s"].default == stream.checkpoint_poll_s
    assert params["prepare_timeout_s"].default == stream.prepare_timeout_s
    assert params["decision_timeout_s"].default == stream.decision_timeout_s
    assert params["source_idle_s"].default == EngineConfig().idle_s
    assert params["vnode_count"].default == VNODE_COUNT_DEFAULT


def test_unset_timings_pass_no_option_and_set_ones_do() -> None:
    options = NodeTimings().options()
    for flag in ("--checkpoint-timeout", "--checkpoint-poll", "--source-idle", "--vnodes"):
        assert flag not in options
    options = NodeTimings(checkpoint_poll_s=0.25, source_idle_s=0.5, vnode_count=16).options()
    assert options[options.index("--checkpoint-poll") + 1] == "0.25"
    assert options[options.index("--source-idle") + 1] == "0.5"
    assert options[options.index("--vnodes") + 1] == "16"


def test_the_demo_polls_less_on_a_remote_store() -> None:
    """The engine's idle reads and the checkpoint interval are longer on a remote store; the
    checkpoint pointer keeps the node's default poll (DC-18 polls fast only when a prepare is
    expected, and a slower fast poll made the demo's checkpoints a second late)."""
    assert timings_for("file:///tmp/x") is TIMINGS
    remote = timings_for("s3://bucket/prefix?endpoint=http://127.0.0.1:9000")
    assert remote is REMOTE_TIMINGS
    assert remote.source_idle_s is not None
    assert remote.source_idle_s > EngineConfig().idle_s
    assert remote.checkpoint_poll_s is None  # the node's default
    assert "--checkpoint-poll" not in remote.options()
    assert remote.checkpoint_interval_s > TIMINGS.checkpoint_interval_s

"""The `laminar-cluster` command line: the Typer app (`cli.app`) with its commands
(`cli.commands`: the views, the workload and the demo; `cli.node_command`; `cli.bench_commands`).
"""

from __future__ import annotations

from laminar_cluster.cli import bench_commands, commands
from laminar_cluster.cli.app import app
from laminar_cluster.cli.node_command import node

__all__ = ["app", "bench_commands", "commands", "main", "node"]


def main() -> None:
    app()

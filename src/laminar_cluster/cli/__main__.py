"""`python -m laminar_cluster.cli ...`: the `laminar-cluster` command (benches and tests spawn
node processes this way)."""

from laminar_cluster.cli.main import main

main()

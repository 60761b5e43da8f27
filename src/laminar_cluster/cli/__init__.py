"""The `laminar-cluster` command."""

"""The benchmarks behind `laminar-cluster bench ...`: each runs real parts, prints its figures
(JSON with `--json`) and asserts nothing about time."""

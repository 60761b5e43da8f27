"""What drives and checks a cluster from outside, for the demo, the benchmarks and the tests:
fleets of real node processes, the deterministic workload and its producer, the exactly-once
checker, leader-election contenders. Not part of a node."""

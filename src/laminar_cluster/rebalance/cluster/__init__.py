"""This process's view of the cluster (the `ClusterController` over the store): membership,
the per-process control slots, drain acks and their quorum, and process takeovers."""

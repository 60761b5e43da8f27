"""Read-only views of a cluster, built from the store alone and never writing to it: status,
the lease and the audited authority log, and their rendering for people (rich) and programs
(JSON). The commands, the demo and the console share them."""

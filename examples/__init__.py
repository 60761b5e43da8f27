"""Example jobs (README "Write a job", docs/jobs.md); each runs in `make test` against an
independently computed result (tests/examples)."""

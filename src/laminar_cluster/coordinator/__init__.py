"""The distributed checkpoint: prepare, per-vnode partials, manifests, outcome
(upstream_context §1.7, §3.3; docs/protocols/distributed-checkpoint.md)."""

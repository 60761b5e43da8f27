"""The distributed checkpoint: prepare, per-vnode partials, manifests, outcome
(DC §1.7, DC §3.3; docs/protocols/distributed-checkpoint.md)."""

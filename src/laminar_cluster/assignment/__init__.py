"""Vnode assignment: key to vnode, rendezvous placement, and (to come) the snapshot store."""

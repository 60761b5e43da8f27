"""The leader side of a rotation: plan by rendezvous, publish the drain, collect the ack quorum,
take the pre-rotation checkpoint, decide and finalize."""

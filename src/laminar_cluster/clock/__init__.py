"""Time and randomness: the only place that reads clocks or draws random numbers."""

from laminar_cluster.clock.api import Clock, seeded_random
from laminar_cluster.clock.deadlines import first_of, within_deadline
from laminar_cluster.clock.real import RealClock
from laminar_cluster.clock.retry import retry_until
from laminar_cluster.clock.simulated import SimulatedClock

__all__ = [
    "Clock",
    "RealClock",
    "SimulatedClock",
    "first_of",
    "retry_until",
    "seeded_random",
    "within_deadline",
]

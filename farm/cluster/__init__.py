"""Distributed execution on Ray: the coordinator, compile tasks and one measure actor per GPU
(or replay actors standing in for GPUs on a machine with none)."""

from farm.cluster.config import CoordinatorConfig, QuietReporter, Reporter
from farm.cluster.coordinator import Coordinator, JobOutcome, NoWorkers, connect_ray

__all__ = ["Coordinator", "CoordinatorConfig", "JobOutcome", "NoWorkers", "QuietReporter",
           "Reporter", "connect_ray"]

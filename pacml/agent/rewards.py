"""Rewards: pure functions of one decision's outcome (never of environment attributes)."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.records import JobRecord
from workloads.jobs import JobSpec


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What happened to the job an action was taken for.

    Attributes:
        job: The job.
        degree: The degree applied (0 = rejected).
        accepted: Placed and within its JCT target.
        record: The blocking record if it was blocked now (``None`` if accepted).
    """

    job: JobSpec
    degree: int
    accepted: bool
    record: JobRecord | None


class JobAcceptance:
    """The paper's reward: ``success`` if the job was accepted, ``failure`` if it was blocked."""

    def __init__(self, success: float = 1.0, failure: float = -1.0) -> None:
        self.success = float(success)
        self.failure = float(failure)

    def __call__(self, outcome: StepOutcome) -> float:
        """Reward of one decision."""
        return self.success if outcome.accepted else self.failure


class AcceptedDemand:
    """Reward proportional to the information an accepted job carries (demand throughput).

    ``demand_bytes / scale_bytes`` if accepted, else ``failure``: favours accepting large jobs.
    """

    def __init__(self, scale_bytes: float = 3e10, failure: float = 0.0) -> None:
        self.scale_bytes = float(scale_bytes)
        self.failure = float(failure)

    def __call__(self, outcome: StepOutcome) -> float:
        """Reward of one decision."""
        return outcome.job.graph.demand_bytes / self.scale_bytes if outcome.accepted else self.failure

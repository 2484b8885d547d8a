"""The policy plug-in interface: one decision per arriving job.

A policy is any object with ``reset(seed)`` and ``decide(job, state) -> Decision``; build it
with ``hydra.utils.instantiate`` from ``conf/policy/<name>.yaml``. Policies read the snapshot
and return a decision; they never mutate simulator state.

Optional hook: ``bind(workload)``, called by ``Simulation.run`` before each episode with the
run's :class:`~workloads.jobs.Workload` (the rollout planner samples futures from it). A
policy that wraps another should forward it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from simulator.cluster import ClusterState
from workloads.jobs import JobSpec


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with an arriving job.

    Attributes:
        degree: Partition degree; 0 rejects the job (it is blocked).
        placement: Optional block of servers for the job (as returned by
            ``state.feasibility.free_blocks(degree)``, or their server tuple); ``None`` lets the
            configured placer choose.
    """

    degree: int
    placement: tuple[int, ...] | None = None


@runtime_checkable
class Policy(Protocol):
    """Decides how many devices each arriving job is partitioned over (and optionally where)."""

    def reset(self, seed: int | None = None) -> None:
        """Start a new episode; ``seed`` seeds any randomness the policy uses."""
        ...

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """Return the decision for ``job`` given the cluster ``state``."""
        ...

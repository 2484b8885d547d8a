"""Cluster occupancy (owned by the simulation) and the read-only snapshot policies see."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from simulator.allocation.first_fit import Placement
from simulator.feasibility import FeasibilityTable
from simulator.topology import RampTopology


class Cluster:
    """Which job holds each server. One job per server (RAMP rule 1), enforced."""

    def __init__(self, topology: RampTopology) -> None:
        self.topology = topology
        self.owner: list[int] = [-1] * topology.num_servers  # job id holding each server, or -1
        self.occupied_mask = 0  # bitmask of held servers
        self.held: dict[int, Placement] = {}  # placement of every running job, by job id

    @property
    def num_running_jobs(self) -> int:
        """Jobs currently running."""
        return len(self.held)

    def allocate(self, job_id: int, placement: Placement) -> None:
        """Give ``placement``'s servers to ``job_id`` (``RuntimeError`` if one is held: a simulator bug)."""
        if placement.mask & self.occupied_mask:
            clash = [s for s in placement.servers if self.owner[s] != -1]
            raise RuntimeError(f"job {job_id}: servers {clash} already held by jobs "
                               f"{sorted({self.owner[s] for s in clash})}")
        if job_id in self.held:
            raise RuntimeError(f"job {job_id} is already running")
        for s in placement.servers:
            self.owner[s] = job_id
        self.occupied_mask |= placement.mask
        self.held[job_id] = placement

    def release(self, job_id: int) -> Placement:
        """Free the servers of ``job_id`` and return its placement."""
        placement = self.held.pop(job_id)
        for s in placement.servers:
            self.owner[s] = -1
        self.occupied_mask &= ~placement.mask
        return placement


@dataclass(frozen=True)
class ClusterState:
    """What a policy sees when a job arrives: a read-only snapshot plus the job's feasibility.

    Attributes:
        feasibility: The shared feasibility function evaluated for the arriving job.
        horizon_s: Last arrival time of the episode (``None`` if open-ended).
        mean_interarrival_s: Mean gap between the arrivals seen so far (``nan`` at the first).
        running_source: The value of :attr:`running`, or a function giving it on first access.
        releases_source: A function giving :attr:`releases` (``None``: counted from :attr:`running`).
    """

    time_s: float
    topology: RampTopology
    occupied_mask: int
    num_running_jobs: int
    feasibility: FeasibilityTable
    horizon_s: float | None = None
    mean_interarrival_s: float = float("nan")
    horizon_accounting: str = "drain"
    running_source: tuple[tuple[float, int], ...] | Callable[[], tuple[tuple[float, int], ...]] = field(
        default=(), repr=False, compare=False)
    releases_source: Callable[[], tuple[tuple[float, int], ...]] | None = field(
        default=None, repr=False, compare=False)

    @cached_property
    def running(self) -> tuple[tuple[float, int], ...]:
        """``(end_time_s, server_mask)`` of every running job, by end time (computed on first access)."""
        source = self.running_source
        return source() if callable(source) else tuple(source)

    @cached_property
    def releases(self) -> tuple[tuple[float, int], ...]:
        """``(end_time_s, num_servers)`` of every running job, by end time."""
        if self.releases_source is not None and "running" not in self.__dict__:
            return self.releases_source()  # kept by the simulation: no bit count of 8 KB masks per job
        return tuple((end_s, mask.bit_count()) for end_s, mask in self.running)

    @property
    def num_servers(self) -> int:
        """Servers in the cluster."""
        return self.topology.num_servers

    @property
    def num_free_servers(self) -> int:
        """Servers not held by any job."""
        return self.topology.num_servers - self.occupied_mask.bit_count()

    @property
    def occupancy(self) -> float:
        """Fraction of servers held."""
        return self.occupied_mask.bit_count() / self.topology.num_servers

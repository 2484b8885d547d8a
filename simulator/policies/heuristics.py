"""Baseline partitioning policies (spec §13) and the ``min_feasible`` oracle baseline.

``para_max`` and ``para_min`` reproduce the original exactly: they choose among the degrees the
original's action mask allows (``mask="paper"``: degree <= free servers, ignoring
fragmentation), so a chosen degree may still fail placement or miss the target and block the
job. Set ``mask: feasible`` to give them the exact feasibility instead.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from simulator.cluster import ClusterState
from simulator.errors import ConfigError, InvalidDecision
from simulator.feasibility import FeasibilityTable, MaskKind, min_feasible_order
from simulator.policy import Decision
from simulator.topology import Block, RampTopology
from workloads.jobs import JobSpec


def _valid_degrees(state: ClusterState, mask: MaskKind) -> list[int]:
    """Non-zero degrees allowed by ``mask``, ascending."""
    m = state.feasibility.mask(mask)
    return [d for d in state.feasibility.degrees if m[d]]


def _check_mask(mask: str) -> MaskKind:
    if mask not in ("paper", "placeable", "feasible"):
        raise ValueError(f"policy.mask must be 'paper', 'placeable' or 'feasible', got {mask!r}")
    return mask  # type: ignore[return-value]


def first_feasible_block(table: FeasibilityTable, degree: int, limit: int) -> Block | None:
    """The first of the first ``limit`` free blocks of ``degree`` servers (first-fit order) in
    which the job meets its target; ``None`` if none of them does (or ``degree`` is 0)."""
    if degree == 0 or limit <= 0:
        return None
    # Lazily: a slice would make all ``limit`` blocks, and the first one usually takes the job.
    for block in itertools.islice(table.free_blocks(degree), limit):
        if table.feasible(degree, block):
            return block
    return None


def _check_int(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"policy.{name} must be an integer >= {low}, got {value!r}")
    return value


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"policy.{name} must be true or false, got {value!r}")
    return value


def horizon_left_s(state: ClusterState) -> float | None:
    """Time left until the horizon when the run counts jobs still running there as blocked
    (``horizon_accounting: paper``); ``None`` otherwise (no such cost to avoid)."""
    if state.horizon_accounting != "paper" or state.horizon_s is None:
        return None
    return state.horizon_s - state.time_s


def placed_decision(table: FeasibilityTable, degree: int, block_search: int,
                    left_s: float | None = None) -> Decision:
    """``Decision(degree)``, in the first feasible block when ``block_search`` > 0 finds one.

    ``left_s`` (the horizon guard, :func:`horizon_left_s`): a job that would still run at the
    horizon (and count as blocked) takes instead the smallest feasible degree at which it ends in
    time, or is rejected, leaving its servers to the jobs after it.
    """
    block = first_feasible_block(table, degree, block_search) if block_search else None
    if left_s is not None and degree:
        jct_s = table.jct_s(degree, block)
        if jct_s is not None and jct_s >= left_s:
            for other in table.degrees:
                if other == degree or not table.feasible(other):
                    continue
                found = first_feasible_block(table, other, block_search) if block_search else None
                other_jct_s = table.jct_s(other, found)
                if other_jct_s is not None and other_jct_s < left_s:
                    return Decision(other, found.servers if found is not None else None)
            return Decision(0)
    return Decision(degree, block.servers if block is not None else None)


class ParaMax:
    """Maximum parallelism: the largest allowed degree, capped at ``max_degree`` (paper: 16).

    Args:
        max_degree: Cap on the degree.
        mask: Which degrees count as allowed (``paper`` reproduces the original).
        block_search: 0, or how many free blocks :func:`first_feasible_block` may look at.
        horizon_guard: See :func:`placed_decision`.
    """

    def __init__(self, max_degree: int = 16, mask: MaskKind = "paper", block_search: int = 0,
                 horizon_guard: bool = False) -> None:
        self.max_degree = max_degree
        self.mask = _check_mask(mask)
        self.block_search = _check_int(block_search, "block_search", 0)
        self.horizon_guard = _check_bool(horizon_guard, "horizon_guard")

    def reset(self, seed: int | None = None) -> None:
        """Stateless."""

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """Largest allowed degree (<= ``max_degree``), or reject if none."""
        valid = [d for d in _valid_degrees(state, self.mask) if d <= self.max_degree]
        return placed_decision(state.feasibility, max(valid) if valid else 0, self.block_search,
                               horizon_left_s(state) if self.horizon_guard else None)


class ParaMin:
    """Minimum parallelism predicted (ignoring communication) to meet the JCT target.

    Target ``p = ceil(JCT_seq / (beta x JCT_seq))``; picks the smallest allowed degree ``>= p``, or
    the largest allowed degree if none is that large (spec §13, ``AcceptableJCT``).
    """

    def __init__(self, mask: MaskKind = "paper") -> None:
        self.mask = _check_mask(mask)

    def reset(self, seed: int | None = None) -> None:
        """Stateless."""

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """Smallest allowed degree predicted to meet the target."""
        valid = _valid_degrees(state, self.mask)
        if not valid:
            return Decision(0)
        # Same float expression as the original, so ties at 1/beta round identically.
        target = math.ceil(job.sequential_jct_s / job.max_jct_s) if job.max_jct_s > 0 else 1
        return Decision(next((d for d in valid if d >= target), valid[-1]))


class RandomPolicy:
    """Uniformly random allowed degree (its own seeded RNG)."""

    def __init__(self, mask: MaskKind = "paper", seed: int | None = None) -> None:
        self.mask = _check_mask(mask)
        self._seed = seed
        self.rng = np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> None:
        """Reseed (``seed`` from the run unless the policy was built with its own)."""
        self.rng = np.random.default_rng(self._seed if self._seed is not None else seed)

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """A uniformly random allowed non-zero degree, or reject if none."""
        valid = _valid_degrees(state, self.mask)
        return Decision(int(self.rng.choice(valid)) if valid else 0)


def _offered(degree: int, degrees: tuple[int, ...]) -> str:
    """The offered degrees for an error message: all of them when few, else the nearest ones."""
    if len(degrees) <= 16:
        return f"degrees: {degrees}"
    below = max((d for d in degrees if d < degree), default=None)
    above = min((d for d in degrees if d > degree), default=None)
    near = " or ".join(str(d) for d in (below, above) if d is not None)
    return f"{len(degrees)} degrees from {degrees[0]} to {degrees[-1]}; nearest: {near}"


class FixedDegree:
    """Always the same degree (``policy.degree=k``); ``degree=1`` is the sequential baseline."""

    def __init__(self, degree: int = 1) -> None:
        self.degree = _check_int(degree, "degree", 0)

    @staticmethod
    def check_config(node: Mapping[str, Any], topology: RampTopology) -> None:
        """Before any work: the degree must be one the cluster offers (hook of ``build.check_buildable``)."""
        degree = node.get("degree", 1)
        if isinstance(degree, int) and degree and degree not in topology.degrees:
            raise ConfigError(f"policy.degree={degree} is not offered on this cluster ({_offered(degree, topology.degrees)})")

    def reset(self, seed: int | None = None) -> None:
        """Stateless."""

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """Return the fixed degree (blocked by the simulator if it cannot be placed)."""
        if self.degree and self.degree not in state.feasibility.degrees:
            raise InvalidDecision(f"policy.degree={self.degree} is not offered on this cluster "
                                  f"({_offered(self.degree, state.feasibility.degrees)})")
        return Decision(self.degree)


class Sequential(FixedDegree):
    """Never partition: always degree 1."""

    def __init__(self) -> None:
        super().__init__(1)


def min_feasible_degree(table: FeasibilityTable, min_degree: int) -> int:
    """The ``MinFeasible(min_degree)`` rule: the smallest feasible degree >= ``min_degree``,
    else the largest feasible one below it, else 0 (tested in that order, stopping at the first)."""
    order = min_feasible_order(table.degrees, table.max_placeable_degree, min_degree)
    return next((d for d in order if table.feasible(d)), 0)


class MinFeasible:
    """The smallest degree that can be placed now and whose simulated JCT meets the target
    (exact feasibility: it rejects only when no degree works).

    Args:
        min_degree: Smallest degree to prefer (:func:`min_feasible_degree`).
        block_search: 0, or how many free blocks :func:`first_feasible_block` may look at.
        horizon_guard: See :func:`placed_decision`.
    """

    def __init__(self, min_degree: int = 1, block_search: int = 0, horizon_guard: bool = False) -> None:
        self.min_degree = _check_int(min_degree, "min_degree", 1)
        self.block_search = _check_int(block_search, "block_search", 0)
        self.horizon_guard = _check_bool(horizon_guard, "horizon_guard")

    def reset(self, seed: int | None = None) -> None:
        """Stateless."""

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """Smallest feasible degree (>= ``min_degree`` when possible), or reject."""
        return placed_decision(state.feasibility, min_feasible_degree(state.feasibility, self.min_degree),
                               self.block_search, horizon_left_s(state) if self.horizon_guard else None)

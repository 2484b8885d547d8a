"""Immutable job specifications and the workload that streams them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from workloads.arrivals import ArrivalProcess
from workloads.beta import BetaDistribution
from workloads.errors import WorkloadError
from workloads.graph import OpGraph, TrainingGraph


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A training job: a graph to train for ``num_training_steps`` steps within its JCT target.

    Attributes:
        job_id: Index of the job in its arrival stream (0-based).
        arrival_time_s: When the job arrives.
        graph: One training step (forward + backward ops).
        beta: JCT target as a fraction of the sequential JCT (accepted iff JCT <= beta x seq).
        num_training_steps: Steps the job runs (the paper uses 50).
        sequential_step_s: One step alone on the job's reference server, if the scenario sets one
            (``scenario=pipeline``: the cluster's fastest server); ``None``: the graph's step time.
    """

    job_id: int
    arrival_time_s: float
    graph: TrainingGraph
    beta: float
    num_training_steps: int
    sequential_step_s: float | None = None

    @property
    def model(self) -> str:
        """Name of the model the job trains."""
        return self.graph.name

    @property
    def sequential_jct_s(self) -> float:
        """JCT on one device with no communication: steps x sum of op times (spec §2.4), or x
        :attr:`sequential_step_s` when set."""
        step = self.graph.step_time_s if self.sequential_step_s is None else self.sequential_step_s
        return self.num_training_steps * step

    @property
    def max_jct_s(self) -> float:
        """The job's completion-time target: ``beta x sequential JCT``."""
        return self.beta * self.sequential_jct_s


class Workload:
    """Turns graphs, an arrival process and a JCT-target distribution into a job stream.

    Randomness comes from one seed, split into independent streams for arrival times, model
    choice and targets: the same seed yields the same jobs whatever policy runs on them.

    Args:
        graphs: The graph set jobs draw from (uniformly unless ``weights`` are given).
        arrivals: When jobs arrive (trace replay also names each job's model).
        beta: The JCT-target distribution.
        num_training_steps: Training steps per job.
        weights: Optional relative frequency of each graph (same order as ``graphs``).
        sequential_step: Optional: each graph's :attr:`JobSpec.sequential_step_s` (the JCT targets' base).
    """

    def __init__(self, graphs: Sequence[OpGraph], arrivals: ArrivalProcess, beta: BetaDistribution,
                 num_training_steps: int = 50, weights: Sequence[float] | None = None,
                 sequential_step: Callable[[TrainingGraph], float] | None = None) -> None:
        if not graphs:
            raise WorkloadError("no graphs loaded", field="workload.graphs")
        if int(num_training_steps) != num_training_steps or num_training_steps <= 0:
            raise WorkloadError(f"must be a positive integer, got {num_training_steps}",
                                field="workload.num_training_steps")
        self.training_graphs = tuple(TrainingGraph(g) for g in graphs)
        self.by_name = {g.name: g for g in self.training_graphs}
        self.sequential_steps = None if sequential_step is None else {
            g.name: sequential_step(g) for g in self.training_graphs}
        self.arrival_process = arrivals
        self.beta = beta
        self.num_training_steps = int(num_training_steps)
        if weights is None:
            self.weights = np.full(len(graphs), 1 / len(graphs))
        else:
            w = np.asarray(list(weights), dtype=np.float64)
            if w.shape != (len(graphs),) or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
                raise WorkloadError(f"need {len(graphs)} non-negative weights with a positive sum",
                                    field="workload.weights")
            self.weights = w / w.sum()
        self._cum_weights = np.cumsum(self.weights)
        self._cum_weights[-1] = 1.0
        models = getattr(arrivals, "models", None)
        if callable(models):
            missing = sorted(set(models()) - set(self.by_name))
            if missing:
                raise WorkloadError(f"the trace needs graphs that are not loaded: {', '.join(missing)} "
                                    "(add them to workload.graphs, e.g. workload=all)", field="workload.graphs")

    def jobs(self, seed: int | np.random.SeedSequence) -> Iterator[JobSpec]:
        """Yield the job stream for ``seed`` (infinite unless the arrival process ends)."""
        ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        arrival_rng, model_rng, beta_rng = (np.random.default_rng(s) for s in ss.spawn(3))
        for job_id, arrival in enumerate(self.arrival_process.arrivals(arrival_rng)):
            if arrival.model is None:
                idx = int(np.searchsorted(self._cum_weights, model_rng.random(), side="right"))
                graph = self.training_graphs[idx]
            else:
                graph = self.by_name[arrival.model]
            seq = self.sequential_steps
            yield JobSpec(job_id=job_id, arrival_time_s=arrival.time_s, graph=graph,
                          beta=self.beta.sample(beta_rng), num_training_steps=self.num_training_steps,
                          sequential_step_s=None if seq is None else seq[graph.name])

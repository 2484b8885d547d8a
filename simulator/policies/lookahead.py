"""Decision-time planning: Monte-Carlo rollouts of a fast rule over sampled futures.

For each arriving job, :class:`RolloutLookahead` evaluates every feasible action (each degree,
and reject) by simulating the next ``window_jobs`` arrivals under a fast base rule (the
``min_feasible`` family) on ``num_futures`` futures shared by all actions (common random
numbers). It leaves the default action (a wrapped policy, or the base rule) only for one that
blocks more than ``margin_jobs`` fewer jobs in expectation (against selection bias): one step of
Bertsekas's rollout algorithm. Futures come from the run's own workload (``futures=workload``,
on independent streams) or are bootstrap-resampled from the jobs seen so far (``observed``; the
default action until ``min_history`` jobs). For the base rule the rollout is exact with respect
to the simulator (same feasibility, release times and end-of-horizon accounting).
``futures=oracle`` is the foresight planner (issue 45, item 5): one future, the run's own next
``window_jobs`` arrivals, an estimate of what knowing the future can buy. With a window covering
the rest of the episode and the base rule as default, it blocks no more than the base rule
(rollout's cost improvement: every step keeps or improves the exact cost-to-go).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from simulator.cluster import ClusterState
from simulator.feasibility import Feasibility, FeasibilityTable
from simulator.policies.heuristics import min_feasible_degree
from simulator.policy import Decision, Policy
from simulator.topology import Block
from workloads.graph import TrainingGraph
from workloads.jobs import JobSpec, Workload

#: One future arrival: (gap to the previous arrival, graph, beta, training steps).
FutureJob = tuple[float, TrainingGraph, float, int]
#: Sampled arrivals, or (``futures=oracle``) the run's own jobs at their own times.
Future = list[FutureJob] | list[JobSpec]


class RolloutCluster:
    """The cluster as a rollout sees it: the servers held and a heap of ``(end time, mask)`` releases.

    Exact with respect to :class:`~simulator.simulation.Simulation` for decisions taken from the
    feasibility table: completions due at an arrival are released before it is decided, a job is
    accepted only when it is placed and meets its target, and it holds its servers for its JCT.
    Much cheaper than a second simulation (no events, no records). Used by the rollouts below and
    by the adaptive agent's shadow clusters.

    Args:
        engine: The feasibility engine (its caches are shared with the real cluster).
        occupied_mask: Servers held now.
        running: ``(end_time_s, server_mask)`` of the jobs holding them.
    """

    __slots__ = ("engine", "occupied_mask", "releases")

    def __init__(self, engine: Feasibility, occupied_mask: int = 0,
                 running: Iterable[tuple[float, int]] = ()) -> None:
        self.engine = engine
        self.occupied_mask = occupied_mask
        self.releases = list(running)
        heapq.heapify(self.releases)

    def table(self, job: JobSpec) -> FeasibilityTable:
        """Release what ends by ``job``'s arrival, then its feasibility table."""
        heap, t = self.releases, job.arrival_time_s
        while heap and heap[0][0] <= t:
            self.occupied_mask &= ~heapq.heappop(heap)[1]
        return self.engine.table(job, self.occupied_mask)

    def start(self, table: FeasibilityTable, degree: int, block: Block | None = None) -> bool:
        """Start ``table``'s job at ``degree`` (inside ``block`` if given, as a decision naming its
        servers) if the simulator would accept it; ``False``: blocked."""
        if degree == 0 or not table.meets_target(degree, block):
            return False
        placement, jct = table.placement(degree, block), table.jct_s(degree, block)
        assert placement is not None and jct is not None
        self.occupied_mask |= placement.mask
        heapq.heappush(self.releases, (table.job.arrival_time_s + jct, placement.mask))
        return True

    def start_min_feasible(self, job: JobSpec, min_degree: int) -> bool:
        """Release what ends by ``job``'s arrival and start it with ``MinFeasible(min_degree)``'s
        degree, placed by the scenario's placer: ``start(table(job), min_feasible_degree(table,
        min_degree))`` without building a table (the rollouts' hot loop); ``False``: blocked."""
        heap, t = self.releases, job.arrival_time_s
        while heap and heap[0][0] <= t:
            self.occupied_mask &= ~heapq.heappop(heap)[1]
        found = self.engine.min_feasible_start(job, self.occupied_mask, min_degree)
        if found is None:
            return False
        _, mask, jct_s = found
        self.occupied_mask |= mask
        heapq.heappush(heap, (t + jct_s, mask))
        return True

    def running_after(self, time_s: float) -> int:
        """Jobs that will still be running at ``time_s``."""
        return sum(1 for end, _ in self.releases if end > time_s)


class RolloutLookahead:
    """One-step policy improvement by Monte-Carlo rollouts (see module docstring).

    Args:
        default: The policy whose action is kept unless a rollout finds a clearly better one
            (``None``: the base rule itself).
        rollout_min_degree: ``k`` of the base rule used inside rollouts (``MinFeasible(k)``);
            ``None`` takes ``default.teacher_min_degree`` or ``default.min_degree`` when the
            default policy has one (a PAC-ML checkpoint records its warm-start teacher), else 1.
        window_jobs: Arrivals simulated after the decision.
        num_futures: Sampled futures per decision (shared by all actions).
        margin_jobs: Expected blocked jobs by which an action must beat the default one.
        min_history: Jobs to observe before planning (``futures=observed``).
        futures: ``workload``, ``observed`` or ``oracle`` (see module docstring; ``oracle``
            ignores ``num_futures`` and ``min_history``).
        seed: Seed of the future sampler (reset per episode with the episode seed).
    """

    #: Jobs drawn from the workload per pool stream, and streams in the pool.
    POOL_JOBS, POOL_STREAMS = 1000, 20

    def __init__(self, default: Policy | None = None, rollout_min_degree: int | None = None,
                 window_jobs: int = 100, num_futures: int = 32, margin_jobs: float = 0.25,
                 min_history: int = 30, futures: str = "workload", seed: int = 0) -> None:
        if futures not in ("workload", "observed", "oracle"):
            raise ValueError(f"policy.futures must be 'workload', 'observed' or 'oracle', got {futures!r}")
        for name, value, low in (("window_jobs", window_jobs, 1), ("num_futures", num_futures, 1),
                                 ("min_history", min_history, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"policy.{name} must be an integer >= {low}, got {value!r}")
        if not (isinstance(margin_jobs, int | float) and math.isfinite(margin_jobs) and margin_jobs >= 0):
            raise ValueError(f"policy.margin_jobs must be a number >= 0, got {margin_jobs!r}")
        if rollout_min_degree is None:
            rollout_min_degree = int(getattr(default, "teacher_min_degree", None)
                                     or getattr(default, "min_degree", None) or 1)
        if isinstance(rollout_min_degree, bool) or not isinstance(rollout_min_degree, int) or rollout_min_degree < 1:
            raise ValueError(f"policy.rollout_min_degree must be an integer >= 1, got {rollout_min_degree!r}")
        self.default = default
        self.rollout_min_degree = rollout_min_degree
        self.window_jobs = window_jobs
        self.num_futures = num_futures
        self.margin_jobs = float(margin_jobs)
        self.min_history = min_history
        self.futures = futures
        self.seed = seed
        self._pool: list[FutureJob] = []
        self._pool_source: int | None = None
        self._workload: Workload | None = None  # futures=oracle: the run's job stream
        self.stats = {"decisions": 0, "planned": 0, "changed": 0}
        #: Expected blocked jobs per candidate degree at the last planned decision (``{}`` when
        #: the last decision was not planned); read by distillation (``pacml.critic.distill``).
        self.last_scores: dict[int, float] = {}
        self.reset(None)

    def reset(self, seed: int | None = None) -> None:
        """Start an episode: forget the observed jobs, reseed the sampler."""
        self._rng = np.random.default_rng([self.seed, 0 if seed is None else int(seed)])
        self._seen: list[FutureJob] = []  # (gap_s, graph, beta, steps)
        self._last_arrival_s: float | None = None
        self._episode_seed, self._stream, self._ahead = seed, None, deque()
        if self.default is not None:
            self.default.reset(seed)

    def bind(self, workload: Workload) -> None:
        """Called by the simulation before an episode: the job distribution to sample futures
        from (``futures=workload``). The pool is drawn once per workload, on seeds no episode
        uses, and shared by all episodes. ``futures=oracle`` keeps the workload to replay the
        episode's own stream."""
        self._workload = workload
        if self.futures != "workload" or self._pool_source == id(workload):
            return
        pool: list[FutureJob] = []
        for stream in range(self.POOL_STREAMS):
            jobs = list(itertools.islice(workload.jobs(2**40 + 7919 * stream), self.POOL_JOBS))
            pool += [(b.arrival_time_s - a.arrival_time_s, b.graph, b.beta, b.num_training_steps)
                     for a, b in itertools.pairwise(jobs)]
        self._pool, self._pool_source = pool, id(workload)

    def _observe(self, job: JobSpec) -> None:
        gap = 0.0 if self._last_arrival_s is None else job.arrival_time_s - self._last_arrival_s
        self._last_arrival_s = job.arrival_time_s
        if len(self._seen) or gap > 0:  # the first job has no gap to learn from
            self._seen.append((gap, job.graph, job.beta, job.num_training_steps))

    def oracle_future(self, job: JobSpec) -> list[JobSpec]:
        """The ``window_jobs`` jobs that arrive after ``job`` in this episode: the workload's stream
        for the episode's seed, as the simulation draws it (``futures=oracle``)."""
        if self._stream is None:
            if self._workload is None or self._episode_seed is None:
                raise RuntimeError("futures=oracle needs bind(workload) and reset(seed) first (Simulation.run does both)")
            self._stream = self._workload.jobs(self._episode_seed)
        stream: Iterator[JobSpec] = self._stream
        ahead: deque[JobSpec] = self._ahead
        while True:
            if not ahead:
                ahead.append(next(stream))
            if ahead[0].job_id >= job.job_id:
                break
            ahead.popleft()
        if ahead[0].job_id != job.job_id or ahead[0].arrival_time_s != job.arrival_time_s:
            raise RuntimeError(f"futures=oracle: job {job.job_id} is not the stream's (another seed or workload?)")
        ahead.popleft()
        ahead.extend(itertools.islice(stream, self.window_jobs - len(ahead)))
        return list(ahead)

    def _blocked_in_future(self, engine: Feasibility, now_s: float, running: list[tuple[float, int]],
                           occupied: int, future: Future, horizon_s: float | None, paper: bool,
                           rollout_degree: Callable[[FeasibilityTable], int] | None = None) -> int:
        """Blocked jobs among ``future`` under the base rule (or ``rollout_degree``) (+ running at
        the horizon, if the run counts those)."""
        cluster = RolloutCluster(engine, occupied, running)
        blocked, t = 0, now_s
        k = self.rollout_min_degree
        reached_horizon = False
        # The targets' base where the scenario sets one (scenario=pipeline: the fastest server).
        seq = None if self._workload is None else self._workload.sequential_steps
        for item in future:
            if isinstance(item, JobSpec):  # futures=oracle: decided as the simulation decides it
                job = item
                if horizon_s is not None and (job.arrival_time_s >= horizon_s if paper else job.arrival_time_s > horizon_s):
                    reached_horizon = True
                    break
            else:
                gap, graph, beta, steps = item
                t += gap
                if horizon_s is not None and t >= horizon_s:
                    reached_horizon = True
                    break
                job = JobSpec(-1, t, graph, beta, steps, None if seq is None else seq[graph.name])
            if rollout_degree is None:
                blocked += not cluster.start_min_feasible(job, k)
            else:
                table = cluster.table(job)
                blocked += not cluster.start(table, rollout_degree(table))
        if paper and reached_horizon:
            blocked += cluster.running_after(horizon_s)  # type: ignore[arg-type]
        return blocked

    def sample_futures(self, source: list[FutureJob] | None = None) -> list[Future]:
        """``num_futures`` futures of ``window_jobs`` arrivals: contiguous stretches of the
        workload pool, or (``futures=observed``) jobs resampled from those seen."""
        if source is None:
            source = self._pool if self.futures == "workload" else self._seen
        if source is self._pool:  # contiguous stretches of independent streams
            starts = self._rng.integers(0, len(source) - self.window_jobs, size=self.num_futures)
            return [source[i:i + self.window_jobs] for i in starts]
        idx = self._rng.integers(0, len(source), size=(self.num_futures, self.window_jobs))
        return [[source[i] for i in row] for row in idx]

    def scores(self, state: ClusterState, candidates: Sequence[int], futures: list[Future],
               rollout_degree: Callable[[FeasibilityTable], int] | None = None) -> dict[int, float]:
        """Expected blocked jobs (the arriving one included) after each candidate degree (0:
        reject), over ``futures`` decided by the base rule, or by ``rollout_degree`` (a function
        of a job's feasibility table, e.g. another rule's)."""
        table = state.feasibility
        engine = table.engine
        paper = state.horizon_accounting == "paper"
        running = list(state.running)
        scores: dict[int, float] = {}
        for d in candidates:
            if d == 0:
                occupied, run, now_blocked = state.occupied_mask, running, 1
            else:
                placement, jct = table.placement(d), table.jct_s(d)
                assert placement is not None and jct is not None
                occupied = state.occupied_mask | placement.mask
                run, now_blocked = [*running, (state.time_s + jct, placement.mask)], 0
            scores[d] = now_blocked + float(np.mean(
                [self._blocked_in_future(engine, state.time_s, run, occupied, f, state.horizon_s, paper,
                                         rollout_degree) for f in futures]))
        return scores

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """The default action, or the action whose rollouts block clearly fewer jobs."""
        self._observe(job)
        self.stats["decisions"] += 1
        self.last_scores = {}
        table = state.feasibility
        default = (self.default.decide(job, state) if self.default is not None
                   else Decision(min_feasible_degree(table, self.rollout_min_degree)))
        source = self._pool if self.futures == "workload" else self._seen
        if self.futures == "oracle":
            source = [self.oracle_future(job)]  # advanced at every job, planned or not
        elif self.futures == "workload" and not source:
            raise RuntimeError("futures=workload needs bind(workload) first (Simulation.run does it)")
        if default.placement is not None or (source is self._seen and len(source) < self.min_history):
            return default  # placements chosen by the default policy are kept as they are
        candidates = [0, *(d for d in table.degrees if table.feasible(d))]
        if len(candidates) == 1:
            return default
        self.stats["planned"] += 1
        scores = self.scores(state, candidates, source if self.futures == "oracle" else self.sample_futures(source))
        self.last_scores = scores
        base = default.degree if default.degree in scores else 0
        best = min(candidates, key=lambda d: (scores[d], d))
        if scores[best] < scores[base] - self.margin_jobs:
            self.stats["changed"] += 1
            return Decision(best)
        return default

    def __repr__(self) -> str:  # shown in logs and run summaries
        return (f"RolloutLookahead(default={self.default!r}, k={self.rollout_min_degree}, "
                f"window_jobs={self.window_jobs}, num_futures={self.num_futures}, "
                f"margin_jobs={self.margin_jobs}, futures={self.futures!r})")


__all__ = ["RolloutLookahead"]

"""The SimPy simulation: jobs arrive, a policy decides, servers are held for the JCT and released.

At each arrival the driver (:meth:`Simulation.run` with a policy, or the Gymnasium environment)
calls :meth:`Simulation.next_job`, decides and calls :meth:`Simulation.apply`; an accepted job
holds its servers for exactly its JCT. ``horizon_accounting`` (``drain`` or ``paper``, spec §8.2):
docs/simulator.md. Final records go to a :class:`~simulator.records.RecordSink` and to the
running totals of the summary.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import math
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import simpy

from simulator.allocation.first_fit import Placement
from simulator.cluster import Cluster, ClusterState
from simulator.errors import ConfigError, InvalidDecision, raised_site
from simulator.feasibility import Feasibility, FeasibilityTable
from simulator.policy import (
    PROTOCOL,
    Decision,
    Policy,
    class_path,
    interface_problem,
    is_project_policy,
    source_site,
)
from simulator.records import (
    NAN,
    BlockReason,
    JobRecord,
    MemorySink,
    Outcome,
    RecordSink,
    SummaryAccumulator,
    format_servers,
)
from simulator.topology import Block
from workloads.errors import WorkloadError
from workloads.jobs import JobSpec, Workload

log = logging.getLogger(__name__)

HorizonAccounting = Literal["drain", "paper"]


class _CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (reported as events/s)."""

    def __init__(self) -> None:
        super().__init__()
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


@dataclass
class RunResult:
    """What a finished run returns: per-job records (sorted by job id; empty when the run
    streamed them to a :class:`~simulator.records.CsvStreamSink`) and the summary metrics."""

    records: list[JobRecord]
    summary: dict[str, Any]


@dataclass
class _Pending:
    job: JobSpec
    answered: simpy.Event
    table: FeasibilityTable | None = None


@dataclass
class _Running:
    job: JobSpec
    degree: int
    placement: Placement
    jct_s: float
    start_s: float
    cluster_bytes: float
    busy_server_s: float
    done: simpy.Event = field(repr=False)


class Simulation:
    """One episode of the cluster under a job stream.

    Args:
        workload: The job stream.
        feasibility: Placer + lookahead (its caches may be shared across episodes).
        seed: Seed of the job stream.
        horizon_s: Last arrival time considered; ``None`` runs until the arrival process ends
            (trace replay).
        horizon_accounting: ``drain`` or ``paper`` (see module docstring).
        sink: Where finished records go (default: a new :class:`~simulator.records.MemorySink`,
            whose list is :attr:`records`).
    """

    def __init__(self, workload: Workload, feasibility: Feasibility, *, seed: int,
                 horizon_s: float | None, horizon_accounting: HorizonAccounting = "drain",
                 sink: RecordSink | None = None) -> None:
        if horizon_s is not None and not (math.isfinite(horizon_s) and horizon_s > 0):
            raise ConfigError(f"must be a finite number > 0 or null, got {horizon_s!r}", field="horizon_s")
        if horizon_accounting not in ("drain", "paper"):
            raise ConfigError(f"must be 'drain' or 'paper', got {horizon_accounting!r}",
                              field="horizon_accounting")
        if horizon_accounting == "paper" and horizon_s is None:
            raise ConfigError("paper accounting needs a finite horizon_s", field="horizon_accounting")
        self.workload = workload
        self.feasibility = feasibility
        self.topology = feasibility.topology
        self.seed = seed
        self.horizon_s = horizon_s
        self.accounting: HorizonAccounting = horizon_accounting
        self.env = _CountingEnvironment()
        self.cluster = Cluster(self.topology)
        self.sink: RecordSink = MemorySink() if sink is None else sink
        self.totals = SummaryAccumulator(horizon_s)  # running totals of every record (the summary)
        self._jobs: Iterator[JobSpec] = workload.jobs(seed)
        self._pending: _Pending | None = None
        self._upcoming: JobSpec | None = None
        self._running: dict[int, _Running] = {}
        self._ends: list[tuple[float, int]] = []  # (end time, job id) of running jobs
        self._request: simpy.Event = self.env.event()
        self._finished = self.env.event()
        self._decided = 0
        self._num_arrived = 0
        self._first_arrival_s = 0.0
        self._finalized = False
        # (end time, server mask) of running jobs, sorted: ClusterState.running without a sort.
        self._running_sorted: list[tuple[float, int]] = []
        # (end time, mask, servers) of the same jobs: ClusterState.releases without bit counts.
        self._releases_sorted: list[tuple[float, int, int]] = []
        self._live_state: weakref.ref[ClusterState] | None = None  # last state, while its running is lazy
        self._wall_start = time.perf_counter()
        self.env.process(self._arrivals())
        if horizon_accounting == "paper":
            self.env.process(self._stop_at_horizon())

    # ------------------------------------------------------------------ SimPy processes
    def _arrivals(self) -> Any:
        for job in self._jobs:
            if self.horizon_s is not None and job.arrival_time_s > self.horizon_s:
                break
            self._upcoming = job
            if job.arrival_time_s > self.env.now:
                yield self.env.timeout(job.arrival_time_s - self.env.now)
            self._upcoming = None
            if self._num_arrived == 0:
                self._first_arrival_s = self.env.now
            self._num_arrived += 1
            self.sink.arrived(job.job_id)
            self._pending = _Pending(job, self.env.event())
            self._request.succeed(job)
            yield self._pending.answered
        self._upcoming = None
        if self.accounting == "drain":
            while self._running:
                yield self.env.all_of([r.done for r in self._running.values()])
            if not self._finished.triggered:
                self._finished.succeed()

    def _stop_at_horizon(self) -> Any:
        yield self.env.timeout(self.horizon_s)
        if not self._finished.triggered:
            self._finished.succeed()

    def _run_job(self, run: _Running) -> Any:
        yield self.env.timeout(run.jct_s)
        if self._finished.triggered:  # paper accounting stopped the clock first
            return
        self.cluster.release(run.job.job_id)
        del self._running[run.job.job_id]
        self._freeze_state()
        entry = (run.start_s + run.jct_s, run.placement.mask)
        del self._running_sorted[bisect.bisect_left(self._running_sorted, entry)]
        del self._releases_sorted[bisect.bisect_left(self._releases_sorted, entry)]
        heap = self._ends  # drop finished jobs from the top (lazy deletion), keeping it ~running
        while heap and heap[0][1] not in self._running:
            heapq.heappop(heap)
        self._resolve(self._record(run.job, run.degree, run.placement, "completed", "", run.jct_s,
                                   run.start_s, self.env.now, run.cluster_bytes, run.busy_server_s))
        run.done.succeed()

    @property
    def records(self) -> list[JobRecord]:
        """Records of the jobs resolved so far, kept by the sink (empty with a streaming sink)."""
        return self.sink.records

    def _resolve(self, record: JobRecord) -> None:
        """A job's outcome is final: count it and hand its record to the sink."""
        self.totals.add(record)
        self.sink.add(record)

    # ------------------------------------------------------------------ driving API
    def next_job(self) -> JobSpec | None:
        """Advance to the next arrival needing a decision; ``None`` once the run is over."""
        if self._pending is not None:
            raise RuntimeError("apply() a decision for the pending job before asking for the next")
        if self._finished.triggered:
            return None
        self._request = self.env.event()
        self.env.run(until=self.env.any_of([self._request, self._finished]))
        # Completions due at this instant are released before the decision (as the original
        # advanced its clock through completions first); SimPy may order equal-time events the
        # other way round, so process any that are still queued for now.
        while self._pending is not None and self.env.peek() == self.env.now and self._completion_due():
            self.env.step()
        if self._pending is None:
            return None
        if self._finished.triggered:  # paper accounting: arrived at the horizon, never decided
            self._upcoming, self._pending = self._pending.job, None
            return None
        self._pending.table = self.feasibility.table(self._pending.job, self.cluster.occupied_mask)
        return self._pending.job

    def _completion_due(self) -> bool:
        """A running job's completion is due now but not processed yet (lazy-deletion heap)."""
        heap = self._ends
        while heap and heap[0][1] not in self._running:
            heapq.heappop(heap)
        return bool(heap) and heap[0][0] <= self.env.now

    def state(self) -> ClusterState:
        """Snapshot for the pending job's decision (includes its feasibility table)."""
        if self._pending is None or self._pending.table is None:
            raise RuntimeError("no job is waiting for a decision")
        self._freeze_state()
        gaps = self._num_arrived - 1
        mean_gap = (self.env.now - self._first_arrival_s) / gaps if gaps > 0 else float("nan")
        state = ClusterState(time_s=self.env.now, topology=self.topology,
                             occupied_mask=self.cluster.occupied_mask,
                             num_running_jobs=self.cluster.num_running_jobs,
                             feasibility=self._pending.table,
                             horizon_s=self.horizon_s, mean_interarrival_s=mean_gap,
                             running_source=self._running_now, horizon_accounting=self.accounting,
                             releases_source=self._releases_now)
        self._live_state = weakref.ref(state)
        return state

    def _running_now(self) -> tuple[tuple[float, int], ...]:
        """``(end_time_s, server_mask)`` of the running jobs, by end time (``ClusterState.running``)."""
        return tuple(self._running_sorted)

    def _releases_now(self) -> tuple[tuple[float, int], ...]:
        """``(end_time_s, num_servers)`` of the running jobs, by end time (``ClusterState.releases``)."""
        return tuple((end_s, n) for end_s, _, n in self._releases_sorted)

    def _freeze_state(self) -> None:
        """Before the running jobs change: a state handed out and still referenced builds its lazy
        ``running`` now, so that it stays a snapshot of its decision."""
        ref, self._live_state = self._live_state, None
        state = ref() if ref is not None else None
        if state is not None and "running" not in state.__dict__:
            state.__dict__["running"] = self._running_now()  # what the cached_property stores
            if "releases" not in state.__dict__:
                state.__dict__["releases"] = self._releases_now()

    def apply(self, decision: Decision) -> JobRecord | None:
        """Apply ``decision`` to the pending job; returns its record if it was blocked now, ``None``
        if it was accepted.

        Raises:
            InvalidDecision: A degree outside the action set or a placement that is not a free
                symmetric block of that degree.
        """
        pending = self._pending
        if pending is None or pending.table is None:
            raise RuntimeError("no job is waiting for a decision")
        job, table = pending.job, pending.table
        degree = decision.degree
        if isinstance(degree, bool) or int(degree) != degree or (degree != 0 and degree not in table.degrees):
            raise InvalidDecision(f"job {job.job_id}: degree {degree!r} is not 0 or one of {table.degrees}")
        degree = int(degree)
        block = self._resolve_block(degree, decision.placement, job)
        record: JobRecord | None = None
        if degree == 0:
            record = self._blocked(job, 0, "rejected")
        else:
            placement = table.placement(degree, block)
            if placement is None:
                record = self._blocked(job, degree, "no_placement")
            else:
                step = table.step(degree, block)
                assert step is not None
                jct = step.step_time_s * job.num_training_steps
                if not table.meets_target(degree, block):
                    record = self._blocked(job, degree, "jct_target", placement, jct)
                else:
                    self._start(job, degree, placement, jct,
                                self.feasibility.step_model.partitioner.total_bytes(job.graph, degree),
                                step.compute_s * job.num_training_steps)
        self._pending = None
        self._decided += 1
        pending.answered.succeed()
        return record

    def _resolve_block(self, degree: int, servers: Any, job: JobSpec) -> Block | None:
        if servers is None:
            return None
        if isinstance(servers, Block):
            servers = servers.servers
        wanted = tuple(int(s) for s in servers)
        # Found by formula (the cluster's blocks are never enumerated: 52.7 million on 65,536 servers).
        blk = self.topology.find_block(wanted) if degree and len(wanted) == degree else None
        if blk is not None:
            if blk.mask & self.cluster.occupied_mask:
                raise InvalidDecision(f"job {job.job_id}: placement {wanted} uses busy servers")
            return blk
        raise InvalidDecision(f"job {job.job_id}: placement {wanted} is not a symmetric block of {degree} servers")

    def _start(self, job: JobSpec, degree: int, placement: Placement, jct_s: float,
               cluster_bytes: float, busy_server_s: float) -> None:
        self.cluster.allocate(job.job_id, placement)
        run = _Running(job, degree, placement, jct_s, self.env.now, cluster_bytes, busy_server_s,
                       self.env.event())
        self._running[job.job_id] = run
        self._freeze_state()
        bisect.insort(self._running_sorted, (run.start_s + jct_s, placement.mask))
        bisect.insort(self._releases_sorted, (run.start_s + jct_s, placement.mask, placement.num_servers))
        heapq.heappush(self._ends, (run.start_s + jct_s, job.job_id))
        self.env.process(self._run_job(run))

    def _blocked(self, job: JobSpec, degree: int, reason: BlockReason, placement: Placement | None = None,
                 jct_s: float = NAN) -> JobRecord:
        rec = self._record(job, degree, placement, "blocked", reason, jct_s, NAN, NAN, NAN, NAN)
        self._resolve(rec)
        return rec

    def _record(self, job: JobSpec, degree: int, placement: Placement | None, outcome: Outcome,
                reason: BlockReason, jct_s: float, start_s: float, end_s: float,
                cluster_bytes: float, busy_server_s: float) -> JobRecord:
        servers = placement.servers if placement is not None else ()
        return JobRecord(
            job_id=job.job_id, model=job.model, arrival_time_s=job.arrival_time_s, beta=job.beta,
            sequential_jct_s=job.sequential_jct_s, max_jct_s=job.max_jct_s, degree=degree,
            num_servers=len(servers),
            servers=format_servers(self.topology, servers),
            outcome=outcome, block_reason=reason, jct_s=jct_s, start_time_s=start_s,
            completion_time_s=end_s,
            speedup=job.sequential_jct_s / jct_s if jct_s and not math.isnan(jct_s) else NAN,
            demand_bytes=job.graph.demand_bytes, cluster_bytes=cluster_bytes, busy_server_s=busy_server_s)

    # ------------------------------------------------------------------ whole runs
    def run(self, policy: Policy, progress: Any = None) -> RunResult:
        """Run the episode with ``policy`` and return its records and summary.

        Args:
            policy: Decides every arriving job.
            progress: Optional tqdm-like bar; updated with simulated time (``total`` = horizon).
        """
        problem = interface_problem(type(policy))
        if problem is not None:
            self.sink.abort()
            raise InvalidDecision(problem)
        user = not is_project_policy(policy)
        shown = 0.0
        calling = ""  # the policy method running now: an exception there is the policy's
        job: JobSpec | None = None
        try:
            bind = getattr(policy, "bind", None)
            if callable(bind):  # planners that sample futures from the job distribution
                calling = "bind"
                bind(self.workload)
            calling = "reset"
            policy.reset(self.seed)
            calling = ""
            while (job := self.next_job()) is not None:
                calling = "decide"
                decision = policy.decide(job, self.state())
                calling = ""
                if not isinstance(decision, Decision):
                    raise InvalidDecision(
                        f"{source_site(type(policy).decide)}: {class_path(type(policy))}.decide returned {decision!r:.60} "
                        f"({type(decision).__name__}) for job {job.job_id}, not a Decision: {PROTOCOL}")
                self.apply(decision)
                if progress is not None and self.env.now > shown:
                    progress.update(self.env.now - shown)
                    shown = self.env.now
            return self.finalize()
        except InvalidDecision as exc:
            self.sink.abort()  # e.g. a streamed jobs.csv is not left half written
            if not user or str(exc).startswith(source_site(type(policy).decide)):
                raise
            raise InvalidDecision(f"{source_site(type(policy).decide)}: {class_path(type(policy))}.decide: {exc}") from None
        except (ConfigError, WorkloadError):
            self.sink.abort()
            raise
        except Exception as exc:
            self.sink.abort()
            if not (user and calling):  # a bug of ours keeps its traceback
                raise
            method = getattr(type(policy), calling)
            where = "" if job is None or calling != "decide" else f" (job {job.job_id})"
            message = " ".join(str(exc).split())[:200]
            raise InvalidDecision(f"{raised_site(exc.__traceback__, method)}: {class_path(type(policy))}.{calling} raised "
                                  f"{type(exc).__name__}{': ' + message if message else ''}{where}") from None
        except BaseException:
            self.sink.abort()
            raise

    def finalize(self) -> RunResult:
        """Close the books (end-of-horizon accounting) and summarise; call once the run is over."""
        if self._finalized:
            raise RuntimeError("finalize() was already called")
        if self._pending is not None:
            raise RuntimeError("a job is still waiting for a decision")
        self._finalized = True
        if self.horizon_s is None:  # the window is [0, now]: clip jobs a stopped run leaves running
            self.totals.set_window(self.env.now)
        paper = self.accounting == "paper"  # jobs still running at the horizon are blocked
        for run in sorted(self._running.values(), key=lambda r: r.job.job_id):
            self._resolve(self._record(run.job, run.degree, run.placement, "blocked" if paper else "running",
                                       "running_at_horizon" if paper else "", run.jct_s, run.start_s, NAN,
                                       run.cluster_bytes, run.busy_server_s))
        upcoming = self._upcoming
        if upcoming is not None and self.horizon_s is not None and upcoming.arrival_time_s <= self.horizon_s:
            self._resolve(self._record(upcoming, 0, None, "unresolved", "", NAN, NAN, NAN, NAN, NAN))
        self.sink.close()
        summary = self.totals.summary(num_servers=self.topology.num_servers)
        wall = time.perf_counter() - self._wall_start
        summary.update({
            "wall_time_s": wall,
            "events_simulated": self.env.events_processed,
            "events_per_s": self.env.events_processed / wall if wall > 0 else NAN,
            "jobs_per_s": self.totals.num_jobs / wall if wall > 0 else NAN,
            "num_decisions": self._decided,
            "seed": self.seed,
            "horizon_accounting": self.accounting,
            **self.feasibility.step_model.cache_info(),
        })
        op_placer = getattr(self.feasibility.placer, "op_placer", None)
        if op_placer is not None:  # first fit adds nothing: its summaries stay as they were
            summary.update(op_placer.info())
        return RunResult(self.records, summary)

"""Op-level step model (the "lookahead"): one training step of a placed, partitioned job (spec §7).

* Each server runs one sub-op at a time, to completion, shortest compute first (SRPT with static
  priorities, ties by sub-op index); the original re-picked every tick (well under 0.1 % apart).
* A sub-op is ready when every non-sync in-dependency's source finished and its transfer (or
  collective) elapsed; transfers run in parallel (RAMP links are uncontended).
* Weight-sync messages never gate a sub-op; the step ends when all sub-ops finished and all sync
  messages arrived. ``JCT = step time x training steps``; a server of speed ``v`` takes ``time / v``.

It runs on :class:`simulator.partition.AggregatePartition` (cost O(sub-ops + training edges));
step times and ``compute_s`` equal the dependency-level reference (:meth:`StepModel.reference_step`,
:func:`simulate_step`) bit for bit, ``comm_s`` up to summation order. Results are cached by
``(graph, degree, placement signature)``: servers renamed alike share an entry, server kinds are in
the signature, and the op placer needs no place in the key (equal placements time equally).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from simulator.allocation.first_fit import Placement
from simulator.comm import RampCommModel
from simulator.partition import AggregatePartition, PartitionedGraph, Partitioner
from simulator.place.kernel import (
    aggregate_layout,
    aggregate_schedule_nb,
    compact_levels,
    list_schedule_fast,
)
from workloads.graph import TrainingGraph

_FINISH, _RELEASE = 0, 1


@dataclass(frozen=True, slots=True)
class StepResult:
    """Timing of one training step.

    Attributes:
        step_time_s: Wall time of one step.
        compute_s: Total sub-op compute time in one step (summed over servers).
        comm_s: Total time of all dependency transfers in one step (summed, overlapping).
        num_sub_ops: Sub-ops simulated.
        num_deps: Dependencies simulated.
    """

    step_time_s: float
    compute_s: float
    comm_s: float
    num_sub_ops: int
    num_deps: int


def list_schedule(out_ptr: list[int], out_dst: list[int], indeg: list[int], out_dur: list[float],
                  dur: list[float], server: list[int], sources: list[int]) -> tuple[list[float], list[float]]:
    """The reference list-scheduling kernel (pure Python) of the cluster simulator and the op placer.

    Both run its compiled twin :func:`simulator.place.kernel.list_schedule_fast`, which must stay
    equal to it bit for bit; this one is the readable specification the tests compare against.

    Each server (device) runs one task at a time, to completion; among its ready tasks it starts
    the shortest first, ties by index. A task is ready when every in-edge has arrived (source
    finished plus the edge's duration). Edges are given in CSR form: task ``i``'s successors are
    ``out_dst[out_ptr[i]:out_ptr[i+1]]`` with durations ``out_dur`` at the same positions.

    Returns:
        ``(start, finish)`` time of every task.

    Raises:
        RuntimeError: If some task never becomes ready (a cycle).
    """
    n = len(dur)
    pending = list(indeg)
    ready_at = [0.0] * n
    start = [0.0] * n
    finish = [0.0] * n
    ready: dict[int, list[tuple[float, int]]] = {}
    busy: set[int] = set()
    events: list[tuple[float, int, int]] = [(0.0, _RELEASE, op) for op in sources]
    heapq.heapify(events)
    touched: set[int] = set()
    push, pop = heapq.heappush, heapq.heappop
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, op = pop(events)
            s = server[op]
            if kind == _FINISH:
                finish[op] = now
                busy.discard(s)
                for k in range(out_ptr[op], out_ptr[op + 1]):
                    d = out_dst[k]
                    arrive = now + out_dur[k]
                    if arrive > ready_at[d]:
                        ready_at[d] = arrive
                    pending[d] -= 1
                    if pending[d] == 0:
                        if ready_at[d] <= now:
                            push(ready.setdefault(server[d], []), (dur[d], d))
                            touched.add(server[d])
                        else:
                            push(events, (ready_at[d], _RELEASE, d))
            else:
                push(ready.setdefault(s, []), (dur[op], op))
            touched.add(s)
        for s in touched:
            queue = ready.get(s)
            if queue and s not in busy:
                _, op = pop(queue)
                busy.add(s)
                start[op] = now
                push(events, (now + dur[op], _FINISH, op))
        touched.clear()
    if any(pending):
        raise RuntimeError("step model deadlock: the graph has a cycle")
    return start, finish


def simulate_step(pg: PartitionedGraph, sub_server: np.ndarray, dep_time_s: np.ndarray,
                  sub_time_s: np.ndarray | None = None) -> float:
    """List-schedule one step of ``pg`` on its servers; return the step time in seconds.

    Args:
        pg: The partitioned graph.
        sub_server: Server of each sub-op.
        dep_time_s: Duration of each dependency.
        sub_time_s: Duration of each sub-op on its server (default: ``pg.sub_time_s``, the
            profiled GPU's).
    """
    out_ptr, out_dst, indeg, out_dep, sources = pg.schedule_index
    dur = pg.sub_time_s if sub_time_s is None else sub_time_s
    # The compiled kernel: list_schedule's semantics, bit for bit (tests/simulator/place/test_objectives.py).
    _, fin = list_schedule_fast(out_ptr, out_dst, indeg, dep_time_s[out_dep], dur, sub_server, sources)
    step = float(fin.max()) if len(fin) else 0.0
    if pg.dep_is_sync.any():
        sync = np.flatnonzero(pg.dep_is_sync)
        step = max(step, float((fin[pg.dep_src[sync]] + dep_time_s[sync]).max()))
    return step


class CachedStepModel:
    """The lookahead cache every step model shares: :meth:`step` answers a (graph, degree,
    placement signature) from the cache or prices it once with :meth:`price`."""

    def __init__(self) -> None:
        self._cache: dict[tuple, StepResult] = {}
        self.num_lookaheads = 0
        """Lookaheads actually simulated (cache misses)."""
        self.num_cache_hits = 0
        """Lookahead requests answered from the cache."""
        self.lookahead_wall_s = 0.0
        """Wall time spent simulating lookaheads."""

    def price(self, graph: TrainingGraph, degree: int, placement: Placement) -> StepResult:
        """One step of ``graph`` at ``degree`` on ``placement``, uncached."""
        raise NotImplementedError

    def step(self, graph: TrainingGraph, degree: int, placement: Placement) -> StepResult:
        """Time one training step of ``graph`` at ``degree`` on ``placement`` (cached)."""
        key = (graph.fingerprint, degree, placement.signature)
        hit = self._cache.get(key)
        if hit is not None:
            self.num_cache_hits += 1
            return hit
        t0 = time.perf_counter()
        result = self.price(graph, degree, placement)
        self.lookahead_wall_s += time.perf_counter() - t0
        self.num_lookaheads += 1
        self._cache[key] = result
        return result

    def cache_info(self) -> dict[str, float]:
        """Cache statistics: lookaheads simulated, hits, and wall time spent simulating."""
        return {"lookaheads": self.num_lookaheads, "lookahead_cache_hits": self.num_cache_hits,
                "lookahead_wall_s": self.lookahead_wall_s}


class StepModel(CachedStepModel):
    """Prices a partitioned job on its servers, with a lookahead cache.

    Args:
        partitioner: Builds partitioned graphs.
        comm: Communication-time model.
    """

    def __init__(self, partitioner: Partitioner, comm: RampCommModel) -> None:
        super().__init__()
        self.partitioner = partitioner
        self.comm = comm
        self._price_cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        topology = comm.topology
        # Per-server speeds only when servers differ: a homogeneous cluster keeps its exact arithmetic.
        self._speed = np.asarray(topology.server_speed, dtype=np.float64) if topology.heterogeneous else None

    def price(self, graph: TrainingGraph, degree: int, placement: Placement) -> StepResult:
        """One step of ``graph`` at ``degree`` on ``placement``: :meth:`simulate` of its aggregate."""
        return self.simulate(self.partitioner.aggregate(graph, degree), placement)

    def reference_step(self, graph: TrainingGraph, degree: int, placement: Placement) -> StepResult:
        """:meth:`step` on the dependency-level graph (uncached): the readable reference.

        Materialises every dependency (O(sum of n_u x n_v)); for tests and small degrees.
        """
        return self.simulate_dependencies(self.partitioner.partition(graph, degree), placement)

    def _prices(self, ap: AggregatePartition) -> tuple[np.ndarray, np.ndarray]:
        """Placement-independent times of a partition: each edge's point-to-point time (0 for no
        bytes) and ``(2n, 8)`` weight-sync pair times per op and difference class (cached)."""
        key = (ap.graph.fingerprint, ap.degree, self.partitioner.split_ops)
        hit = self._price_cache.get(key)
        if hit is not None:
            return hit
        p2p = self.comm.point_to_point_s(ap.edge_size_bytes, np.zeros(ap.num_edges, dtype=bool))
        # Class D: bit 1 other communication group, 2 other rack, 4 other in-rack index.
        d = np.arange(8)
        bytes_ = np.repeat(ap.sync_pair_bytes, 8)
        cls = np.tile(d, len(ap.sync_pair_bytes))
        t = self.comm.collective_s(bytes_, 1 + (cls & 1), 1 + ((cls >> 1) & 1), 1 + ((cls >> 2) & 1))
        t = np.where((cls == 0) | (bytes_ <= 0), 0.0, t).reshape(-1, 8)
        for arr in (p2p, t):
            arr.setflags(write=False)
        self._price_cache[key] = (p2p, t)
        return p2p, t

    def simulate(self, ap: AggregatePartition, placement: Placement) -> StepResult:
        """One step of ``ap`` on ``placement``, uncached (what :meth:`step` runs on a cache miss).

        Cost O(sub-ops + sum over edges of n_u + n_v), whatever the degree; the step time equals
        :meth:`simulate_dependencies`' bit for bit.
        """
        sub_server = placement.sub_op_servers(ap.splits)
        used, local = np.unique(sub_server, return_inverse=True)
        local = local.astype(np.int64)
        levels, sizes = compact_levels(*(np.ascontiguousarray(lv[used]) for lv in self.comm.server_levels()))
        num_groups = len(ap.group_key)
        n2 = len(ap.op_splits)
        # Ops with weight sync: the split backward ops.
        sync_ops = np.flatnonzero(ap.op_splits[n2 // 2:] > 1).astype(np.int64) + n2 // 2
        group_coll = np.zeros(num_groups, dtype=bool)
        touch = np.zeros((num_groups, 4), dtype=np.int64)
        edge_same = np.zeros(ap.num_edges, dtype=np.int64)
        # Weight sync: sub-op l's longest pair time over the classes its partners fall in.
        sync_extra = np.full(ap.num_sub_ops, -np.inf)
        sync_pairs = np.zeros((n2, 8), dtype=np.int64)
        p2p_s, sync_s = self._prices(ap)
        aggregate_layout(ap.offset, ap.op_splits, local, len(used), levels, sizes, ap.group_key, ap.group_ptr,
                         ap.group_edges, ap.edge_u, ap.edge_v, sync_ops, sync_s, group_coll, touch, edge_same,
                         sync_extra, sync_pairs)
        tg = self.comm.collective_s(ap.group_bytes, touch[:, 0], touch[:, 1], touch[:, 2])
        tg = np.where((touch[:, 3] <= 1) | (ap.group_bytes <= 0), 0.0, tg)
        grouped = ap.edge_group >= 0
        coll_edge = np.zeros(ap.num_edges, dtype=bool)
        coll_edge[grouped] = group_coll[ap.edge_group[grouped]]
        edge_p2p = ~coll_edge & (ap.edge_size_bytes > 0)
        edge_time = np.where(coll_edge, tg[np.maximum(ap.edge_group, 0)] if num_groups else 0.0, p2p_s)
        dur = ap.sub_time_s if self._speed is None else ap.sub_time_s / self._speed[sub_server]
        finish = np.empty(ap.num_sub_ops)
        step = aggregate_schedule_nb(ap.offset, ap.sub_origin, np.ascontiguousarray(dur), local, len(used),
                                     ap.out_ptr, ap.out_edges, ap.edge_v, edge_p2p, edge_time, ap.in_degree,
                                     sync_extra, finish)
        if step < 0:
            raise RuntimeError("step model deadlock: the graph has a cycle")
        comm = np.where(coll_edge, edge_time * ap.edge_count,
                        np.where(edge_p2p, edge_time * (ap.edge_count - edge_same), 0.0))
        comm_s = float(comm.sum() + (sync_pairs * sync_s).sum())
        return StepResult(step_time_s=float(step), compute_s=float(dur.sum()), comm_s=comm_s,
                          num_sub_ops=ap.num_sub_ops, num_deps=ap.num_deps)

    def simulate_dependencies(self, pg: PartitionedGraph, placement: Placement) -> StepResult:
        """One step on the dependency-level graph, uncached: every dependency priced by
        :meth:`RampCommModel.dependency_times_s` and list-scheduled (the reference)."""
        sub_server = placement.sub_op_servers(pg.splits)
        dep_time = self.comm.dependency_times_s(
            sub_server[pg.dep_src], sub_server[pg.dep_dst], pg.dep_bytes, pg.dep_group, pg.group_is_sync)
        dur = None if self._speed is None else pg.sub_time_s / self._speed[sub_server]
        step = simulate_step(pg, sub_server, dep_time, dur)
        return StepResult(step_time_s=step, compute_s=float((pg.sub_time_s if dur is None else dur).sum()),
                          comm_s=float(dep_time.sum()), num_sub_ops=pg.num_sub_ops, num_deps=pg.num_deps)


"""Search baselines: the reference program's local search and simulated annealing.

Both move whole groups; on the ``pipeline`` objective with one transfer time per sending node a
move is priced incrementally by a compiled kernel. In detail: docs/op-placement.md ("The
heuristics and searches in detail").
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray

from simulator.errors import ConfigError
from simulator.place.heuristics import HeftPlacer, METFPlacer, PipeDreamPlacer
from simulator.place.objectives import BoundObjective, PipelineObjective
from simulator.place.placer import (
    PlacerResult,
    accelerators,
    check_bool,
    check_float,
    check_int,
    expand_groups,
    timed_place,
)

log = logging.getLogger(__name__)

#: A move must lower the objective by more than this to count (the program's 1e-5 ms).
IMPROVEMENT_TOLERANCE_S = 1e-8


# ---------------------------------------------------------------------- cost model
@dataclass(frozen=True)
class NodeCosts:
    """The pipeline objective's communication reduced to one transfer time per sending node.

    Attributes:
        cost_s: Transfer time a node pays (sending) or causes (receiving), per node: the smallest
            time of any of its edges to another group between any two distinct devices.
        exact: Whether that is every such edge's time on every device pair, so that the
            per-node model *is* the objective (else it is a lower bound on it).
    """

    cost_s: NDArray[np.float64]
    exact: bool


def pipeline_node_costs(objective: BoundObjective) -> NodeCosts:
    """Per-node transfer times of ``objective`` (see :class:`NodeCosts`)."""
    g, dev = objective.graph, objective.devices
    n, d = g.num_nodes, dev.num_devices
    cost = np.zeros(n)
    if not g.num_edges or d < 2:
        return NodeCosts(cost, True)
    src, dst = g.edges[:, 0], g.edges[:, 1]
    cross = g.group[src] != g.group[dst]
    e = g.num_edges
    # Time of every edge with its source on device a and its destination on b.
    times = np.stack([np.where(objective.has_fixed, objective.fixed_cost,
                               dev.transfer_time_s(np.full(e, a), np.full(e, b), objective.edge_bytes))
                      for a in range(d) for b in range(d) if a != b], axis=1)
    times = times[cross]
    s = src[cross]
    cost[:] = np.inf
    np.minimum.at(cost, s, times.min(axis=1))
    top = np.zeros(n)
    np.maximum.at(top, s, times.max(axis=1))
    cost[np.isinf(cost)] = 0.0
    exact = bool(np.allclose(top, cost, rtol=1e-12, atol=0.0))
    return NodeCosts(cost, exact)


# ---------------------------------------------------------------------- compiled kernel
@njit(cache=True)
def _contrib(w, dev, cnt, outdeg, cost, no_comm, out, sign):  # pragma: no cover - compiled
    c = cost[w]
    if c == 0.0:
        return
    d0 = dev[w]
    if outdeg[w] - cnt[w, d0] > 0 and not no_comm[d0]:
        out[d0] += sign * c
    for d in range(cnt.shape[1]):
        if d != d0 and cnt[w, d] > 0 and not no_comm[d]:
            out[d] += sign * c


@njit(cache=True)
def _full_loads(dev, cnt, outdeg, cost, no_comm, time, out):  # pragma: no cover - compiled
    for d in range(out.shape[0]):
        out[d] = 0.0
    for w in range(dev.shape[0]):
        out[dev[w]] += time[w, dev[w]]
    for w in range(dev.shape[0]):
        _contrib(w, dev, cnt, outdeg, cost, no_comm, out, 1.0)


@njit(cache=True)
def _move(g, b, commit, mem_ptr, members, pred_ptr, preds, dev, cnt, outdeg, cost, no_comm, time,
          loads, buf, mark, stamp, affected):  # pragma: no cover - compiled
    """Loads after moving group ``g`` to device ``b`` (into ``buf``); undone unless ``commit``."""
    for d in range(loads.shape[0]):
        buf[d] = loads[d]
    n_aff = 0
    for i in range(mem_ptr[g], mem_ptr[g + 1]):
        u = members[i]
        if mark[u] != stamp:
            mark[u] = stamp
            affected[n_aff] = u
            n_aff += 1
        for j in range(pred_ptr[u], pred_ptr[u + 1]):
            p = preds[j]
            if mark[p] != stamp:
                mark[p] = stamp
                affected[n_aff] = p
                n_aff += 1
    for k in range(n_aff):
        _contrib(affected[k], dev, cnt, outdeg, cost, no_comm, buf, -1.0)
    a = dev[members[mem_ptr[g]]]
    for i in range(mem_ptr[g], mem_ptr[g + 1]):
        u = members[i]
        buf[a] -= time[u, a]
        buf[b] += time[u, b]
        dev[u] = b
        for j in range(pred_ptr[u], pred_ptr[u + 1]):
            cnt[preds[j], a] -= 1
            cnt[preds[j], b] += 1
    for k in range(n_aff):
        _contrib(affected[k], dev, cnt, outdeg, cost, no_comm, buf, 1.0)
    if not commit:
        for i in range(mem_ptr[g], mem_ptr[g + 1]):
            u = members[i]
            dev[u] = a
            for j in range(pred_ptr[u], pred_ptr[u + 1]):
                cnt[preds[j], b] -= 1
                cnt[preds[j], a] += 1
    value = buf[0]
    for d in range(1, buf.shape[0]):
        if buf[d] > value:
            value = buf[d]
    return value


@njit(cache=True)
def _hill_climb(gdev, movable, targets, group_mem, mem_used, capacity, respect_memory, first_improvement,
                budget, tol, mem_ptr, members, pred_ptr, preds, dev, cnt, outdeg, cost, no_comm, time,
                loads, buf, mark, affected):  # pragma: no cover - compiled
    """Group moves to convergence (or until ``budget`` priced moves); returns (value, moves priced)."""
    _full_loads(dev, cnt, outdeg, cost, no_comm, time, loads)
    current = loads.max()
    used = 0
    stamp = mark.max()
    while True:
        best_value = current
        best_g, best_b = -1, -1
        done = False
        for gi in range(movable.shape[0]):
            g = movable[gi]
            for bi in range(targets.shape[0]):
                b = targets[bi]
                if b == gdev[g] or math.isinf(time[members[mem_ptr[g]], b]):
                    continue
                if respect_memory and mem_used[b] + group_mem[g] > capacity[b] * (1 + 1e-12):
                    continue
                if budget >= 0 and used >= budget:
                    done = True
                    break
                stamp += 1
                value = _move(g, b, False, mem_ptr, members, pred_ptr, preds, dev, cnt, outdeg, cost,
                              no_comm, time, loads, buf, mark, stamp, affected)
                used += 1
                if value < best_value:
                    best_value, best_g, best_b = value, g, b
            if done or (first_improvement and best_g >= 0 and best_value < current - tol):
                break
        if best_g < 0 or best_value >= current - tol:
            break
        stamp += 1
        a = gdev[best_g]
        _move(best_g, best_b, True, mem_ptr, members, pred_ptr, preds, dev, cnt, outdeg, cost, no_comm,
              time, loads, buf, mark, stamp, affected)
        gdev[best_g] = best_b
        mem_used[a] -= group_mem[best_g]
        mem_used[best_b] += group_mem[best_g]
        # Recompute from scratch after each accepted move: no drift from incremental sums.
        _full_loads(dev, cnt, outdeg, cost, no_comm, time, loads)
        current = loads.max()
        if done:
            break
    return current, used


class IncrementalPipeline:
    """Compiled, incremental pricing of group moves under the pipeline objective.

    Valid only when :func:`pipeline_node_costs` is exact (then it equals the objective).
    """

    def __init__(self, objective: BoundObjective, costs: NodeCosts) -> None:
        g = objective.graph
        n, d = g.num_nodes, objective.devices.num_devices
        members = np.concatenate(g.group_members) if n else np.zeros(0, np.int64)
        self.mem_ptr = np.concatenate([[0], np.cumsum([len(m) for m in g.group_members])]).astype(np.int64)
        self.members = members.astype(np.int64)
        src, dst = g.edges[:, 0], g.edges[:, 1]
        order = np.argsort(dst, kind="stable")
        self.pred_ptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]).astype(np.int64)
        self.preds = src[order].astype(np.int64)
        self.src, self.dst = src, dst
        self.outdeg = np.bincount(src, minlength=n).astype(np.int64)
        self.cost = costs.cost_s.astype(np.float64)
        self.no_comm = objective.devices.is_cpu.astype(np.bool_)
        self.time = np.ascontiguousarray(objective.time_s, dtype=np.float64)
        self.num_devices = d
        self.mark = np.zeros(n, dtype=np.int64)
        self.affected = np.zeros(n, dtype=np.int64)
        self.loads = np.zeros(d)
        self.buf = np.zeros(d)

    def state(self, placement: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(dev, cnt)`` arrays of a placement: device per node, successors of each node per device."""
        dev = np.array(placement, dtype=np.int64)
        cnt = np.zeros((len(dev), self.num_devices), dtype=np.int64)
        np.add.at(cnt, (self.src, dev[self.dst]), 1)
        return dev, cnt

    def value(self, placement: NDArray[np.int64]) -> float:
        """Max load of ``placement`` (no memory check)."""
        dev, cnt = self.state(placement)
        _full_loads(dev, cnt, self.outdeg, self.cost, self.no_comm, self.time, self.loads)
        return float(self.loads.max())


def incremental_pricer(objective: BoundObjective) -> IncrementalPipeline | None:
    """The compiled move pricer when it equals ``objective`` (pipeline, one cost per node), else None."""
    if not isinstance(objective, PipelineObjective) or not objective.graph.num_nodes:
        return None
    costs = pipeline_node_costs(objective)
    return IncrementalPipeline(objective, costs) if costs.exact else None


# ---------------------------------------------------------------------- the best simple start
@dataclass(frozen=True)
class SimpleStart:
    """The best of the cheap placements a search starts one climb from.

    Attributes:
        group_device: Device of every group.
        value_s: Its objective value (memory respected; ``inf`` if none of the candidates is feasible).
        name: Which candidate it is (``single:<device>``, ``heft``, ``m_etf`` or ``pipedream``).
        values_s: Every candidate priced, by name.
    """

    group_device: NDArray[np.int64]
    value_s: float
    name: str
    values_s: dict[str, float]


def best_simple_start(objective: BoundObjective, *, budget: int = -1) -> SimpleStart:
    """The best of: every device alone, HEFT, m-ETF and (``pipeline`` objective) PipeDream's split.

    Priced in that order while ``budget`` (``-1``: none) allows, the first always; ties keep the
    earlier candidate, so a single device wins over an equal heuristic.
    """
    g, dev = objective.graph, objective.devices
    before = objective.evaluations
    values: dict[str, float] = {}
    best: tuple[float, str, NDArray[np.int64]] | None = None

    def offer(name: str, group_device: NDArray[np.int64], value: float) -> None:
        nonlocal best
        values[name] = value
        if best is None or value < best[0]:
            best = (value, name, np.asarray(group_device, dtype=np.int64))

    def room() -> bool:
        return best is None or budget < 0 or objective.evaluations - before < budget

    for d in range(dev.num_devices):
        if not room():
            break
        gdev = np.full(g.num_groups, d, dtype=np.int64)
        offer(f"single:{dev.names[d]}", gdev, objective.value_groups(gdev))
    heuristics = [HeftPlacer(), METFPlacer()] + ([PipeDreamPlacer()] if isinstance(objective, PipelineObjective) else [])
    for placer in heuristics:
        if not room() or not g.num_nodes:
            break
        result = placer.place(objective)
        gdev = np.asarray(result.placement, dtype=np.int64)[[int(m[0]) for m in g.group_members]]
        offer(placer.name, gdev, float(result.info["objective_s"]))  # priced by the heuristic already
    assert best is not None
    return SimpleStart(best[2], best[0], best[1], values)


# ---------------------------------------------------------------------- local search
class LocalSearchPlacer:
    """The reference program's local search over group moves among accelerators, plus a first
    climb from the best simple placement, so that it never ends worse than that; arguments:
    ``conf/method/local_search.yaml``."""

    name = "local_search"

    def __init__(self, restarts: int = 10, max_evaluations: int | None = None, respect_memory: bool = False,
                 move_rule: str = "best") -> None:
        self.restarts = check_int(restarts, "restarts", low=1)
        self.max_evaluations = check_int(max_evaluations, "max_evaluations", low=1, allow_none=True)
        self.respect_memory = check_bool(respect_memory, "respect_memory")
        if move_rule not in ("best", "first"):
            raise ConfigError(f"must be 'best' or 'first', got {move_rule!r}", field="method.move_rule")
        self.move_rule = move_rule

    @timed_place
    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Best placement of a climb from the best simple placement and ``restarts`` from random starts."""
        rng = np.random.default_rng(seed)
        targets = accelerators(objective)
        gtime = group_time(objective)
        runnable = np.isfinite(gtime[:, targets])
        movable = np.flatnonzero(runnable.any(axis=1))
        # A group no accelerator can run stays on its fastest device (the CPU).
        home = np.argmin(gtime, axis=1)
        pricer = incremental_pricer(objective)
        budget = -1 if self.max_evaluations is None else self.max_evaluations
        before = objective.evaluations
        start = best_simple_start(objective, budget=budget)
        used_total = objective.evaluations - before
        best_value, best_gdev, best_restart, climbs = math.inf, None, -1, []
        simple_climbed: NDArray[np.int64] | None = None
        # Climb 0 starts from the best simple placement, climbs 1.. from random ones (the program's);
        # the random starts draw the same numbers as without climb 0.
        for restart in range(self.restarts + 1):
            if budget >= 0 and used_total >= budget:
                break
            if restart == 0:
                gdev = start.group_device.copy()
            else:
                gdev = home.copy()
                for k in movable.tolist():
                    choices = targets[runnable[k]]
                    gdev[k] = choices[rng.integers(len(choices))]
            remaining = -1 if budget < 0 else budget - used_total
            if pricer is not None:
                value, used = self._climb_compiled(objective, pricer, gdev, movable, targets, remaining)
                objective.evaluations += used
            else:
                value, used = self._climb_generic(objective, gdev, movable, targets, remaining)
            used_total += used
            climbs.append(value)
            log.debug("local search climb %d: %.6g s after %d evaluations", restart, value, used)
            if restart == 0:
                simple_climbed = gdev.copy()
            if value < best_value:
                best_value, best_gdev, best_restart = value, gdev.copy(), restart
        value = math.inf
        simple = f"the best simple placement ({start.name})"
        best_from = f"climb from {simple}" if best_restart == 0 else f"climb from random start {best_restart}"
        if best_gdev is not None:
            value = objective.value(expand_groups(objective, best_gdev))
            if pricer is not None and math.isfinite(value) and not math.isclose(value, best_value, rel_tol=1e-9):
                log.warning("incremental pricing %.9g s differs from the objective %.9g s", best_value, value)
        if best_gdev is None or not value <= start.value_s:
            # The climbs' pricing ignores memory unless asked: the best climb can overflow. Then the
            # climb from the simple start, or the start itself, whichever is lower.
            best_gdev, value, best_from = start.group_device, start.value_s, simple
            if simple_climbed is not None and best_restart != 0 and climbs[0] < start.value_s:
                climbed_value = objective.value(expand_groups(objective, simple_climbed))
                if climbed_value < value:
                    best_gdev, value, best_from = simple_climbed, climbed_value, f"climb from {simple}"
        placement = expand_groups(objective, best_gdev)
        info = {"value_s": value, "restarts": max(0, len(climbs) - 1), "restart_values_s": climbs[1:],
                "start": start.name, "start_value_s": start.value_s, "start_candidates_s": start.values_s,
                "start_climb_value_s": climbs[0] if climbs else None, "result_from": best_from,
                "incremental": pricer is not None, "respect_memory": self.respect_memory,
                "move_rule": self.move_rule, "feasible": bool(math.isfinite(value))}
        if not math.isfinite(value):
            info["infeasible"] = objective.infeasibility(placement) or "infeasible"
        return PlacerResult(placement, info=info)

    def _climb_compiled(self, objective, pricer: IncrementalPipeline, gdev, movable, targets, budget):
        g = objective.graph
        dev, cnt = pricer.state(expand_groups(objective, gdev))
        group_mem = g.group_memory_bytes.astype(np.float64)
        mem_used = np.bincount(gdev, weights=group_mem, minlength=pricer.num_devices).astype(np.float64)
        cap = np.asarray(objective.capacity_bytes, dtype=np.float64)
        value, used = _hill_climb(gdev, movable.astype(np.int64), targets.astype(np.int64), group_mem, mem_used,
                                  cap, self.respect_memory, self.move_rule == "first", budget,
                                  IMPROVEMENT_TOLERANCE_S, pricer.mem_ptr, pricer.members, pricer.pred_ptr,
                                  pricer.preds, dev, cnt, pricer.outdeg, pricer.cost, pricer.no_comm, pricer.time,
                                  pricer.loads, pricer.buf, pricer.mark, pricer.affected)
        return float(value), int(used)

    def _climb_generic(self, objective, gdev, movable, targets, budget):
        g = objective.graph
        gtime = group_time(objective)
        group_mem = g.group_memory_bytes
        cap = objective.capacity_bytes
        used = 0
        mem_used = np.bincount(gdev, weights=group_mem, minlength=objective.devices.num_devices)

        def price(assign):
            # Memory is ignored unless asked: price the loads as if every device could hold it.
            if self.respect_memory:
                return objective.value_groups(assign)
            placement = expand_groups(objective, assign)
            objective.evaluations += 1
            return objective.raw_value(objective.check(placement))

        current = price(gdev)
        used += 1
        while budget < 0 or used < budget:
            best = (current, -1, -1)
            stop = False
            for k in movable.tolist():
                old = gdev[k]
                for b in targets.tolist():
                    if b == old or not math.isfinite(gtime[k, b]):
                        continue
                    if self.respect_memory and mem_used[b] + group_mem[k] > cap[b] * (1 + 1e-12):
                        continue
                    if 0 <= budget <= used:
                        stop = True
                        break
                    gdev[k] = b
                    value = price(gdev)
                    used += 1
                    gdev[k] = old
                    if value < best[0]:
                        best = (value, k, b)
                if stop or (self.move_rule == "first" and best[1] >= 0 and best[0] < current - IMPROVEMENT_TOLERANCE_S):
                    break
            if best[1] < 0 or best[0] >= current - IMPROVEMENT_TOLERANCE_S:
                break
            _, k, b = best
            mem_used[gdev[k]] -= group_mem[k]
            mem_used[b] += group_mem[k]
            gdev[k] = b
            current = best[0]
            if stop:
                break
        return float(current), used


def climb_groups(objective: BoundObjective, group_device: NDArray[np.int64], movable: NDArray[np.int64], *,
                 max_evaluations: int, move_rule: str = "first",
                 respect_memory: bool = True) -> tuple[NDArray[np.int64], float, int]:
    """One hill climb of single-group moves of the ``movable`` groups from ``group_device`` (for
    refining a given placement, ``simulator.place.coarsen``).

    Returns:
        ``(group_device, value, evaluations)``: value never worse than the start's; evaluations
        include the start's and are at most ``max_evaluations``.
    """
    climber = LocalSearchPlacer(restarts=1, max_evaluations=max_evaluations, respect_memory=respect_memory,
                                move_rule=move_rule)
    gdev = np.array(group_device, dtype=np.int64)
    targets = np.arange(objective.devices.num_devices, dtype=np.int64)
    value, used = climber._climb_generic(objective, gdev, np.asarray(movable, dtype=np.int64), targets,
                                         climber.max_evaluations)
    return gdev, value, used


def group_time(objective: BoundObjective) -> NDArray[np.float64]:
    """(G, D) compute time of each group on each device (inf where some node cannot run)."""
    g = objective.graph
    out = np.zeros((g.num_groups, objective.devices.num_devices))
    np.add.at(out, g.group, objective.time_s)
    return out


# ---------------------------------------------------------------------- annealing
class AnnealPlacer:
    """Simulated annealing over group moves and swaps on any objective, memory respected, from the
    best simple placement (never worse than it); arguments: ``conf/method/anneal.yaml``."""

    name = "anneal"

    def __init__(self, max_evaluations: int = 20_000, initial_temperature: float = 0.05,
                 final_temperature: float = 1e-4, swap_probability: float = 0.3) -> None:
        self.max_evaluations = check_int(max_evaluations, "max_evaluations", low=1)
        self.initial_temperature = check_float(initial_temperature, "initial_temperature", low=0.0)
        self.final_temperature = check_float(final_temperature, "final_temperature", low=0.0,
                                              high=self.initial_temperature)
        self.swap_probability = check_float(swap_probability, "swap_probability", low=0.0, high=1.0,
                                             low_open=False)

    def _start(self, objective: BoundObjective, gtime, group_mem, cap) -> tuple[NDArray[np.int64], str]:
        """The start and its name: the best simple placement when it is feasible, else a greedy fill."""
        start = best_simple_start(objective)
        if math.isfinite(start.value_s):
            return start.group_device.copy(), start.name
        # Greedy fill: largest groups first, each on the fastest device with room left.
        gdev = np.argmin(gtime, axis=1).astype(np.int64)
        left = cap.astype(np.float64).copy()
        for k in np.argsort(-group_mem, kind="stable").tolist():
            for dv in np.argsort(gtime[k], kind="stable").tolist():
                if math.isfinite(gtime[k, dv]) and group_mem[k] <= left[dv] * (1 + 1e-12):
                    gdev[k] = dv
                    left[dv] -= group_mem[k]
                    break
        return gdev, "greedy_fill"

    @timed_place
    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Anneal from a feasible start for ``max_evaluations`` evaluations."""
        g, d = objective.graph, objective.devices.num_devices
        rng = np.random.default_rng(seed)
        before = objective.evaluations
        gtime = group_time(objective)
        group_mem = g.group_memory_bytes
        cap = np.asarray(objective.capacity_bytes, dtype=np.float64)
        gdev, start_name = self._start(objective, gtime, group_mem, cap)
        mem_used = np.bincount(gdev, weights=group_mem, minlength=d)
        current = objective.value_groups(gdev)
        # The start's evaluations (every simple placement priced) count against the budget too.
        used = objective.evaluations - before
        best_value, best = current, gdev.copy()
        scale = current if math.isfinite(current) and current > 0 else 1.0
        t0, t1 = self.initial_temperature * scale, self.final_temperature * scale
        steps = max(1, self.max_evaluations - 1)
        cooling = (t1 / t0) ** (1.0 / steps)
        temperature = t0
        accepted = 0
        runnable = np.isfinite(gtime)
        if g.num_groups == 0 or d < 2:
            steps = 0
        fits = lambda k, b, extra=0.0: mem_used[b] - extra + group_mem[k] <= cap[b] * (1 + 1e-12)  # noqa: E731
        misses = 0
        while used < self.max_evaluations and steps and misses < 1000:
            if rng.random() < self.swap_probability and g.num_groups > 1:
                k1, k2 = rng.integers(g.num_groups, size=2).tolist()
                a, b = int(gdev[k1]), int(gdev[k2])
                if a == b or not (runnable[k1, b] and runnable[k2, a]) or not (
                        fits(k1, b, group_mem[k2]) and fits(k2, a, group_mem[k1])):
                    misses += 1
                    continue
                move = ((k1, b), (k2, a))
            else:
                k = int(rng.integers(g.num_groups))
                choices = np.flatnonzero(runnable[k])
                b = int(choices[rng.integers(len(choices))])
                if b == gdev[k] or not fits(k, b):
                    misses += 1
                    continue
                move = ((k, b),)
            misses = 0
            old = [(k, int(gdev[k])) for k, _ in move]
            for k, b in move:
                gdev[k] = b
            value = objective.value_groups(gdev)
            used += 1
            delta = value - current
            if delta <= 0 or (math.isfinite(delta) and rng.random() < math.exp(-delta / temperature)):
                current = value
                accepted += 1
                for (k, a), (_, b) in zip(old, move, strict=True):
                    mem_used[a] -= group_mem[k]
                    mem_used[b] += group_mem[k]
                if value < best_value:
                    best_value, best = value, gdev.copy()
            else:
                for k, a in old:
                    gdev[k] = a
            temperature *= cooling
        placement = expand_groups(objective, best)
        info = {"value_s": best_value, "start": start_name, "accepted": accepted,
                "evaluations_budget": self.max_evaluations,
                "feasible": bool(math.isfinite(best_value))}
        if not math.isfinite(best_value):
            info["infeasible"] = objective.infeasibility(placement) or "infeasible"
        return PlacerResult(placement, info=info)

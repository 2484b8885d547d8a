"""An exact MIP of the ``pipeline`` (max-load) objective, solved by HiGHS with a time limit.

The model in full: docs/op-placement.md ("The MIP model").
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import highspy
import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError
from simulator.place.local_search import LocalSearchPlacer, group_time, pipeline_node_costs
from simulator.place.objectives import BoundObjective, PipelineObjective
from simulator.place.placer import (
    PlacerResult,
    SingleDevicePlacer,
    check_float,
    check_int,
    expand_groups,
    quiet_stdout,
    timed_place,
)

log = logging.getLogger(__name__)

#: Seconds -> model units (milliseconds).
MODEL_UNIT_PER_S = 1e3


class MipPlacer:
    """Optimal placement for the ``pipeline`` objective by a MIP with a proven gap; arguments:
    ``conf/method/mip.yaml`` (``warm_start`` may also be a placer object or a placement)."""

    name = "mip"

    def __init__(self, time_limit_s: float = 60.0, mip_gap: float = 1e-3, warm_start: Any = "local_search",
                 threads: int = 1, random_seed: int = 0) -> None:
        self.time_limit_s = check_float(time_limit_s, "time_limit_s", low=0.0)
        self.mip_gap = check_float(mip_gap, "mip_gap", low=0.0, high=1.0, low_open=False)
        self.threads = check_int(threads, "threads", low=1)
        self.random_seed = check_int(random_seed, "random_seed", low=0)
        if isinstance(warm_start, str) and warm_start not in ("local_search", "single"):
            raise ConfigError(f"must be null, 'local_search', 'single' or a placement, got {warm_start!r}",
                              field="method.warm_start")
        if not (warm_start is None or isinstance(warm_start, str) or hasattr(warm_start, "place")):
            try:
                warm_start = np.asarray(list(warm_start), dtype=np.int64)
            except (TypeError, ValueError):
                raise ConfigError(f"must be null, 'local_search', 'single' or a placement, got {warm_start!r}",
                                  field="method.warm_start") from None
        self.warm_start = warm_start

    def check(self, objective: BoundObjective) -> None:
        """Refuse an objective other than ``pipeline`` before any work (ConfigError, field ``objective``)."""
        if not isinstance(objective, PipelineObjective):
            raise ConfigError(f"the MIP models the pipeline objective only, not {objective.name!r}",
                              field="objective")

    # ------------------------------------------------------------------ warm start
    def _warm(self, objective: BoundObjective, seed: int) -> NDArray[np.int64] | None:
        ws = self.warm_start
        if ws is None:
            return None
        if isinstance(ws, str):
            ws = LocalSearchPlacer() if ws == "local_search" else SingleDevicePlacer()
        if hasattr(ws, "place"):
            return np.asarray(ws.place(objective, seed=seed).placement, dtype=np.int64)
        return objective.check(ws)

    # ------------------------------------------------------------------ model
    @timed_place
    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Solve the MIP; return its best placement and the bound it proved."""
        self.check(objective)
        g, devs = objective.graph, objective.devices
        G, D = g.num_groups, devs.num_devices
        model = _build(objective)
        h = _new_highs()
        h.setOptionValue("time_limit", self.time_limit_s)
        h.setOptionValue("mip_rel_gap", self.mip_gap)
        h.setOptionValue("threads", self.threads)
        h.setOptionValue("random_seed", int(self.random_seed + seed) % (2**31 - 1))
        h.passModel(model.lp)
        warm = self._warm(objective, seed)
        warm_value = math.inf
        if warm is not None:
            warm_value = objective.value(warm)
            if math.isfinite(warm_value) and _consistent_groups(g.group, warm):
                start = highspy.HighsSolution()
                start.col_value = model.point(warm[[m[0] for m in g.group_members]])
                start.value_valid = True
                h.setSolution(start)
        h.run()
        status = h.modelStatusToString(h.getModelStatus())
        info = h.getInfo()
        bound_s = float(info.mip_dual_bound) / MODEL_UNIT_PER_S
        placement, source = None, "mip"
        if info.primal_solution_status == 2:  # kSolutionStatusFeasible
            x = np.asarray(h.getSolution().col_value)[:G * D].reshape(G, D)
            placement = expand_groups(objective, np.argmax(x, axis=1).astype(np.int64))
        value = objective.value(placement) if placement is not None else math.inf
        if warm is not None and warm_value < value:
            placement, value, source = warm, warm_value, "warm_start"
        if placement is None:
            placement, source = SingleDevicePlacer().place(objective, seed=seed).placement, "single (no incumbent)"
            value = objective.value(placement)
        if not math.isfinite(bound_s) or bound_s < 0:
            bound_s = 0.0 if status != "Infeasible" else math.inf
        gap = max(0.0, (value - bound_s) / value) if math.isfinite(value) and value > 0 else \
            (0.0 if value == 0 else math.inf)
        result_info = {
            "value_s": value, "best_bound_s": bound_s, "gap": gap, "status": _status(status, model.exact, gap),
            "solver_time_s": float(h.getRunTime()), "nodes": int(info.mip_node_count),
            "model_exact": model.exact, "placement_from": source, "warm_start_value_s": warm_value,
            "columns": int(model.lp.num_col_), "rows": int(model.lp.num_row_),
            "time_limit_s": self.time_limit_s, "contiguous": "not required (may beat the contiguous DP)"}
        if status == "Infeasible":
            result_info["infeasible"] = "no placement fits the devices' memory"
        log.info("mip: %.6g s, bound %.6g s, gap %.3g%%, %s", value, bound_s, 100 * gap, result_info["status"])
        return PlacerResult(np.asarray(placement, dtype=np.int64), info=result_info)


#: Largest relative gap still called a proven optimum (the solver's own tolerances are this fine).
PROVEN_GAP = 1e-6


def _status(solver_status: str, exact: bool, gap: float) -> str:
    """The solver's status in words that claim an optimum only where one is proven (HiGHS says
    ``Optimal`` within ``mip_gap``, 0.1 % by default, of a model that may be a relaxation)."""
    if solver_status != "Optimal" or (exact and gap <= PROVEN_GAP):
        return solver_status
    if not exact:
        return f"relaxed model solved; the placement is within {gap:.3g} of the bound (not proven best)"
    return f"stopped within mip_gap; the placement is within {gap:.3g} of the bound (not proven best)"


def _new_highs() -> highspy.Highs:
    """A silent solver (HiGHS prints a banner on stdout when the first one is made in a process)."""
    with quiet_stdout():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return h


def _consistent_groups(group: NDArray[np.int64], placement: NDArray[np.int64]) -> bool:
    first = np.full(group.max() + 1, -1)
    first[group[::-1]] = placement[::-1]
    return bool((first[group] == placement).all())


@dataclass
class _Model:
    """The LP of the MIP plus how to map a group assignment onto its columns."""

    lp: Any
    exact: bool
    G: int
    D: int
    y_cols: list[tuple[int, int, int, list[int]]]
    sym: list[list[int]]
    prefix_col: dict[tuple[int, int], int]
    t_col: int
    gtime: NDArray[np.float64]
    costs: dict[int, float]

    def canonical(self, gdev: NDArray[np.int64]) -> NDArray[np.int64]:
        """Relabel interchangeable devices so that ``gdev`` meets the symmetry constraints."""
        gdev = gdev.copy()
        for cls in self.sym:
            lowest = [int(np.flatnonzero(gdev == d)[0]) if (gdev == d).any() else self.G + i
                      for i, d in enumerate(cls)]
            order = [cls[i] for i in np.argsort(lowest, kind="stable")]
            mapping = {old: new for new, old in zip(cls, order, strict=True)}
            gdev = np.array([mapping.get(int(d), int(d)) for d in gdev], dtype=np.int64)
        return gdev

    def point(self, gdev: NDArray[np.int64]) -> list[float]:
        """Column values of a group assignment (a MIP start)."""
        gdev = self.canonical(np.asarray(gdev, dtype=np.int64))
        G, D = self.G, self.D
        col = np.zeros(self.lp.num_col_)
        col[np.arange(G) * D + gdev] = 1.0
        loads = np.array([self.gtime[gdev == d, d].sum() for d in range(D)])
        for c, g, d, succ in self.y_cols:
            on = gdev[g] == d
            val = float(any((gdev[s] == d) != on for s in succ))
            col[c] = val
            loads[d] += self.costs[c] * val
        for (k, gi), c in self.prefix_col.items():
            col[c] = float((gdev[:gi + 1] == k).sum())
        col[self.t_col] = loads.max()
        return col.tolist()


def _build(objective: PipelineObjective) -> _Model:
    """The MIP of ``objective`` (see module docstring)."""
    g, devs = objective.graph, objective.devices
    G, D = g.num_groups, devs.num_devices
    gtime = group_time(objective) * MODEL_UNIT_PER_S
    gmem = g.group_memory_bytes
    cap = np.asarray(objective.capacity_bytes, dtype=np.float64)
    no_comm = devs.is_cpu
    allowed = np.isfinite(gtime) & (gmem[:, None] <= cap[None, :] * (1 + 1e-12))
    node_costs = pipeline_node_costs(objective)
    inf = highspy.kHighsInf

    col_lower: list[float] = []
    col_upper: list[float] = []
    col_cost: list[float] = []
    integer: list[int] = []

    def add_col(lo: float, hi: float, cost: float = 0.0, is_int: bool = False) -> int:
        col_lower.append(lo)
        col_upper.append(hi)
        col_cost.append(cost)
        if is_int:
            integer.append(len(col_lower) - 1)
        return len(col_lower) - 1

    for k in range(G):
        for d in range(D):
            add_col(0.0, 1.0 if allowed[k, d] else 0.0, is_int=True)
    finite_t = np.where(np.isfinite(gtime), gtime, 0.0)
    t_col = add_col(pigeonhole_bound(gtime, no_comm), inf, 1.0)

    rows_lo: list[float] = []
    rows_hi: list[float] = []
    starts: list[int] = [0]
    index: list[int] = []
    value: list[float] = []

    def add_row(lo: float, hi: float, idx: list[int], val: list[float]) -> None:
        rows_lo.append(lo)
        rows_hi.append(hi)
        index.extend(idx)
        value.extend(val)
        starts.append(len(index))

    def x(k: int, d: int) -> int:
        return k * D + d

    for k in range(G):
        add_row(1.0, 1.0, [x(k, d) for d in range(D)], [1.0] * D)
    for d in range(D):
        if math.isfinite(cap[d]) and gmem[allowed[:, d]].sum() > cap[d]:
            ks = np.flatnonzero(allowed[:, d]).tolist()
            add_row(-inf, float(cap[d]), [x(k, d) for k in ks], [float(gmem[k]) for k in ks])

    # Communication: one y per (sending group, successor groups) and device that pays.
    send: dict[tuple[int, frozenset], float] = {}
    if g.num_edges:
        succ: dict[int, set[int]] = {}
        for u, v in g.edges.tolist():
            if g.group[u] != g.group[v]:
                succ.setdefault(u, set()).add(int(g.group[v]))
        for u, ss in succ.items():
            c = float(node_costs.cost_s[u]) * MODEL_UNIT_PER_S
            if c > 0:
                key = (int(g.group[u]), frozenset(ss))
                send[key] = send.get(key, 0.0) + c
    load_terms: list[tuple[list[int], list[float]]] = [
        ([x(k, d) for k in range(G) if allowed[k, d]], [float(finite_t[k, d]) for k in range(G) if allowed[k, d]])
        for d in range(D)]
    y_cols: list[tuple[int, int, int, list[int]]] = []
    costs: dict[int, float] = {}
    for (k, ss), c in send.items():
        members = sorted(ss)
        for d in range(D):
            if no_comm[d] or not (allowed[k, d] or any(allowed[s, d] for s in members)):
                continue
            yc = add_col(0.0, inf)
            y_cols.append((yc, k, d, members))
            costs[yc] = c
            for s in members:
                add_row(0.0, inf, [yc, x(k, d), x(s, d)], [1.0, -1.0, 1.0])
                add_row(0.0, inf, [yc, x(s, d), x(k, d)], [1.0, -1.0, 1.0])
            load_terms[d][0].append(yc)
            load_terms[d][1].append(c)
    for d in range(D):
        idx, val = load_terms[d]
        add_row(-inf, 0.0, idx + [t_col], val + [-1.0])

    # Symmetry among interchangeable devices: kind, speed, memory and the same allowed groups.
    classes: dict[tuple, list[int]] = {}
    for d, dev in enumerate(devs.devices):
        classes.setdefault((dev.kind, dev.speed, float(cap[d]), allowed[:, d].tobytes()), []).append(d)
    sym = [c for c in classes.values() if len(c) > 1]
    prefix_col: dict[tuple[int, int], int] = {}
    for cls in sym:
        for k_i in range(len(cls) - 1):
            prev = cls[k_i]
            # P[gi] = number of groups 0..gi on device prev.
            for gi in range(G - 1):
                pc = add_col(0.0, inf)
                prefix_col[(prev, gi)] = pc
                terms = [pc, x(gi, prev)] + ([prefix_col[(prev, gi - 1)]] if gi else [])
                add_row(0.0, 0.0, terms, [1.0, -1.0] + ([-1.0] if gi else []))
            nxt = cls[k_i + 1]
            add_row(0.0, 0.0, [x(0, nxt)], [1.0])
            for gi in range(1, G):
                add_row(-inf, 0.0, [x(gi, nxt), prefix_col[(prev, gi - 1)]], [1.0, -1.0])

    lp = highspy.HighsLp()
    lp.num_col_ = len(col_lower)
    lp.num_row_ = len(rows_lo)
    lp.col_cost_ = np.asarray(col_cost)
    lp.col_lower_ = np.asarray(col_lower)
    lp.col_upper_ = np.asarray(col_upper)
    lp.row_lower_ = np.asarray(rows_lo)
    lp.row_upper_ = np.asarray(rows_hi)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.asarray(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.asarray(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.asarray(value)
    kinds = [highspy.HighsVarType.kContinuous] * lp.num_col_
    for c in integer:
        kinds[c] = highspy.HighsVarType.kInteger
    lp.integrality_ = kinds
    return _Model(lp, node_costs.exact, G, D, y_cols, sym, prefix_col, t_col, finite_t, costs)


def pigeonhole_bound(gtime: NDArray[np.float64], no_comm: NDArray[np.bool_]) -> float:
    """A lower bound on the max load that the LP relaxation misses (a valid cut on ``T``).

    For a candidate ``T``, the groups too slow for every CPU within ``T`` must go to the ``A``
    accelerators, so one takes at least ``ceil(|B| / A)`` of them: the bound is the least ``T`` at
    or above the sum of that many of their smallest accelerator times.
    """
    acc = ~no_comm
    a = int(acc.sum())
    if a == 0 or not len(gtime):
        return 0.0
    acc_t = gtime[:, acc].min(axis=1)
    cpu_t = gtime[:, ~acc].min(axis=1) if (~acc).any() else np.full(len(gtime), np.inf)
    singles = np.minimum(acc_t, cpu_t)
    floor = float(singles[np.isfinite(singles)].max()) if np.isfinite(singles).any() else 0.0
    # Breakpoints of B(T) = {groups with CPU time > T}: constant between consecutive CPU times.
    points = np.unique(np.concatenate([[0.0], cpu_t[np.isfinite(cpu_t)]]))
    for i, lo in enumerate(points.tolist()):
        hi = points[i + 1] if i + 1 < len(points) else np.inf
        must = np.sort(acc_t[(cpu_t > lo) & np.isfinite(acc_t)])
        need = math.ceil(len(must) / a)
        f = float(must[:need].sum())
        if f < hi:
            return max(floor, lo, f)
    return floor

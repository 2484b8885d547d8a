"""Heuristic op placers: HEFT, Baechi's m-TOPO / m-ETF / m-SCT, METIS min-cut and PipeDream.

Each decides per group and prices its result with the objective; the rules they share and each
method in detail: docs/op-placement.md ("The heuristics and searches in detail").
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from simulator.errors import ConfigError
from simulator.place.objectives import BoundObjective
from simulator.place.placer import PlacerResult, check_bool, expand_groups, timed_place
from workloads.graph import topological_order

_TOL = 1 + 1e-12  # the objective's memory tolerance


# ---------------------------------------------------------------------- shared problem view
class HeuristicProblem:
    """Placement-independent arrays every heuristic needs (built once per call)."""

    def __init__(self, objective: BoundObjective) -> None:
        g, dev = objective.graph, objective.devices
        self.n, self.d, self.num_groups = g.num_nodes, dev.num_devices, g.num_groups
        self.time_s = np.asarray(objective.time_s, dtype=np.float64)
        self.group = np.asarray(g.group, dtype=np.int64)
        self.group_memory_bytes = np.asarray(g.group_memory_bytes, dtype=np.float64)
        self.capacity_bytes = np.asarray(dev.memory_bytes, dtype=np.float64)
        self.is_cpu = dev.is_cpu
        # A group can run on a device when every member can.
        finite = np.isfinite(self.time_s)
        self.group_ok = np.ones((self.num_groups, self.d), dtype=bool)
        np.logical_and.at(self.group_ok, self.group, finite)
        # Mean compute time over the devices able to run the node (HEFT's w-bar).
        safe = np.where(finite, self.time_s, 0.0)
        count = finite.sum(axis=1)
        self.mean_time_s = np.where(count > 0, safe.sum(axis=1) / np.maximum(count, 1), 0.0)
        #: (G, D) compute of each whole group on each device (inf: cannot run it); breaks ties
        #: between devices, so that a zero-time first node does not drag its group to a slow device.
        self.group_time_s = np.zeros((self.num_groups, self.d))
        np.add.at(self.group_time_s, self.group, self.time_s)
        # Transfer time of every edge between every pair of devices: (E, D, D), zero on the diagonal.
        self.src, self.dst = g.edges[:, 0], g.edges[:, 1]
        size = np.where(np.isnan(g.edge_bytes), 0.0, g.edge_bytes)
        link = dev.latency_s[None, :, :] + size[:, None, None] / dev.bandwidth_Bps[None, :, :]
        link = np.where(size[:, None, None] > 0, link, 0.0)
        fixed = ~np.isnan(g.edge_cost_s)
        cost = np.where(fixed, g.edge_cost_s, 0.0)
        self.edge_time_s = np.where(fixed[:, None, None], cost[:, None, None], link)
        self.edge_time_s[:, np.arange(self.d), np.arange(self.d)] = 0.0
        off = ~np.eye(self.d, dtype=bool)
        self.mean_edge_time_s = self.edge_time_s[:, off].mean(axis=1) if self.d > 1 else np.zeros(g.num_edges)
        self.preds: list[list[tuple[int, int]]] = [[] for _ in range(self.n)]
        self.succs: list[list[tuple[int, int]]] = [[] for _ in range(self.n)]
        for e, (u, v) in enumerate(zip(self.src.tolist(), self.dst.tolist(), strict=True)):
            self.preds[v].append((u, e))
            self.succs[u].append((v, e))
        topo = list(g.topological_order)
        self.topo_pos = np.empty(self.n, dtype=np.int64)
        self.topo_pos[topo] = np.arange(self.n)
        split = bool(g.meta.get("backward_after_forward", False)) or objective.name == "latency"
        bwd = np.asarray(g.is_backward, dtype=bool)
        if split and bwd.any() and (~bwd).any():
            self.phases = [sorted(np.flatnonzero(~bwd).tolist(), key=self.topo_pos.__getitem__),
                           sorted(np.flatnonzero(bwd).tolist(), key=self.topo_pos.__getitem__)]
        else:
            self.phases = [topo]
        self.phase_of = np.zeros(self.n, dtype=np.int64)
        for k, phase in enumerate(self.phases):
            self.phase_of[phase] = k

    def fits(self, grp: int, used: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Devices able to run group ``grp`` with room for it given memory ``used``."""
        room = used + self.group_memory_bytes[grp] <= self.capacity_bytes * _TOL
        return self.group_ok[grp] & room

    def fallback(self, grp: int, used: NDArray[np.float64]) -> int:
        """Device for a group nothing can take: the capable device with most free memory."""
        free = np.where(self.group_ok[grp], self.capacity_bytes - used, -np.inf)
        return int(np.argmax(free))

    def upward_rank(self, nodes: Sequence[int]) -> NDArray[np.float64]:
        """HEFT's upward rank on mean costs, within the given phase (reverse topological sweep)."""
        rank = np.zeros(self.n)
        inside = np.zeros(self.n, dtype=bool)
        inside[list(nodes)] = True
        for v in reversed(nodes):
            best = 0.0
            for w, e in self.succs[v]:
                if inside[w]:
                    best = max(best, self.mean_edge_time_s[e] + rank[w])
            rank[v] = self.mean_time_s[v] + best
        return rank

    def arrival_s(self, v: int, finish_s: NDArray[np.float64], placement: NDArray[np.int64],
                  floor_s: float) -> NDArray[np.float64]:
        """Time all of ``v``'s inputs are on each device (``floor_s``: phase start)."""
        arrive = np.full(self.d, floor_s)
        for u, e in self.preds[v]:
            np.maximum(arrive, finish_s[u] + self.edge_time_s[e, placement[u]], out=arrive)
        return arrive

    def topo_order_makespan(self, placement: NDArray[np.int64]) -> float:
        """Makespan when each device runs its nodes in topological order (each phase is in it)."""
        finish = np.zeros(self.n)
        free = np.zeros(self.d)
        floor = 0.0
        for phase in self.phases:
            for v in phase:
                d = int(placement[v])
                start = max(free[d], self.arrival_s(v, finish, placement, floor)[d])
                finish[v] = start + self.time_s[v, d]
                free[d] = finish[v]
            floor = max(floor, float(finish[phase].max())) if phase else floor
            free[:] = floor
        return floor


def _finish(objective: BoundObjective, group_device: NDArray[np.int64], info: dict[str, Any],
            own_makespan_s: float | None) -> PlacerResult:
    """Price a per-group assignment with the objective and fill in the shared ``info`` keys."""
    placement = expand_groups(objective, group_device)
    value = objective.value(placement)
    info["objective_s"] = value
    if own_makespan_s is not None:
        info["own_makespan_s"] = own_makespan_s
        info["own_order_better"] = bool(math.isfinite(value) and own_makespan_s < value * (1 - 1e-9))
    memory = objective.memory_bytes(placement)
    info["memory_bytes"] = {name: float(m) for name, m in zip(objective.devices.names, memory, strict=True)}
    return PlacerResult(placement, info=info)


class _Heuristic:
    """A deterministic heuristic (the seed is unused), priced by the objective it is given."""

    @timed_place
    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Run the heuristic; return its placement priced by ``objective``."""
        return self._run(objective)

    def _run(self, objective: BoundObjective) -> PlacerResult:
        raise NotImplementedError


# ---------------------------------------------------------------------- HEFT
class HeftPlacer(_Heuristic):
    """HEFT (Topcuoglu, Hariri and Wu, 2002), deciding per group; ``insertion``: use idle gaps
    between scheduled nodes (the paper's policy), else append."""

    name = "heft"

    def __init__(self, insertion: bool = True) -> None:
        self.insertion = check_bool(insertion, "insertion")

    def _run(self, objective: BoundObjective) -> PlacerResult:
        p = HeuristicProblem(objective)
        group_device = np.full(p.num_groups, -1, dtype=np.int64)
        placement = np.zeros(p.n, dtype=np.int64)
        finish = np.zeros(p.n)
        used = np.zeros(p.d)
        busy: list[list[tuple[float, float]]] = [[] for _ in range(p.d)]
        fallback = 0
        floor = 0.0
        for phase in p.phases:
            rank = p.upward_rank(phase)
            for v in sorted(phase, key=lambda x: (-rank[x], p.topo_pos[x])):
                grp = int(p.group[v])
                if group_device[grp] >= 0:
                    candidates = [int(group_device[grp])]
                else:
                    ok = p.fits(grp, used)
                    candidates = np.flatnonzero(ok).tolist()
                    if not candidates:
                        candidates = [p.fallback(grp, used)]
                        fallback += 1
                arrive = p.arrival_s(v, finish, placement, floor)
                best = None
                for d in candidates:
                    dur = p.time_s[v, d]
                    if not math.isfinite(dur):
                        dur = 0.0 if best is None else math.inf  # an infeasible fallback still gets a slot
                    start = self._slot(busy[d], float(arrive[d]), dur)
                    key = (start + dur, p.group_time_s[grp, d], d)
                    if best is None or key < best[0]:
                        best = (key, start, d, dur)
                assert best is not None
                (eft, _, _), start, d, dur = best
                if group_device[grp] < 0:
                    group_device[grp] = d
                    used[d] += p.group_memory_bytes[grp]
                placement[v] = d
                finish[v] = eft
                bisect.insort(busy[d], (start, eft))
            floor = max(floor, float(finish[phase].max())) if phase else floor
            busy = [[(-math.inf, floor)] for _ in range(p.d)]
        return _finish(objective, group_device, {"memory_fallback_groups": fallback}, floor)

    def _slot(self, intervals: list[tuple[float, float]], ready_s: float, dur_s: float) -> float:
        """Earliest start >= ``ready_s`` of a gap of ``dur_s`` (after the last interval without insertion)."""
        if not self.insertion:
            return max(ready_s, intervals[-1][1]) if intervals else ready_s
        start = ready_s
        for s, f in intervals:
            if start + dur_s <= s:
                break
            start = max(start, f)
        return start


# ---------------------------------------------------------------------- Baechi
class _BaechiPlacer(_Heuristic):
    """A heuristic with Baechi's ``use_cpu`` switch."""

    def __init__(self, use_cpu: bool = False) -> None:
        self.use_cpu = check_bool(use_cpu, "use_cpu")


def _baechi_devices(p: HeuristicProblem, use_cpu: bool) -> NDArray[np.bool_]:
    """Devices Baechi places on: the accelerators (its setting is a set of GPUs) unless
    ``use_cpu`` or there are none; a group only a CPU can run still goes to a CPU."""
    if use_cpu or p.is_cpu.all():
        return np.ones(p.d, dtype=bool)
    return ~p.is_cpu


class MTopoPlacer(_BaechiPlacer):
    """Baechi's m-TOPO: groups in topological order fill one device after another, each up to an
    equal share of the memory (or compute); ``use_cpu``: also fill CPU devices."""

    name = "m_topo"

    def _run(self, objective: BoundObjective) -> PlacerResult:
        p = HeuristicProblem(objective)
        allowed = _baechi_devices(p, self.use_cpu)
        order = _group_order(p)
        weight = p.group_memory_bytes.copy()
        if weight.sum() <= 0:  # no memory figures: balance compute instead
            weight = np.bincount(p.group, weights=p.mean_time_s, minlength=p.num_groups)
        targets = np.flatnonzero(allowed).tolist()
        share = weight.sum() / max(len(targets), 1)
        limit = np.minimum(share, p.capacity_bytes)
        group_device = np.full(p.num_groups, -1, dtype=np.int64)
        used = np.zeros(p.d)        # memory, for feasibility
        filled = np.zeros(p.d)      # share weight, for the fill rule
        cursor, fallback = 0, 0
        members = objective.graph.group_members
        for grp in order:
            fits = p.fits(grp, used)
            d = -1
            while cursor < len(targets):
                t = targets[cursor]
                if not p.group_ok[grp, t]:
                    break  # this kind cannot run the group: put it elsewhere, keep filling t
                last = cursor == len(targets) - 1
                if fits[t] and (last or filled[t] == 0 or filled[t] + weight[grp] <= limit[t] * _TOL):
                    d = t
                    break
                if last:
                    break
                cursor += 1
            if d < 0:
                pref = fits & allowed
                cands = np.flatnonzero(pref if pref.any() else fits)
                if len(cands):
                    d = int(cands[np.argmin(p.time_s[members[grp]][:, cands].sum(axis=0))])
                else:
                    d = p.fallback(grp, used)
                    fallback += 1
            group_device[grp] = d
            used[d] += p.group_memory_bytes[grp]
            filled[d] += weight[grp]
        placement = group_device[p.group]
        own = p.topo_order_makespan(placement)
        return _finish(objective, group_device, {"memory_fallback_groups": fallback}, own)


def _group_order(p: HeuristicProblem) -> list[int]:
    """Groups in the order their first node appears in the phases' topological orders."""
    return list(dict.fromkeys(int(p.group[v]) for phase in p.phases for v in phase))


def _etf(p: HeuristicProblem, allowed: NDArray[np.bool_],
         fav_parent: NDArray[np.int64] | None) -> tuple[NDArray[np.int64], float, int, int]:
    """Earliest-task-first list scheduling with Baechi's memory check (docs/op-placement.md);
    ``fav_parent`` (m-SCT) pins a node to its favourite parent's device. Returns (group device,
    own makespan, fallback groups, favourite children kept)."""
    group_device = np.full(p.num_groups, -1, dtype=np.int64)
    placement = np.zeros(p.n, dtype=np.int64)
    finish = np.zeros(p.n)
    used = np.zeros(p.d)
    free = np.zeros(p.d)
    fallback = kept = 0
    floor = 0.0
    for phase in p.phases:
        if not phase:
            continue
        inside = np.zeros(p.n, dtype=bool)
        inside[phase] = True
        rank = p.upward_rank(phase)
        pending = {v: sum(1 for u, _ in p.preds[v] if inside[u]) for v in phase}
        ready: list[int] = [v for v in phase if pending[v] == 0]
        arrivals: dict[int, NDArray[np.float64]] = {v: p.arrival_s(v, finish, placement, floor) for v in ready}
        free[:] = floor
        while ready:
            arr = np.stack([arrivals[v] for v in ready])
            start = np.maximum(arr, free[None, :])
            mask = np.zeros_like(start, dtype=bool)
            for i, v in enumerate(ready):
                grp = int(p.group[v])
                if group_device[grp] >= 0:
                    mask[i, group_device[grp]] = True
                    continue
                ok = p.fits(grp, used)
                pref = ok & allowed
                row = pref if pref.any() else ok
                if fav_parent is not None and fav_parent[v] >= 0:
                    dp = placement[fav_parent[v]]
                    if row[dp]:
                        row = np.zeros(p.d, dtype=bool)
                        row[dp] = True
                if not row.any():
                    row = np.zeros(p.d, dtype=bool)
                    row[p.fallback(grp, used)] = True
                mask[i] = row
            start = np.where(mask, start, np.inf)
            best = start.min()
            rows, cols = np.nonzero(start <= best)
            i, d = min(zip(rows.tolist(), cols.tolist(), strict=True), key=lambda rc: (-rank[ready[rc[0]]], ready[rc[0]],
                                          p.group_time_s[p.group[ready[rc[0]]], rc[1]], rc[1]))
            v = ready.pop(i)
            del arrivals[v]
            grp = int(p.group[v])
            if group_device[grp] < 0:
                group_device[grp] = d
                used[d] += p.group_memory_bytes[grp]
                if not p.fits(grp, used - p.group_memory_bytes[grp])[d]:
                    fallback += 1
                if fav_parent is not None and fav_parent[v] >= 0 and placement[fav_parent[v]] == d:
                    kept += 1
            dur = p.time_s[v, d]
            placement[v] = d
            finish[v] = float(start[i, d]) + (dur if math.isfinite(dur) else 0.0)
            free[d] = finish[v]
            for w, _ in p.succs[v]:
                if inside[w]:
                    pending[w] -= 1
                    if pending[w] == 0:
                        ready.append(w)
                        arrivals[w] = p.arrival_s(w, finish, placement, floor)
        floor = max(floor, float(finish[phase].max()))
    return group_device, floor, fallback, kept


class METFPlacer(_BaechiPlacer):
    """Baechi's m-ETF: earliest-task-first list scheduling with a memory check per device;
    ``use_cpu``: also place on CPU devices."""

    name = "m_etf"
    #: Keep a node with its favourite parent (m-SCT).
    favourites = False

    def _run(self, objective: BoundObjective) -> PlacerResult:
        p = HeuristicProblem(objective)
        fav = favourite_parents(p) if self.favourites else None
        gd, own, fallback, kept = _etf(p, _baechi_devices(p, self.use_cpu), fav)
        info = {"memory_fallback_groups": fallback}
        if fav is not None:
            info |= {"favourite_children": int((fav >= 0).sum()), "favourites_kept_on_parent": kept}
        return _finish(objective, gd, info, own)


def favourite_parents(p: HeuristicProblem) -> NDArray[np.int64]:
    """SCT's favourite parent of each node (-1: none), a greedy maximal matching of the edges
    by decreasing mean transfer time within a phase (docs/op-placement.md)."""
    parent = np.full(p.n, -1, dtype=np.int64)
    has_child = np.zeros(p.n, dtype=bool)
    for e in np.argsort(-p.mean_edge_time_s, kind="stable").tolist():
        u, v = int(p.src[e]), int(p.dst[e])
        if p.mean_edge_time_s[e] <= 0 or p.phase_of[u] != p.phase_of[v]:
            continue
        if not has_child[u] and parent[v] < 0:
            has_child[u] = True
            parent[v] = u
    return parent


class MSCTPlacer(METFPlacer):
    """Baechi's m-SCT: m-ETF keeping a node on its favourite parent's device when that has room
    (SCT's favourite children)."""

    name = "m_sct"
    favourites = True


# ---------------------------------------------------------------------- METIS
def _device_speed(p: HeuristicProblem) -> NDArray[np.float64]:
    """Relative speed of each device: median over nodes it can run of mean time / its time."""
    speed = np.ones(p.d)
    for d in range(p.d):
        ok = np.isfinite(p.time_s[:, d]) & (p.time_s[:, d] > 0)
        if ok.any():
            speed[d] = float(np.median(p.mean_time_s[ok] / p.time_s[ok, d]))
    return speed


def scaled_ints(values: NDArray[np.float64], top: int = 1_000_000) -> NDArray[np.int64]:
    """Positive integer weights for METIS, proportional to ``values`` (largest ``top``, least 1)."""
    peak = float(values.max()) if len(values) else 0.0
    if peak <= 0:
        return np.ones(len(values), dtype=np.int64)
    return np.maximum(1, np.rint(values / peak * top)).astype(np.int64)


def metis_adjacency(num_groups: int, gu: NDArray[np.int64], gv: NDArray[np.int64],
                    weight: NDArray[np.float64]) -> tuple[list[int], list[int], list[int]]:
    """METIS's undirected CSR ``(xadj, adjncy, eweights)`` of the edges ``gu -> gv`` between
    groups, parallel edges merged with their weights summed, then :func:`scaled_ints`."""
    uniq, inv = np.unique(np.minimum(gu, gv) * num_groups + np.maximum(gu, gv), return_inverse=True)
    w = scaled_ints(np.bincount(inv, weights=weight, minlength=len(uniq)))
    ia, ib = uniq // max(num_groups, 1), uniq % max(num_groups, 1)
    rows, cols, wts = np.concatenate([ia, ib]), np.concatenate([ib, ia]), np.concatenate([w, w])
    order = np.lexsort((cols, rows))
    xadj = np.concatenate([[0], np.cumsum(np.bincount(rows[order], minlength=num_groups))])
    return xadj.tolist(), cols[order].tolist(), wts[order].tolist()


class MetisPlacer:
    """Balanced min-cut partitioning of the group graph with METIS (pymetis), then groups a device
    cannot run or hold repaired; arguments: ``conf/method/metis.yaml``."""

    name = "metis"

    def __init__(self, parts: int | None = None, balance: str = "speed", edge_weight: str = "transfer") -> None:
        if parts is not None and (isinstance(parts, bool) or not isinstance(parts, int) or parts < 1):
            raise ConfigError(f"must be an integer >= 1 or null, got {parts!r}", field="method.parts")
        if balance not in ("speed", "equal"):
            raise ConfigError(f"must be 'speed' or 'equal', got {balance!r}", field="method.balance")
        if edge_weight not in ("transfer", "unit"):
            raise ConfigError(f"must be 'transfer' or 'unit', got {edge_weight!r}", field="method.edge_weight")
        self.parts, self.balance, self.edge_weight = parts, balance, edge_weight

    @timed_place
    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Partition the group graph with METIS (seeded); return the placement priced by ``objective``."""
        import pymetis  # noqa: PLC0415  # lazy: pymetis

        p = HeuristicProblem(objective)
        k = min(self.parts or p.d, max(p.num_groups, 1))
        speed = _device_speed(p)
        vweight = scaled_ints(np.bincount(p.group, weights=p.mean_time_s, minlength=p.num_groups))
        gu, gv = p.group[p.src], p.group[p.dst]
        cross = gu != gv
        if self.edge_weight == "unit":
            w = np.ones(int(cross.sum()))
        else:  # one unit for every edge: its fixed cost, or its bytes over the mean link
            w = p.mean_edge_time_s[cross]
            w = w / w.max() if len(w) and w.max() > 0 else np.ones(len(w))
        xadj, adjncy, wts = metis_adjacency(p.num_groups, gu[cross], gv[cross], w)
        per_device = self.parts is None
        if k == 1:
            part = np.zeros(p.num_groups, dtype=np.int64)
            cut = 0
        else:
            tpwgts = None
            if per_device and self.balance == "speed":
                tpwgts = (speed / speed.sum()).tolist()
            res = pymetis.part_graph(k, pymetis.CSRAdjacency(xadj, adjncy),
                                     vweights=vweight.tolist(), eweights=wts, tpwgts=tpwgts,
                                     options=pymetis.Options(seed=int(seed)))
            part = np.asarray(res.vertex_part, dtype=np.int64)
            cut = int(res.edge_cuts)
        if per_device and k == p.d:
            device_of_part = np.arange(p.d)
        else:
            load = np.bincount(part, weights=vweight, minlength=k)
            device_of_part = np.zeros(k, dtype=np.int64)
            fastest = np.argsort(-speed, kind="stable")
            for rank, q in enumerate(np.argsort(-load, kind="stable").tolist()):
                device_of_part[q] = fastest[rank % p.d]
        group_device, repaired, fallback = _repair(p, device_of_part[part], speed)
        info = {"parts": k, "edge_cut": cut, "repaired_groups": repaired, "memory_fallback_groups": fallback}
        return _finish(objective, group_device, info, None)


def _fastest_fit(p: HeuristicProblem, grp: int, used: NDArray[np.float64],
                 speed: NDArray[np.float64]) -> tuple[int, bool]:
    """The fastest device able to run and hold ``grp`` (else :meth:`HeuristicProblem.fallback`),
    and whether it is the fallback."""
    fits = p.fits(grp, used)
    if not fits.any():
        return p.fallback(grp, used), True
    cands = np.flatnonzero(fits)
    return int(cands[np.argmax(speed[cands])]), False


def _repair(p: HeuristicProblem, group_device: NDArray[np.int64], speed: NDArray[np.float64]) -> tuple[NDArray[np.int64], int, int]:
    """Move groups a device cannot run or hold to the fastest capable device with room, biggest
    groups first (so the big ones stay put); returns (group device, repaired, fallback)."""
    out = np.asarray(group_device, dtype=np.int64).copy()
    used = np.zeros(p.d)
    repaired = fallback = 0
    for grp in np.argsort(-p.group_memory_bytes, kind="stable").tolist():
        d = int(out[grp])
        if not p.fits(grp, used)[d]:
            repaired += 1
            d, fell_back = _fastest_fit(p, grp, used, speed)
            fallback += fell_back
        out[grp] = d
        used[d] += p.group_memory_bytes[grp]
    return out, repaired, fallback


# ---------------------------------------------------------------------- PipeDream
@njit(cache=True)
def _pipedream_dp(comp, bad, mem, cut, stage_devices, limit, is_cpu):  # pragma: no cover - compiled
    """PipeDream's split DP: ``best[k, j]`` the least bottleneck with the first ``j`` chain groups on
    the first ``k`` stage devices, ``back[k, j]`` where the ``k``-th stage starts (``j``: unused).
    Compiled for the decision latency of ``scenario=pipeline`` (the numpy loop it replaces took
    ~100 ms on a 16-server block); the same float operations in the same order, and argmin's first
    minimum, so the same split."""
    m, n = len(stage_devices), comp.shape[0] - 1
    best = np.full((m + 1, n + 1), np.inf)
    best[0, 0] = 0.0
    back = np.zeros((m + 1, n + 1), dtype=np.int64)
    for k in range(1, m + 1):
        d = stage_devices[k - 1]
        for j in range(n + 1):
            best[k, j] = best[k - 1, j]
            back[k, j] = j  # device unused
        for j in range(1, n + 1):
            arg, low = -1, np.inf
            for i in range(j):
                if bad[j, d] - bad[i, d] > 0 or mem[j] - mem[i] > limit[k - 1]:
                    stage = np.inf
                elif is_cpu[k - 1]:
                    stage = comp[j, d] - comp[i, d] + 0.0
                else:
                    stage = comp[j, d] - comp[i, d] + (cut[i] + cut[j])
                cand = max(best[k - 1, i], stage)
                if arg < 0 or cand < low:
                    arg, low = i, cand
            if low < best[k, j]:
                best[k, j], back[k, j] = low, arg
    return best, back


class PipeDreamPlacer(_BaechiPlacer):
    """PipeDream's partitioner (Narayanan et al., SOSP 2019) without replication: the groups as a
    chain split into consecutive stages on the accelerators, minimising the slowest stage
    (docs/op-placement.md); ``use_cpu``: let the CPU take a stage too."""

    name = "pipedream"

    @staticmethod
    def _chain(p: HeuristicProblem, is_backward: NDArray[np.bool_], topo: Sequence[int]) -> list[int]:
        """Groups in chain order: first forward node; backward-only groups by reversed backward order."""
        key = np.full(p.num_groups, np.inf)
        fwd_nodes = [v for v in topo if not is_backward[v]]
        bwd_nodes = [v for v in topo if is_backward[v]]
        for i, v in enumerate(fwd_nodes):
            key[p.group[v]] = min(key[p.group[v]], i)
        has_fwd = np.isfinite(key)
        nf, nb = max(len(fwd_nodes), 1), max(len(bwd_nodes), 1)
        for i, v in enumerate(bwd_nodes):  # the backward pass runs the forward order in reverse
            grp = p.group[v]
            if not has_fwd[grp]:
                key[grp] = min(key[grp], (nf - 1) * (1 - (i + 0.5) / nb) + 0.5)
        return sorted(range(p.num_groups), key=lambda q: (key[q], q))

    def _run(self, objective: BoundObjective) -> PlacerResult:
        p = HeuristicProblem(objective)
        g = objective.graph
        # As soon as possible (Kahn's order) and as late as possible; the better split wins.
        asap = list(g.topological_order)
        alap = list(reversed(topological_order(g.num_nodes, g.edges[:, ::-1])))
        best: PlacerResult | None = None
        for label, topo in (("asap", asap), ("alap", alap)):
            chain = self._chain(p, g.is_backward, topo)
            result = self._split(objective, p, _baechi_devices(p, self.use_cpu), chain)
            if not math.isfinite(result.info["dp_bottleneck_s"]) and not self.use_cpu and p.is_cpu.any():
                # The accelerators alone cannot hold the chain: let the CPU take stages too.
                result = self._split(objective, p, np.ones(p.d, dtype=bool), chain)
                result.info["cpu_stage_needed"] = True
            result.info["linearisation"] = label
            if best is None or result.info["dp_bottleneck_s"] < best.info["dp_bottleneck_s"]:
                best = result
        assert best is not None
        return best

    def _split(self, objective: BoundObjective, p: HeuristicProblem, allowed: NDArray[np.bool_],
               full_chain: list[int]) -> PlacerResult:
        stage_devices = np.flatnonzero(allowed)
        on_acc = p.group_ok[:, stage_devices].any(axis=1)
        speed = _device_speed(p)
        group_device = np.full(p.num_groups, -1, dtype=np.int64)
        used = np.zeros(p.d)
        fallback = 0
        for grp in np.flatnonzero(~on_acc).tolist():  # CPU-only groups
            d, fell_back = _fastest_fit(p, grp, used, speed)
            fallback += fell_back
            group_device[grp] = d
            used[d] += p.group_memory_bytes[grp]
        chain = [q for q in full_chain if on_acc[q]]
        n, m = len(chain), len(stage_devices)
        pos = np.full(p.num_groups, -1, dtype=np.int64)
        pos[chain] = np.arange(n)
        # Per-device compute prefix sums over the chain, with a count of groups it cannot run.
        gtime = np.zeros((p.num_groups, p.d))
        np.add.at(gtime, p.group, np.where(np.isfinite(p.time_s), p.time_s, 0.0))
        comp = np.vstack([np.zeros((1, p.d)), np.cumsum(gtime[chain], axis=0)])
        bad = np.vstack([np.zeros((1, p.d)), np.cumsum(~p.group_ok[chain], axis=0)])
        mem = np.concatenate([[0.0], np.cumsum(p.group_memory_bytes[chain])])
        cut = self._boundary_cost(p, pos, n)
        limit = np.array([(p.capacity_bytes[d] - used[d]) * _TOL for d in stage_devices.tolist()])
        best, back = _pipedream_dp(comp, bad.astype(np.int64), mem, cut, stage_devices.astype(np.int64), limit,
                                   p.is_cpu[stage_devices])
        bottleneck = float(best[m, n])
        stages = []
        j = n
        for k in range(m, 0, -1):
            i = int(back[k, j])
            if i < j:
                for q in chain[i:j]:
                    group_device[q] = stage_devices[k - 1]
                stages.append({"device": objective.devices.names[stage_devices[k - 1]], "groups": j - i})
            j = i
        if not math.isfinite(bottleneck):  # nothing fits: fall back per group
            for q in chain:
                fits = p.fits(q, used)
                group_device[q] = int(np.flatnonzero(fits)[0]) if fits.any() else p.fallback(q, used)
                fallback += int(not fits.any())
                used[group_device[q]] += p.group_memory_bytes[q]
        info = {"dp_bottleneck_s": bottleneck, "stages": stages[::-1], "memory_fallback_groups": fallback}
        return _finish(objective, group_device, info, None)

    @staticmethod
    def _boundary_cost(p: HeuristicProblem, pos: NDArray[np.int64], n: int) -> NDArray[np.float64]:
        """Transfer time across each chain boundary ``b`` (between positions ``b-1`` and ``b``)."""
        diff = np.zeros(n + 2)
        for u in range(p.n):
            pu = pos[p.group[u]]
            if pu < 0 or not p.succs[u]:
                continue
            lo = hi = pu
            t = 0.0
            for v, e in p.succs[u]:
                pv = pos[p.group[v]]
                if pv < 0 or pv == pu:
                    continue
                lo, hi = min(lo, pv), max(hi, pv)
                t = max(t, float(p.mean_edge_time_s[e]))
            if hi > lo:  # boundaries lo+1 .. hi
                diff[lo + 1] += t
                diff[hi + 1] -= t
        return np.cumsum(diff)[: n + 1]

"""The exact optimum of the ``pipeline`` (max-load) objective over contiguous splits.

Tarnawski, Phanishayee, Devanur, Mahajan, Nina Paravecino, "Efficient Algorithms for Device
Placement of DNN Graph Operators", NeurIPS 2020. Over the ideals (downward-closed node sets) of
the contracted forward DAG, with ``k`` accelerators and ``c`` CPUs::

    dp[c][k][I] = min over ideals J <= I of max(dp[c][k-1][J], load_acc(I \\ J)),
                                           max(dp[c-1][k][J], load_cpu(I \\ J))

Only the ``pipeline`` objective; a device set with unlike accelerators or link-dependent transfer
times is refused with a ``ConfigError``. ``info["optimal"]`` is true only for a proven optimum
(``info["optimal_for"]`` says of what). ``max_states`` / ``max_pairs`` cap the search; past a cap
it raises, or returns ``fallback``'s placement. Assumptions and limits: docs/op-placement.md
("The DP: what it assumes").
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from simulator.errors import ConfigError
from simulator.place.heuristics import PipeDreamPlacer
from simulator.place.objectives import BoundObjective, PipelineObjective, PlacementError
from simulator.place.pipeline_schedule import SCHEDULES, iteration_time_s, stage_costs
from simulator.place.placer import (
    Placer,
    PlacerResult,
    RandomPlacer,
    RoundRobinPlacer,
    SingleDevicePlacer,
    timed,
)

log = logging.getLogger(__name__)

#: Forward nodes at most this long (seconds) count as zero-time (the paper's program: 1e-6 ms).
ZERO_TIME_S = 1e-9
#: Relative tolerance for "same transfer time" and memory checks.
_REL_TOL = 1e-9


# ---------------------------------------------------------------------- the forward DAG the DP sees
@dataclass(frozen=True)
class DPGraph:
    """The contracted forward DAG of a graph, as the paper's DP reads it.

    Attributes:
        owner: ``(N,)`` DP node (contracted forward class) of every original node.
        num_nodes: Number of DP nodes.
        edges: ``(E, 2)`` ordering edges between DP nodes (no self-loops, no duplicates).
        merged_zero: Zero-time forward classes merged into their neighbour.
        artificial: Backward-only classes given an artificial forward node.
    """

    owner: NDArray[np.int64]
    num_nodes: int
    edges: NDArray[np.int64]
    merged_zero: int
    artificial: int


def _unique_pairs(a: NDArray[np.int64], b: NDArray[np.int64]) -> NDArray[np.int64]:
    keep = a != b
    if not keep.any():
        return np.zeros((0, 2), dtype=np.int64)
    return np.unique(np.stack([a[keep], b[keep]], axis=1), axis=0)


def contract_forward(graph, cpu_time_s: NDArray[np.float64], acc_time_s: NDArray[np.float64]) -> DPGraph:
    """Contract ``graph`` into the forward DAG of the paper's DP (module docstring).

    ``cpu_time_s`` and ``acc_time_s`` are the per-node times used to find zero-time nodes (both
    must be below :data:`ZERO_TIME_S`, as in the paper's program).
    """
    n = graph.num_nodes
    fwd = ~np.asarray(graph.is_backward, dtype=bool)
    cls = np.asarray(graph.group, dtype=np.int64).copy()
    num_cls = int(cls.max()) + 1 if n else 0
    src, dst = (graph.edges[:, 0], graph.edges[:, 1]) if graph.num_edges else (np.zeros(0, np.int64),) * 2
    has_fwd = np.bincount(cls[fwd], minlength=num_cls) > 0
    orphan = ~has_fwd
    # Ordering edges between classes: forward edges ("true"), and for each backward edge touching a
    # backward-only class its mirror image between the classes' forward nodes ("artificial").
    ff = fwd[src] & fwd[dst]
    bb = ~fwd[src] & ~fwd[dst]
    mirror = bb & (orphan[cls[src]] | orphan[cls[dst]])
    true_e = (cls[src[ff]], cls[dst[ff]])
    art_e = (cls[dst[mirror]], cls[src[mirror]])

    def relabel(mapping: NDArray[np.int64]) -> None:
        nonlocal cls, true_e, art_e
        cls = mapping[cls]
        true_e = (mapping[true_e[0]], mapping[true_e[1]])
        art_e = (mapping[art_e[0]], mapping[art_e[1]])

    # Fuse the strongly connected components that contraction creates (forward graph only).
    a = np.concatenate([true_e[0], art_e[0]])
    b = np.concatenate([true_e[1], art_e[1]])
    if num_cls:
        adj = coo_matrix((np.ones(len(a)), (a, b)), shape=(num_cls, num_cls))
        _, scc = connected_components(adj, directed=True, connection="strong")
        relabel(np.asarray(scc, dtype=np.int64))
        num_cls = int(cls.max()) + 1

    # Merge zero-time forward classes with a single forward neighbour and no backward work.
    cpu_t = np.where(np.isfinite(cpu_time_s), cpu_time_s, np.inf)
    acc_t = np.where(np.isfinite(acc_time_s), acc_time_s, np.inf)
    fwd_src_to_bwd = (fwd[src] & ~fwd[dst]) | (~fwd[src] & fwd[dst])  # a forward node's backward neighbour
    merged = 0
    while True:
        fwd_cpu = np.bincount(cls[fwd], weights=cpu_t[fwd], minlength=num_cls)
        fwd_acc = np.bincount(cls[fwd], weights=acc_t[fwd], minlength=num_cls)
        bwd_t = np.bincount(cls[~fwd], weights=(cpu_t + acc_t)[~fwd], minlength=num_cls)
        fwd_end = np.where(fwd[src], cls[src], cls[dst])[fwd_src_to_bwd]
        has_bwd_nb = np.bincount(fwd_end, minlength=num_cls) > 0
        te, ae = _unique_pairs(*true_e), _unique_pairs(*art_e)
        both = np.concatenate([te, ae])
        deg = np.bincount(both.ravel(), minlength=num_cls)
        ok = (fwd_cpu < ZERO_TIME_S) & (fwd_acc < ZERO_TIME_S) & (bwd_t < ZERO_TIME_S) & ~has_bwd_nb & (deg == 1)
        cand = np.flatnonzero(ok)
        if not len(cand):
            break
        c = int(cand[0])
        row = both[(both[:, 0] == c) | (both[:, 1] == c)][0]
        m = int(row[1] if row[0] == c else row[0])
        mapping = np.arange(num_cls)
        mapping[c] = m
        _, dense = np.unique(mapping, return_inverse=True)
        relabel(dense.astype(np.int64))
        num_cls = int(cls.max()) + 1
        merged += 1
    edges = np.unique(np.concatenate([_unique_pairs(*true_e), _unique_pairs(*art_e)]), axis=0) \
        if num_cls else np.zeros((0, 2), np.int64)
    return DPGraph(cls, num_cls, edges.reshape(-1, 2), merged, int(orphan.sum()))


# ---------------------------------------------------------------------- ideals
def _words(num_nodes: int) -> int:
    return max(1, (num_nodes + 63) // 64)


def _bit_matrix(rows: list[NDArray[np.int64]], num_nodes: int) -> NDArray[np.uint64]:
    w = _words(num_nodes)
    out = np.zeros((len(rows), w), dtype=np.uint64)
    for r, members in enumerate(rows):
        for v in np.asarray(members, dtype=np.int64).tolist():
            out[r, v >> 6] |= np.uint64(1) << np.uint64(v & 63)
    return out


class TooManyStates(RuntimeError):
    """The ideal enumeration or the pair count passed its cap.

    Attributes:
        field: The cap that was passed (``method.max_states`` or ``method.max_pairs``).
        info: Counts known so far (for ``summary.json``).
    """

    def __init__(self, message: str, *, field: str = "method.max_states", info: dict | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.info = info or {}


def enumerate_ideals(num_nodes: int, edges: NDArray[np.int64], *, max_states: int) -> NDArray[np.uint64]:
    """All downward-closed node sets of a DAG as bitsets ``(M, W)``, by size (the empty set first).

    Reverse search, so each ideal is made once and no table of seen sets is needed: ``J`` is made
    only from ``J`` minus its highest-numbered maximal node.

    Raises:
        TooManyStates: When more than ``max_states`` ideals exist.
    """
    preds = [edges[edges[:, 1] == v, 0] for v in range(num_nodes)]
    pred = _bit_matrix(preds, num_nodes)  # (F, W)
    out, count = _ideals_kernel(pred, num_nodes, max_states)
    if count > max_states:
        raise TooManyStates(f"more than {max_states:,} downward-closed sets", info={"dp_states_over": max_states})
    return out


@njit(cache=True)
def _highest_bit(x):  # pragma: no cover - compiled
    h = 0
    while x > np.uint64(1):
        x = x >> np.uint64(1)
        h += 1
    return h


@njit(cache=True)
def _ideals_kernel(pred, num_nodes, cap):  # pragma: no cover - compiled
    w = pred.shape[1]
    out = np.zeros((cap + 1, w), dtype=np.uint64)
    top = np.zeros((cap + 1, w), dtype=np.uint64)  # maximal nodes of each ideal
    count, start, end = 1, 0, 1
    one = np.uint64(1)
    while start < end:  # one level (ideal size) at a time, so the output is sorted by size
        for r in range(start, end):
            for v in range(num_nodes):
                wv = v >> 6
                bv = one << np.uint64(v & 63)
                if out[r, wv] & bv:
                    continue
                ok = True
                for q in range(w):
                    if pred[v, q] & ~out[r, q]:
                        ok = False
                        break
                if not ok:
                    continue
                # v must be the highest-numbered maximal node of the new ideal.
                for q in range(w - 1, -1, -1):
                    x = top[r, q] & ~pred[v, q]
                    if x:
                        ok = q * 64 + _highest_bit(x) < v
                        break
                if not ok:
                    continue
                if count > cap - 1:
                    return out[:1], cap + 1
                for q in range(w):
                    out[count, q] = out[r, q]
                    top[count, q] = top[r, q] & ~pred[v, q]
                out[count, wv] |= bv
                top[count, wv] |= bv
                count += 1
        start, end = end, count
    return out[:count].copy(), count


@njit(cache=True)
def _count_pairs(ideals, sizes, max_pairs):  # pragma: no cover - compiled
    m, w = ideals.shape
    count = 0
    for i in range(m):
        for j in range(i + 1):
            if sizes[j] > sizes[i]:
                break
            sub = True
            for k in range(w):
                if ideals[j, k] & ~ideals[i, k]:
                    sub = False
                    break
            if sub:
                count += 1
        if count > max_pairs:
            return count, i
    return count, m


@njit(cache=True)
def _dp_kernel(ideals, sizes, acc_t, cpu_t, acc_bad, cpu_bad, mem, acc_cap, cpu_cap,
               sig_a, sig_b, sig_cost, num_cpus, num_accs):  # pragma: no cover - compiled
    m, w = ideals.shape
    inf = np.inf
    dp = np.full((num_cpus + 1, num_accs + 1, m), inf)
    back = np.full((num_cpus + 1, num_accs + 1, m), -1, dtype=np.int64)
    kind = np.zeros((num_cpus + 1, num_accs + 1, m), dtype=np.int8)  # 1: accelerator, 2: CPU
    for c in range(num_cpus + 1):
        for k in range(num_accs + 1):
            dp[c, k, 0] = 0.0
    s = np.zeros(w, dtype=np.uint64)
    u_count = sig_a.shape[0]
    for i in range(1, m):
        # The empty sub-ideal first (all of I on one device), then the largest ones: small sets
        # give good bounds early, so more sets skip the communication sum below.
        for t in range(i):
            j = 0 if t == 0 else i - t
            if sizes[j] >= sizes[i]:
                continue
            sub = True
            for q in range(w):
                if ideals[j, q] & ~ideals[i, q]:
                    sub = False
                    break
            if not sub:
                continue
            for q in range(w):
                s[q] = ideals[i, q] & ~ideals[j, q]
            size = mem[i] - mem[j]
            load_acc = inf
            # The largest state this set could still improve (comm >= 0, so compute is a lower bound);
            # the communication sum stops as soon as it passes that.
            bound = -1.0
            if num_accs > 0 and acc_bad[i] - acc_bad[j] == 0 and size <= acc_cap:
                compute = acc_t[i] - acc_t[j]
                for c in range(num_cpus + 1):
                    for k in range(1, num_accs + 1):
                        if compute < dp[c, k, i] and dp[c, k - 1, j] < dp[c, k, i] and dp[c, k, i] > bound:
                            bound = dp[c, k, i]
            if bound > 0.0:
                load = compute
                for u in range(u_count):
                    a = sig_a[u]
                    in_s = (s[a >> 6] >> np.uint64(a & 63)) & np.uint64(1)
                    cross = False
                    if in_s:
                        for q in range(w):
                            if sig_b[u, q] & ~s[q]:
                                cross = True
                                break
                    else:
                        for q in range(w):
                            if sig_b[u, q] & s[q]:
                                cross = True
                                break
                    if cross:
                        load += sig_cost[u]
                        if load >= bound:
                            break
                load_acc = load
            load_cpu = inf
            if num_cpus > 0 and cpu_bad[i] - cpu_bad[j] == 0 and size <= cpu_cap:
                load_cpu = cpu_t[i] - cpu_t[j]
            for c in range(num_cpus + 1):
                for k in range(num_accs + 1):
                    if k > 0:
                        cand = max(dp[c, k - 1, j], load_acc)
                        if cand < dp[c, k, i]:
                            dp[c, k, i] = cand
                            back[c, k, i] = j
                            kind[c, k, i] = 1
                    if c > 0:
                        cand = max(dp[c - 1, k, j], load_cpu)
                        if cand < dp[c, k, i]:
                            dp[c, k, i] = cand
                            back[c, k, i] = j
                            kind[c, k, i] = 2
        # A device may stay empty (the pair (I, I)); needs the finished row of one device fewer.
        for c in range(num_cpus + 1):
            for k in range(num_accs + 1):
                if k > 0 and dp[c, k - 1, i] < dp[c, k, i]:
                    dp[c, k, i] = dp[c, k - 1, i]
                    back[c, k, i] = i
                    kind[c, k, i] = 1
                if c > 0 and dp[c - 1, k, i] < dp[c, k, i]:
                    dp[c, k, i] = dp[c - 1, k, i]
                    back[c, k, i] = i
                    kind[c, k, i] = 2
    return dp, back, kind


# ---------------------------------------------------------------------- device assumptions
def _dp_devices(objective: BoundObjective) -> tuple[list[int], list[int]]:
    """CPU and accelerator device indices, after checking the DP's assumptions (module docstring)."""
    dev = objective.devices
    cpus = [i for i, d in enumerate(dev.devices) if d.kind == "cpu"]
    accs = [i for i, d in enumerate(dev.devices) if d.kind != "cpu"]
    for group, what in ((cpus, "CPUs"), (accs, "accelerators")):
        kinds = {(dev.devices[i].kind, dev.devices[i].speed, dev.devices[i].memory_bytes) for i in group}
        if len(kinds) > 1:
            raise ConfigError(f"method dp needs {what} of one kind, speed and memory; {dev.name} has "
                              f"{len(kinds)} different ones (use another method, e.g. method=local_search)",
                              field="devices")
    return cpus, accs


def _node_send_time_s(objective: BoundObjective, *, quiet: bool = False) -> tuple[NDArray[np.float64], bool]:
    """Transfer time of each node's output (its largest, if its edges differ) and whether every
    node's edges agree; refuses devices where the time depends on the link (``quiet``: no log line)."""
    g, dev = objective.graph, objective.devices
    n, d = g.num_nodes, dev.num_devices
    out = np.zeros(n)
    if not g.num_edges:
        return out, True
    fixed = ~np.isnan(g.edge_cost_s)
    edge_t = np.where(fixed, g.edge_cost_s, 0.0)
    if (~fixed).any() and d > 1:
        off = ~np.eye(d, dtype=bool)
        bw, lat = dev.bandwidth_Bps[off], dev.latency_s[off]
        if not (np.allclose(bw, bw[0], rtol=_REL_TOL, atol=0) and np.allclose(lat, lat[0], rtol=_REL_TOL, atol=0)):
            raise ConfigError(f"method dp needs every link alike (a node's transfer time must not depend on "
                              f"the devices); {dev.name} has {dev.links} links of different speeds",
                              field="devices")
        ebytes = np.where(np.isnan(g.edge_bytes), 0.0, g.edge_bytes)
        t = np.where(ebytes > 0, lat[0] + ebytes / bw[0], 0.0)
        edge_t = np.where(fixed, edge_t, t)
    src = g.edges[:, 0]
    hi = np.full(n, -np.inf)
    lo = np.full(n, np.inf)
    np.maximum.at(hi, src, edge_t)
    np.minimum.at(lo, src, edge_t)
    has = np.isfinite(hi)
    uniform = not (hi[has] - lo[has] > _REL_TOL * np.maximum(1.0, np.abs(hi[has]))).any()
    if not uniform and not quiet:
        # A PipeDream training graph's backward node sends a different gradient to each
        # predecessor: the DP then prices each node by its largest output (an upper bound on the
        # model's cost), and its answer is a strong contiguous split rather than a proven optimum.
        bad = int(np.flatnonzero(has & (hi - lo > _REL_TOL * np.maximum(1.0, np.abs(hi))))[0])
        log.info("dp: edges out of node %r take %g to %g s; each node is priced by its largest output, "
                 "so the split is not proven optimal", g.node_names[bad], lo[bad], hi[bad])
    out[has] = hi[has]
    return out, uniform


# ---------------------------------------------------------------------- the placer
_FALLBACKS = {"single": SingleDevicePlacer, "round_robin": RoundRobinPlacer, "random": RandomPlacer}


class DPPlacer:
    """Exact optimum of the ``pipeline`` objective over contiguous splits (see module docstring).

    Args:
        max_states: Cap on the downward-closed sets (ideals) of the contracted forward DAG.
        max_pairs: Cap on the (ideal, sub-ideal) pairs the DP visits (its running time).
        fallback: ``None`` (past a cap: error), or a placer (or the name of a simple baseline:
            ``single``, ``round_robin``, ``random``; ``pipedream``, the default as in conf/method/)
            used instead, with a logged message.
    """

    name = "dp"

    def __init__(self, max_states: int = 200_000, max_pairs: int = 50_000_000, fallback: Any = "pipedream") -> None:
        for key, value in (("max_states", max_states), ("max_pairs", max_pairs)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"must be an integer >= 1, got {value!r}", field=f"method.{key}")
        if fallback == "pipedream":  # the contiguous chain split: the natural stand-in for the DP
            fallback = PipeDreamPlacer()
        elif isinstance(fallback, str):
            if fallback not in _FALLBACKS:
                raise ConfigError(f"unknown fallback {fallback!r} (expected null, a placer config or one of "
                                  f"{', '.join([*_FALLBACKS, 'pipedream'])})", field="method.fallback")
            fallback = _FALLBACKS[fallback]()
        elif fallback is not None and not isinstance(fallback, Placer):
            raise ConfigError(f"expected null, a placer or a baseline name, got {fallback!r}", field="method.fallback")
        self.max_states = max_states
        self.max_pairs = max_pairs
        self.fallback = fallback

    def check(self, objective: BoundObjective) -> None:
        """Refuse an objective other than ``pipeline``, or devices the DP cannot model, before any
        work (see module docstring).

        Raises:
            ConfigError: (field ``objective``) the objective is ``step`` or ``latency``; (field
                ``devices``) accelerators of several kinds, or links of different speeds.
        """
        if not isinstance(objective, PipelineObjective):
            raise ConfigError(f"method dp optimises the pipeline objective only, not {objective.name!r} (use "
                              "objective=pipeline; to price its split under another objective, re-price its "
                              "placement.json with method=file)", field="objective")
        _dp_devices(objective)
        _node_send_time_s(objective, quiet=True)

    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Solve the DP on ``objective.graph`` and ``objective.devices`` (``pipeline`` only: :meth:`check`)."""
        self.check(objective)
        t0 = time.perf_counter()
        try:
            return timed(objective, lambda: self._solve(objective))
        except TooManyStates as exc:
            if self.fallback is None:
                raise ConfigError(f"{exc}: the exact DP would not finish; raise the cap or set "
                                  "method.fallback (e.g. method.fallback=round_robin)",
                                  field=exc.field) from None
            log.warning("dp: %s on %s; falling back to %s", exc, objective.graph.name, self.fallback.name)
            result = self.fallback.place(objective, seed=seed)
            result.wall_s = time.perf_counter() - t0  # the failed DP's time counts too
            result.info = {**result.info, "optimal": False, "fallback": self.fallback.name,
                           "dp_error": str(exc), **exc.info}
            return result

    def _solve(self, objective: BoundObjective) -> PlacerResult:
        g, dev = objective.graph, objective.devices
        cpus, accs = _dp_devices(objective)
        send_s, uniform_outputs = _node_send_time_s(objective)
        zeros = np.zeros(g.num_nodes)
        acc_time = objective.time_s[:, accs[0]] if accs else np.full(g.num_nodes, np.inf)
        cpu_time = objective.time_s[:, cpus[0]] if cpus else np.full(g.num_nodes, np.inf)
        cg = contract_forward(g, cpu_time if cpus else zeros, acc_time if accs else zeros)
        ideals = enumerate_ideals(cg.num_nodes, cg.edges, max_states=self.max_states)
        m = len(ideals)
        sizes = ideals_popcount(ideals)
        pairs, _ = _count_pairs(ideals, sizes, self.max_pairs)
        if pairs > self.max_pairs:
            raise TooManyStates(f"{m:,} downward-closed sets and more than {self.max_pairs:,} pairs of them",
                                field="method.max_pairs", info={"dp_states": m})
        # Per-ideal sums over the original nodes it owns (forward and backward): time, memory, unsupported.
        owned = _unpack(ideals, cg.num_nodes)[:, cg.owner]  # (M, N) bool
        acc_ok = np.isfinite(acc_time)
        cpu_ok = np.isfinite(cpu_time)
        acc_t = owned @ np.where(acc_ok, acc_time, 0.0)
        cpu_t = owned @ np.where(cpu_ok, cpu_time, 0.0)
        acc_bad = owned @ (~acc_ok).astype(np.int64)
        cpu_bad = owned @ (~cpu_ok).astype(np.int64)
        mem = owned @ g.memory_bytes
        sig_a, sig_b, sig_cost = _signatures(g, cg, send_s)
        acc_cap = float(dev.devices[accs[0]].memory_bytes) * (1 + 1e-12) if accs else 0.0
        cpu_cap = float(dev.devices[cpus[0]].memory_bytes) * (1 + 1e-12) if cpus else 0.0
        dp, back, kind = _dp_kernel(ideals, sizes, acc_t, cpu_t, acc_bad, cpu_bad, mem, acc_cap, cpu_cap,
                                    sig_a, sig_b, sig_cost, len(cpus), len(accs))
        c, k, i = len(cpus), len(accs), m - 1
        best = float(dp[c, k, i])
        info: dict[str, Any] = {"dp_states": m, "dp_pairs": int(pairs), "dp_nodes": cg.num_nodes,
                                "dp_merged_zero_nodes": cg.merged_zero, "dp_artificial_nodes": cg.artificial,
                                "optimal": uniform_outputs and math.isfinite(best), "dp_value_s": best}
        if info["optimal"]:
            info["optimal_for"] = "pipeline objective, among contiguous splits"
        if not uniform_outputs:
            info["note"] = ("edges out of some nodes carry different sizes; each node priced by its largest "
                            "output, so the split is the DP's best under that bound, not a proven optimum")
        if not math.isfinite(best):
            info["feasible"] = False
            info["reason"] = "no contiguous split fits the devices' memory"
            device = accs[0] if accs else cpus[0]
            return PlacerResult(np.full(g.num_nodes, device, dtype=np.int64), info=info)
        placement_of_class = np.full(cg.num_nodes, -1, dtype=np.int64)
        while i != 0:
            j, what = int(back[c, k, i]), int(kind[c, k, i])
            members = _unpack(ideals[i:i + 1] & ~ideals[j:j + 1], cg.num_nodes)[0]
            if what == 1:
                placement_of_class[members] = accs[k - 1]
                k -= 1
            else:
                placement_of_class[members] = cpus[c - 1]
                c -= 1
            i = j
        placement = placement_of_class[cg.owner]
        check = objective.raw_value(placement)
        # With one output time per node the table is the objective; otherwise each node was priced
        # by its largest output, so the table bounds the objective from above.
        agrees = math.isclose(check, best, rel_tol=1e-6, abs_tol=1e-12)
        if not (agrees or (not uniform_outputs and check < best)):
            raise AssertionError(f"dp: table value {best!r} differs from the objective's {check!r}")
        info["parts"] = int(len(np.unique(placement)))
        return PlacerResult(placement, info=info)


def _unpack(bits: NDArray[np.uint64], num_nodes: int) -> NDArray[np.bool_]:
    """``(M, W)`` bitsets -> ``(M, num_nodes)`` booleans."""
    as_bytes = bits.astype("<u8").view(np.uint8).reshape(len(bits), -1)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :num_nodes].astype(bool)


def ideals_popcount(ideals: NDArray[np.uint64]) -> NDArray[np.int64]:
    """Number of nodes in each bitset."""
    as_bytes = ideals.astype("<u8").view(np.uint8).reshape(len(ideals), -1)
    return np.unpackbits(as_bytes, axis=1).sum(axis=1).astype(np.int64)


def _signatures(graph, cg: DPGraph, send_s: NDArray[np.float64]):
    """One row per distinct (owner of u, owners u sends to) with the summed transfer times: node ``u``
    costs ``send_s[u]`` to a set that holds its owner but not all its receivers, or that holds some
    receiver but not its owner."""
    if not graph.num_edges:
        return np.zeros(0, np.int64), np.zeros((0, _words(cg.num_nodes)), np.uint64), np.zeros(0)
    src, dst = graph.edges[:, 0], graph.edges[:, 1]
    a, b = cg.owner[src], cg.owner[dst]
    keep = (a != b) & (send_s[src] > 0)
    rows: dict[tuple[int, tuple[int, ...]], float] = {}
    targets: dict[int, set[int]] = {}
    for u, v in zip(src[keep].tolist(), b[keep].tolist(), strict=True):
        targets.setdefault(u, set()).add(v)
    for u, vs in targets.items():
        key = (int(cg.owner[u]), tuple(sorted(vs)))
        rows[key] = rows.get(key, 0.0) + float(send_s[u])
    keys = sorted(rows, key=lambda k: -rows[k])  # costliest first: the DP's early exit comes sooner
    sig_a = np.array([k[0] for k in keys], dtype=np.int64)
    sig_b = _bit_matrix([np.array(k[1], dtype=np.int64) for k in keys], cg.num_nodes)
    return sig_a, sig_b, np.array([rows[k] for k in keys], dtype=np.float64)


# ---------------------------------------------------------------------- mixed devices (dp_mixed)
@njit(cache=True)
def _staged_kernel(ideals, sizes, grp_t, grp_bad, grp_cap, grp_comm, mem, sig_a, sig_b, sig_cost,
                   t_ptr, t_pred, t_grp):  # pragma: no cover - compiled
    """``dp[s, i]``: least max load of ideal ``i`` on the devices of state ``s`` (state 0: none).
    State ``s`` is reached from ``t_pred[e]`` by one more device of group ``t_grp[e]``
    (``e`` in ``t_ptr[s]..t_ptr[s+1]``): a stage of that group, or the device left empty."""
    m, w = ideals.shape
    num_groups = grp_t.shape[0]
    num_states = t_ptr.shape[0] - 1
    num_trans = t_pred.shape[0]
    inf = np.inf
    dp = np.full((num_states, m), inf)
    back_j = np.full((num_states, m), -1, dtype=np.int32)
    back_e = np.full((num_states, m), -1, dtype=np.int32)  # >= num_trans: the device left empty
    for s in range(num_states):
        dp[s, 0] = 0.0
    s_bits = np.zeros(w, dtype=np.uint64)
    load = np.zeros(num_groups)
    u_count = sig_a.shape[0]
    for i in range(1, m):
        for t in range(i):
            j = 0 if t == 0 else i - t
            if sizes[j] >= sizes[i]:
                continue
            sub = True
            for q in range(w):
                if ideals[j, q] & ~ideals[i, q]:
                    sub = False
                    break
            if not sub:
                continue
            size = mem[i] - mem[j]
            least = inf  # least compute of a group that pays communication
            for g in range(num_groups):
                load[g] = inf
                if grp_bad[g, i] - grp_bad[g, j] == 0 and size <= grp_cap[g]:
                    load[g] = grp_t[g, i] - grp_t[g, j]
                    if grp_comm[g] and load[g] < least:
                        least = load[g]
            # The largest state value a communicating group could still improve (comm >= 0).
            bound = -1.0
            for s in range(1, num_states):
                cur = dp[s, i]
                for e in range(t_ptr[s], t_ptr[s + 1]):
                    g = t_grp[e]
                    if grp_comm[g] and load[g] < cur and dp[t_pred[e], j] < cur and cur > bound:
                        bound = cur
            comm = 0.0
            if bound > 0.0:
                for q in range(w):
                    s_bits[q] = ideals[i, q] & ~ideals[j, q]
                for u in range(u_count):
                    a = sig_a[u]
                    in_s = (s_bits[a >> 6] >> np.uint64(a & 63)) & np.uint64(1)
                    cross = False
                    if in_s:
                        for q in range(w):
                            if sig_b[u, q] & ~s_bits[q]:
                                cross = True
                                break
                    else:
                        for q in range(w):
                            if sig_b[u, q] & s_bits[q]:
                                cross = True
                                break
                    if cross:
                        comm += sig_cost[u]
                        if least + comm >= bound:
                            break  # no communicating group improves any state
            for g in range(num_groups):
                if grp_comm[g]:
                    load[g] = load[g] + comm if bound > 0.0 else inf
            for s in range(1, num_states):
                for e in range(t_ptr[s], t_ptr[s + 1]):
                    cand = max(dp[t_pred[e], j], load[t_grp[e]])
                    if cand < dp[s, i]:
                        dp[s, i] = cand
                        back_j[s, i] = j
                        back_e[s, i] = e
        # A device may stay empty; states in increasing order, so a predecessor's row is final.
        for s in range(1, num_states):
            for e in range(t_ptr[s], t_ptr[s + 1]):
                if dp[t_pred[e], i] < dp[s, i]:
                    dp[s, i] = dp[t_pred[e], i]
                    back_j[s, i] = i
                    back_e[s, i] = e + num_trans
    return dp, back_j, back_e


def _device_groups(objective: BoundObjective) -> list[list[int]]:
    """Devices grouped by (kind, speed, memory), each group in index order, groups by first device."""
    groups: dict[tuple, list[int]] = {}
    for i, d in enumerate(objective.devices.devices):
        groups.setdefault((d.kind, d.speed, d.memory_bytes), []).append(i)
    return list(groups.values())


def _transitions(sizes: list[int]) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """The lattice of per-group device counts ``c <= sizes`` (mixed radix, state 0 = no device):
    state ``c`` is reached from ``c - e_g`` by a device of group ``g``. Every order of the
    groups' devices is one path through it."""
    strides = np.cumprod([1] + [n + 1 for n in sizes[:-1]]).tolist()
    num = int(np.prod([n + 1 for n in sizes]))
    ptr, pred, grp = [0], [], []
    for s in range(num):
        for g, (n, stride) in enumerate(zip(sizes, strides, strict=True)):
            if s // stride % (n + 1) > 0:
                pred.append(s - stride)
                grp.append(g)
        ptr.append(len(pred))
    return np.array(ptr, np.int64), np.array(pred, np.int64), np.array(grp, np.int64)


class MixedDPPlacer(DPPlacer):
    """The exact optimum of the ``pipeline`` objective over contiguous splits on devices of several
    kinds (``dp_mixed``): Tarnawski et al.'s DP over ideals with a device of its own speed, memory
    and communication (none on a CPU) per stage, searched over every order of the device kinds.

    ``order=best``: the state is the number of devices of each (kind, speed, memory) group used so
    far, so one pass covers every distinct order of the multiset of kinds (``prod(n_g + 1)``
    states, not the orders' ``k! / prod(n_g!)``); the stages of a group go to its devices in
    index order. ``order=given``: stage ``i`` on device ``i`` (the device set's order; a device
    may stay empty). Same caps and fallback as :class:`DPPlacer`, plus ``max_cells`` (states x
    ideals: the table's memory). ``minimise=iteration`` (``scenario=pipeline``'s stage placer)
    returns, among the table's best cut of every state (every count of devices used per group),
    the one whose iteration under ``schedule`` and ``micro_batches`` is shortest; ``max_load``
    (``pacml place``) the cut of all devices. docs/op-placement.md ("dp_mixed").

    Args:
        order: ``best`` (every order of the kinds) or ``given`` (the devices' order).
        max_cells: Cap on states x ideals.
        minimise: ``max_load`` (the objective) or ``iteration`` (one pipeline iteration).
        schedule: ``1f1b`` or ``gpipe`` (``minimise=iteration`` only).
        micro_batches: ``M`` per iteration (``minimise=iteration`` only).
    """

    name = "dp_mixed"

    def __init__(self, max_states: int = 200_000, max_pairs: int = 50_000_000, fallback: Any = "pipedream",
                 order: str = "best", max_cells: int = 20_000_000, minimise: str = "max_load",
                 schedule: str = "1f1b", micro_batches: int = 8) -> None:
        super().__init__(max_states, max_pairs, fallback)
        if order not in ("best", "given"):
            raise ConfigError(f"must be best or given, got {order!r}", field="method.order")
        if isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 1:
            raise ConfigError(f"must be an integer >= 1, got {max_cells!r}", field="method.max_cells")
        if minimise not in ("max_load", "iteration"):
            raise ConfigError(f"must be max_load or iteration, got {minimise!r}", field="method.minimise")
        if schedule not in SCHEDULES:
            raise ConfigError(f"must be {' or '.join(SCHEDULES)}, got {schedule!r}", field="method.schedule")
        if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
            raise ConfigError(f"must be an integer >= 1, got {micro_batches!r}", field="method.micro_batches")
        self.order = order
        self.max_cells = max_cells
        self.minimise = minimise
        self.schedule = schedule
        self.micro_batches = micro_batches

    def check(self, objective: BoundObjective) -> None:
        """Refuse an objective other than ``pipeline`` or links of different speeds (any devices)."""
        if not isinstance(objective, PipelineObjective):
            raise ConfigError(f"method dp_mixed optimises the pipeline objective only, not {objective.name!r}",
                              field="objective")
        _node_send_time_s(objective, quiet=True)

    def _table(self, objective: BoundObjective):
        """The DP: ``(info, values, read, counts, uniform)``: ``values[s]`` is the least max load of
        the whole graph on the devices of state ``s`` (a device may stay empty), ``read(s)`` its cut
        (node -> device), ``counts(s)`` the devices of each group that state has, ``uniform``
        whether the table prices every transfer exactly (:func:`_node_send_time_s`)."""
        g, dev = objective.graph, objective.devices
        send_s, uniform_outputs = _node_send_time_s(objective)
        if self.order == "given":
            groups = [[d] for d in range(dev.num_devices)]
            ptr = np.concatenate([[0], np.arange(dev.num_devices + 1)]).astype(np.int64)
            pred = np.arange(dev.num_devices, dtype=np.int64)
            grp = np.arange(dev.num_devices, dtype=np.int64)
        else:
            groups = _device_groups(objective)
            ptr, pred, grp = _transitions([len(x) for x in groups])
        first = [x[0] for x in groups]
        time_s = objective.time_s[:, first]  # (N, G)
        worst = np.where(np.isfinite(time_s), time_s, np.inf).max(axis=1)
        cg = contract_forward(g, worst, worst)
        ideals = enumerate_ideals(cg.num_nodes, cg.edges, max_states=self.max_states)
        m, num_states = len(ideals), len(ptr) - 1
        if m * num_states > self.max_cells:
            raise TooManyStates(f"{m:,} downward-closed sets x {num_states:,} device states pass "
                                f"{self.max_cells:,} cells", field="method.max_cells", info={"dp_states": m})
        sizes = ideals_popcount(ideals)
        pairs, _ = _count_pairs(ideals, sizes, self.max_pairs)
        if pairs > self.max_pairs:
            raise TooManyStates(f"{m:,} downward-closed sets and more than {self.max_pairs:,} pairs of them",
                                field="method.max_pairs", info={"dp_states": m})
        owned = _unpack(ideals, cg.num_nodes)[:, cg.owner]  # (M, N) bool
        ok = np.isfinite(time_s)
        grp_t = np.ascontiguousarray((owned @ np.where(ok, time_s, 0.0)).T)
        grp_bad = np.ascontiguousarray((owned @ (~ok).astype(np.int64)).T)
        cap = np.array([dev.devices[d].memory_bytes for d in first], float) * (1 + 1e-12)
        comm = ~dev.is_cpu[first]
        sig_a, sig_b, sig_cost = _signatures(g, cg, send_s)
        dp, back_j, back_e = _staged_kernel(ideals, sizes, grp_t, grp_bad, cap, comm, owned @ g.memory_bytes,
                                            sig_a, sig_b, sig_cost, ptr, pred, grp)
        best = float(dp[num_states - 1, m - 1])
        info: dict[str, Any] = {"dp_states": m, "dp_pairs": int(pairs), "dp_nodes": cg.num_nodes,
                                "dp_device_states": num_states, "dp_order": self.order,
                                "optimal": uniform_outputs and math.isfinite(best), "dp_value_s": best,
                                "lower_bound_s": _max_load_lower_bound(objective)}
        if info["optimal"]:
            info["optimal_for"] = ("pipeline objective, among contiguous splits and "
                                   + ("every order of the device kinds" if self.order == "best"
                                      else "the devices' order"))
        num_trans = len(pred)
        stage_nodes: dict[tuple[int, int], NDArray[np.bool_]] = {}  # (ideal, sub-ideal) -> its classes

        def read(s: int) -> NDArray[np.int64]:
            free = [list(x) for x in groups]  # the last stage of a group takes its last device
            placement_of_class = np.full(cg.num_nodes, -1, dtype=np.int64)
            i = m - 1
            while i != 0:
                e, j = int(back_e[s, i]), int(back_j[s, i])
                if e >= num_trans:  # the device left empty
                    s = int(pred[e - num_trans])
                    free[int(grp[e - num_trans])].pop()
                    continue
                members = stage_nodes.get((i, j))
                if members is None:  # minimise=iteration reads every state: stages recur across them
                    members = stage_nodes[(i, j)] = _unpack(ideals[i:i + 1] & ~ideals[j:j + 1], cg.num_nodes)[0]
                placement_of_class[members] = free[int(grp[e])].pop()
                s, i = int(pred[e]), j
            return placement_of_class[cg.owner]

        if self.order == "given":  # state s: the first s devices
            def counts(s: int) -> tuple[int, ...]:
                return tuple(int(d < s) for d in range(len(groups)))
        else:  # mixed radix, as _transitions
            def counts(s: int) -> tuple[int, ...]:
                out = []
                for x in groups:
                    s, c = divmod(s, len(x) + 1)
                    out.append(c)
                return tuple(out)
        return info, dp[:, m - 1], read, counts, uniform_outputs

    def candidates(self, objective: BoundObjective) -> list[tuple[tuple[int, ...], float, NDArray[np.int64]]]:
        """``(devices used per group, least max load, cut)`` of every state with a finite value, all
        devices first: the cuts ``minimise=iteration`` chooses among (``order=given``: a group per device)."""
        self.check(objective)
        _, values, read, counts, _ = self._table(objective)
        return [(counts(s), float(values[s]), read(s)) for s in range(len(values) - 1, -1, -1)
                if math.isfinite(values[s])]

    def _solve(self, objective: BoundObjective) -> PlacerResult:
        g = objective.graph
        info, values, read, _, uniform = self._table(objective)
        s = len(values) - 1
        best = float(values[s])
        if not math.isfinite(best):
            info["feasible"] = False
            info["reason"] = "no contiguous split fits the devices' memory"
            first = _device_groups(objective)[0][0] if self.order == "best" else 0
            return PlacerResult(np.full(g.num_nodes, first, dtype=np.int64), info=info)
        placement = read(s)
        if self.minimise == "iteration":
            s, placement, info["iteration_s"], info["dp_candidates"] = self._least_iteration(objective, values, read)
            if float(values[s]) != best:  # a cut of fewer devices, with a larger max load
                best = info["dp_value_s"] = float(values[s])
                info["optimal"] = False
                info.pop("optimal_for", None)
        check = objective.raw_value(placement)
        if not (math.isclose(check, best, rel_tol=1e-6, abs_tol=1e-12) or (not uniform and check < best)):
            raise AssertionError(f"dp_mixed: table value {best!r} differs from the objective's {check!r}")
        info["gap"] = best / info["lower_bound_s"] - 1 if info["lower_bound_s"] > 0 else 0.0
        info["parts"] = int(len(np.unique(placement)))
        return PlacerResult(placement, info=info)

    def _least_iteration(self, objective: BoundObjective, values: NDArray[np.float64], read):
        """``(state, cut, iteration_s, distinct cuts)``: the shortest iteration among the states'
        cuts; ties keep the state with more devices (all devices first: never longer than its cut).

        Pruned, exactly: every distinct cut's stage costs give a lower bound of its iteration
        (:func:`_iteration_lower_bound`, at least ``M`` x its largest stage load; from the cut, not
        the table, whose value bounds the load from above when outputs differ in size). Cuts are
        priced in increasing order of it; once a bound exceeds the best iteration so far (relative
        tolerance 1e-9, far above rounding) no later cut can be the shortest or tie it. Same cut,
        iteration and count as pricing every cut."""
        first: dict[bytes, tuple[int, NDArray[np.int64]]] = {}  # distinct cut -> its state of most devices
        for s in range(len(values) - 1, -1, -1):
            if math.isfinite(values[s]):
                placement = read(s)
                first.setdefault(placement.tobytes(), (s, placement))
        m = self.micro_batches
        staged = []
        for s, placement in first.values():
            try:
                st = stage_costs(objective, placement)
            except PlacementError:  # not a pipeline (cannot happen for a contiguous split): skipped
                continue
            staged.append((_iteration_lower_bound(st.forward_s, st.backward_s, self.schedule, m), -s, placement, st))
        staged.sort(key=lambda x: (x[0], x[1]))
        chosen = None
        for bound, neg_s, placement, st in staged:
            if chosen is not None and bound > chosen[2] * (1 + 1e-9):
                break  # every later cut's bound is larger still
            t = iteration_time_s(st.forward_s, st.backward_s, self.schedule, m)
            if t < bound * (1 - 1e-9):  # the schedule changed under the bound: the pruning would be wrong
                raise AssertionError(f"dp_mixed: iteration {t!r} below its lower bound {bound!r}")
            if chosen is None or t < chosen[2] or (t == chosen[2] and -neg_s > chosen[0]):
                chosen = (-neg_s, placement, t)
        if chosen is None:  # no candidate is a pipeline: the max-load cut, as without the choice
            s = len(values) - 1
            return s, read(s), math.inf, len(first)
        return (*chosen, len(first))


def _iteration_lower_bound(forward_s: NDArray[np.float64], backward_s: NDArray[np.float64], schedule: str,
                           m: int) -> float:
    """A lower bound of :func:`iteration_time_s` (stages in pipeline order), from stage ``j``'s
    tasks (:func:`stage_tasks`) run one after another: its first ``w`` forwards start after the
    first micro-batch's forwards upstream (``sum_{i<j} f_i``); its first backward waits for that
    micro-batch's forwards through every stage and backwards downstream; then its remaining ``m``
    backwards and ``m - w`` forwards; then the last backward passes through the stages upstream.
    The largest over ``j``: at least ``m`` times the largest stage load."""
    f, b = np.asarray(forward_s, float), np.asarray(backward_s, float)
    k = len(f)
    if not k:
        return 0.0
    j = np.arange(k)
    w = np.full(k, m) if schedule == "gpipe" else np.minimum(k - j, m)  # forwards before its first backward
    f_up = np.concatenate([[0.0], np.cumsum(f)[:-1]])
    b_up = np.concatenate([[0.0], np.cumsum(b)[:-1]])
    b_down = b.sum() - b_up - b
    first_b = np.maximum(f.sum() + b_down, f_up + w * f)
    return float((first_b + m * b + (m - w) * f + b_up).max())


def _max_load_lower_bound(objective: BoundObjective) -> float:
    """A lower bound of any placement's max load: the slowest node at its fastest, and the work
    ``sum_n min_d t[n, d] s_d`` spread over the total speed ``sum_d s_d`` (``s``: device speeds)."""
    t = objective.time_s
    if not t.size:
        return 0.0
    speed = np.array([d.speed for d in objective.devices.devices], float)
    one = float(np.min(t, axis=1).max())
    work = float(np.min(t * speed, axis=1).sum() / speed.sum())
    return max(one, work)

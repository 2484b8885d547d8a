"""Coarsening of big computation graphs (HSDAG-style) and the placer that places the coarse graph.

Methods, guarantees and :class:`CoarsenedPlacer` (``method=coarse``) in detail:
docs/op-placement.md ("Coarsening").
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from omegaconf import DictConfig, OmegaConf
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from simulator.config import CONF_DIR, instantiate_checked
from simulator.errors import ConfigError
from simulator.place.heuristics import metis_adjacency, scaled_ints
from simulator.place.local_search import climb_groups
from simulator.place.objectives import BoundObjective, bind_objective
from simulator.place.placer import PlacerResult, check_bool, check_int, quiet_stdout, timed_place
from workloads.compute_graph import ComputeGraph

log = logging.getLogger(__name__)

METHODS = ("chain", "metis")
#: Bandwidth that turns an edge's bytes into a transfer time for weights (gpu4's link, 4e11 B/s).
WEIGHT_BANDWIDTH_BPS = 4.0e11


# ---------------------------------------------------------------------- graph views
def _node_weight_s(graph: ComputeGraph) -> NDArray[np.float64]:
    """Compute weight of each node: its fastest finite time over the listed kinds (0 if none)."""
    times = np.stack(list(graph.kind_time_s.values()), axis=1)
    finite = np.where(np.isfinite(times), times, np.inf).min(axis=1)
    return np.where(np.isfinite(finite), finite, 0.0)


def _edge_weight_s(graph: ComputeGraph) -> NDArray[np.float64]:
    """Transfer weight of each edge in seconds: its fixed cost, else its bytes over :data:`WEIGHT_BANDWIDTH_BPS`."""
    size = np.where(np.isnan(graph.edge_bytes), 0.0, graph.edge_bytes)
    return np.where(np.isnan(graph.edge_cost_s), size / WEIGHT_BANDWIDTH_BPS, graph.edge_cost_s)


def _pass_edges(graph: ComputeGraph) -> NDArray[np.bool_]:
    """Edges that drive the group graph: forward -> forward when the graph has any, else all."""
    fwd = ~graph.is_backward[graph.edges[:, 0]] & ~graph.is_backward[graph.edges[:, 1]]
    return fwd if fwd.any() else np.ones(graph.num_edges, dtype=bool)


def _quotient(label: NDArray[np.int64], src: NDArray[np.int64], dst: NDArray[np.int64], weight: NDArray[np.float64],
              n: int) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """Distinct edges between different labels (``n`` of them) with summed weights."""
    a, b = label[src], label[dst]
    keep = a != b
    pair = a[keep] * n + b[keep]
    uniq, inv = np.unique(pair, return_inverse=True)
    return uniq // n, uniq % n, np.bincount(inv, weights=weight[keep], minlength=len(uniq))


def _strong_components(n: int, src: NDArray[np.int64], dst: NDArray[np.int64]) -> NDArray[np.int64]:
    """Strongly connected component of each node (scipy's compiled search: fast on a million edges)."""
    adj = coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n)).tocsr()
    return connected_components(adj, directed=True, connection="strong")[1].astype(np.int64)


def _acyclic(n: int, src: NDArray[np.int64], dst: NDArray[np.int64]) -> bool:
    """Whether the graph is a DAG: no self-loop and every strongly connected component a single node."""
    if not len(src):
        return True
    if (src == dst).any():
        return False
    return len(np.unique(_strong_components(n, src, dst))) == n


def quotient_acyclic(graph: ComputeGraph, cluster_of_node: NDArray[np.int64]) -> bool:
    """Whether the cluster quotient graph of each pass (forward edges; backward edges) is acyclic."""
    bwd = graph.is_backward
    k = int(cluster_of_node.max()) + 1 if len(cluster_of_node) else 0
    s, d = graph.edges[:, 0], graph.edges[:, 1]
    for mask in (~bwd[s] & ~bwd[d], bwd[s] & bwd[d]):
        a, b, _ = _quotient(cluster_of_node, s[mask], d[mask], np.zeros(int(mask.sum())), k)
        if not _acyclic(k, a, b):
            return False
    return True


def _levels(n: int, src: NDArray[np.int64], dst: NDArray[np.int64]) -> NDArray[np.int64]:
    """Longest-path level of each node of a DAG (sources at 0): Kahn's algorithm a whole frontier at a time."""
    order = np.argsort(src, kind="stable")
    succ = dst[order]
    ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).astype(np.int64)
    pending = np.bincount(dst, minlength=n).astype(np.int64)
    level = np.zeros(n, dtype=np.int64)
    frontier = np.flatnonzero(pending == 0)
    depth, seen = 0, 0
    while len(frontier):
        level[frontier] = depth
        seen += len(frontier)
        counts = ptr[frontier + 1] - ptr[frontier]
        total = int(counts.sum())
        if not total:
            break
        # Positions of the frontier's out-edges in the CSR arrays.
        pos = np.repeat(ptr[frontier] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts) + np.arange(total)
        hit = succ[pos]
        pending -= np.bincount(hit, minlength=n)
        touched = np.unique(hit)
        frontier = touched[pending[touched] == 0]
        depth += 1
    if seen < n and (pending > 0).any():
        raise ValueError("the graph has a cycle")
    return level


def _dense(label: NDArray[np.int64]) -> NDArray[np.int64]:
    """Labels renumbered ``0..K-1`` in order of their smallest member."""
    _, first, inv = np.unique(label, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inv]


# ---------------------------------------------------------------------- coarsening
@dataclass(frozen=True, eq=False)
class Coarsening:
    """A coarsened graph and its mapping.

    Attributes:
        fine: The graph coarsened.
        graph: Same nodes, edges and times as ``fine``; ``group`` is the cluster of each node.
        cluster_of_group: Cluster of each fine group.
        method: ``chain`` or ``metis``.
        acyclic: Whether the cluster quotient graph of each pass is acyclic (measured).
        wall_s: Time taken to coarsen.
    """

    fine: ComputeGraph
    graph: ComputeGraph
    cluster_of_group: NDArray[np.int64]
    method: str
    acyclic: bool
    wall_s: float

    @property
    def num_clusters(self) -> int:
        """Number of clusters."""
        return self.graph.num_groups

    def contracted(self) -> tuple[ComputeGraph, NDArray[np.int64]]:
        """One node per (cluster, pass), times, memory and edge bytes summed: ``(graph,
        node_of_fine_node)``, a cheap stand-in the fine objective re-prices (``ValueError`` on a cycle)."""
        g = self.fine
        key = self.graph.group * 2 + g.is_backward.astype(np.int64)
        node = _dense(key)
        m = int(node.max()) + 1
        first = np.zeros(m, dtype=np.int64)
        first[node[::-1]] = np.arange(g.num_nodes)[::-1]
        times = {k: np.bincount(node, weights=v, minlength=m) for k, v in g.kind_time_s.items()}
        s, d = node[g.edges[:, 0]], node[g.edges[:, 1]]
        keep = s != d
        pair = s[keep] * m + d[keep]
        uniq, inv = np.unique(pair, return_inverse=True)
        nbytes = np.bincount(inv, weights=np.where(np.isnan(g.edge_bytes[keep]), 0.0, g.edge_bytes[keep]),
                             minlength=len(uniq))
        fixed = ~np.isnan(g.edge_cost_s[keep])
        cost = np.bincount(inv, weights=np.where(fixed, g.edge_cost_s[keep], 0.0), minlength=len(uniq))
        any_fixed = np.bincount(inv, weights=fixed.astype(np.float64), minlength=len(uniq)) > 0
        edges = np.stack([uniq // m, uniq % m], axis=1) if len(uniq) else np.zeros((0, 2), np.int64)
        if not _acyclic(m, edges[:, 0], edges[:, 1]):
            raise ValueError("the contracted graph has a cycle")
        # Per-node meta (ids, colour classes) does not survive contraction; scalars do.
        meta = {k: v for k, v in g.meta.items() if not isinstance(v, list | tuple | np.ndarray | Mapping)}
        cluster = self.graph.group[first]
        graph = ComputeGraph(
            name=f"{g.name}/contracted{self.num_clusters}",
            node_names=tuple(f"c{c}{'/backward' if b else ''}" for c, b in
                             zip(cluster.tolist(), g.is_backward[first].tolist(), strict=True)),
            kind_time_s=times, reference_kind=g.reference_kind,
            memory_bytes=np.bincount(node, weights=g.memory_bytes, minlength=m), is_backward=g.is_backward[first],
            group=_dense(cluster), edges=edges, edge_bytes=nbytes,
            edge_cost_s=np.where(any_fixed, cost, np.nan), source=g.source, meta=meta)
        return graph, node


def _metis(num_groups: int, gs, gd, gw, weight, max_groups: int, seed: int) -> NDArray[np.int64]:
    import pymetis  # noqa: PLC0415  # lazy: pymetis

    xadj, adjncy, wts = metis_adjacency(num_groups, gs, gd, gw)
    with quiet_stdout():  # METIS prints its complaints (too many parts for a small graph) on fd 1
        res = pymetis.part_graph(max_groups, pymetis.CSRAdjacency(xadj, adjncy),
                                 vweights=scaled_ints(weight, top=10_000).tolist(), eweights=wts,
                                 recursive=False, options=pymetis.Options(seed=int(seed)))
    return np.asarray(res.vertex_part, dtype=np.int64)


def _chain(num_groups: int, gs, gd, gw, weight, max_groups: int, width: int = 1) -> NDArray[np.int64]:
    label = np.arange(num_groups, dtype=np.int64)
    # A cyclic group graph: merge its strongly connected components first (the guarantee needs it).
    if not _acyclic(num_groups, gs, gd):
        label = _dense(_strong_components(num_groups, gs, gd))
    total = float(weight.sum())
    cap = total / max_groups if total > 0 else math.inf
    k = int(label.max()) + 1
    # The quotient graph is carried from round to round (it shrinks with the clusters).
    a, b, w = _quotient(label, gs, gd, gw, k)
    cw = np.bincount(label, weights=weight, minlength=k)
    while k > max_groups:
        need = k - max_groups
        pairs: list[tuple[int, int]] = []
        if len(a):
            outdeg = np.bincount(a, minlength=k)
            indeg = np.bincount(b, minlength=k)
            sole_succ = outdeg[a] == 1
            safe = np.flatnonzero(sole_succ | (indeg[b] == 1))
            # Heaviest transfer first, then the lighter merged cluster (keeps sizes even).
            safe = safe[np.lexsort((cw[a[safe]] + cw[b[safe]], -w[safe]))]
            # Stars: a hub takes any number of members, each an untouched cluster whose one successor
            # (or one predecessor) is the hub; every path into or out of a member passes the hub,
            # so each merge in turn keeps the quotient acyclic. A hub never becomes a member.
            role = np.zeros(k, dtype=np.int8)  # 0 untouched, 1 hub, 2 member
            hub_w = cw.astype(np.float64).copy()
            for e, only_succ in zip(safe.tolist(), sole_succ[safe].tolist(), strict=True):
                u, v = int(a[e]), int(b[e])
                hub, member = (v, u) if only_succ else (u, v)
                if role[member] != 0 or role[hub] == 2 or hub_w[hub] + cw[member] > cap:
                    if not only_succ or indeg[v] != 1:
                        continue
                    hub, member = u, v  # the edge is safe both ways: try the other star
                    if role[member] != 0 or role[hub] == 2 or hub_w[hub] + cw[member] > cap:
                        continue
                role[hub], role[member] = 1, 2
                hub_w[hub] += cw[member]
                pairs.append((hub, member))
                if len(pairs) == need:
                    break
        if not pairs:
            # Pack same-level clusters (in order of their first group: locality), the i-th of a level
            # into lane i mod width, up to the cap: many at once, since same-level merges never make
            # a cycle. Lanes keep up to ``width`` parallel branches (or shards) of a level apart.
            level = _levels(k, a, b).tolist()
            heads: list[int] = []
            head_w: list[float] = []
            current, i = -1, 0
            for v in np.argsort(np.asarray(level), kind="stable").tolist():
                if level[v] != current:
                    current, i, heads, head_w = level[v], 0, [], []
                lane = i % width
                i += 1
                if lane >= len(heads):
                    heads.append(v)
                    head_w.append(float(cw[v]))
                elif head_w[lane] + cw[v] <= cap:
                    pairs.append((heads[lane], v))
                    head_w[lane] += float(cw[v])
                    if len(pairs) == need:
                        break
                else:  # the lane's cluster is full: v starts the lane's next one
                    heads[lane], head_w[lane] = v, float(cw[v])
        if not pairs:
            if width > 1 and cap >= total:
                width = 1  # lanes alone cannot reach max_groups: let parallel clusters merge too
            else:
                cap *= 2
            continue
        merge = np.arange(k)
        for u, v in pairs:
            merge[v] = u
        renumber = _dense(merge)
        label = renumber[label]
        k = int(renumber.max()) + 1
        a, b, w = _quotient(renumber, a, b, w, k)
        cw = np.bincount(renumber, weights=cw, minlength=k)
    return label


def coarsen(graph: ComputeGraph, max_groups: int, *, method: str = "chain", seed: int = 0,
            width: int = 1) -> Coarsening:
    """Merge whole groups of ``graph`` into at most ``max_groups`` clusters (docs/op-placement.md).

    ``width`` (chain only): same-level clusters are packed into ``width`` lanes per level, keeping
    up to ``width`` parallel branches of a level apart while the count allows.
    """
    if isinstance(max_groups, bool) or not isinstance(max_groups, int | np.integer) or max_groups < 1:
        raise ConfigError(f"must be an integer >= 1, got {max_groups!r}", field="method.max_groups")
    if method not in METHODS:
        raise ConfigError(f"must be one of {', '.join(METHODS)}, got {method!r}", field="method.method")
    t0 = time.perf_counter()
    num_groups = graph.num_groups
    if num_groups <= max_groups:
        cluster = np.arange(num_groups, dtype=np.int64)
    else:
        mask = _pass_edges(graph)
        src, dst = graph.edges[mask, 0], graph.edges[mask, 1]
        gs, gd, gw = _quotient(graph.group, src, dst, _edge_weight_s(graph)[mask], num_groups)
        weight = np.bincount(graph.group, weights=_node_weight_s(graph), minlength=num_groups)
        if method == "metis":
            if not len(gs):  # no edges between groups: METIS has nothing to cut; deal them out
                cluster = np.arange(num_groups, dtype=np.int64) % max_groups
            else:
                cluster = _metis(num_groups, gs, gd, gw, weight, int(max_groups), seed)
        else:
            cluster = _chain(num_groups, gs, gd, gw, weight, int(max_groups), max(1, int(width)))
        cluster = _dense(cluster)
    node_cluster = cluster[graph.group]
    coarse = ComputeGraph(
        name=graph.name, node_names=graph.node_names, kind_time_s=graph.kind_time_s,
        reference_kind=graph.reference_kind, memory_bytes=graph.memory_bytes, is_backward=graph.is_backward,
        group=node_cluster, edges=graph.edges, edge_bytes=graph.edge_bytes, edge_cost_s=graph.edge_cost_s,
        source=graph.source, meta=dict(graph.meta))
    acyclic = quotient_acyclic(graph, node_cluster)
    return Coarsening(graph, coarse, cluster, method, acyclic, time.perf_counter() - t0)


# ---------------------------------------------------------------------- the wrapper placer
def build_inner(inner: Any, inner_args: Mapping[str, Any] | None = None) -> Any:
    """The inner placer: a method name of ``conf/method/`` (its config, updated by ``inner_args``, instantiated
    like any method), a config with ``_target_``, or a placer object; a ConfigError names the key."""
    args = dict(inner_args or {})
    if isinstance(inner, str):
        names = sorted(p.stem for p in (CONF_DIR / "method").glob("*.yaml"))
        if inner == "coarse":
            raise ConfigError("the inner placer cannot be coarse itself", field="method.inner")
        if inner not in names:
            raise ConfigError(f"unknown method {inner!r} (available: {', '.join(n for n in names if n != 'coarse')})",
                              field="method.inner")
        cfg = OmegaConf.load(CONF_DIR / "method" / f"{inner}.yaml")
        inner = OmegaConf.merge(cfg, args) if args else cfg
    elif args:
        raise ConfigError("inner_args apply only when inner is a method name", field="method.inner_args")
    if isinstance(inner, Mapping | DictConfig):
        if "_target_" not in inner:
            raise ConfigError("an inner placer config needs a _target_", field="method.inner")
        try:
            inner = instantiate_checked(inner, "method.inner")
        except ConfigError as exc:
            field = exc.field or "method.inner"
            if field.startswith("method.") and field != "method.inner":
                field = "method.inner_args." + field.removeprefix("method.")
            raise ConfigError(str(exc).split(": ", 1)[-1] if exc.field else str(exc), field=field) from None
    if not callable(getattr(inner, "place", None)):
        raise ConfigError(f"{type(inner).__name__} has no place(objective, seed=...) method", field="method.inner")
    return inner


#: Inner results that hold for the coarse graph only (clusters placed whole): renamed so that an
#: inner DP's ``optimal: true`` or a MIP's bound is not read as one of the fine graph.
_COARSE_ONLY = ("optimal", "optimal_for", "best_bound_s", "gap", "status")


def _coarse_scope(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with the keys of :data:`_COARSE_ONLY` prefixed ``coarse_graph_``."""
    return {f"coarse_graph_{k}" if k in _COARSE_ONLY else k: v for k, v in info.items()}


class CoarsenedPlacer:
    """Coarsen, place the clusters with an inner placer (a method name or a placer object), refine on
    the fine graph (docs/op-placement.md); arguments: ``conf/method/coarse.yaml``."""

    name = "coarse"

    def __init__(self, inner: Any = "heft", max_groups: int = 128, method: str = "chain",
                 refine_evaluations: int = 200, contract: bool = True, width: int = 1,
                 inner_args: Mapping[str, Any] | None = None) -> None:
        self.max_groups = check_int(max_groups, "max_groups", low=1)
        self.width = check_int(width, "width", low=1)
        if method not in METHODS:
            raise ConfigError(f"must be one of {', '.join(METHODS)}, got {method!r}", field="method.method")
        self.method = method
        self.refine_evaluations = check_int(refine_evaluations, "refine_evaluations", low=0)
        self.contract = check_bool(contract, "contract")
        if inner_args is not None and not isinstance(inner_args, Mapping | DictConfig):
            raise ConfigError(f"must be a mapping of the inner method's keys, got {inner_args!r}",
                              field="method.inner_args")
        self.inner_name = inner if isinstance(inner, str) else getattr(inner, "name", type(inner).__name__)
        self.inner = build_inner(inner, inner_args)

    def check(self, objective: BoundObjective) -> None:
        """The inner placer's check of the objective (``method.inner=dp`` or ``mip``: pipeline only),
        before any work; the inner placer sees the same objective on the coarse graph."""
        hook = getattr(self.inner, "check", None)
        if callable(hook):
            hook(objective)

    @timed_place
    def place(self, objective: BoundObjective, *, seed: int = 0) -> PlacerResult:
        """Coarsen ``objective.graph``, place the clusters, refine; the result is a fine placement."""
        g = objective.graph
        c = coarsen(g, self.max_groups, method=self.method, seed=seed, width=self.width)
        t0 = time.perf_counter()
        small = None
        if self.contract and c.acyclic and c.num_clusters < g.num_groups:
            with contextlib.suppress(ValueError):  # a cycle through forward/backward joins: the full graph
                small, node = c.contracted()
        view = "full" if small is None else "contracted"
        inner_obj = bind_objective(objective.name, c.graph if small is None else small, objective.devices)
        res = self.inner.place(inner_obj, seed=seed)
        placement = np.asarray(res.placement, dtype=np.int64)
        if small is not None:
            # A contracted node per cluster and pass; a cluster's passes share one group, so one device.
            cluster_device = np.empty(c.num_clusters, dtype=np.int64)
            cluster_device[c.graph.group[np.unique(node, return_index=True)[1]]] = placement
            placement = cluster_device[c.graph.group]
        inner_s = time.perf_counter() - t0
        objective.evaluations += inner_obj.evaluations  # the inner placer's evaluations count too
        # Fine groups are inside clusters, so a placer that keeps clusters whole keeps groups whole.
        group_device = placement[[int(m[0]) for m in g.group_members]]
        t1 = time.perf_counter()
        coarse_value = objective.value_groups(group_device)
        refined_value, used, movable = coarse_value, 1, np.zeros(0, dtype=np.int64)
        if self.refine_evaluations >= 2 and g.num_edges and objective.devices.num_devices > 1:
            movable = self._boundary_groups(objective, c, group_device)
            if len(movable):
                # The climb prices its start again: it gets the budget left after the coarse value.
                group_device, climbed, climb_used = climb_groups(objective, group_device, movable,
                                                                 max_evaluations=self.refine_evaluations - 1)
                used += climb_used
                refined_value = min(climbed, coarse_value)
        refine_s = time.perf_counter() - t1
        info = {"clusters": c.num_clusters, "fine_groups": g.num_groups, "coarsen_method": self.method,
                "acyclic": c.acyclic, "view": view, "inner": self.inner_name, "inner_info": _coarse_scope(res.info),
                "inner_evaluations": inner_obj.evaluations, "coarse_value_s": coarse_value,
                "refined_value_s": refined_value, "refine_evaluations": used, "boundary_groups": int(len(movable)),
                "coarsen_s": c.wall_s, "inner_s": inner_s, "refine_s": refine_s,
                "feasible": bool(math.isfinite(refined_value))}
        placement = group_device[g.group]
        if not math.isfinite(refined_value):
            info["infeasible"] = objective.infeasibility(placement) or "infeasible"
        # Say so: otherwise a user sees "201 evaluations" and no reason for them.
        log.info("%s: %d groups coarsened to %d clusters (%s), placed by %s, refined with %d evaluations: "
                 "%.4g -> %.4g ms", g.name, g.num_groups, c.num_clusters, self.method, self.inner_name, used,
                 coarse_value * 1e3, refined_value * 1e3)
        return PlacerResult(placement, info=info)

    @staticmethod
    def _boundary_groups(objective: BoundObjective, c: Coarsening, group_device: NDArray[np.int64]) -> NDArray[np.int64]:
        """Fine groups with an edge to another cluster, most cross-device transfer time first."""
        g = objective.graph
        s, d = g.edges[:, 0], g.edges[:, 1]
        cs, cd = c.graph.group[s], c.graph.group[d]
        cross = cs != cd
        gs, gd = g.group[s[cross]], g.group[d[cross]]
        edge_t = objective.edge_time_s(group_device[g.group])[cross]
        score = np.bincount(gs, weights=edge_t, minlength=g.num_groups) + \
            np.bincount(gd, weights=edge_t, minlength=g.num_groups)
        boundary = np.zeros(g.num_groups, dtype=bool)
        boundary[gs] = True
        boundary[gd] = True
        ids = np.flatnonzero(boundary)
        return ids[np.argsort(-score[ids], kind="stable")]

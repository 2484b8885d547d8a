"""What the learned placer sees of one (graph, devices, objective): numpy only, built once per task.

:class:`GroupProblem` holds the placement-independent arrays of the groups (an op and its backward
mirror; a colour class; a cluster of a coarsened graph). Devices enter only through their
features, never their names or indices, so interchangeable devices are interchangeable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from pacml.placer.arrays import bucket
from simulator.place.heuristics import HeuristicProblem  # HEFT's own ranks, not a copy
from simulator.place.objectives import BoundObjective

#: Objectives the policy knows (one-hot in the group features).
OBJECTIVE_NAMES = ("step", "latency", "pipeline")
#: Number of static group features (see :meth:`GroupProblem._group_features`).
NUM_GROUP_FEATURES = 14
#: Number of static device features (see :meth:`GroupProblem._device_features`).
NUM_DEVICE_FEATURES = 6
_TOL = 1 + 1e-12
#: Placement order: ``rank`` (HEFT's upward rank over the forward pass, highest first),
#: ``full_rank`` (HEFT's upward rank over the whole step, as HEFT orders it) or ``first``
#: (topological position of each group's first node).
ORDER_BY = "rank"
ORDERS = ("rank", "full_rank", "first")


def _log_ratio(x: NDArray[np.float64], scale: float) -> NDArray[np.float64]:
    """``log1p(x / scale)``: a scale-free, bounded-growth feature of a nonnegative quantity."""
    return np.log1p(np.maximum(x, 0.0) / max(scale, 1e-30))


@dataclass(eq=False)
class GroupProblem:
    """Placement-independent arrays of one placement task (see module docstring).

    Attributes:
        objective: The bound objective (graph, devices, values).
        order: Groups in placement order: by HEFT's upward rank over the forward pass (critical
            paths first; a topological order), a group without inputs from other groups just
            before its first consumer (so it can follow that consumer's other inputs).
        group_time_s: ``(G, D)`` compute of each group on each device (``inf``: cannot run it).
        first_pass_s: ``(G, D)`` compute of the group's forward nodes (all of them for a group
            without any): what the decoder's finish-time estimate schedules; the backward part
            counts as load only (it runs later, in the mirrored order).
        group_memory_bytes: Memory of each group.
        capacity_bytes: Memory of each device.
        runnable: ``(G, D)`` whether each device can run each group.
        edge_src, edge_dst: Quotient edges between groups (distinct groups, both directions kept).
        edge_cost_s: ``(Eq, D, D)`` transfer time of each quotient edge between device pairs.
        in_edges: For each group, the quotient edges into it from groups placed before it.
        out_edges: For each group, the quotient edges from it into groups placed before it.
        sibling_edges: For each group, the quotient edges into its consumers from other groups.
        group_x: ``(G, NUM_GROUP_FEATURES)`` static group features.
        device_x: ``(D, NUM_DEVICE_FEATURES)`` static device features.
        time_scale_s: The graph's compute (each group on its fastest device) divided by the device
            count: the load every device would carry in a perfect balance (normalises loads and times).
    """

    objective: BoundObjective
    order: NDArray[np.int64]
    group_time_s: NDArray[np.float64]
    first_pass_s: NDArray[np.float64]
    group_memory_bytes: NDArray[np.float64]
    capacity_bytes: NDArray[np.float64]
    runnable: NDArray[np.bool_]
    edge_src: NDArray[np.int64]
    edge_dst: NDArray[np.int64]
    edge_cost_s: NDArray[np.float32]
    in_edges: tuple[NDArray[np.int64], ...]
    out_edges: tuple[NDArray[np.int64], ...]
    sibling_edges: tuple[NDArray[np.int64], ...]
    group_x: NDArray[np.float32]
    device_x: NDArray[np.float32]
    time_scale_s: float

    @property
    def num_groups(self) -> int:
        """Number of groups (decisions)."""
        return len(self.order)

    @property
    def num_devices(self) -> int:
        """Number of devices."""
        return self.objective.devices.num_devices

    @classmethod
    def from_objective(cls, objective: BoundObjective, order_by: str = ORDER_BY) -> GroupProblem:
        """Build the arrays of ``objective`` (its graph and devices)."""
        g, dev = objective.graph, objective.devices
        n_groups, d = g.num_groups, dev.num_devices
        group = np.asarray(g.group, dtype=np.int64)
        time_s = np.asarray(objective.time_s, dtype=np.float64)
        group_time = np.zeros((n_groups, d))
        np.add.at(group_time, group, time_s)  # inf stays inf: the group cannot run there
        runnable = np.isfinite(group_time)
        forward_time = np.zeros((n_groups, d))
        fwd = ~np.asarray(g.is_backward, dtype=bool)
        np.add.at(forward_time, group[fwd], time_s[fwd])
        has_forward = np.bincount(group[fwd], minlength=n_groups) > 0
        first_pass = np.where(has_forward[:, None], forward_time, group_time)
        # Placement order: groups by the topological position of their first node.
        first = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
        topo = np.asarray(g.topological_order, dtype=np.int64)
        pos = np.empty(g.num_nodes, dtype=np.int64)
        pos[topo] = np.arange(g.num_nodes)
        np.minimum.at(first, group, pos)
        # Source groups (no input from another group: weights, inputs) are placed just before
        # their first consumer, so that they can follow the inputs it already has instead of
        # being spread over idle devices before anything is known about where they are needed.
        src_all = group[g.edges[:, 0]] if g.num_edges else np.zeros(0, np.int64)
        dst_all = group[g.edges[:, 1]] if g.num_edges else np.zeros(0, np.int64)
        between = src_all != dst_all
        has_input = np.zeros(n_groups, dtype=bool)
        has_input[dst_all[between]] = True
        key = first.astype(np.float64)
        if order_by not in ORDERS:
            raise ValueError(f"order_by must be one of {', '.join(ORDERS)}, got {order_by!r}")
        if order_by == "rank":
            key = -_forward_rank(objective, topo, group, n_groups)
        elif order_by == "full_rank":
            key = -_step_rank(objective, group, n_groups)
        consumer_first = np.full(n_groups, np.inf)
        np.minimum.at(consumer_first, src_all[between], key[dst_all[between]])
        lazy = ~has_input & np.isfinite(consumer_first)
        key[lazy] = consumer_first[lazy]
        order = np.lexsort((first, ~lazy, key)).astype(np.int64)
        rank = np.empty(n_groups, dtype=np.int64)
        rank[order] = np.arange(n_groups)

        # Quotient edges: node edges between distinct groups, summed per (src group, dst group).
        src_g, dst_g = src_all, dst_all
        cross = np.flatnonzero(between)
        size = np.where(np.isnan(g.edge_bytes), 0.0, g.edge_bytes)[cross]
        fixed = ~np.isnan(g.edge_cost_s[cross])
        fixed_cost = np.where(fixed, g.edge_cost_s[cross], 0.0)
        key = src_g[cross] * n_groups + dst_g[cross]
        uniq, inverse = np.unique(key, return_inverse=True)
        e_src, e_dst = (uniq // max(n_groups, 1)).astype(np.int64), (uniq % max(n_groups, 1)).astype(np.int64)
        link = dev.latency_s[None, :, :] + size[:, None, None] / dev.bandwidth_Bps[None, :, :]
        link = np.where(size[:, None, None] > 0, link, 0.0)
        per_edge = np.where(fixed[:, None, None], fixed_cost[:, None, None], link)
        cost = np.zeros((len(uniq), d, d))
        np.add.at(cost, inverse, per_edge)
        cost[:, np.arange(d), np.arange(d)] = 0.0
        cost = cost.astype(np.float32)

        # Edges touching each group whose other end is placed earlier.
        earlier_src = rank[e_src] < rank[e_dst]
        # Sibling edges of each group: edges into its consumers from other groups (2 hops), so a
        # group can follow the other inputs of the ops it feeds.
        sib_edge, sib_owner = [], []
        by_dst = bucket(e_dst, np.arange(len(e_dst)), n_groups)
        for e in range(len(e_src)):
            others = by_dst[e_dst[e]]
            others = others[e_src[others] != e_src[e]]
            sib_edge.append(others)
            sib_owner.append(np.full(len(others), e_src[e], dtype=np.int64))
        sib_edge_arr = np.concatenate(sib_edge) if sib_edge else np.zeros(0, np.int64)
        sib_owner_arr = np.concatenate(sib_owner) if sib_owner else np.zeros(0, np.int64)
        siblings = bucket(sib_owner_arr, sib_edge_arr, n_groups)
        in_edges = bucket(e_dst[earlier_src], np.flatnonzero(earlier_src), n_groups)
        out_edges = bucket(e_src[~earlier_src], np.flatnonzero(~earlier_src), n_groups)

        finite_time = np.where(runnable, group_time, np.nan)
        mean_time = np.nanmean(finite_time, axis=1) if d else np.zeros(n_groups)
        mean_time = np.where(np.isfinite(mean_time), mean_time, 0.0)
        fastest = np.where(runnable, group_time, np.inf).min(axis=1) if d else np.zeros(n_groups)
        fastest = np.where(np.isfinite(fastest), fastest, 0.0)
        # A perfect balance: the graph's compute on its fastest devices, shared by all devices.
        scale = max(float(fastest.sum()) / max(d, 1), 1e-9)
        problem = cls(objective=objective, order=order, group_time_s=group_time, first_pass_s=first_pass,
                      group_memory_bytes=np.asarray(g.group_memory_bytes, dtype=np.float64),
                      capacity_bytes=np.asarray(dev.memory_bytes, dtype=np.float64), runnable=runnable,
                      edge_src=e_src, edge_dst=e_dst, edge_cost_s=cost, in_edges=in_edges,
                      out_edges=out_edges, sibling_edges=siblings, group_x=np.zeros((n_groups, NUM_GROUP_FEATURES), np.float32),
                      device_x=np.zeros((d, NUM_DEVICE_FEATURES), np.float32), time_scale_s=scale)
        problem.group_x = problem._group_features(mean_time, rank)
        problem.device_x = problem._device_features()
        return problem

    # ------------------------------------------------------------------ features
    def _group_features(self, mean_time: NDArray[np.float64], rank: NDArray[np.int64]) -> NDArray[np.float32]:
        """Static features of every group: compute, memory, traffic, position, kind support, task."""
        g, n_groups = self.objective.graph, self.num_groups
        fastest = np.where(self.runnable, self.group_time_s, np.inf).min(axis=1)
        fastest = np.where(np.isfinite(fastest), fastest, 0.0)
        slowest = np.where(self.runnable, self.group_time_s, -np.inf).max(axis=1)
        slowest = np.where(np.isfinite(slowest), slowest, fastest)
        per_group = self.time_scale_s * self.num_devices / max(n_groups, 1)  # mean group compute
        off = ~np.eye(self.num_devices, dtype=bool)
        mean_cost = self.edge_cost_s[:, off].mean(axis=1) if self.num_devices > 1 else \
            np.zeros(len(self.edge_src), np.float32)
        cost_out = np.bincount(self.edge_src, weights=mean_cost, minlength=n_groups)
        cost_in = np.bincount(self.edge_dst, weights=mean_cost, minlength=n_groups)
        deg_out = np.bincount(self.edge_src, minlength=n_groups)
        deg_in = np.bincount(self.edge_dst, minlength=n_groups)
        cap = self.capacity_bytes[np.isfinite(self.capacity_bytes)]
        cap_ref = float(cap.min()) if len(cap) else max(float(self.group_memory_bytes.sum()), 1.0)
        backward = np.bincount(g.group, weights=g.is_backward.astype(float), minlength=n_groups)
        size = np.bincount(g.group, minlength=n_groups)
        obj = np.zeros(len(OBJECTIVE_NAMES))
        if self.objective.name in OBJECTIVE_NAMES:
            obj[OBJECTIVE_NAMES.index(self.objective.name)] = 1.0
        x = np.column_stack([
            _log_ratio(mean_time, per_group),                 # compute relative to the mean group
            mean_time / max(self.time_scale_s * self.num_devices, 1e-30) * n_groups / 10.0,
            np.log(np.maximum(slowest, 1e-12) / np.maximum(fastest, 1e-12)).clip(0, 10),  # kind spread
            self.runnable.mean(axis=1),                       # share of devices able to run it
            _log_ratio(self.group_memory_bytes, cap_ref / max(n_groups, 1)),
            _log_ratio(cost_in, per_group), _log_ratio(cost_out, per_group),
            np.log1p(deg_in), np.log1p(deg_out),
            rank / max(n_groups - 1, 1),                      # position in the placement order
            backward / np.maximum(size, 1),
            *(np.full(n_groups, v) for v in obj),
        ])
        return x.astype(np.float32)

    def _device_features(self) -> NDArray[np.float32]:
        """Static features of every device: speed, memory, kind, links (no name, no index)."""
        dev, d = self.objective.devices, self.num_devices
        runnable_time = np.where(self.runnable, self.group_time_s, 0.0).sum(axis=0)
        runnable_best = runnable_time.max() if d else 1.0
        speed = np.where(runnable_time > 0, runnable_best / np.maximum(runnable_time, 1e-30), 0.0)
        mem = self.capacity_bytes
        total_mem = float(self.group_memory_bytes.sum()) or 1.0
        mem_ratio = np.where(np.isfinite(mem), np.minimum(mem / total_mem, 4.0), 4.0)
        bw = np.where(np.eye(d, dtype=bool), np.nan, dev.bandwidth_Bps)
        mean_bw = np.nanmean(bw, axis=1) if d > 1 else np.ones(d)
        bw_ref = float(np.nanmax(mean_bw)) if d > 1 else 1.0
        x = np.column_stack([
            np.minimum(speed, 4.0), mem_ratio, dev.is_cpu.astype(float), self.runnable.mean(axis=0),
            mean_bw / bw_ref if d > 1 else np.ones(d), np.full(d, math.log(d)),
        ])
        return x.astype(np.float32)

    @property
    def edge_weight_s(self) -> NDArray[np.float32]:
        """Weight of each quotient edge: its largest transfer time over device pairs (cached)."""
        w = getattr(self, "_edge_weight", None)
        if w is None:
            w = self.edge_cost_s.max(axis=(1, 2)) if len(self.edge_src) else np.zeros(0, np.float32)
            self._edge_weight = w
        return w

    def edge_index(self) -> NDArray[np.int64]:
        """``(2, Eq)`` group-graph edges for message passing (source row, destination row)."""
        return np.stack([self.edge_src, self.edge_dst]).astype(np.int64)


def _forward_rank(objective: BoundObjective, topo: NDArray[np.int64], group: NDArray[np.int64],
                  n_groups: int) -> NDArray[np.float64]:
    """HEFT's upward rank (mean compute plus mean transfer along the longest path to a sink) over
    the forward nodes, per group (its forward nodes' largest; backward-only groups: -1 - position)."""
    g, dev = objective.graph, objective.devices
    fwd = ~np.asarray(g.is_backward, dtype=bool)
    time_s = np.where(np.isfinite(objective.time_s), objective.time_s, np.nan)
    mean_t = np.nan_to_num(np.nanmean(time_s, axis=1)) if g.num_nodes else np.zeros(0)
    src, dst = (g.edges[:, 0], g.edges[:, 1]) if g.num_edges else (np.zeros(0, np.int64),) * 2
    keep = fwd[src] & fwd[dst]
    src, dst = src[keep], dst[keep]
    size = np.where(np.isnan(g.edge_bytes), 0.0, g.edge_bytes)[keep]
    fixed = g.edge_cost_s[keep]
    d = dev.num_devices
    off = ~np.eye(d, dtype=bool)
    mean_lat = float(dev.latency_s[off].mean()) if d > 1 else 0.0
    mean_inv_bw = float((1.0 / dev.bandwidth_Bps[off]).mean()) if d > 1 else 0.0
    comm = np.where(np.isnan(fixed), np.where(size > 0, mean_lat + size * mean_inv_bw, 0.0), fixed)
    order = np.argsort(src, kind="stable")
    ptr = np.searchsorted(src[order], np.arange(g.num_nodes + 1)).tolist()
    succ, succ_cost, mean_l = dst[order].tolist(), comm[order].tolist(), mean_t.tolist()
    rank = [0.0] * g.num_nodes
    for v in reversed(topo.tolist()):
        best = 0.0
        for k in range(ptr[v], ptr[v + 1]):
            c = succ_cost[k] + rank[succ[k]]
            if c > best:
                best = c
        rank[v] = mean_l[v] + best
    out = np.full(n_groups, -np.inf)
    r = np.asarray(rank)
    np.maximum.at(out, group[fwd], r[fwd])
    pos = np.empty(g.num_nodes)
    pos[topo] = np.arange(g.num_nodes)
    first = np.full(n_groups, np.inf)
    np.minimum.at(first, group, pos)
    return np.where(np.isfinite(out), out, -1.0 - first)


def _step_rank(objective: BoundObjective, group: NDArray[np.int64], n_groups: int) -> NDArray[np.float64]:
    """HEFT's own order key per group: the upward rank of its nodes over the whole step (forward and
    backward, each phase apart when the graph runs its backward pass after the forward one; an
    earlier phase first), the group's largest (it is placed with its first node, as in HEFT)."""
    hp = HeuristicProblem(objective)
    key = np.zeros(objective.graph.num_nodes)
    # Phases run one after the other: every node of an earlier phase outranks every later one.
    offset = 0.0
    for phase in reversed(hp.phases):
        rank = hp.upward_rank(phase)
        key[phase] = rank[phase] + offset
        offset = float(key[phase].max()) + 1.0 if phase else offset
    out = np.full(n_groups, -np.inf)
    np.maximum.at(out, group, key)
    return np.where(np.isfinite(out), out, 0.0)


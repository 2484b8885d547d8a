"""Partitioning a training graph: per-op split counts and the partitioned (sub-op) graph.

Spec §4; docs/simulator.md ("Partitioning"). ``split_ops=False`` (``sim.split_ops=false``, the
model-parallel scenario) splits no op.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from workloads.graph import TrainingGraph

EdgeSizing = Literal["paper", "activation"]
"""How dependency sizes are set: ``paper`` as the original (spec §4.2, quirk §15.7: an edge
between split ops takes the memory of the op split first); ``activation``: the activation (or
its gradient) sharded over the sub-op pairs, weight sync the parameter shard."""


def split_counts(graph: TrainingGraph, degree: int, min_op_time_s: float,
                 split_sizes: tuple[int, ...] | None = None, split_ops: bool = True) -> NDArray[np.int64]:
    """Per forward op, its number of sub-ops at partition degree ``degree`` (spec §4.1).

    ``n = max(1, min(2 * ceil(ceil(c / quantum) / 2), degree))`` with the original's float
    operations, rounded down to the largest of ``split_sizes`` if given; 1 for every op when
    ``split_ops`` is false.
    """
    if degree < 1:
        raise ValueError(f"degree must be >= 1, got {degree}")
    if not split_ops:
        return np.ones(graph.num_forward_ops, dtype=np.int64)
    out = np.empty(graph.num_forward_ops, dtype=np.int64)
    for i, c in enumerate(graph.forward.forward_time_s.tolist()):
        ratio = c / min_op_time_s
        # ratio > degree already gives n = degree; testing it first keeps ceil() away from an
        # infinite ratio (a huge time over a tiny quantum), which would raise OverflowError.
        if ratio > degree:
            n = degree
        else:
            even = math.ceil(math.ceil(ratio) / 2) * 2
            n = int(max(1, min(even, degree)))
        if split_sizes is not None and n not in split_sizes:
            n = max((size for size in split_sizes if size <= n), default=1)
        out[i] = n
    return out


def _edge_sizes(graph: TrainingGraph, edge_sizing: EdgeSizing, u: NDArray, v: NDArray, su: NDArray,
                sv: NDArray) -> NDArray[np.float64]:
    """Size of each sub-op dependency of training edge ``u -> v`` (see :data:`EdgeSizing`)."""
    n = graph.num_forward_ops
    if edge_sizing == "activation":
        act = graph.forward.activation_bytes
        # Forward edge: u's output; backward edge (n+v' -> n+u'): gradient of u''s output.
        carried = np.where(u >= n, act[v % n], act[u % n])
        return carried / (su * sv)
    mem = graph.memory_bytes
    # Split order: forward op i at 2i, its backward mirror at 2i+1 (spec §4.2).
    order = np.where(np.arange(2 * n) < n, 2 * np.arange(2 * n), 2 * (np.arange(2 * n) - n) + 1)
    both = (su > 1) & (sv > 1)
    parent_first = order[u] < order[v]
    size = np.where(
        both, np.where(parent_first, mem[u], mem[v]) / (su * sv),
        np.where(sv > 1, mem[u] / sv, np.where(su > 1, mem[v] / su, mem[u])))
    return size.astype(np.float64)


def _sync_bytes(graph: TrainingGraph, edge_sizing: EdgeSizing, j: int, sj: int) -> float:
    """Size of one weight-sync message of backward op ``j`` split ``sj`` ways."""
    if edge_sizing == "paper":
        return float(graph.memory_bytes[j] / sj)
    return float(graph.forward.parameter_bytes[j - graph.num_forward_ops] / sj)


def _edge_groups(num_forward_ops: int, u: NDArray, v: NDArray, s: NDArray) -> NDArray[np.int64]:
    """Group key (a training op) of each training edge, ``-1`` for point-to-point.

    Forward/join edges are grouped by their (forward) source, backward edges by their
    destination, only when that op is split (spec §6.1).
    """
    key = np.where(u >= num_forward_ops, v, u)
    return np.where(s[key] > 1, key, -1).astype(np.int64)


def _pairs(n: int) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Ordered pairs (l, m), l != m, of n sub-ops and the id of their unordered pair."""
    ls, ms = np.nonzero(~np.eye(n, dtype=bool))
    lo, hi = np.minimum(ls, ms), np.maximum(ls, ms)
    pair_id = lo * n + hi
    _, pair_id = np.unique(pair_id, return_inverse=True)
    return ls.astype(np.int64), ms.astype(np.int64), pair_id.astype(np.int64)


@dataclass(frozen=True, eq=False)
class _SplitGraph:
    """The sub-ops of ``graph`` split at ``degree`` (``splits``: per forward op), shared by both
    partition forms: sub-ops of training op ``j`` are ``offset[j] .. offset[j+1]-1``, and
    ``sub_origin`` is the training op of each sub-op."""

    graph: TrainingGraph
    degree: int
    splits: NDArray[np.int64]
    edge_sizing: EdgeSizing = "paper"
    offset: NDArray[np.int64] = field(init=False, repr=False)
    sub_origin: NDArray[np.int64] = field(init=False, repr=False)
    sub_time_s: NDArray[np.float64] = field(init=False, repr=False)
    sub_memory_bytes: NDArray[np.float64] = field(init=False, repr=False)

    def _sub_ops(self) -> NDArray[np.int64]:
        """Set the sub-op arrays; returns the split count of every training op (the backward
        mirror as its forward op)."""
        g = self.graph
        s = np.concatenate([self.splits, self.splits]).astype(np.int64)
        sub_origin = np.repeat(np.arange(2 * g.num_forward_ops), s)
        self._freeze({"offset": np.concatenate([[0], np.cumsum(s)]).astype(np.int64), "sub_origin": sub_origin,
                      "sub_time_s": g.compute_time_s[sub_origin] / s[sub_origin],
                      "sub_memory_bytes": g.memory_bytes[sub_origin] / s[sub_origin]})
        return s

    def _freeze(self, values: dict[str, NDArray]) -> None:
        """Set read-only contiguous array fields."""
        for name, value in values.items():
            value = np.ascontiguousarray(value)
            value.setflags(write=False)
            object.__setattr__(self, name, value)

    @property
    def num_sub_ops(self) -> int:
        """Number of sub-ops."""
        return int(self.sub_origin.shape[0])


@dataclass(frozen=True, eq=False)
class PartitionedGraph(_SplitGraph):
    """A training graph split at one degree: sub-ops and dependencies as flat arrays.

    Each dependency belongs to at most one communication *group* (spec §6.1): the out-edges of a
    split forward op, the in-edges of a split backward op, or one pair of weight-sync messages. A
    group runs as a collective when its placement is symmetric (always, for sync pairs); otherwise
    its dependencies are point-to-point transfers. ``group = -1`` marks a point-to-point dependency.
    """

    dep_src: NDArray[np.int64] = field(init=False, repr=False)
    dep_dst: NDArray[np.int64] = field(init=False, repr=False)
    dep_bytes: NDArray[np.float64] = field(init=False, repr=False)
    dep_is_sync: NDArray[np.bool_] = field(init=False, repr=False)
    dep_group: NDArray[np.int64] = field(init=False, repr=False)
    group_is_sync: NDArray[np.bool_] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        g = self.graph
        n = g.num_forward_ops
        s = self._sub_ops()
        offset = self.offset

        # --- all-to-all edges between the sub-ops of each training edge (u -> v)
        u, v = g.edges[:, 0], g.edges[:, 1]
        su, sv = s[u], s[v]
        cnt = su * sv
        e_rep = np.repeat(np.arange(len(u)), cnt)
        k = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        src = offset[u[e_rep]] + k // sv[e_rep]
        dst = offset[v[e_rep]] + k % sv[e_rep]
        size = _edge_sizes(g, self.edge_sizing, u, v, su, sv)[e_rep]
        group = _edge_groups(n, u, v, s)[e_rep]

        # --- weight-sync pairs among the sub-ops of each split backward op
        sync_src, sync_dst, sync_size, sync_group = [], [], [], []
        next_group = 2 * n
        pair_cache: dict[int, tuple[NDArray, NDArray, NDArray]] = {}
        for j in range(n, 2 * n):
            sj = int(s[j])
            if sj <= 1:
                continue
            if sj not in pair_cache:
                pair_cache[sj] = _pairs(sj)
            ls, ms, pid = pair_cache[sj]
            sync_src.append(offset[j] + ls)
            sync_dst.append(offset[j] + ms)
            sync_size.append(np.full(len(ls), _sync_bytes(g, self.edge_sizing, j, sj)))
            sync_group.append(next_group + pid)
            next_group += int(pid.max()) + 1
        if sync_src:
            src = np.concatenate([src, *sync_src])
            dst = np.concatenate([dst, *sync_dst])
            size = np.concatenate([size, *sync_size])
            group = np.concatenate([group, *sync_group])
        num_sync = sum(len(a) for a in sync_src)
        is_sync = np.zeros(len(src), dtype=bool)
        if num_sync:
            is_sync[-num_sync:] = True
        # Compact group ids to 0..G-1 (keeping -1).
        grouped = group >= 0
        uniq, inv = np.unique(group[grouped], return_inverse=True)
        compact = np.full(len(group), -1, dtype=np.int64)
        compact[grouped] = inv
        self._freeze({"dep_src": src.astype(np.int64), "dep_dst": dst.astype(np.int64),
                      "dep_bytes": size.astype(np.float64), "dep_is_sync": is_sync, "dep_group": compact,
                      "group_is_sync": uniq >= 2 * n})

    @property
    def num_deps(self) -> int:
        """Number of dependencies (including weight-sync messages)."""
        return int(self.dep_src.shape[0])

    @property
    def num_groups(self) -> int:
        """Number of communication groups."""
        return int(self.group_is_sync.shape[0])

    @cached_property
    def total_bytes(self) -> float:
        """Sub-op memory plus dependency sizes (the original's partitioned 'cluster' demand)."""
        return float(self.sub_memory_bytes.sum() + self.dep_bytes.sum())

    @cached_property
    def schedule_index(self) -> tuple[NDArray[np.int64], ...]:
        """Precedence structure for the step model, placement-independent (cached).

        Returns ``(out_ptr, out_dst, in_degree, out_dep, sources)`` over non-sync dependencies:
        sub-op ``i``'s successors are ``out_dst[out_ptr[i]:out_ptr[i+1]]`` and ``out_dep`` maps
        those positions back to dependency indices. Contiguous int64 arrays, ready for the
        compiled kernel (converting per lookahead would cost O(sub-ops) on the hot path).
        """
        real = np.flatnonzero(~self.dep_is_sync)
        order = real[np.argsort(self.dep_src[real], kind="stable")]
        counts = np.bincount(self.dep_src[order], minlength=self.num_sub_ops)
        out_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        indeg = np.bincount(self.dep_dst[real], minlength=self.num_sub_ops).astype(np.int64)
        sources = np.flatnonzero(indeg == 0).astype(np.int64)
        index = (out_ptr, np.ascontiguousarray(self.dep_dst[order], dtype=np.int64), indeg,
                 order.astype(np.int64), sources)
        for arr in index:
            arr.setflags(write=False)
        return index


@dataclass(frozen=True, eq=False)
class AggregatePartition(_SplitGraph):
    """A training graph split at one degree, with dependencies kept at op level: each training
    edge stands for its ``n_u x n_v`` all-to-all dependencies and each split backward op's weight
    sync for its pairs, so it costs O(sub-ops + training edges) at any degree; the step model
    times it with the same results as :class:`PartitionedGraph`.

    Attributes:
        op_splits: Split count of every training op (forward then backward).
        edge_u, edge_v: Source and destination training op of each edge (the graph's edge order).
        edge_count: Dependencies each edge stands for (``n_u x n_v``).
        edge_size_bytes: Size of each of those dependencies.
        edge_group: Communication group of each edge (``-1``: point-to-point dependencies).
        group_key: The training op a group is keyed by (a split forward source or a split
            backward destination; spec §6.1).
        group_ptr, group_edges: The edges of group ``g`` are ``group_edges[group_ptr[g]:group_ptr[g+1]]``.
        group_bytes: Total bytes of each group, summed dependency by dependency in dependency
            order (bit for bit what the dependency-level model sums).
        out_ptr, out_edges: Out-edges of training op ``j``: ``out_edges[out_ptr[j]:out_ptr[j+1]]``.
        in_degree: Op-level in-edges of each training op (the barriers a sub-op waits for).
        sync_pair_bytes: Bytes of one weight-sync pair group of each training op (both
            directions); 0 for ops without weight sync (forward or unsplit).
    """

    op_splits: NDArray[np.int64] = field(init=False, repr=False)
    edge_u: NDArray[np.int64] = field(init=False, repr=False)
    edge_v: NDArray[np.int64] = field(init=False, repr=False)
    edge_count: NDArray[np.int64] = field(init=False, repr=False)
    edge_size_bytes: NDArray[np.float64] = field(init=False, repr=False)
    edge_group: NDArray[np.int64] = field(init=False, repr=False)
    group_key: NDArray[np.int64] = field(init=False, repr=False)
    group_ptr: NDArray[np.int64] = field(init=False, repr=False)
    group_edges: NDArray[np.int64] = field(init=False, repr=False)
    group_bytes: NDArray[np.float64] = field(init=False, repr=False)
    out_ptr: NDArray[np.int64] = field(init=False, repr=False)
    out_edges: NDArray[np.int64] = field(init=False, repr=False)
    in_degree: NDArray[np.int64] = field(init=False, repr=False)
    sync_pair_bytes: NDArray[np.float64] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Imported here: the kernels module pulls in numba, which plain partitioning never needs.
        from simulator.place.kernel import repeated_sums  # lazy: numba

        g = self.graph
        n = g.num_forward_ops
        s = self._sub_ops()
        u = np.ascontiguousarray(g.edges[:, 0], dtype=np.int64)
        v = np.ascontiguousarray(g.edges[:, 1], dtype=np.int64)
        su, sv = s[u], s[v]
        key = _edge_groups(n, u, v, s)
        group_key, edge_group = np.unique(key[key >= 0], return_inverse=True)
        full_group = np.full(len(u), -1, dtype=np.int64)
        full_group[key >= 0] = edge_group
        num_groups = len(group_key)
        # Edges of each group in edge order (a stable sort keeps it), hence in dependency order.
        grouped = np.flatnonzero(full_group >= 0)
        group_edges = grouped[np.argsort(full_group[grouped], kind="stable")]
        group_ptr = np.concatenate([[0], np.cumsum(np.bincount(full_group[grouped], minlength=num_groups))])
        size = _edge_sizes(g, self.edge_sizing, u, v, su, sv)
        count = (su * sv).astype(np.int64)
        out_edges = np.argsort(u, kind="stable")
        out_ptr = np.concatenate([[0], np.cumsum(np.bincount(u, minlength=2 * n))])
        sync = np.zeros(2 * n)
        for j in range(n, 2 * n):
            if s[j] > 1:
                per = _sync_bytes(g, self.edge_sizing, j, int(s[j]))
                # The pair's two messages summed from 0 as the dependency-level model does.
                sync[j] = (0.0 + per) + per
        self._freeze({
            "op_splits": s, "edge_u": u, "edge_v": v,
            "edge_count": count, "edge_size_bytes": size, "edge_group": full_group,
            "group_key": group_key.astype(np.int64), "group_ptr": group_ptr.astype(np.int64),
            "group_edges": group_edges.astype(np.int64),
            "group_bytes": repeated_sums(group_edges.astype(np.int64), group_ptr.astype(np.int64), count, size),
            "out_ptr": out_ptr.astype(np.int64), "out_edges": out_edges.astype(np.int64),
            "in_degree": np.bincount(v, minlength=2 * n).astype(np.int64), "sync_pair_bytes": sync,
        })

    @property
    def num_edges(self) -> int:
        """Number of op-level edges (training edges)."""
        return int(self.edge_u.shape[0])

    @cached_property
    def num_deps(self) -> int:
        """Dependencies of the dependency-level graph (including weight-sync messages), counted."""
        s = self.op_splits[self.graph.num_forward_ops:]
        return int(self.edge_count.sum() + (s * (s - 1)).sum())

    @cached_property
    def dep_bytes_sum(self) -> float:
        """Sum of every dependency's size (all-to-all edges and weight-sync messages)."""
        n = self.graph.num_forward_ops
        s = self.op_splits[n:]
        # One sync pair group holds both directions of a pair; there are n (n - 1) / 2 pairs.
        sync = (self.sync_pair_bytes[n:] * (s * (s - 1) // 2)).sum()
        return float((self.edge_count * self.edge_size_bytes).sum() + sync)

    @cached_property
    def total_bytes(self) -> float:
        """Sub-op memory plus dependency sizes (:attr:`PartitionedGraph.total_bytes` up to
        summation order)."""
        return float(self.sub_memory_bytes.sum() + self.dep_bytes_sum)


class Partitioner:
    """Builds (and caches) partitioned graphs per ``(graph, degree)``.

    Args:
        min_op_time_s: The SiP-ML quantum: ops are not split below this sub-op time.
        edge_sizing: Dependency sizing rule (:data:`EdgeSizing`).
        split_sizes: Split counts that can be placed, one tuple or a function of the degree
            (:meth:`~simulator.topology.RampTopology.block_split_sizes`); ``None``: the raw rule.
        split_ops: ``False``: no op is split (the model-parallel scenario).
    """

    def __init__(self, min_op_time_s: float = 0.01, edge_sizing: EdgeSizing = "paper",
                 split_sizes: tuple[int, ...] | Callable[[int], tuple[int, ...]] | None = None,
                 split_ops: bool = True) -> None:
        if not (math.isfinite(min_op_time_s) and min_op_time_s > 0):
            raise ValueError(f"min_op_time_s must be > 0, got {min_op_time_s}")
        if edge_sizing not in ("paper", "activation"):
            raise ValueError(f"edge_sizing must be 'paper' or 'activation', got {edge_sizing!r}")
        self.min_op_time_s = float(min_op_time_s)
        self.edge_sizing: EdgeSizing = edge_sizing
        if not isinstance(split_ops, bool | np.bool_):
            raise ValueError(f"split_ops must be true or false, got {split_ops!r}")
        self.split_sizes: tuple[int, ...] | Callable[[int], tuple[int, ...]] | None = (
            split_sizes if split_sizes is None or callable(split_sizes) else tuple(sorted(split_sizes)))
        self.split_ops = bool(split_ops)
        self._splits: dict[tuple[str, int, bool], NDArray[np.int64]] = {}
        self._graphs: dict[tuple[str, int, bool], PartitionedGraph] = {}
        self._aggregates: dict[tuple[str, int, bool], AggregatePartition] = {}

    def splits(self, graph: TrainingGraph, degree: int) -> NDArray[np.int64]:
        """Split counts per forward op (cached)."""
        key = (graph.fingerprint, degree, self.split_ops)
        if key not in self._splits:
            sizes = self.split_sizes(degree) if callable(self.split_sizes) else self.split_sizes
            out = split_counts(graph, degree, self.min_op_time_s, sizes, self.split_ops)
            out.setflags(write=False)
            self._splits[key] = out
        return self._splits[key]

    def partition(self, graph: TrainingGraph, degree: int) -> PartitionedGraph:
        """The partitioned graph at ``degree`` (cached: built once per graph and degree)."""
        return self._built(self._graphs, PartitionedGraph, graph, degree)

    def aggregate(self, graph: TrainingGraph, degree: int) -> AggregatePartition:
        """The op-level partition at ``degree`` (cached; O(sub-ops + edges) at any degree)."""
        return self._built(self._aggregates, AggregatePartition, graph, degree)

    def _built(self, cache: dict, cls: type, graph: TrainingGraph, degree: int) -> Any:
        key = (graph.fingerprint, degree, self.split_ops)
        if key not in cache:
            cache[key] = cls(graph, degree, self.splits(graph, degree), self.edge_sizing)
        return cache[key]

    def total_bytes(self, graph: TrainingGraph, degree: int) -> float:
        """Sub-op memory plus dependency bytes at ``degree`` (a record's ``cluster_bytes``)."""
        return self.aggregate(graph, degree).total_bytes

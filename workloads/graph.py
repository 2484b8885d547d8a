"""Immutable computation graphs: the profiled forward graph and the training (fwd+bwd) graph.

Units: times in seconds (``*_s``), sizes in bytes (``*_bytes``). Loaders convert profile units
(PipeDream profiles are milliseconds) into seconds with their ``time_unit_s`` argument. A graph
records the unit its times are really in (:attr:`OpGraph.time_unit_s`): the paper scenario runs
on a clock whose "second" is one profile millisecond, and a graph knows which clock it is on.

Bounds: an op time above :data:`MAX_OP_TIME_S` or a size above :data:`MAX_OP_BYTES` is rejected
as clearly bad input (it would otherwise overflow later, e.g. in the split-count rule).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from workloads.errors import WorkloadError

#: Longest believable compute time of one op for one sample, in real seconds (about 28 hours).
MAX_OP_TIME_S = 1e5
#: Largest believable activation or parameter size of one op, in bytes (1 PB; a GPU holds 80 GB).
MAX_OP_BYTES = 1e15
#: Accepted range of a graph's time unit, in seconds (a nanosecond to an hour).
TIME_UNIT_RANGE_S = (1e-9, 3600.0)


def frozen_array(array: NDArray, dtype: type) -> NDArray:
    """A read-only copy of ``array`` as ``dtype`` (graphs are immutable)."""
    out = np.array(array, dtype=dtype, copy=True)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class OpGraph:
    """A profiled forward computation graph (one training sample's forward pass).

    Ops are kept in file order: that order decides split order, placement order and the
    row order of observations, as in the original PAC-ML simulator.

    Attributes:
        name: Model name (e.g. ``"resnet18"``).
        op_ids: Op identifiers as written in the source file.
        labels: Human-readable layer descriptions.
        forward_time_s: Forward compute time of each op on one device.
        backward_time_s: Backward compute time of each op on one device.
        activation_bytes: Size of each op's output activation.
        parameter_bytes: Size of each op's parameters.
        edges: ``(E, 2)`` array of ``(src, dst)`` op indices.
        loss_index: Index of the op whose gradient starts the backward pass.
        source: Where the graph came from (a path, or a description).
        time_unit_s: Real seconds per unit of the two time arrays: 1.0 for a graph in seconds;
            1e-3 for PipeDream profile numbers used as the time unit (the paper scenario).
    """

    name: str
    op_ids: tuple[str, ...]
    labels: tuple[str, ...]
    forward_time_s: NDArray[np.float64]
    backward_time_s: NDArray[np.float64]
    activation_bytes: NDArray[np.float64]
    parameter_bytes: NDArray[np.float64]
    edges: NDArray[np.int64]
    loss_index: int
    source: str = ""
    time_unit_s: float = 1.0

    def __post_init__(self) -> None:
        n = len(self.op_ids)
        unit = self.time_unit_s
        if not (isinstance(unit, int | float) and TIME_UNIT_RANGE_S[0] <= unit <= TIME_UNIT_RANGE_S[1]):
            raise WorkloadError(f"time unit {unit!r} s outside {TIME_UNIT_RANGE_S}", path=self.source,
                                field="time_unit_s")
        object.__setattr__(self, "time_unit_s", float(unit))
        for name in ("forward_time_s", "backward_time_s", "activation_bytes", "parameter_bytes"):
            arr = frozen_array(getattr(self, name), np.float64)
            if arr.shape != (n,):
                raise WorkloadError(f"expected {n} values, got shape {arr.shape}", path=self.source, field=name)
            # A backstop for graphs built in code (loaders check first, naming the line): no
            # NaN, no negative and no absurd value gets into the simulator.
            bound = MAX_OP_TIME_S / unit if name.endswith("_s") else MAX_OP_BYTES
            bad = np.flatnonzero(~((arr >= 0) & (arr <= bound)))
            if len(bad):
                i = int(bad[0])
                raise WorkloadError(f"op {self.op_ids[i]!r}: value {arr[i]} outside [0, {bound:g}]",
                                    path=self.source, field=name)
            object.__setattr__(self, name, arr)
        edges = frozen_array(np.asarray(self.edges, dtype=np.int64).reshape(-1, 2), np.int64)
        object.__setattr__(self, "edges", edges)
        if len(self.labels) != n:
            raise WorkloadError("labels and op_ids differ in length", path=self.source, field="labels")
        if not 0 <= self.loss_index < n:
            raise WorkloadError(f"loss op index {self.loss_index} out of range", path=self.source, field="loss_op")

    @property
    def num_ops(self) -> int:
        """Number of forward ops."""
        return len(self.op_ids)

    @property
    def num_edges(self) -> int:
        """Number of forward edges."""
        return int(self.edges.shape[0])

    @cached_property
    def fingerprint(self) -> str:
        """A content hash: equal graphs share simulator caches, whatever their file."""
        h = hashlib.sha1(self.name.encode())
        for arr in (self.forward_time_s, self.backward_time_s, self.activation_bytes,
                    self.parameter_bytes, self.edges):
            h.update(arr.tobytes())
        h.update(str(self.loss_index).encode())
        return h.hexdigest()[:16]

    def scaled(self, time_factor: float) -> OpGraph:
        """Return a copy with every compute time multiplied by ``time_factor`` (same unit)."""
        return replace(self, forward_time_s=self.forward_time_s * time_factor,
                       backward_time_s=self.backward_time_s * time_factor)

    def in_time_unit(self, time_unit_s: float) -> OpGraph:
        """The same graph with its times expressed in units of ``time_unit_s`` real seconds.

        E.g. a graph in seconds (unit 1.0) put on the paper scenario's clock (unit 1e-3, one
        profile millisecond) has every time multiplied by 1000. Returns ``self`` if nothing changes.
        Converted times are rounded to 15 significant digits, so that a round trip through another
        unit gives back the very same numbers (split counts compare times against a quantum).
        """
        if time_unit_s == self.time_unit_s:
            return self
        factor = self.time_unit_s / time_unit_s

        def convert(times: NDArray[np.float64]) -> NDArray[np.float64]:
            return np.array([float(f"{t:.15g}") for t in (times * factor).tolist()], dtype=np.float64)

        return replace(self, forward_time_s=convert(self.forward_time_s),
                       backward_time_s=convert(self.backward_time_s), time_unit_s=time_unit_s)


@dataclass(frozen=True, eq=False)
class TrainingGraph:
    """One training step: the forward ops, their mirrored backward ops and the join edge.

    Op ``i < n`` is forward op ``i`` of :attr:`forward`; op ``n + i`` is its backward mirror.
    Edges: each forward edge ``u -> v``; its mirror ``n+v -> n+u``; and one join edge
    ``loss -> n+loss`` (spec §2.3). Every edge carries the activation size of its source.

    Attributes:
        forward: The profiled forward graph.
    """

    forward: OpGraph
    compute_time_s: NDArray[np.float64] = field(init=False, repr=False)
    memory_bytes: NDArray[np.float64] = field(init=False, repr=False)
    edges: NDArray[np.int64] = field(init=False, repr=False)
    edge_bytes: NDArray[np.float64] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        f = self.forward
        n = f.num_ops
        compute = np.concatenate([f.forward_time_s, f.backward_time_s])
        # The original model charges an op and its mirror the same memory (activation+params).
        mem = f.activation_bytes + f.parameter_bytes
        memory = np.concatenate([mem, mem])
        u, v = f.edges[:, 0], f.edges[:, 1]
        fwd = np.stack([u, v], axis=1)
        bwd = np.stack([n + v, n + u], axis=1)
        join = np.array([[f.loss_index, n + f.loss_index]], dtype=np.int64)
        edges = np.concatenate([fwd, bwd, join]).astype(np.int64)
        act = np.concatenate([f.activation_bytes, f.activation_bytes])
        edge_bytes = act[edges[:, 0]]
        object.__setattr__(self, "compute_time_s", frozen_array(compute, np.float64))
        object.__setattr__(self, "memory_bytes", frozen_array(memory, np.float64))
        object.__setattr__(self, "edges", frozen_array(edges, np.int64))
        object.__setattr__(self, "edge_bytes", frozen_array(edge_bytes, np.float64))

    @property
    def name(self) -> str:
        """Model name."""
        return self.forward.name

    @property
    def num_forward_ops(self) -> int:
        """Number of forward ops ``n`` (the graph has ``2n`` ops)."""
        return self.forward.num_ops

    @property
    def num_ops(self) -> int:
        """Number of ops (forward + backward)."""
        return 2 * self.forward.num_ops

    @property
    def num_edges(self) -> int:
        """Number of dependencies (forward, backward and join)."""
        return int(self.edges.shape[0])

    @property
    def fingerprint(self) -> str:
        """Content hash of the forward graph (the training graph is derived from it)."""
        return self.forward.fingerprint

    @cached_property
    def step_time_s(self) -> float:
        """Sequential time of one training step on one device (sum of all op times)."""
        return float(self.compute_time_s.sum())

    @cached_property
    def critical_path_s(self) -> float:
        """Longest compute path through one step: a lower bound on any parallel step time."""
        order = self.topological_order
        longest = self.compute_time_s.copy()
        preds: list[list[int]] = [[] for _ in range(self.num_ops)]
        for s, d in self.edges.tolist():
            preds[d].append(s)
        for op in order:
            if preds[op]:
                longest[op] += max(longest[p] for p in preds[op])
        return float(longest.max())

    @cached_property
    def topological_order(self) -> tuple[int, ...]:
        """A topological order of the ops (Kahn, seeded in index order)."""
        return topological_order(self.num_ops, self.edges)

    @cached_property
    def total_memory_bytes(self) -> float:
        """Sum of op memory (the original's 'total op memory')."""
        return float(self.memory_bytes.sum())

    @cached_property
    def total_edge_bytes(self) -> float:
        """Sum of dependency sizes (the original's 'total dep size')."""
        return float(self.edge_bytes.sum())

    @cached_property
    def demand_bytes(self) -> float:
        """Information a job carries per the original's demand-throughput metric (spec §9)."""
        return self.total_memory_bytes + self.total_edge_bytes

    @cached_property
    def depth(self) -> NDArray[np.int64]:
        """Per op: number of ops on the shortest path from the first source (0 if unreachable)."""
        succ: list[list[int]] = [[] for _ in range(self.num_ops)]
        indeg = np.zeros(self.num_ops, dtype=np.int64)
        for s, d in self.edges.tolist():
            succ[s].append(d)
            indeg[d] += 1
        depth = np.zeros(self.num_ops, dtype=np.int64)
        sources = np.flatnonzero(indeg == 0)
        if len(sources) == 0:
            return depth
        start = int(sources[0])
        depth[start] = 1
        frontier = [start]
        while frontier:
            nxt = []
            for u in frontier:
                for v in succ[u]:
                    if depth[v] == 0:
                        depth[v] = depth[u] + 1
                        nxt.append(v)
            frontier = nxt
        return depth


def _kahn(num_nodes: int, edges: Iterable[Sequence[int]]) -> tuple[list[int], list[int]]:
    """Kahn's algorithm, seeded with zero in-degree nodes in index order: the order of the nodes
    it removes, and every node's in-degree left (> 0 exactly on or behind a cycle)."""
    succ: list[list[int]] = [[] for _ in range(num_nodes)]
    indeg = [0] * num_nodes
    for s, d in edges:
        succ[s].append(d)
        indeg[d] += 1
    order = [i for i in range(num_nodes) if indeg[i] == 0]
    for u in order:  # grows while it is walked
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
    return order, indeg


def topological_order(num_nodes: int, edges: NDArray[np.int64]) -> tuple[int, ...]:
    """Kahn's algorithm, seeded with zero in-degree nodes in index order.

    Raises:
        ValueError: If the graph has a cycle (the message lists a node on it).
    """
    order, indeg = _kahn(num_nodes, np.asarray(edges).reshape(-1, 2).tolist())
    if len(order) != num_nodes:
        stuck = next(i for i in range(num_nodes) if indeg[i] > 0)
        raise ValueError(f"graph has a cycle through node index {stuck}")
    return tuple(order)


def find_cycle(num_nodes: int, edges: list[tuple[int, int]]) -> list[int] | None:
    """One cycle as a list of nodes ``[a, b, ..., z]`` (edges a->b, ..., z->a), or ``None``.

    Kahn's algorithm leaves every node on or behind a cycle with a remaining predecessor;
    walking remaining predecessors from any of them must revisit a node, closing a cycle.
    Linear in nodes + edges.
    """
    order, indeg = _kahn(num_nodes, edges)
    if len(order) == num_nodes:
        return None
    pred: list[list[int]] = [[] for _ in range(num_nodes)]
    for s, d in edges:
        pred[d].append(s)
    node = next(i for i in range(num_nodes) if indeg[i] > 0)
    seen: dict[int, int] = {}
    walk: list[int] = []
    while node not in seen:
        seen[node] = len(walk)
        walk.append(node)
        node = next(p for p in pred[node] if indeg[p] > 0)
    return walk[seen[node]:][::-1]


def cycle_error(num_nodes: int, position: dict[tuple[int, int], int],
                names: Sequence[str]) -> tuple[str, int] | None:
    """``("graph has a cycle: a -> b -> a", where)`` if the edges (the keys of ``position``, each
    edge's place in its file, in file order) hold a cycle, ``where`` being the place of the
    cycle's last edge in file order (the one that closed it); else ``None``."""
    cycle = find_cycle(num_nodes, list(position))
    if cycle is None:
        return None
    closing = max(position[pair] for pair in zip(cycle, [*cycle[1:], cycle[0]], strict=True))
    return "graph has a cycle: " + " -> ".join(names[i] for i in [*cycle, cycle[0]]), closing

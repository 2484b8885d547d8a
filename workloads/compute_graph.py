"""The graph an op placer places: nodes with per-device-kind times, memory, groups and edges.

One type serves every source of graphs:

* a PAC-ML training step (:class:`~workloads.graph.TrainingGraph`): forward ops, their mirrored
  backward ops and the join edge; an op and its mirror form one *group* (placed together);
* a msr-fiddle/dnn-partitioning file (Tarnawski et al.): explicit forward and backward nodes,
  CPU and accelerator times, colour classes (each class is one group), per-edge transfer costs.

Units: times in seconds, sizes in bytes. Times are per *device kind*: ``kind_time_s[kind][i]``
is node ``i``'s compute time on a device of that kind; a kind the graph does not list uses the
reference kind's time divided by the device's speed (see
:meth:`ComputeGraph.node_time_s`). ``inf`` marks a node that cannot run on a kind (e.g. a node
not ``supportedOnFpga``).

Terms: *op placement* maps each node to a device (this module and ``simulator.place``); *job
allocation* is which block of RAMP servers a job gets (``simulator.allocation``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workloads.errors import WorkloadError
from workloads.graph import TrainingGraph, frozen_array, topological_order

#: The kind whose times every PipeDream / pacml JSON graph carries (profiled on a GPU).
GPU_KIND = "gpu"


@dataclass(frozen=True, eq=False)
class ComputeGraph:
    """A computation graph to place op by op (see module docstring).

    Attributes:
        name: Model name.
        node_names: One name per node (file ids or op labels), for placements and charts.
        kind_time_s: Device kind -> per-node compute time in seconds (``inf``: not supported).
        reference_kind: The kind whose times stand in for kinds the graph does not list.
        memory_bytes: Memory each node takes on the device that runs it.
        is_backward: Whether each node belongs to the backward pass.
        group: Group of each node (``0..G-1``); a group is placed whole on one device (an op and
            its backward mirror; a colour class).
        edges: ``(E, 2)`` array of ``(src, dst)`` node indices.
        edge_bytes: Bytes each edge carries (``nan`` if the source gives none).
        edge_cost_s: Fixed transfer time of each edge when its ends are on different devices
            (``nan``: priced from ``edge_bytes`` and the link instead).
        source: Where the graph came from.
    """

    name: str
    node_names: tuple[str, ...]
    kind_time_s: Mapping[str, NDArray[np.float64]]
    reference_kind: str
    memory_bytes: NDArray[np.float64]
    is_backward: NDArray[np.bool_]
    group: NDArray[np.int64]
    edges: NDArray[np.int64]
    edge_bytes: NDArray[np.float64]
    edge_cost_s: NDArray[np.float64]
    source: str = ""
    meta: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.node_names)
        if self.reference_kind not in self.kind_time_s:
            raise WorkloadError(f"reference kind {self.reference_kind!r} has no times", path=self.source)
        times = {}
        for kind, arr in self.kind_time_s.items():
            a = frozen_array(arr, np.float64)
            if a.shape != (n,):
                raise WorkloadError(f"kind {kind!r}: expected {n} times, got shape {a.shape}", path=self.source)
            if np.isnan(a).any() or (a < 0).any():
                raise WorkloadError(f"kind {kind!r}: times must be >= 0 (inf: unsupported)", path=self.source)
            times[kind] = a
        if np.isinf(times[self.reference_kind]).all() and n:
            raise WorkloadError(f"no node runs on the reference kind {self.reference_kind!r}", path=self.source)
        object.__setattr__(self, "kind_time_s", times)
        edges = frozen_array(np.asarray(self.edges, dtype=np.int64).reshape(-1, 2), np.int64)
        object.__setattr__(self, "edges", edges)
        e = len(edges)
        for name, dtype, size in (("memory_bytes", np.float64, n), ("is_backward", bool, n),
                                  ("group", np.int64, n), ("edge_bytes", np.float64, e),
                                  ("edge_cost_s", np.float64, e)):
            arr = frozen_array(getattr(self, name), dtype)
            if arr.shape != (size,):
                raise WorkloadError(f"{name}: expected {size} values, got shape {arr.shape}", path=self.source)
            object.__setattr__(self, name, arr)
        group = self.group
        if n and (group.min() != 0 or len(np.unique(group)) != group.max() + 1):
            raise WorkloadError("groups must be numbered 0..G-1", path=self.source)
        if e and (edges.min() < 0 or edges.max() >= n):
            raise WorkloadError("an edge names a node out of range", path=self.source)
        if (self.memory_bytes < 0).any() or np.isnan(self.memory_bytes).any():
            raise WorkloadError("memory must be >= 0", path=self.source)

    # ------------------------------------------------------------------ sizes
    @property
    def num_nodes(self) -> int:
        """Number of nodes (forward and backward)."""
        return len(self.node_names)

    @property
    def num_edges(self) -> int:
        """Number of edges."""
        return int(self.edges.shape[0])

    @cached_property
    def num_groups(self) -> int:
        """Number of groups (units of placement)."""
        return int(self.group.max()) + 1 if self.num_nodes else 0

    @cached_property
    def group_members(self) -> tuple[NDArray[np.int64], ...]:
        """Nodes of each group, ascending."""
        order = np.argsort(self.group, kind="stable")
        bounds = np.searchsorted(self.group[order], np.arange(self.num_groups + 1))
        return tuple(order[bounds[g]:bounds[g + 1]] for g in range(self.num_groups))

    @cached_property
    def group_memory_bytes(self) -> NDArray[np.float64]:
        """Memory of each group (sum over its nodes)."""
        return np.bincount(self.group, weights=self.memory_bytes, minlength=self.num_groups)

    @cached_property
    def fingerprint(self) -> str:
        """Content hash: equal graphs share caches whatever their file."""
        return self.content_hash(hashlib.sha1(self.name.encode()))

    def content_hash(self, h: Any) -> str:
        """``h`` (a hashlib object) updated with everything a placer sees but the name; its digest."""
        for kind in sorted(self.kind_time_s):
            h.update(kind.encode())
            h.update(self.kind_time_s[kind].tobytes())
        for arr in (self.memory_bytes, self.is_backward, self.group, self.edges, self.edge_bytes,
                    self.edge_cost_s):
            h.update(arr.tobytes())
        return h.hexdigest()[:16]

    @cached_property
    def topological_order(self) -> tuple[int, ...]:
        """A topological order of the nodes (raises ``ValueError`` on a cycle)."""
        return topological_order(self.num_nodes, self.edges)

    # ------------------------------------------------------------------ times
    def node_time_s(self, kind: str, speed: float = 1.0) -> NDArray[np.float64]:
        """Per-node compute time on a device of ``kind`` whose speed relative to the reference kind
        is ``speed``.

        A kind the graph lists uses its own (measured) times as they are: ``speed`` only stands
        in for times the graph does not have. Any other kind uses the reference kind's times
        divided by ``speed`` (e.g. a GPU-profiled graph on a CPU of speed 0.1 runs 10x slower).
        """
        base = self.kind_time_s.get(kind)
        if base is not None:
            return base
        return self.kind_time_s[self.reference_kind] / speed

    def forward_only(self) -> ComputeGraph:
        """The forward nodes alone (inference), edges among them kept; groups renumbered."""
        keep = np.flatnonzero(~self.is_backward)
        return self.subgraph(keep, name=self.name)

    def subgraph(self, nodes: NDArray[np.int64], *, name: str | None = None) -> ComputeGraph:
        """The graph induced by ``nodes`` (in the given order); groups renumbered densely."""
        nodes = np.asarray(nodes, dtype=np.int64)
        index = np.full(self.num_nodes, -1, dtype=np.int64)
        index[nodes] = np.arange(len(nodes))
        ekeep = (index[self.edges[:, 0]] >= 0) & (index[self.edges[:, 1]] >= 0)
        _, group = np.unique(self.group[nodes], return_inverse=True)
        return ComputeGraph(
            name=name or self.name, node_names=tuple(self.node_names[i] for i in nodes.tolist()),
            kind_time_s={k: v[nodes] for k, v in self.kind_time_s.items()},
            reference_kind=self.reference_kind, memory_bytes=self.memory_bytes[nodes],
            is_backward=self.is_backward[nodes], group=group,
            edges=index[self.edges[ekeep]], edge_bytes=self.edge_bytes[ekeep],
            edge_cost_s=self.edge_cost_s[ekeep], source=self.source, meta=dict(self.meta))

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_training_graph(cls, graph: TrainingGraph, *, time_unit_s: float | None = None) -> ComputeGraph:
        """One PAC-ML training step: node ``i < n`` is forward op ``i``, ``n + i`` its mirror.

        Times are converted to seconds with the forward graph's ``time_unit_s`` (a PipeDream
        profile in the paper scenario has unit 1e-3: one profile millisecond); pass
        ``time_unit_s`` to override. Each op and its mirror form group ``i``; edges carry the
        output of the forward op they stem from: a forward edge ``u -> v`` carries ``u``'s activation,
        its mirror ``n+v -> n+u`` the gradient of it (same size), as the cluster simulator's
        physical edge sizing (``sim.edge_sizing=activation``) at one sub-op per op.
        """
        f = graph.forward
        n = f.num_ops
        unit = f.time_unit_s if time_unit_s is None else time_unit_s
        names = tuple(f.op_ids) + tuple(f"{op}/backward" for op in f.op_ids)
        act = np.asarray(f.activation_bytes)
        edges = np.asarray(graph.edges)
        carried = np.where(edges[:, 0] >= n, act[edges[:, 1] % n], act[edges[:, 0] % n])
        return cls(
            name=graph.name, node_names=names,
            kind_time_s={GPU_KIND: np.asarray(graph.compute_time_s) * unit},
            reference_kind=GPU_KIND, memory_bytes=graph.memory_bytes,
            is_backward=np.arange(2 * n) >= n, group=np.concatenate([np.arange(n), np.arange(n)]),
            edges=graph.edges, edge_bytes=carried,
            edge_cost_s=np.full(graph.num_edges, np.nan), source=f.source,
            meta={"forward_ops": n, "labels": tuple(f.labels)})

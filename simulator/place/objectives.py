"""Objectives of op placement, each a pure function of (graph, devices, placement).

* ``step`` (default): one training step, list-scheduled by the cluster simulator's kernel
  (:func:`simulator.step_model.list_schedule`): each device runs one node at a time, shortest
  ready node first; an edge between devices takes its transfer time. On a graph whose backward
  nodes have no edge from the forward pass (dnn-partitioning training graphs), the backward pass
  starts when the forward pass has finished.
* ``latency``: the forward pass alone (inference; HSDAG's metric).
* ``pipeline``: time per sample of pipelined execution, Tarnawski et al.'s max-load model: the
  largest device load, where a load is compute plus communication; a host CPU pays no
  communication (``workloads/data/dnn_partitioning/README.md``).

A placement is an integer array, the device index of every node. A placement that puts a node on
a device without the memory for it, or on a kind that cannot run it, is infeasible: its value is
``inf`` and :meth:`BoundObjective.evaluate` names the device and the bytes.

Bind once per (graph, devices) with :meth:`Objective.bind`; the bound objective precomputes
every placement-independent array and counts evaluations (the search budget's unit).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from simulator.place.devices import DeviceSet
from simulator.place.kernel import scheduled_value
from workloads.compute_graph import ComputeGraph


class PlacementError(ValueError):
    """A placement that does not fit the graph or the devices (wrong length, unknown device)."""


@dataclass(frozen=True)
class Schedule:
    """One step's timeline (for Gantt charts).

    Attributes:
        start_s: Start time of each node.
        finish_s: Finish time of each node.
        transfers: ``(edge index, start_s, finish_s)`` of every transfer between devices.
    """

    start_s: NDArray[np.float64]
    finish_s: NDArray[np.float64]
    transfers: tuple[tuple[int, float, float], ...]


@dataclass(frozen=True)
class Evaluation:
    """A placement's value and what explains it.

    Attributes:
        value_s: Objective value in seconds (``inf`` if infeasible).
        feasible: Whether every device can hold and run its nodes.
        reason: Why not (one line naming the device and the bytes), or ``""``.
        memory_bytes: Memory used on each device.
        compute_s: Compute time on each device.
        comm_s: Communication of each device: its max-load communication (pipeline objective), or
            the summed time of the transfers it sends in the step (step, latency; they overlap compute).
        schedule: The timeline (step and latency objectives), else ``None``.
    """

    value_s: float
    feasible: bool
    reason: str
    memory_bytes: NDArray[np.float64]
    compute_s: NDArray[np.float64]
    comm_s: NDArray[np.float64]
    schedule: Schedule | None = None


@dataclass(eq=False)
class BoundObjective(ABC):
    """An objective bound to one graph and one device set (see module docstring)."""

    graph: ComputeGraph
    devices: DeviceSet
    name: ClassVar[str] = ""
    evaluations: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        g, dev = self.graph, self.devices
        #: (N, D) compute time of every node on every device (inf: the kind cannot run it).
        self.time_s = np.stack([g.node_time_s(d.kind, d.speed) for d in dev.devices], axis=1) \
            if g.num_nodes else np.zeros((0, dev.num_devices))
        self.capacity_bytes = dev.memory_bytes
        src, dst = (g.edges[:, 0], g.edges[:, 1]) if g.num_edges else (np.zeros(0, np.int64),) * 2
        self._src, self._dst = src, dst
        fixed = ~np.isnan(g.edge_cost_s)
        #: Per edge: its fixed transfer time (s; 0 where none), whether it has one, and its bytes (0 for NaN).
        self.fixed_cost = np.where(fixed, g.edge_cost_s, 0.0)
        self.has_fixed = fixed
        self.edge_bytes = np.where(np.isnan(g.edge_bytes), 0.0, g.edge_bytes)

    # ---------------------------------------------------------------- helpers
    def check(self, placement: NDArray[np.int64]) -> NDArray[np.int64]:
        """Validate a placement's shape and device indices; return it as an int array."""
        p = np.asarray(placement)
        if p.shape != (self.graph.num_nodes,):
            raise PlacementError(f"a placement needs one device per node ({self.graph.num_nodes}), got shape {p.shape}")
        if p.size and (p.dtype.kind not in "iu" or p.min() < 0 or p.max() >= self.devices.num_devices):
            raise PlacementError(f"device indices must be integers in 0..{self.devices.num_devices - 1}")
        return p.astype(np.int64, copy=False)

    def edge_time_s(self, placement: NDArray[np.int64]) -> NDArray[np.float64]:
        """Transfer time of every edge under ``placement`` (0 when both ends share a device)."""
        a, b = placement[self._src], placement[self._dst]
        t = self.devices.transfer_time_s(a, b, self.edge_bytes)
        t = np.where(self.has_fixed, self.fixed_cost, t)
        return np.where(a == b, 0.0, t)

    def infeasibility(self, placement: NDArray[np.int64]) -> str:
        """Why ``placement`` is infeasible (one line), or ``""``."""
        g, dev = self.graph, self.devices
        node_t = self.time_s[np.arange(g.num_nodes), placement]
        bad = np.flatnonzero(np.isinf(node_t))
        if len(bad):
            i = int(bad[0])
            d = dev.devices[placement[i]]
            return f"node {g.node_names[i]!r} cannot run on device {d.name!r} (kind {d.kind})"
        used = np.bincount(placement, weights=g.memory_bytes, minlength=dev.num_devices)
        over = np.flatnonzero(used > self.capacity_bytes * (1 + 1e-12))
        if len(over):
            d = int(over[0])
            return (f"device {dev.devices[d].name!r} needs {used[d]:,.0f} bytes, holds "
                    f"{self.capacity_bytes[d]:,.0f} bytes")
        return ""

    def memory_bytes(self, placement: NDArray[np.int64]) -> NDArray[np.float64]:
        """Memory used on each device."""
        return np.bincount(placement, weights=self.graph.memory_bytes, minlength=self.devices.num_devices)

    def feasible(self, placement: NDArray[np.int64]) -> bool:
        """Whether every device can hold and run its nodes (fast)."""
        used = np.bincount(placement, weights=self.graph.memory_bytes, minlength=self.devices.num_devices)
        if (used > self.capacity_bytes * (1 + 1e-12)).any():
            return False
        return bool(np.isfinite(self.time_s[np.arange(self.graph.num_nodes), placement]).all())

    # ---------------------------------------------------------------- interface
    def value(self, placement: NDArray[np.int64]) -> float:
        """Objective value of ``placement`` in seconds (``inf`` if infeasible); counts one evaluation."""
        p = self.check(placement)
        self.evaluations += 1
        if not self.feasible(p):
            return math.inf
        return self.raw_value(p)

    def value_groups(self, group_device: NDArray[np.int64]) -> float:
        """:meth:`value` of the placement that puts every node on its group's device."""
        return self.value(np.asarray(group_device, dtype=np.int64)[self.graph.group])

    def evaluate(self, placement: NDArray[np.int64]) -> Evaluation:
        """Value plus explanation (memory, compute and communication per device, timeline)."""
        p = self.check(placement)
        reason = self.infeasibility(p)
        compute = np.zeros(self.devices.num_devices)
        node_t = self.time_s[np.arange(self.graph.num_nodes), p]
        np.add.at(compute, p, np.where(np.isfinite(node_t), node_t, 0.0))
        if reason:
            return Evaluation(math.inf, False, reason, self.memory_bytes(p), compute,
                              np.zeros(self.devices.num_devices))
        return self._evaluate(p, compute)

    @abstractmethod
    def raw_value(self, placement: NDArray[np.int64]) -> float:
        """:meth:`value` of a checked, feasible placement, without counting an evaluation."""

    @abstractmethod
    def _evaluate(self, placement: NDArray[np.int64], compute: NDArray[np.float64]) -> Evaluation: ...


class _ScheduledObjective(BoundObjective):
    """Shared by ``step`` and ``latency``: list-schedule the nodes on their devices."""

    forward_only: ClassVar[bool] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        g = self.graph
        nodes = np.flatnonzero(~g.is_backward) if self.forward_only else np.arange(g.num_nodes)
        # Phases: forward then backward when no edge joins them (explicit backward graphs).
        barrier = bool(g.meta.get("backward_after_forward", False)) and not self.forward_only
        self._phases = [np.flatnonzero(~g.is_backward), np.flatnonzero(g.is_backward)] if barrier else [nodes]
        self._csr = [self._phase_csr(ph) for ph in self._phases]
        self._kernel_args = self._pack_kernel_args()

    def _phase_csr(self, nodes: NDArray[np.int64]):
        g = self.graph
        local = np.full(g.num_nodes, -1, dtype=np.int64)
        local[nodes] = np.arange(len(nodes))
        keep = np.flatnonzero((local[self._src] >= 0) & (local[self._dst] >= 0)) if g.num_edges else \
            np.zeros(0, np.int64)
        src_l, dst_l = local[self._src[keep]], local[self._dst[keep]]
        order = np.argsort(src_l, kind="stable")
        counts = np.bincount(src_l[order], minlength=len(nodes))
        out_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        indeg = np.bincount(dst_l, minlength=len(nodes))
        sources = np.flatnonzero(indeg == 0)
        return nodes, keep[order], out_ptr, dst_l[order], indeg, sources

    def _pack_kernel_args(self) -> tuple:
        """Every placement-independent array of :func:`simulator.place.kernel.scheduled_value`, flat and typed
        once (the compiled call then costs no conversion per evaluation)."""
        def cat(parts, dtype):
            return np.ascontiguousarray(np.concatenate([np.asarray(x, dtype) for x in parts]) if parts else
                                        np.zeros(0, dtype), dtype=dtype)

        def offsets(parts):
            return np.concatenate([[0], np.cumsum([len(x) for x in parts])]).astype(np.int64)

        nodes, edges, ptrs, dsts, indegs, sources = zip(*self._csr, strict=True)
        dev = self.devices
        f64, i64 = np.float64, np.int64
        return (np.ascontiguousarray(self.time_s, f64), np.ascontiguousarray(self.graph.memory_bytes, f64),
                np.ascontiguousarray(self.capacity_bytes, f64), np.ascontiguousarray(self._src, i64),
                np.ascontiguousarray(self._dst, i64), np.ascontiguousarray(self.has_fixed, np.bool_),
                np.ascontiguousarray(self.fixed_cost, f64), np.ascontiguousarray(self.edge_bytes, f64),
                np.ascontiguousarray(dev.latency_s, f64), np.ascontiguousarray(dev.bandwidth_Bps, f64),
                offsets(nodes), cat(nodes, i64), cat(edges, i64), offsets(edges), cat(ptrs, i64), cat(dsts, i64),
                cat(indegs, i64), offsets(sources), cat(sources, i64))

    def _run_kernel(self, placement: NDArray[np.int64]) -> tuple[float, NDArray[np.float64], NDArray[np.float64]]:
        """``(value, start, finish)`` from the compiled kernel (value ``inf`` if infeasible, ``nan`` on a bad index)."""
        n = self.graph.num_nodes
        start, finish = np.zeros(n), np.zeros(n)
        value = scheduled_value(placement, *self._kernel_args, start, finish)
        if value < 0:
            raise RuntimeError("step model deadlock: the graph has a cycle")
        return value, start, finish

    def value(self, placement: NDArray[np.int64]) -> float:
        """Objective value of ``placement`` in seconds (``inf`` if infeasible); counts one evaluation.

        Same contract as :meth:`BoundObjective.value`, with the checks done inside the compiled call.
        """
        p = np.asarray(placement)
        if p.shape != (self.graph.num_nodes,) or (p.size and p.dtype.kind not in "iu"):
            self.check(p)  # raises the usual PlacementError
        p = np.ascontiguousarray(p, dtype=np.int64)
        v = self._run_kernel(p)[0]
        if math.isnan(v):
            self.check(p)  # a device index out of range: raises
        self.evaluations += 1
        return v

    def _schedule(self, placement: NDArray[np.int64]) -> tuple[float, Schedule | None, NDArray[np.float64]]:
        p = np.ascontiguousarray(placement, dtype=np.int64)
        value, start, finish = self._run_kernel(p)
        return value, Schedule(start, finish, ()), self.edge_time_s(p)

    def raw_value(self, placement: NDArray[np.int64]) -> float:
        return self._run_kernel(np.ascontiguousarray(placement, dtype=np.int64))[0]

    def _evaluate(self, placement: NDArray[np.int64], compute: NDArray[np.float64]) -> Evaluation:
        value, sched, edge_t = self._schedule(placement)
        transfers = []
        for k in np.flatnonzero(edge_t > 0).tolist():
            s = int(self._src[k])
            if self.forward_only and (self.graph.is_backward[s] or self.graph.is_backward[self._dst[k]]):
                continue
            t0 = float(sched.finish_s[s])
            transfers.append((k, t0, t0 + float(edge_t[k])))
        sched = Schedule(sched.start_s, sched.finish_s, tuple(transfers))
        if self.forward_only:
            bwd = self.graph.is_backward
            compute = compute - np.bincount(placement[bwd], weights=self.time_s[np.flatnonzero(bwd), placement[bwd]],
                                            minlength=self.devices.num_devices)
        # Communication per device: the time of the transfers it sends (they overlap its compute).
        comm = np.zeros(self.devices.num_devices)
        for k, t0, t1 in transfers:
            comm[placement[self._src[k]]] += t1 - t0
        return Evaluation(value, True, "", self.memory_bytes(placement), compute, comm, sched)


class StepObjective(_ScheduledObjective):
    """Time of one training step (forward and backward)."""

    name: ClassVar[str] = "step"


class LatencyObjective(_ScheduledObjective):
    """Time of one forward pass (inference)."""

    name: ClassVar[str] = "latency"
    forward_only: ClassVar[bool] = True


class PipelineObjective(BoundObjective):
    """Time per sample of pipelined execution: the max-load model of Tarnawski et al.

    Load of a device = compute (sum of its nodes' times) + communication. An accelerator pays,
    for each of its nodes ``u`` with an edge to another device, ``u``'s transfer time once
    (sending), and for each node ``u`` elsewhere with an edge into it, ``u``'s transfer time once
    (receiving). A transfer time is the edge's fixed cost when the graph gives one (the same on
    every edge out of a node in dnn-partitioning files), else the link time of ``u``'s output;
    a node sending to several devices pays the longest. Devices of kind ``cpu`` pay no communication.
    """

    name: ClassVar[str] = "pipeline"

    def __post_init__(self) -> None:
        super().__post_init__()
        self._no_comm = self.devices.is_cpu

    def loads(self, placement: NDArray[np.int64], sources: NDArray[np.bool_] | None = None
              ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(compute_s, comm_s)`` of every device.

        ``sources`` (a node mask) keeps only those nodes' compute and the transfers of their outputs:
        ``~graph.is_backward`` gives the forward pass's share (:mod:`simulator.place.pipeline_schedule`).
        """
        g, d = self.graph, self.devices.num_devices
        node_t = self.time_s[np.arange(g.num_nodes), placement]
        if sources is not None:
            node_t = np.where(sources, node_t, 0.0)
        compute = np.bincount(placement, weights=node_t, minlength=d)
        comm = np.zeros(d)
        if g.num_edges:
            a, b = placement[self._src], placement[self._dst]
            cross = np.flatnonzero(a != b) if sources is None else np.flatnonzero((a != b) & sources[self._src])
            if len(cross):
                t = self.edge_time_s(placement)[cross]
                u = self._src[cross]
                # Sending: node u pays once, its longest cross transfer.
                send = np.zeros(g.num_nodes)
                np.maximum.at(send, u, t)
                comm += np.bincount(placement, weights=send, minlength=d)
                # Receiving: each (u, receiving device) pair once.
                key = u * d + b[cross]
                uniq, first = np.unique(key, return_index=True)
                comm += np.bincount(uniq % d, weights=t[first], minlength=d)
        comm[self._no_comm] = 0.0
        return compute, comm

    def raw_value(self, placement: NDArray[np.int64]) -> float:
        compute, comm = self.loads(placement)
        return float((compute + comm).max())

    def _evaluate(self, placement: NDArray[np.int64], compute: NDArray[np.float64]) -> Evaluation:
        compute, comm = self.loads(placement)
        return Evaluation(float((compute + comm).max()), True, "", self.memory_bytes(placement), compute, comm)


#: Objectives by name.
OBJECTIVES: dict[str, type[BoundObjective]] = {
    cls.name: cls for cls in (StepObjective, LatencyObjective, PipelineObjective)}


def bind_objective(name: str, graph: ComputeGraph, devices: DeviceSet) -> BoundObjective:
    """The objective called ``name`` bound to ``graph`` on ``devices``.

    Raises:
        KeyError: For an unknown name (the message lists the known ones).
    """
    if name not in OBJECTIVES:
        raise KeyError(f"unknown objective {name!r} (expected one of {', '.join(OBJECTIVES)})")
    return OBJECTIVES[name](graph, devices)

"""Pipeline-parallel iteration time of a placement, priced with the ``pipeline`` objective's loads.

A placement whose devices, ordered along the forward edges, form a chain is a ``k``-stage pipeline
(``k`` = the devices that hold nodes). Stage ``i``'s cost per micro-batch is the ``pipeline``
objective's load of its device (:meth:`PipelineObjective.loads`: compute plus the transfers it
sends and receives; one cost model), split into the forward pass ``f_i`` (forward nodes' compute
and their outputs' transfers) and the backward pass ``b_i``; ``f_i + b_i`` is the device's load.
One iteration runs ``M`` micro-batches and flushes (GPipe; 1F1B = PipeDream-Flush):

* GPipe: ``T = sum_i f_i + (M-1) max_i f_i + sum_i b_i + (M-1) max_i b_i`` (a flow shop of ``M``
  identical jobs, forward then backward: Alpa's form, Zheng et al., OSDI'22, Eq. 2, applied to
  each pass, with links folded into the stages). Balanced stages give ``(M+k-1)(f+b)`` (Huang et al., GPipe,
  NeurIPS 2019, section 2.3; Narayanan et al., SC'21, section 2.2.1 and Eq. 1).
* 1F1B: stage ``i`` runs ``min(k-i-1, M)`` warm-up forwards, then alternates one forward and one
  backward, then the remaining backwards (Megatron-LM ``schedules.py``). ``T`` is the longest path
  through that task graph (:func:`schedule_time_s`); balanced stages give ``(M+k-1)(f+b)``, the
  same bubble as GPipe (SC'21 section 2.2.1). Unbalanced, no closed form holds: the Alpa/AMP form
  ``sum L + (M-1) max L`` errs both ways; ``M max L <= T <= (M+k-1) max L`` (tested).

Both are exact under these assumptions: every micro-batch costs the same; a transfer occupies
the sending and the receiving stage (folded into their loads, as in Tarnawski et al.'s max-load
model), so no separate link delay; stages form one chain (parallel branches on different
devices are serialised); one replica per stage, so no all-reduce, and the optimiser step is not
priced. One device gives ``M (f + b)``, the sequential time. The objective's value ``max_i L_i``
is 1F1B's steady-state time per micro-batch (Tarnawski et al., NeurIPS 2020: time per sample).
Memory per stage: ``state_factor x`` its parameter bytes plus its stashed activations times the
micro-batches in flight (GPipe ``M``; 1F1B ``min(k-i, M)``, 0-based ``i``: Megatron-LM's
``num_warmup + 1``; Narayanan et al., ICML 2021, section 3.1). Formulas and sources: docs/pipeline.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.errors import ConfigError
from simulator.place.objectives import PipelineObjective, PlacementError
from workloads.compute_graph import ComputeGraph
from workloads.graph import TrainingGraph

#: Pipeline schedules (both flush once per iteration).
SCHEDULES = ("gpipe", "1f1b")
#: Where data loading runs (:attr:`PipelineSettings.input_loading`).
INPUT_LOADING = ("prefetched", "profiled")


@dataclass(frozen=True)
class PipelineSettings:
    """How a pipeline runs one iteration.

    Attributes:
        schedule: ``gpipe`` (all forwards, then all backwards) or ``1f1b`` (PipeDream-Flush).
        micro_batches: ``M``, micro-batches per iteration (GPipe: the bubble is small for ``M >= 4k``).
        state_factor: Bytes of weights, gradients and optimiser state per parameter byte (fp32 Adam:
            4 + 4 + 8 bytes per 4-byte parameter = 4; GPipe's RMSProp: 3).
        input_loading: ``prefetched``: data loading (a profile's ``Input`` ops) runs on the host,
            overlapped with the stages, so its time is on no stage; ``profiled``: it runs on the
            stage that holds it, as profiled (docs/pipeline.md, "Data loading").
    """

    schedule: str = "1f1b"
    micro_batches: int = 8
    state_factor: float = 4.0
    input_loading: str = "prefetched"

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule {self.schedule!r} (expected {' or '.join(SCHEDULES)})",
                              field="pipeline.schedule")
        m = self.micro_batches
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
            raise ConfigError(f"must be an integer >= 1, got {m!r}", field="pipeline.micro_batches")
        s = self.state_factor
        if isinstance(s, bool) or not isinstance(s, int | float) or not (math.isfinite(s) and s >= 0):
            raise ConfigError(f"must be a finite number >= 0, got {s!r}", field="pipeline.state_factor")
        if self.input_loading not in INPUT_LOADING:
            raise ConfigError(f"must be {' or '.join(INPUT_LOADING)}, got {self.input_loading!r}",
                              field="pipeline.input_loading")

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> PipelineSettings:
        """Settings from a mapping (the dataclass's fields; missing ones take their defaults); unknown keys refused."""
        cfg = dict(cfg or {})
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(cfg) - set(names))
        if unknown:
            raise ConfigError(f"unknown key (expected {', '.join(names)})", field=f"pipeline.{unknown[0]}")
        return cls(**cfg)


def input_nodes(graph: ComputeGraph) -> NDArray[np.int64]:
    """The nodes of ``graph`` that load data: PipeDream's ``Input``, ``Input0``, ... forward ops
    (no forward predecessor) and their backward mirrors, for a graph built from a training graph
    (:meth:`ComputeGraph.from_training_graph`: its ``meta`` holds the forward labels); none for
    a graph without them (e.g. a dnn-partitioning file)."""
    n, labels = graph.meta.get("forward_ops"), graph.meta.get("labels")
    if n is None or labels is None:
        return np.zeros(0, dtype=np.int64)
    e = graph.edges
    fed = set(e[(e[:, 0] < n) & (e[:, 1] < n), 1].tolist())
    ops = np.array([i for i, label in enumerate(labels) if i not in fed and re.fullmatch(r"Input\d*", str(label))],
                   dtype=np.int64)
    return np.concatenate([ops, ops + n])


def with_input_loading(graph: ComputeGraph, input_loading: str) -> ComputeGraph:
    """``graph`` with its data loading priced as ``input_loading`` says (:data:`INPUT_LOADING`):
    ``profiled`` returns ``graph`` itself; ``prefetched`` gives :func:`input_nodes` no time on
    any kind (loaded on the host, overlapped). The one rule of scenario=pipeline
    (``sim.pipeline.input_loading``) and ``pacml place`` (``input_loading``)."""
    if input_loading not in INPUT_LOADING:
        raise ConfigError(f"must be {' or '.join(INPUT_LOADING)}, got {input_loading!r}", field="input_loading")
    if input_loading == "profiled":
        return graph
    nodes = input_nodes(graph)
    times = {}
    for kind, t in graph.kind_time_s.items():
        t = t.copy()
        t[nodes] = 0.0
        times[kind] = t
    return replace(graph, kind_time_s=times)


def in_flight(schedule: str, stages: int, micro_batches: int) -> NDArray[np.int64]:
    """Micro-batches whose activations stage ``i`` holds at its peak: GPipe ``M``; 1F1B ``min(k-i, M)``."""
    i = np.arange(stages)
    if schedule == "gpipe":
        return np.full(stages, micro_batches, dtype=np.int64)
    return np.minimum(stages - i, micro_batches).astype(np.int64)


def stage_tasks(schedule: str, stages: int, micro_batches: int, stage: int) -> list[tuple[str, int]]:
    """Stage ``stage``'s tasks in the order it runs them: ``("F", m)`` / ``("B", m)``."""
    m = micro_batches
    if schedule == "gpipe":
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    warm = min(stages - stage - 1, m)
    out = [("F", j) for j in range(warm)]
    for j in range(m - warm):
        out += [("F", warm + j), ("B", j)]
    return out + [("B", j) for j in range(m - warm, m)]


def schedule_time_s(forward_s: NDArray[np.float64], backward_s: NDArray[np.float64], schedule: str,
                    micro_batches: int) -> float:
    """Longest path through the schedule's task graph: each stage runs its tasks in
    :func:`stage_tasks` order; ``F(i, m)`` needs ``F(i-1, m)``, ``B(i, m)`` needs ``B(i+1, m)``
    (the last stage's ``B(k-1, m)`` follows its own ``F``). O(k M)."""
    f, b = np.asarray(forward_s, float), np.asarray(backward_s, float)
    k, m = len(f), int(micro_batches)
    if k == 0:
        return 0.0
    orders = [stage_tasks(schedule, k, m, i) for i in range(k)]
    done: dict[tuple[str, int, int], float] = {}
    pos, free = [0] * k, [0.0] * k
    left = 2 * k * m
    while left:
        moved = False
        for i in range(k):
            while pos[i] < len(orders[i]):
                kind, j = orders[i][pos[i]]
                if kind == "F":
                    dep = done.get(("F", i - 1, j)) if i else 0.0
                else:
                    dep = done.get(("B", i + 1, j)) if i < k - 1 else done.get(("F", i, j))
                if dep is None:
                    break
                free[i] = max(dep, free[i]) + (f[i] if kind == "F" else b[i])
                done[(kind, i, j)] = free[i]
                pos[i] += 1
                left -= 1
                moved = True
        if not moved:  # pragma: no cover - the schedules above cannot deadlock
            raise RuntimeError(f"{schedule} schedule deadlocked")
    return float(max(free))


def iteration_time_s(forward_s: NDArray[np.float64], backward_s: NDArray[np.float64], schedule: str,
                     micro_batches: int) -> float:
    """One iteration (see module docstring): GPipe's closed form; 1F1B's longest path."""
    f, b = np.asarray(forward_s, float), np.asarray(backward_s, float)
    if len(f) == 0:
        return 0.0
    if schedule == "gpipe":
        m1 = micro_batches - 1
        return float(f.sum() + m1 * f.max() + b.sum() + m1 * b.max())
    return schedule_time_s(f, b, schedule, micro_batches)


def stage_order(objective: PipelineObjective, placement: NDArray[np.int64]) -> tuple[int, ...]:
    """The devices holding nodes, in pipeline order: topological along the edges between forward
    nodes (backward edges follow no common convention: dnn-partitioning files draw them forward),
    ties by device index.

    Raises:
        PlacementError: Two devices feed each other (a split that is not contiguous), or a device
            holds backward nodes only.
    """
    g = objective.graph
    p = objective.check(placement)
    used = np.unique(p)
    fwd_dev = set(np.unique(p[~g.is_backward]).tolist())
    lone = [int(d) for d in used.tolist() if d not in fwd_dev]
    if lone:
        raise PlacementError(f"not a pipeline: device {objective.devices.names[lone[0]]!r} holds backward nodes "
                             "only (a stage runs its part of the forward pass too)")
    if g.num_edges:
        src, dst = g.edges[:, 0], g.edges[:, 1]
        ff = ~g.is_backward[src] & ~g.is_backward[dst]
        pairs = {(int(x), int(y)) for x, y in zip(p[src[ff]].tolist(), p[dst[ff]].tolist(), strict=True) if x != y}
    else:
        pairs = set()
    succ: dict[int, set[int]] = {int(d): set() for d in used}
    indeg = dict.fromkeys(succ, 0)
    for x, y in pairs:
        if y not in succ[x]:
            succ[x].add(y)
            indeg[y] += 1
    ready = sorted(d for d, n in indeg.items() if n == 0)
    order: list[int] = []
    while ready:
        d = ready.pop(0)
        order.append(d)
        for y in sorted(succ[d]):
            indeg[y] -= 1
            if indeg[y] == 0:
                ready.append(y)
        ready.sort()
    if len(order) != len(succ):
        names = objective.devices.names
        stuck = sorted(d for d, n in indeg.items() if n > 0)
        raise PlacementError(f"not a pipeline: devices {', '.join(names[d] for d in stuck)} feed each other "
                             "(a split that is not contiguous)")
    return tuple(order)


@dataclass(frozen=True)
class PipelineStages:
    """Per-stage costs of one micro-batch, in pipeline order.

    Attributes:
        devices: Device index of each stage.
        forward_s: ``f_i``: forward nodes' compute plus their outputs' transfers.
        backward_s: ``b_i``: the same for the backward nodes.
        load_s: The ``pipeline`` objective's load of the device (``compute_s + comm_s``; ``f_i + b_i``).
        compute_s: Compute of the device's nodes.
        comm_s: The objective's communication of the device.
        parameter_bytes: Parameter bytes of the stage's nodes (0 when not given).
        activation_bytes: Activation bytes the stage stashes per micro-batch (0 when not given).
    """

    devices: tuple[int, ...]
    forward_s: NDArray[np.float64]
    backward_s: NDArray[np.float64]
    load_s: NDArray[np.float64]
    compute_s: NDArray[np.float64]
    comm_s: NDArray[np.float64]
    parameter_bytes: NDArray[np.float64]
    activation_bytes: NDArray[np.float64]

    @property
    def num_stages(self) -> int:
        """``k``."""
        return len(self.devices)


def _per_node(values: NDArray[np.float64] | None, n: int, name: str) -> NDArray[np.float64]:
    if values is None:
        return np.zeros(n)
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (n,) or not (np.isfinite(arr).all() and (arr >= 0).all()):
        raise ValueError(f"{name}: expected {n} finite values >= 0, got shape {arr.shape}")
    return arr


def stage_costs(objective: PipelineObjective, placement: NDArray[np.int64], *,
                parameter_bytes: NDArray[np.float64] | None = None,
                activation_bytes: NDArray[np.float64] | None = None) -> PipelineStages:
    """Stage costs of ``placement`` (module docstring); byte arrays are per node (see
    :func:`training_graph_bytes`).

    Raises:
        PlacementError: A bad placement, or one that is not a pipeline (:func:`stage_order`).
    """
    if not isinstance(objective, PipelineObjective):
        raise TypeError(f"stage costs come from the pipeline objective, got {type(objective).__name__}")
    g = objective.graph
    p = objective.check(placement)
    order = list(stage_order(objective, p))
    compute, comm = objective.loads(p)
    fc, fm = objective.loads(p, ~g.is_backward)
    bc, bm = objective.loads(p, g.is_backward)
    d = objective.devices.num_devices
    params = np.bincount(p, weights=_per_node(parameter_bytes, g.num_nodes, "parameter_bytes"), minlength=d)
    acts = np.bincount(p, weights=_per_node(activation_bytes, g.num_nodes, "activation_bytes"), minlength=d)
    return PipelineStages(tuple(order), (fc + fm)[order], (bc + bm)[order], (compute + comm)[order],
                          compute[order], comm[order], params[order], acts[order])


@dataclass(frozen=True)
class PipelineEstimate:
    """One iteration of a pipeline.

    Attributes:
        stages: The per-stage costs.
        settings: Schedule, micro-batches, state factor.
        iteration_s: Time of one iteration (``M`` micro-batches and the flush).
        max_load_s: The ``pipeline`` objective's value (the largest stage load).
        memory_bytes: Per stage: ``state_factor x parameters + in-flight x activations``.
        capacity_bytes: Per stage: its device's memory.
        feasible: Every stage fits its device.
        reason: Why not (one line), or ``""``.
    """

    stages: PipelineStages
    settings: PipelineSettings
    iteration_s: float
    max_load_s: float
    memory_bytes: NDArray[np.float64]
    capacity_bytes: NDArray[np.float64]
    feasible: bool
    reason: str

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the stages' time: ``1 - sum_i M L_i / (k T)`` (GPipe's ``(k-1)/(M+k-1)`` when balanced)."""
        k, t = self.stages.num_stages, self.iteration_s
        if not k or t <= 0:
            return 0.0
        return float(1.0 - self.settings.micro_batches * self.stages.load_s.sum() / (k * t))


def pipeline_estimate(objective: PipelineObjective, placement: NDArray[np.int64],
                      settings: PipelineSettings | None = None, *,
                      parameter_bytes: NDArray[np.float64] | None = None,
                      activation_bytes: NDArray[np.float64] | None = None) -> PipelineEstimate:
    """Iteration time and memory of ``placement`` run as a pipeline (module docstring)."""
    settings = settings or PipelineSettings()
    st = stage_costs(objective, placement, parameter_bytes=parameter_bytes, activation_bytes=activation_bytes)
    k, m = st.num_stages, settings.micro_batches
    t = iteration_time_s(st.forward_s, st.backward_s, settings.schedule, m)
    memory = settings.state_factor * st.parameter_bytes + in_flight(settings.schedule, k, m) * st.activation_bytes
    cap = objective.devices.memory_bytes[list(st.devices)]
    over = np.flatnonzero(memory > cap * (1 + 1e-12))
    reason = ""
    if len(over):
        i = int(over[0])
        name = objective.devices.names[st.devices[i]]
        reason = f"stage {i} on device {name!r} needs {memory[i]:,.0f} bytes, holds {cap[i]:,.0f} bytes"
    return PipelineEstimate(st, settings, t, float(st.load_s.max()) if k else 0.0, memory, cap, not reason, reason)


def training_graph_bytes(graph: TrainingGraph) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per node of :meth:`ComputeGraph.from_training_graph`'s ``2n`` nodes: ``(parameter_bytes,
    activation_bytes)``; forward node ``i`` carries op ``i``'s parameters and stashed output,
    backward nodes nothing."""
    f = graph.forward
    zero = np.zeros(f.num_ops)
    return (np.concatenate([np.asarray(f.parameter_bytes, float), zero]),
            np.concatenate([np.asarray(f.activation_bytes, float), zero]))


def micro_batch_graph(graph: ComputeGraph, micro_batches: int) -> ComputeGraph:
    """``graph`` (one mini-batch) cut into ``micro_batches`` equal micro-batches: every time, edge
    size and fixed edge cost divided by ``M`` (linear in the batch size: an approximation at small
    micro-batches); node memory unchanged. ``M`` micro-batches on one device take the graph's time."""
    m = float(micro_batches)
    if m == 1:
        return graph
    return ComputeGraph(
        name=graph.name, node_names=graph.node_names,
        kind_time_s={k: v / m for k, v in graph.kind_time_s.items()}, reference_kind=graph.reference_kind,
        memory_bytes=graph.memory_bytes, is_backward=graph.is_backward, group=graph.group, edges=graph.edges,
        edge_bytes=graph.edge_bytes / m, edge_cost_s=graph.edge_cost_s / m, source=graph.source,
        meta=dict(graph.meta))

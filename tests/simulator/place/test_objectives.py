"""Op-placement objectives: hand-computed tiny graphs, and the compiled kernel against the reference.

The hand-computed figures follow the definitions in ``simulator/place/objectives.py`` and the
max-load model of ``workloads/data/dnn_partitioning/README.md``. Link ``bandwidth 2 B/s,
latency 0.5 s``: a 1-byte edge between devices takes 1.0 s.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from simulator.place.devices import Device, DeviceSet, device_set_from_config
from simulator.place.kernel import list_schedule_fast
from simulator.place.objectives import PlacementError, Schedule, bind_objective
from simulator.step_model import list_schedule
from workloads.compute_graph import ComputeGraph
from workloads.loaders import load_compute_graph, shipped_placement_graphs

CONF = "conf/devices"


def _graph(times, edges, *, backward=None, group=None, memory=None, edge_bytes=None, edge_cost=None,
           meta=None, kind_times=None) -> ComputeGraph:
    n = len(times)
    e = len(edges)
    kinds = kind_times or {"gpu": times}
    return ComputeGraph(
        name="tiny", node_names=tuple(f"n{i}" for i in range(n)), kind_time_s=kinds,
        reference_kind=next(iter(kinds)), memory_bytes=np.zeros(n) if memory is None else memory,
        is_backward=np.zeros(n, bool) if backward is None else np.asarray(backward, bool),
        group=np.arange(n) if group is None else group, edges=np.asarray(edges, np.int64).reshape(-1, 2),
        edge_bytes=np.ones(e) if edge_bytes is None else np.asarray(edge_bytes, float),
        edge_cost_s=np.full(e, np.nan) if edge_cost is None else np.asarray(edge_cost, float), meta=meta or {})


def _mesh(d=2, memory=math.inf) -> DeviceSet:
    return DeviceSet.full_mesh("mesh", [Device(f"gpu{i}", "gpu", 1.0, memory) for i in range(d)],
                               bandwidth_Bps=2.0, latency_s=0.5)


def _reference_schedule(obj, placement):
    """The objectives' schedule as written before the compiled kernel: step_model.list_schedule per phase."""
    g = obj.graph
    p = np.asarray(placement, np.int64)
    edge_t = obj.edge_time_s(p)
    node_t = obj.time_s[np.arange(g.num_nodes), p]
    start, finish = np.zeros(g.num_nodes), np.zeros(g.num_nodes)
    offset = 0.0
    for nodes, edge_idx, out_ptr, out_dst, indeg, sources in obj._csr:
        if not len(nodes):
            continue
        s, f = list_schedule(out_ptr.tolist(), out_dst.tolist(), indeg.tolist(), edge_t[edge_idx].tolist(),
                             node_t[nodes].tolist(), p[nodes].tolist(), sources.tolist())
        start[nodes] = np.asarray(s) + offset
        finish[nodes] = np.asarray(f) + offset
        offset = float(finish[nodes].max())
    return offset, start, finish


# ---------------------------------------------------------------------- hand-computed: step / latency
def test_step_transfers_and_device_contention():
    # a(1s) -> b(2s), a -> c(3s), b -> d(1s), c -> d; a, d on gpu0; b, c on gpu1.
    g = _graph([1.0, 2.0, 3.0, 1.0], [(0, 1), (0, 2), (1, 3), (2, 3)])
    obj = bind_objective("step", g, _mesh())
    p = np.array([0, 1, 1, 0])
    # a 0-1; both transfers arrive at 2; gpu1 runs the shorter b first (2-4), then c (4-7);
    # d waits for c's transfer: 7 + 1 = 8, runs 8-9.
    assert obj.value(p) == 9.0
    ev = obj.evaluate(p)
    assert ev.feasible and ev.value_s == 9.0
    assert ev.schedule.start_s.tolist() == [0.0, 2.0, 4.0, 8.0]
    assert ev.schedule.finish_s.tolist() == [1.0, 4.0, 7.0, 9.0]
    assert sorted(ev.schedule.transfers) == [(0, 1.0, 2.0), (1, 1.0, 2.0), (2, 4.0, 5.0), (3, 7.0, 8.0)]
    assert ev.compute_s.tolist() == [2.0, 5.0]
    # All on one device: no transfers, shortest ready first: 1 + 2 + 3 + 1.
    assert obj.value(np.zeros(4, np.int64)) == 7.0
    assert obj.evaluations == 2


def test_step_fixed_edge_cost_overrides_bytes():
    g = _graph([1.0, 1.0], [(0, 1)], edge_bytes=[100.0], edge_cost=[0.25])
    assert bind_objective("step", g, _mesh()).value(np.array([0, 1])) == 2.25


def test_latency_is_the_forward_pass_only():
    # f0(1s) -> f1(2s) -> b1(4s) -> b0(3s); groups {f0, b0}, {f1, b1}.
    g = _graph([1.0, 2.0, 4.0, 3.0], [(0, 1), (1, 2), (2, 3)], backward=[0, 0, 1, 1], group=[0, 1, 1, 0])
    step, lat = bind_objective("step", g, _mesh()), bind_objective("latency", g, _mesh())
    assert step.value(np.zeros(4, np.int64)) == 10.0
    assert lat.value(np.zeros(4, np.int64)) == 3.0
    # Split: f0 0-1, transfer 1-2, f1 2-4 | b1 4-8, transfer 8-9, b0 9-12.
    assert step.value_groups(np.array([0, 1])) == 12.0
    assert lat.value_groups(np.array([0, 1])) == 4.0
    ev = lat.evaluate(np.array([0, 1, 1, 0]))
    assert ev.compute_s.tolist() == [1.0, 2.0]  # backward work not counted
    assert [k for k, _, _ in ev.schedule.transfers] == [0]


def test_explicit_backward_nodes_run_after_the_forward_pass():
    # f0(1s), f1(3s): forward, no edges; b0(2s), b1(1s): backward, b1 -> b0 with a fixed cost 0.5 s.
    times, edges = [1.0, 3.0, 2.0, 1.0], [(3, 2)]
    kw = {"backward": [0, 0, 1, 1], "group": [0, 1, 0, 1], "edge_cost": [0.5]}
    p = np.array([0, 1, 0, 1])
    barrier = bind_objective("step", _graph(times, edges, meta={"backward_after_forward": True}, **kw), _mesh())
    # Forward ends at 3; then b1 3-4, arrives 4.5, b0 4.5-6.5.
    assert barrier.value(p) == 6.5
    assert barrier.evaluate(p).schedule.start_s.tolist() == [0.0, 0.0, 4.5, 3.0]
    # Without the barrier gpu1 runs b1 (shorter) before f1: b1 0-1, f1 1-4; b0 1.5-3.5: 4.
    free = bind_objective("step", _graph(times, edges, **kw), _mesh())
    assert free.value(p) == 4.0
    # latency ignores the backward nodes either way.
    assert bind_objective("latency", _graph(times, edges, meta={"backward_after_forward": True}, **kw),
                          _mesh()).value(p) == 3.0


# ---------------------------------------------------------------------- hand-computed: pipeline
def _dnn_graph(acc_times, cpu_times, edges, costs, memory=None, meta=None) -> ComputeGraph:
    return _graph(acc_times, edges, edge_cost=costs, edge_bytes=[np.nan] * len(edges), memory=memory,
                  kind_times={"accelerator": acc_times, "cpu": cpu_times},
                  meta={"max_accelerators": 2, "accelerator_memory_bytes": 100.0, **(meta or {})})


def test_pipeline_max_load_send_receive_and_cpu_pays_none():
    # u -> v, u -> w (cost(u) = 2), v -> w (cost(v) = 1). Devices: cpu, acc0, acc1.
    g = _dnn_graph([1.0, 2.0, 1.0], [10.0, 3.0, 4.0], [(0, 1), (0, 2), (1, 2)], [2.0, 2.0, 1.0])
    dev = DeviceSet.for_dnn_partitioning(g.meta)
    obj = bind_objective("pipeline", g, dev)
    # u acc0, v acc1, w cpu: acc0 = 1 + send u (2) = 3; acc1 = 2 + send v (1) + receive u (2) = 5;
    # cpu = 4 (it receives u and v, but pays no communication).
    p = np.array([1, 2, 0])
    compute, comm = obj.loads(p)
    assert compute.tolist() == [4.0, 1.0, 2.0]
    assert comm.tolist() == [0.0, 2.0, 3.0]
    assert obj.value(p) == 5.0
    # u, v on acc0, w on acc1: acc0 = 3 + send u (2) + send v (1) = 6; acc1 = 1 + receive u, v (3) = 4.
    assert obj.value(np.array([1, 1, 2])) == 6.0
    # u on the cpu (10), v acc0, w acc1: u is received once by each accelerator (2 each);
    # acc0 = 2 + receive u (2) + send v (1) = 5; acc1 = 1 + receive u (2) + receive v (1) = 4.
    assert obj.loads(np.array([0, 1, 2]))[1].tolist() == [0.0, 3.0, 3.0]
    assert obj.value(np.array([0, 1, 2])) == 10.0


def test_memory_overflow_is_infeasible_and_named():
    g = _dnn_graph([1.0, 1.0], [10.0, 10.0], [(0, 1)], [1.0], memory=np.array([60.0, 50.0]))
    dev = DeviceSet.for_dnn_partitioning(g.meta)
    for name in ("step", "latency", "pipeline"):
        obj = bind_objective(name, g, dev)
        p = np.array([1, 1])
        assert obj.value(p) == math.inf
        ev = obj.evaluate(p)
        assert not ev.feasible and ev.value_s == math.inf
        assert ev.reason == "device 'acc0' needs 110 bytes, holds 100 bytes"
        assert ev.memory_bytes.tolist() == [0.0, 110.0, 0.0]
        assert math.isfinite(obj.value(np.array([1, 2])))
        assert obj.value(np.array([0, 0])) == 20.0  # both on the unlimited CPU


def test_node_unsupported_on_a_kind_is_infeasible():
    g = _dnn_graph([1.0, math.inf], [10.0, 3.0], [(0, 1)], [1.0])
    dev = DeviceSet.for_dnn_partitioning(g.meta)
    for name in ("step", "latency", "pipeline"):
        obj = bind_objective(name, g, dev)
        assert obj.value(np.array([1, 1])) == math.inf
        assert obj.evaluate(np.array([1, 2])).reason == "node 'n1' cannot run on device 'acc1' (kind accelerator)"
        assert math.isfinite(obj.value(np.array([1, 0])))
    assert bind_objective("step", g, dev).value(np.array([1, 0])) == 1.0 + 1.0 + 3.0
    assert bind_objective("pipeline", g, dev).value(np.array([1, 0])) == 3.0  # acc0: 1 + send 1; cpu: 3


def test_bad_placements_raise_and_are_not_counted():
    obj = bind_objective("step", _graph([1.0, 2.0], [(0, 1)]), _mesh())
    for bad in (np.array([0]), np.array([0, 2]), np.array([-1, 0]), np.array([0.0, 1.0])):
        with pytest.raises(PlacementError):
            obj.value(bad)
    assert obj.evaluations == 0
    assert obj.value([0, 1]) == 4.0  # a list is fine
    assert obj.evaluations == 1


# ---------------------------------------------------------------------- compiled kernel == reference
def _csr(n, edges):
    edges = sorted(edges)
    out_ptr = [0] * (n + 1)
    for u, _ in edges:
        out_ptr[u + 1] += 1
    for i in range(n):
        out_ptr[i + 1] += out_ptr[i]
    indeg = [0] * n
    for _, v in edges:
        indeg[v] += 1
    return out_ptr, [v for _, v in edges], indeg, [i for i in range(n) if indeg[i] == 0]


@st.composite
def _schedules(draw):
    n = draw(st.integers(1, 14))
    pairs = [(u, v) for u in range(n) for v in range(u + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=3 * n)) if pairs else []
    # Few distinct values: ties between durations and between event times are the point.
    dur = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 3.0, 0.1, 0.2]), min_size=n, max_size=n))
    edur = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 0.3]), min_size=len(edges), max_size=len(edges)))
    server = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    perm = draw(st.permutations(range(n)))  # relabel so that indices are not a topological order
    edges = [(perm[u], perm[v]) for u, v in edges]
    return n, edges, dur, edur, server


@settings(max_examples=150, deadline=None, derandomize=True)
@given(_schedules())
def test_compiled_kernel_equals_reference_bit_for_bit(case):
    n, edges, dur, edur, server = case
    out_ptr, out_dst, indeg, sources = _csr(n, edges)
    # Edge durations in CSR order (edges sorted by source, as _csr lays them out).
    out_dur = [edur[edges.index(e)] for e in sorted(edges)]
    ref_start, ref_finish = list_schedule(out_ptr, out_dst, indeg, out_dur, dur, server, sources)
    start, finish = list_schedule_fast(out_ptr, out_dst, indeg, out_dur, dur, server, sources)
    assert start.tolist() == ref_start
    assert finish.tolist() == ref_finish


def test_compiled_kernel_reports_a_cycle():
    out_ptr, out_dst, indeg, sources = _csr(3, [(0, 1), (1, 2), (2, 1)])
    for kernel in (list_schedule, list_schedule_fast):
        with pytest.raises(RuntimeError, match="cycle"):
            kernel(out_ptr, out_dst, indeg, [1.0] * 3, [1.0] * 3, [0, 0, 1], sources)


def _preset(name):
    return device_set_from_config(OmegaConf.to_container(OmegaConf.load(f"{CONF}/{name}.yaml")))


@pytest.mark.parametrize("graph_name", sorted(shipped_placement_graphs()))
def test_objectives_on_shipped_graphs_equal_the_reference(graph_name):
    g = load_compute_graph(graph_name)
    presets = ["file"] if "max_accelerators" in g.meta else ["gpu4", "hetero", "cpu_gpu"]
    rng = np.random.default_rng(7)
    compared = 0
    for preset in presets:
        dev = DeviceSet.for_dnn_partitioning(g.meta) if preset == "file" else _preset(preset)
        for name in ("step", "latency"):
            obj = bind_objective(name, g, dev)
            placements = [rng.integers(0, dev.num_devices, g.num_groups)[g.group] for _ in range(2)]
            placements.append(np.full(g.num_nodes, dev.num_devices - 1))
            for p in placements:
                if not obj.feasible(p):
                    assert obj.value(p) == math.inf
                    continue
                value, start, finish = _reference_schedule(obj, p)
                assert obj.value(p) == value
                sched = obj.evaluate(p).schedule
                assert isinstance(sched, Schedule)
                assert np.array_equal(sched.start_s, start) and np.array_equal(sched.finish_s, finish)
                compared += 1
    assert compared >= 2

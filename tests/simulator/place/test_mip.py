"""The MIP placer: optimum equal to brute force on tiny graphs, memory and CPU-only nodes honoured,
warm starts, a reported bound and gap, and one-line errors for bad arguments."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import ConfigError
from simulator.place.devices import Device, DeviceSet
from simulator.place.mip import MipPlacer
from simulator.place.objectives import bind_objective
from tests.simulator.place.test_local_search import pipeline, random_document
from workloads.dnn_partitioning import parse_dnn_partitioning


def brute_force(obj) -> float:
    """Best value over every group assignment (memory and CPU-only nodes included)."""
    g, d = obj.graph, obj.devices.num_devices
    return min(obj.value_groups(np.array(a)) for a in itertools.product(range(d), repeat=g.num_groups))


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 6), accelerators=st.integers(1, 3),
       memory=st.sampled_from([12.0, 25.0, 1e12]), cpu_only=st.integers(0, 1))
def test_mip_optimum_equals_brute_force(seed: int, n: int, accelerators: int, memory: float, cpu_only: int) -> None:
    obj = pipeline(random_document(np.random.default_rng(seed), n, accelerators=accelerators, memory=memory,
                                   classes=max(1, n - 1), cpu_only=cpu_only))
    best = brute_force(obj)
    result = MipPlacer(time_limit_s=20, mip_gap=0.0, warm_start=None).place(obj, seed=0)
    assert result.info["status"] == "Optimal"
    assert result.info["model_exact"]
    assert obj.value(result.placement) == pytest.approx(best, rel=1e-6)
    assert result.info["gap"] <= 1e-6
    assert obj.feasible(result.placement)
    assert result.info["best_bound_s"] <= best * (1 + 1e-6)


def test_mip_with_interchangeable_accelerators_keeps_the_optimum() -> None:
    """Symmetry breaking among identical accelerators must not cut the optimum off."""
    for seed in range(3):
        obj = pipeline(random_document(np.random.default_rng(100 + seed), 6, accelerators=3, classes=5))
        result = MipPlacer(time_limit_s=20, mip_gap=0.0, warm_start="local_search").place(obj, seed=seed)
        assert obj.value(result.placement) == pytest.approx(brute_force(obj), rel=1e-6)


def test_mip_on_link_priced_edges_reports_an_honest_gap() -> None:
    """Edges priced by the link (two-level devices): the model is a relaxation; the bound stays
    below the true optimum and the value is the objective's own."""
    graph = parse_dnn_partitioning(random_document(np.random.default_rng(4), 5), name="tiny")
    graph = type(graph)(**{**graph.__dict__, "edge_cost_s": np.full(graph.num_edges, np.nan),
                           "edge_bytes": np.full(graph.num_edges, 2e8)})
    devices = DeviceSet.two_level("two", [Device(f"g{i}", "accelerator") for i in range(3)], devices_per_server=2,
                                  intra_bandwidth_Bps=1e11, intra_latency_s=0.0, inter_bandwidth_Bps=1e10,
                                  inter_latency_s=0.0)
    obj = bind_objective("pipeline", graph, devices)
    result = MipPlacer(time_limit_s=20, mip_gap=0.0, warm_start=None).place(obj, seed=0)
    best = brute_force(obj)
    assert not result.info["model_exact"]
    assert result.info["best_bound_s"] <= best * (1 + 1e-6)
    assert result.info["value_s"] == pytest.approx(obj.value(result.placement))
    assert result.info["value_s"] >= best * (1 - 1e-9)


def test_mip_warm_start_placement_and_time_limit_report_a_gap() -> None:
    obj = pipeline(random_document(np.random.default_rng(8), 12, accelerators=3, classes=10))
    start = np.zeros(obj.graph.num_nodes, dtype=np.int64)
    result = MipPlacer(time_limit_s=0.5, warm_start=start.tolist()).place(obj, seed=0)
    info = result.info
    assert info["warm_start_value_s"] == pytest.approx(obj.value(start))
    assert info["value_s"] <= info["warm_start_value_s"] + 1e-12
    assert 0.0 <= info["gap"] <= 1.0
    assert info["best_bound_s"] <= info["value_s"] + 1e-12
    assert {"status", "solver_time_s", "nodes", "placement_from"} <= set(info)


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"time_limit_s": 0}, "method.time_limit_s"),
    ({"time_limit_s": -1.0}, "method.time_limit_s"),
    ({"time_limit_s": float("inf")}, "method.time_limit_s"),
    ({"mip_gap": -0.1}, "method.mip_gap"),
    ({"threads": 0}, "method.threads"),
    ({"warm_start": "dp_magic"}, "method.warm_start"),
    ({"warm_start": 3}, "method.warm_start"),
])
def test_bad_arguments_name_the_key(kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        MipPlacer(**kwargs)


def test_mip_refuses_other_objectives() -> None:
    graph = parse_dnn_partitioning(random_document(np.random.default_rng(1), 4), name="tiny")
    obj = bind_objective("step", graph, DeviceSet.for_dnn_partitioning(graph.meta))
    with pytest.raises(ConfigError, match="pipeline objective only"):
        MipPlacer().place(obj)


def test_pigeonhole_bound_by_hand() -> None:
    """Seven unit groups, three accelerators and a CPU ten times slower: some accelerator takes
    three groups, so the max load is at least 3 (the LP alone says 7 / 3.1)."""
    from simulator.place.mip import pigeonhole_bound
    gtime = np.column_stack([np.full(7, 10.0), np.ones((7, 3))])
    no_comm = np.array([True, False, False, False])
    assert pigeonhole_bound(gtime, no_comm) == pytest.approx(3.0)
    # A CPU as fast as the bound takes groups off the accelerators: 2 on each, one on the CPU.
    gtime[:, 0] = 2.0
    assert pigeonhole_bound(gtime, no_comm) == pytest.approx(2.0)
    assert pigeonhole_bound(np.ones((4, 2)), np.array([False, False])) == pytest.approx(2.0)
    assert pigeonhole_bound(np.ones((4, 1)), np.array([True])) == 0.0


def test_mip_proves_a_chain_of_equal_layers_at_once() -> None:
    """Seven equal layers in a chain, three accelerators: three layers on an end device, which
    only sends (3 + 0.001 ms), is the proven optimum."""
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 10.0, "size": 1.0, "isBackwardNode": False}
             for i in range(7)]
    edges = [{"sourceId": i, "destId": i + 1, "cost": 0.001} for i in range(6)]
    obj = pipeline({"maxSizePerFPGA": 100.0, "maxFPGAs": 3, "maxCPUs": 1, "nodes": nodes, "edges": edges})
    result = MipPlacer(time_limit_s=20, mip_gap=0.0, warm_start=None).place(obj, seed=0)
    assert result.info["status"] == "Optimal"
    assert result.info["value_s"] == pytest.approx(3.001e-3)
    assert result.info["best_bound_s"] >= 3e-3

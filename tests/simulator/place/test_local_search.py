"""Local search and simulated annealing: incremental pricing, local optimality, feasibility,
determinism per seed, budgets and the reference program's local-search figures."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import ConfigError
from simulator.place.devices import DeviceSet
from simulator.place.local_search import (
    IMPROVEMENT_TOLERANCE_S,
    AnnealPlacer,
    IncrementalPipeline,
    LocalSearchPlacer,
    pipeline_node_costs,
)
from simulator.place.objectives import bind_objective
from workloads.dnn_partitioning import parse_dnn_partitioning
from workloads.loaders import load_compute_graph


def random_document(rng: np.random.Generator, n: int, *, accelerators: int = 2, memory: float = 1e12,
                    classes: int | None = None, cpu_only: int = 0) -> dict:
    """A random dnn-partitioning document: a DAG on ``n`` nodes (edges go forward in id order)."""
    nodes = []
    for i in range(n):
        node = {"id": i, "fpgaLatency": float(rng.uniform(0.5, 5.0)), "size": float(rng.integers(1, 10)),
                "isBackwardNode": False, "supportedOnFpga": i >= cpu_only}
        node["cpuLatency"] = node["fpgaLatency"] * 10
        if classes:
            node["colorClass"] = int(rng.integers(classes))
        nodes.append(node)
    cost = rng.uniform(0.1, 2.0, n)
    edges = [{"sourceId": u, "destId": v, "cost": float(cost[u])}
             for u in range(n) for v in range(u + 1, n) if rng.random() < 0.4]
    return {"maxSizePerFPGA": memory, "maxFPGAs": accelerators, "maxCPUs": 1, "nodes": nodes, "edges": edges}


def pipeline(document: dict):
    graph = parse_dnn_partitioning(document, name="tiny")
    return bind_objective("pipeline", graph, DeviceSet.for_dnn_partitioning(graph.meta))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 9), accelerators=st.integers(1, 3))
def test_incremental_pricing_equals_the_objective(seed: int, n: int, accelerators: int) -> None:
    obj = pipeline(random_document(np.random.default_rng(seed), n, accelerators=accelerators, classes=n - 1))
    costs = pipeline_node_costs(obj)
    assert costs.exact
    pricer = IncrementalPipeline(obj, costs)
    rng = np.random.default_rng(seed + 1)
    for _ in range(5):
        p = rng.integers(0, obj.devices.num_devices, obj.graph.num_groups)[obj.graph.group]
        assert pricer.value(p) == pytest.approx(obj.value(p), rel=1e-12, abs=1e-15)


def test_pricing_is_a_lower_bound_when_links_differ() -> None:
    """On a two-level device set an edge's time depends on the link: the per-node model is not exact."""
    graph = parse_dnn_partitioning(random_document(np.random.default_rng(3), 6), name="tiny")
    graph = type(graph)(**{**graph.__dict__, "edge_cost_s": np.full(graph.num_edges, np.nan),
                           "edge_bytes": np.full(graph.num_edges, 1e9)})
    from simulator.place.devices import Device
    devices = DeviceSet.two_level("two", [Device(f"g{i}", "accelerator") for i in range(4)], devices_per_server=2,
                                  intra_bandwidth_Bps=1e11, intra_latency_s=0.0, inter_bandwidth_Bps=1e10,
                                  inter_latency_s=0.0)
    obj = bind_objective("pipeline", graph, devices)
    costs = pipeline_node_costs(obj)
    assert not costs.exact
    assert costs.cost_s.max() == pytest.approx(1e9 / 1e11)


def brute_local_optimum(obj, placement: np.ndarray, targets: list[int]) -> bool:
    """No single group move among ``targets`` lowers the value (memory ignored) by more than the tolerance."""
    g = obj.graph
    gdev = np.array([placement[m[0]] for m in g.group_members])
    base = obj.raw_value(gdev[g.group])
    for k, b in itertools.product(range(g.num_groups), targets):
        if b == gdev[k] or not np.isfinite(obj.time_s[g.group_members[k], b]).all():
            continue
        trial = gdev.copy()
        trial[k] = b
        if obj.raw_value(trial[g.group]) < base - IMPROVEMENT_TOLERANCE_S:
            return False
    return True


@pytest.mark.parametrize("rule", ["best", "first"])
def test_local_search_ends_in_a_local_optimum_on_accelerators(rule: str) -> None:
    obj = pipeline(random_document(np.random.default_rng(7), 9, accelerators=3, classes=6, cpu_only=1))
    result = LocalSearchPlacer(restarts=3, move_rule=rule).place(obj, seed=0)
    p = result.placement
    g = obj.graph
    assert p.shape == (g.num_nodes,)
    for members in g.group_members:  # groups whole
        assert len(set(p[members].tolist())) == 1
    cpu_only = np.array([np.isinf(obj.time_s[m, 1]).any() for m in g.group_members])[g.group]
    assert cpu_only.any()
    assert (p[cpu_only] == 0).all() and (p[~cpu_only] != 0).all()  # CPU only where it must
    assert brute_local_optimum(obj, p, [1, 2, 3])
    assert result.info["value_s"] == pytest.approx(min(result.info["restart_values_s"]))
    assert result.evaluations > 0


def test_local_search_is_deterministic_per_seed_and_respects_memory_when_asked() -> None:
    doc = random_document(np.random.default_rng(11), 10, accelerators=3, memory=20.0)
    obj = pipeline(doc)
    a = LocalSearchPlacer(respect_memory=True).place(obj, seed=5)
    b = LocalSearchPlacer(respect_memory=True).place(obj, seed=5)
    assert (a.placement == b.placement).all() and a.info == b.info
    # Moves that overflow are skipped, but a random start may already overflow; any feasible
    # result must also hold every device's memory.
    if a.info["feasible"]:
        assert obj.feasible(a.placement)
    c = LocalSearchPlacer(restarts=2, max_evaluations=7).place(obj, seed=0)
    assert c.evaluations <= 7 + 1  # the budget plus the final pricing of the result


def test_local_search_on_the_step_objective_uses_full_evaluations_within_budget() -> None:
    graph = parse_dnn_partitioning(random_document(np.random.default_rng(2), 8, accelerators=2), name="tiny")
    obj = bind_objective("step", graph, DeviceSet.for_dnn_partitioning(graph.meta))
    r1 = LocalSearchPlacer(restarts=2, max_evaluations=40).place(obj, seed=1)
    r2 = LocalSearchPlacer(restarts=2, max_evaluations=40).place(obj, seed=1)
    assert (r1.placement == r2.placement).all()
    assert not r1.info["incremental"]
    assert r1.evaluations <= 41
    assert math.isfinite(r1.info["value_s"])


@pytest.mark.parametrize(("name", "reference_ms"), [
    ("bert24_inference", 17.7776), ("bert24_training", 39.9432),
    ("bert_l-3_inference", 27.5741), ("bert_l-3_training", 68.0629)])
def test_local_search_reaches_the_reference_figures(name: str, reference_ms: float) -> None:
    """The reference program's local search (10 restarts), seed 0: within 1 % (lower is fine)."""
    graph = load_compute_graph(name)
    obj = bind_objective("pipeline", graph, DeviceSet.for_dnn_partitioning(graph.meta))
    result = LocalSearchPlacer().place(obj, seed=0)
    assert result.info["incremental"]
    assert result.info["value_s"] * 1e3 <= reference_ms * 1.01


def test_anneal_is_feasible_deterministic_and_no_worse_than_its_start() -> None:
    doc = random_document(np.random.default_rng(5), 10, accelerators=3, memory=25.0)
    graph = parse_dnn_partitioning(doc, name="tiny")
    devices = DeviceSet.for_dnn_partitioning(graph.meta)
    for objective in ("pipeline", "step", "latency"):
        obj = bind_objective(objective, graph, devices)
        a = AnnealPlacer(max_evaluations=300).place(obj, seed=3)
        b = AnnealPlacer(max_evaluations=300).place(obj, seed=3)
        assert (a.placement == b.placement).all()
        assert obj.feasible(a.placement)
        assert a.evaluations <= 300 + 1
        start = AnnealPlacer(max_evaluations=1).place(obj, seed=3)
        assert obj.value(a.placement) <= obj.value(start.placement) + 1e-12


def test_anneal_finds_the_optimum_of_a_tiny_graph() -> None:
    obj = pipeline(random_document(np.random.default_rng(9), 5, accelerators=2))
    g, d = obj.graph, obj.devices.num_devices
    best = min(obj.value_groups(np.array(a)) for a in itertools.product(range(d), repeat=g.num_groups))
    result = AnnealPlacer(max_evaluations=3000).place(obj, seed=0)
    assert obj.value(result.placement) == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize(("cls", "kwargs", "key"), [
    (LocalSearchPlacer, {"restarts": 0}, "method.restarts"),
    (LocalSearchPlacer, {"max_evaluations": -1}, "method.max_evaluations"),
    (LocalSearchPlacer, {"respect_memory": "yes"}, "method.respect_memory"),
    (LocalSearchPlacer, {"move_rule": "worst"}, "method.move_rule"),
    (AnnealPlacer, {"max_evaluations": 0}, "method.max_evaluations"),
    (AnnealPlacer, {"initial_temperature": 0.0}, "method.initial_temperature"),
    (AnnealPlacer, {"final_temperature": 1.0}, "method.final_temperature"),
    (AnnealPlacer, {"swap_probability": 1.5}, "method.swap_probability"),
])
def test_bad_arguments_name_the_key(cls, kwargs: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        cls(**kwargs)

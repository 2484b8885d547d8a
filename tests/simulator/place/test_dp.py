"""The exact DP (method=dp) and the person's split (method=expert) against known answers and brute force."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config import CONF_DIR
from simulator.errors import ConfigError
from simulator.place.devices import DeviceSet, device_set_from_config
from simulator.place.dp import DPPlacer, contract_forward, enumerate_ideals
from simulator.place.expert import ExpertPlacer
from simulator.place.objectives import bind_objective
from workloads.dnn_partitioning import parse_dnn_partitioning
from workloads.errors import WorkloadError
from workloads.loaders import load_compute_graph


def _bind(name: str, objective: str = "pipeline"):
    graph = load_compute_graph(name)
    return bind_objective(objective, graph, DeviceSet.for_dnn_partitioning(graph.meta))


def _preset(name: str) -> DeviceSet:
    return device_set_from_config(yaml.safe_load((CONF_DIR / "devices" / f"{name}.yaml").read_text()))


# ---------------------------------------------------------------------- known answers (reference_maxload.md)
@pytest.mark.parametrize(("graph", "expected_ms"), [
    ("bert24_inference", 17.7899), ("bert24_training", 41.7458),
    ("bert_l-3_inference", 27.9186), ("bert_l-3_training", 65.3031)])
def test_dp_equals_published_optimum(graph, expected_ms):
    objective = _bind(graph)
    result = DPPlacer().place(objective)
    value_ms = objective.value(result.placement) * 1e3
    assert value_ms == pytest.approx(expected_ms, rel=1e-3)
    assert result.info["optimal"] is True and result.info["dp_states"] > 0
    # Colour classes (forward and backward parts) stay whole.
    g = objective.graph
    for members in g.group_members:
        assert len(set(result.placement[members].tolist())) == 1


@pytest.mark.parametrize(("graph", "expected_ms"), [
    ("bert24_inference", 20.084), ("bert24_training", 49.4049), ("inceptionv3_inference", 102.482),
    ("inceptionv3_training", 213.654)])
def test_expert_split_equals_published_figure(graph, expected_ms):
    objective = _bind(graph)
    result = ExpertPlacer().place(objective)
    assert result.info["split"] == "file"
    assert objective.value(result.placement) * 1e3 == pytest.approx(expected_ms, rel=1e-3)


def test_one_accelerator_figure_and_dp_never_worse():
    objective = _bind("bert24_training")
    one = np.ones(objective.graph.num_nodes, dtype=np.int64)  # device 1 = acc0
    assert objective.value(one) * 1e3 == pytest.approx(217.813, rel=1e-3)
    assert objective.value(DPPlacer().place(objective).placement) < objective.value(one)


def test_dp_stops_clearly_on_inception_or_falls_back(caplog):
    objective = _bind("inceptionv3_inference")
    with pytest.raises(ConfigError, match=r"method.max_pairs.*36,596 downward-closed sets"):
        DPPlacer(max_pairs=100_000, fallback=None).place(objective)
    with pytest.raises(ConfigError, match=r"method.max_states.*more than 1,000 downward-closed"):
        DPPlacer(max_states=1_000, fallback=None).place(objective)
    result = DPPlacer(max_states=1_000, fallback="round_robin").place(objective)
    assert result.info["optimal"] is False and result.info["fallback"] == "round_robin"
    assert result.info["dp_states_over"] == 1_000
    assert len(result.placement) == objective.graph.num_nodes
    assert "falling back to round_robin" in caplog.text


# ---------------------------------------------------------------------- brute force on random small DAGs
def _random_document(draw) -> dict:
    n = draw(st.integers(2, 7))
    accs = draw(st.integers(2, 3))
    limited = draw(st.booleans())
    cpu_only = draw(st.integers(-1, n - 1))  # -1: every node runs on an accelerator
    nodes, edges = [], []
    for i in range(n):
        acc_ms = draw(st.integers(1, 20))
        nodes.append({"id": i, "supportedOnFpga": i != cpu_only, "fpgaLatency": acc_ms,
                      "cpuLatency": acc_ms * draw(st.integers(2, 12)), "isBackwardNode": False,
                      "size": draw(st.integers(1, 10))})
    for i in range(n):
        cost = draw(st.integers(0, 6))
        for j in range(i + 1, n):
            if draw(st.booleans()):
                edges.append({"sourceId": i, "destId": j, "cost": cost})
    size = draw(st.integers(5, 25)) if limited else 1000
    return {"maxSizePerFPGA": size, "maxFPGAs": accs, "maxCPUs": 1, "nodes": nodes, "edges": edges}


def _brute_force_ms(document: dict) -> float:
    """Best contiguous split by enumerating every assignment of nodes to devices (CPU = 0)."""
    n, d = len(document["nodes"]), document["maxFPGAs"] + 1
    grid = np.stack(np.meshgrid(*[np.arange(d)] * n, indexing="ij"), axis=-1).reshape(-1, n)
    acc = np.array([x["fpgaLatency"] if x["supportedOnFpga"] else np.inf for x in document["nodes"]], float)
    cpu = np.array([x["cpuLatency"] for x in document["nodes"]], float)
    size = np.array([x["size"] for x in document["nodes"]], float)
    out: dict[int, list[int]] = {}
    cost = np.zeros(n)
    for e in document["edges"]:
        out.setdefault(e["sourceId"], []).append(e["destId"])
        cost[e["sourceId"]] = e["cost"]
    load = np.zeros((len(grid), d))
    mem = np.zeros((len(grid), d))
    for u in range(n):
        for dev in range(d):
            on = grid[:, u] == dev
            load[on, dev] += cpu[u] if dev == 0 else acc[u]
            mem[on, dev] += size[u]
    for u, targets in out.items():
        pu = grid[:, u]
        pv = grid[:, targets]
        sends = (pv != pu[:, None]).any(axis=1)
        for dev in range(1, d):  # the CPU pays no communication
            load[:, dev] += cost[u] * ((sends & (pu == dev)) + ((pv == dev).any(axis=1) & (pu != dev)))
    ok = (mem[:, 1:] <= document["maxSizePerFPGA"]).all(axis=1) & np.isfinite(load).all(axis=1)
    # Contiguous: the graph of device sets (an edge d1 -> d2 when a node on d1 feeds one on d2) is acyclic.
    adj = np.zeros((len(grid), d, d), dtype=bool)
    for e in document["edges"]:
        a, b = grid[:, e["sourceId"]], grid[:, e["destId"]]
        cross = a != b
        adj[np.flatnonzero(cross), a[cross], b[cross]] = True
    reach = adj.copy()
    for _ in range(d):
        reach |= np.einsum("pij,pjk->pik", reach.astype(np.int64), adj.astype(np.int64)) > 0
    ok &= ~np.diagonal(reach, axis1=1, axis2=2).any(axis=1)
    return float(load[ok].max(axis=1).min()) if ok.any() else math.inf


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_dp_equals_brute_force_on_random_small_dags(data):
    document = _random_document(data.draw)
    graph = parse_dnn_partitioning(document, path="random.json")
    objective = bind_objective("pipeline", graph, DeviceSet.for_dnn_partitioning(graph.meta))
    result = DPPlacer().place(objective)
    expected_ms = _brute_force_ms(document)
    if math.isinf(expected_ms):
        assert result.info.get("feasible") is False
    else:
        assert objective.value(result.placement) * 1e3 == pytest.approx(expected_ms, rel=1e-9)


# ---------------------------------------------------------------------- how training graphs are read
def _training_document() -> dict:
    # Forward chain 0 -> 1 -> 2 (1 takes no time), backward 4 -> 3 mirrors 1 -> 0; class 9 is backward-only
    # (node 5, fed by 4), so it gets an artificial forward node, before class 2's (the mirror of 4 -> 5).
    def node(i, ms, backward, colour):
        return {"id": i, "fpgaLatency": ms, "cpuLatency": 10 * ms, "isBackwardNode": backward,
                "colorClass": colour, "size": 1, "supportedOnFpga": True}
    return {"maxSizePerFPGA": 100, "maxFPGAs": 2, "maxCPUs": 1,
            "nodes": [node(0, 5, False, 0), node(1, 0, False, 1), node(2, 4, False, 2),
                      node(3, 6, True, 0), node(4, 3, True, 2), node(5, 2, True, 9)],
            "edges": [{"sourceId": 0, "destId": 1, "cost": 1}, {"sourceId": 1, "destId": 2, "cost": 1},
                      {"sourceId": 4, "destId": 3, "cost": 1}, {"sourceId": 4, "destId": 5, "cost": 1}]}


def test_training_graph_contraction():
    graph = parse_dnn_partitioning(_training_document(), path="train.json")
    t = graph.kind_time_s["accelerator"]
    cg = contract_forward(graph, graph.kind_time_s["cpu"], t)
    # The zero-time node 1 has two forward neighbours (0 and 2), so it stays; the orphan class gets a node.
    assert cg.artificial == 1 and cg.merged_zero == 0 and cg.num_nodes == 4
    # Backward nodes follow their class's forward node.
    assert cg.owner[3] == cg.owner[0] and cg.owner[4] == cg.owner[2]
    # The artificial node of class 9 comes before class 2's forward node (mirror of 4 -> 5).
    assert [cg.owner[5], cg.owner[2]] in cg.edges.tolist()
    ideals = enumerate_ideals(cg.num_nodes, cg.edges, max_states=100)
    # 0 -> 1 -> 2 and a -> 2: {}, {0}, {a}, {0,1}, {0,a}, {0,1,a}, all.
    assert len(ideals) == 7
    result = DPPlacer().place(bind_objective("pipeline", graph, DeviceSet.for_dnn_partitioning(graph.meta)))
    assert result.info["dp_artificial_nodes"] == 1


def test_zero_time_leaf_is_merged_into_its_neighbour():
    doc = _training_document()
    doc["nodes"].append({"id": 6, "fpgaLatency": 0, "cpuLatency": 0, "isBackwardNode": False, "colorClass": 7,
                         "size": 0, "supportedOnFpga": True})
    doc["edges"].append({"sourceId": 6, "destId": 2, "cost": 0})
    graph = parse_dnn_partitioning(doc, path="train.json")
    cg = contract_forward(graph, graph.kind_time_s["cpu"], graph.kind_time_s["accelerator"])
    assert cg.merged_zero == 1 and cg.owner[6] == cg.owner[2]


# ---------------------------------------------------------------------- other device sets, bad input
def test_dp_on_a_preset_beats_the_single_device():
    graph = load_compute_graph("gnmt")
    objective = bind_objective("pipeline", graph, _preset("gpu4"))
    dp = objective.value(DPPlacer().place(objective).placement)
    single = objective.value(np.zeros(graph.num_nodes, dtype=np.int64))
    expert = objective.value(ExpertPlacer().place(objective).placement)
    assert dp < single and dp <= expert * (1 + 1e-12)


@pytest.mark.parametrize(("preset", "message"), [
    ("hetero", "accelerators of one kind, speed and memory"), ("cpu_gpu", "every link alike")])
def test_dp_refuses_device_sets_it_cannot_solve_exactly(preset, message):
    objective = bind_objective("pipeline", load_compute_graph("alexnet"), _preset(preset))
    with pytest.raises(ConfigError, match=message):
        DPPlacer().place(objective)


@pytest.mark.parametrize("kwargs", [{"max_states": 0}, {"max_pairs": 1.5}, {"fallback": "nope"},
                                    {"max_states": True}])
def test_dp_rejects_bad_options(kwargs):
    with pytest.raises(ConfigError, match="method."):
        DPPlacer(**kwargs)


def test_expert_contiguous_layers_keep_groups_and_memory():
    graph = load_compute_graph("resnet50")
    for preset in ("gpu4", "hetero", "cpu_gpu"):
        objective = bind_objective("step", graph, _preset(preset))
        result = ExpertPlacer().place(objective)
        assert result.info["split"] == "contiguous_layers"
        assert objective.feasible(result.placement), preset
        for members in graph.group_members:
            assert len(set(result.placement[members].tolist())) == 1
    assert result.info["host_spill"] is False  # cpu_gpu's two 40 GB accelerators hold resnet50's 39 GB
    # Two 16 GB accelerators do not: the tail goes to the host.
    small = device_set_from_config({"name": "small", "groups": [
        {"kind": "cpu", "count": 1, "speed": 0.1, "memory_bytes": 256e9},
        {"kind": "gpu", "count": 2, "memory_bytes": 16e9}], "links": {"type": "host_accelerator"}})
    objective = bind_objective("step", graph, small)
    result = ExpertPlacer().place(objective)
    assert result.info["host_spill"] is True and objective.feasible(result.placement)


def test_expert_user_split_file(tmp_path):
    objective = _bind("bert24_inference")
    ids = list(objective.graph.meta["node_ids"])
    good = tmp_path / "split.json"
    good.write_text(json.dumps({"cpus": [{"nodes": []}], "fpgas": [{"nodes": ids[:16]}, {"nodes": ids[16:]}]}))
    result = ExpertPlacer(path=str(good)).place(objective)
    assert set(result.placement.tolist()) == {1, 2}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"cpus": [], "fpgas": [{"nodes": ids + [999]}]}))
    with pytest.raises(WorkloadError, match="node id 999 is not in graph") as err:
        ExpertPlacer(path=str(bad)).place(objective)
    assert "\n" not in str(err.value) and "bad.json" in str(err.value)
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"cpus": [], "fpgas": [{"nodes": ids[:-1]}]}))
    with pytest.raises(WorkloadError, match=f"node id {ids[-1]} is not placed"):
        ExpertPlacer(path=str(missing)).place(objective)
    with pytest.raises(ConfigError, match="method.path"):
        ExpertPlacer(path=str(tmp_path / "nowhere.json"))


def test_dp_falls_back_to_the_pipedream_split_past_its_cap():
    objective = _bind("bert24_inference")
    result = DPPlacer(max_states=5, fallback="pipedream").place(objective)
    assert result.info["optimal"] is False and result.info["fallback"] == "pipedream"
    assert objective.value(result.placement) * 1e3 == pytest.approx(17.7899, rel=1e-4)

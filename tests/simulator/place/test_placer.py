"""Op placement core: the graph type, the dnn-partitioning reader, device sets, and one world
with the cluster simulator (the same list-scheduling kernel prices both)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.comm import RampCommModel
from simulator.errors import ConfigError
from simulator.partition import PartitionedGraph
from simulator.place.devices import DeviceSet, device_set_from_config, ramp_block_devices
from simulator.place.objectives import PlacementError, bind_objective
from simulator.place.placer import RandomPlacer, RoundRobinPlacer, SingleDevicePlacer
from simulator.step_model import simulate_step
from simulator.topology import RampTopology
from workloads.compute_graph import ComputeGraph
from workloads.dnn_partitioning import load_dnn_partitioning, parse_dnn_partitioning
from workloads.errors import WorkloadError
from workloads.graph import TrainingGraph
from workloads.loaders import load_compute_graph, load_graph

ROOT = Path(__file__).resolve().parents[3]


def _preset(name: str) -> DeviceSet:
    return device_set_from_config(yaml.safe_load((ROOT / "conf" / "devices" / f"{name}.yaml").read_text()))


# Published one-accelerator figures (reference_maxload.md), ms per sample.
ONE_ACCELERATOR_MS = {"bert24_inference": 92.406, "bert24_training": 217.813, "inceptionv3_inference": 310.969,
                      "bert_l-3_inference": 49.3526, "bert_l-3_training": 122.987}


@pytest.mark.parametrize("name", sorted(ONE_ACCELERATOR_MS))
def test_one_accelerator_matches_the_published_figure(name: str) -> None:
    graph = load_compute_graph(name)
    devices = DeviceSet.for_dnn_partitioning(graph.meta)
    objective = bind_objective("pipeline", graph, devices)
    value_ms = objective.value(np.ones(graph.num_nodes, dtype=np.int64)) * 1e3
    assert value_ms == pytest.approx(ONE_ACCELERATOR_MS[name], rel=1e-5)


def test_memory_overflow_names_the_device_and_the_bytes() -> None:
    graph = load_compute_graph("inceptionv3_training")  # 33.6 GB on one 17.2 GB accelerator
    objective = bind_objective("pipeline", graph, DeviceSet.for_dnn_partitioning(graph.meta))
    placement = np.ones(graph.num_nodes, dtype=np.int64)
    assert objective.value(placement) == math.inf
    ev = objective.evaluate(placement)
    assert not ev.feasible and "'acc0' needs 33,590,837,648 bytes, holds 17,185,374,208 bytes" in ev.reason


def test_placement_of_wrong_shape_or_device_is_refused() -> None:
    graph = load_compute_graph("bert24_inference")
    objective = bind_objective("step", graph, _preset("gpu4"))
    with pytest.raises(PlacementError, match="one device per node"):
        objective.value(np.zeros(3, dtype=np.int64))
    with pytest.raises(PlacementError, match="0..3"):
        objective.value(np.full(graph.num_nodes, 4))


def _tiny(**changes) -> dict:
    doc = {"maxSizePerFPGA": 100.0, "maxFPGAs": 2, "maxCPUs": 1,
           "nodes": [{"id": 1, "supportedOnFpga": 1, "cpuLatency": 10.0, "fpgaLatency": 1.0, "isBackwardNode": 0,
                      "size": 10.0},
                     {"id": 2, "supportedOnFpga": 0, "cpuLatency": 20.0, "fpgaLatency": 2.0, "isBackwardNode": 0,
                      "size": 10.0}],
           "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}]}
    doc.update(changes)
    return doc


def test_dnn_partitioning_reader_units_kinds_and_groups() -> None:
    g = parse_dnn_partitioning(_tiny(), path="tiny.json")
    assert g.kind_time_s["accelerator"].tolist() == [1e-3, math.inf]  # node 2 is CPU-only
    assert g.kind_time_s["cpu"].tolist() == [10e-3, 20e-3]
    assert g.edge_cost_s.tolist() == [0.5e-3] and g.num_groups == 2
    devices = DeviceSet.for_dnn_partitioning(g.meta)
    assert [d.kind for d in devices.devices] == ["cpu", "accelerator", "accelerator"]
    objective = bind_objective("pipeline", g, devices)
    # Node 1 on acc0 sends once (0.5); the CPU pays no communication.
    assert objective.value(np.array([1, 0])) * 1e3 == pytest.approx(max(1.0 + 0.5, 20.0))
    assert objective.value(np.array([1, 1])) == math.inf
    assert "cannot run on device 'acc0'" in objective.evaluate(np.array([1, 1])).reason


@pytest.mark.parametrize(("changes", "message"), [
    ({"maxFPGAs": 0}, "'maxFPGAs': must be in 1..4096"),
    ({"maxSizePerFPGA": -1}, "maxSizePerFPGA"),
    ({"nodes": []}, "non-empty list"),
    ({"edges": [{"sourceId": 1, "destId": 9, "cost": 1}]}, "node id 9 does not exist"),
    ({"edges": [{"sourceId": 1, "destId": 2, "cost": 1}, {"sourceId": 2, "destId": 1, "cost": 1}]}, "cycle"),
    ({"edges": [{"sourceId": 1, "destId": 2, "cost": "x"}]}, r"edges\[0\].cost"),
    ({"colour": 1}, "'colour': unknown key"),
])
def test_dnn_partitioning_reader_refuses_bad_input_in_one_line(changes: dict, message: str) -> None:
    with pytest.raises(WorkloadError, match=message) as info:
        parse_dnn_partitioning(_tiny(**changes), path="tiny.json")
    assert "\n" not in str(info.value) and str(info.value).startswith("tiny.json")


def test_dnn_partitioning_bad_node_field_names_the_node(tmp_path: Path) -> None:
    doc = _tiny()
    doc["nodes"][1]["fpgaLatency"] = -3
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(WorkloadError, match=r"nodes\[1\].fpgaLatency"):
        load_dnn_partitioning(path)


@pytest.mark.parametrize("preset", ["gpu4", "gpu8", "hetero", "cpu_gpu"])
def test_presets_build_and_simple_placers_keep_groups_whole(preset: str) -> None:
    devices = _preset(preset)
    graph = load_compute_graph("resnet18")
    objective = bind_objective("step", graph, devices)
    for placer in (SingleDevicePlacer(), RoundRobinPlacer(), RandomPlacer()):
        result = placer.place(objective, seed=3)
        p = result.placement
        assert p.shape == (graph.num_nodes,)
        n = graph.num_nodes // 2
        assert (p[:n] == p[n:]).all()  # an op and its mirror together
        assert result.evaluations >= 1 or placer.name != "single"
    # The single fastest device is a GPU, never the 10x slower CPU.
    single = SingleDevicePlacer().place(objective).placement
    assert devices.devices[single[0]].kind != "cpu"


@pytest.mark.parametrize(("cfg", "field"), [
    ({"groups": []}, "devices.groups"),
    ({"groups": [{"kind": "gpu", "count": 0}]}, "devices.groups[0].count"),
    ({"groups": [{"kind": "gpu", "speed": -1}]}, "devices.groups[0].speed"),
    ({"groups": [{"kind": "gpu", "memory_bytes": 0}]}, "devices.groups[0].memory_bytes"),
    ({"groups": [{"kind": "gpu", "sped": 1}]}, "devices.groups[0].sped"),
    ({"groups": [{"kind": "gpu"}], "links": {"type": "torus"}}, "devices.links.type"),
    ({"groups": [{"kind": "gpu"}], "links": {"type": "full_mesh", "bandwidth_Bps": 0}}, "devices.links.bandwidth_Bps"),
    ({"groups": [{"kind": "gpu"}], "colour": 1}, "devices.colour"),
])
def test_bad_device_configs_name_the_key(cfg: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        device_set_from_config(cfg)
    assert info.value.field == field


def test_two_level_and_host_links() -> None:
    hetero = _preset("hetero")
    assert hetero.bandwidth_Bps[0, 1] == 3e11 and hetero.bandwidth_Bps[0, 4] == 2.5e10
    cpu_gpu = _preset("cpu_gpu")
    assert cpu_gpu.bandwidth_Bps[0, 1] == 2.5e10 and cpu_gpu.bandwidth_Bps[1, 2] == 3e11
    # A GPU-profiled graph runs 10x slower on the CPU; the old GPUs 2x slower.
    graph = load_compute_graph("alexnet")
    t = bind_objective("step", graph, cpu_gpu).time_s
    assert np.allclose(t[:, 0], 10 * t[:, 1])
    t = bind_objective("step", graph, hetero).time_s
    assert np.allclose(t[:, 4], 2 * t[:, 0])


def test_op_placement_on_a_ramp_block_prices_like_the_cluster_simulator() -> None:
    """One world: a placement on the servers of a RAMP block costs the same step time in the
    op placer's objective as in the cluster simulator's step model (unsplit ops, physical sizes)."""
    graph = TrainingGraph(load_graph(ROOT / "workloads/data/pipedream/resnet18/graph.txt", time_unit_s=1e-3))
    topology = RampTopology()
    servers = (0, 1, 2, 5)
    devices = ramp_block_devices(topology, servers)
    compute = ComputeGraph.from_training_graph(graph)
    objective = bind_objective("step", compute, devices)
    pg = PartitionedGraph(graph, 4, np.ones(graph.num_forward_ops, dtype=np.int64), "activation")
    comm = RampCommModel(topology, double_bandwidth_division=False, rack_index_only=False)
    rng = np.random.default_rng(0)
    for _ in range(5):
        group_device = rng.integers(0, 4, compute.num_groups)
        placement = group_device[compute.group]
        sub_server = np.asarray(servers)[placement]
        dep_time = comm.dependency_times_s(sub_server[pg.dep_src], sub_server[pg.dep_dst], pg.dep_bytes,
                                           pg.dep_group, pg.group_is_sync)
        expected = simulate_step(pg, sub_server, dep_time)
        assert objective.value(placement) == pytest.approx(expected, rel=1e-12)


def test_renamed_job_placement_checkpoints_resolve() -> None:
    from pacml.shipped import SHIPPED_DIR, resolve_checkpoint

    assert resolve_checkpoint("paper_betaA_placement", "policy.pt", "policy", "policy.checkpoint") == \
        SHIPPED_DIR / "paper_betaA_block" / "policy.pt"


def test_a_kind_the_graph_measured_uses_its_own_times() -> None:
    graph = load_compute_graph("bert24_inference")  # cpuLatency given: the CPU's speed is not applied
    t = bind_objective("step", graph, _preset("cpu_gpu")).time_s
    assert np.allclose(t[:, 0], graph.kind_time_s["cpu"])
    assert np.allclose(t[:, 1], graph.kind_time_s["accelerator"])


def test_simple_placers_put_cpu_only_nodes_on_the_cpu() -> None:
    g = parse_dnn_partitioning(_tiny(), path="tiny.json")
    objective = bind_objective("pipeline", g, DeviceSet.for_dnn_partitioning(g.meta))
    for placer in (RoundRobinPlacer(), RandomPlacer()):
        p = placer.place(objective, seed=1).placement
        assert p[1] == 0 and p[0] in (1, 2) and math.isfinite(objective.value(p))


def test_step_evaluation_reports_the_transfers_each_device_sends() -> None:
    graph = load_compute_graph("resnet18")
    objective = bind_objective("step", graph, _preset("gpu4"))
    placement = RoundRobinPlacer().place(objective).placement
    ev = objective.evaluate(placement)
    sent = sum(t1 - t0 for _, t0, t1 in ev.schedule.transfers)
    assert sent > 0 and ev.comm_s.sum() == pytest.approx(sent)
    assert objective.evaluate(np.zeros(graph.num_nodes, dtype=np.int64)).comm_s.sum() == 0.0

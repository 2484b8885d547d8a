"""Graph formats for op placement (issue 11, item 3): the format is recognised from the content,
pacml JSON version 2 keeps a computation graph whole (round trip: same fingerprint, same objective
values), dnn-partitioning files map to cluster-simulator workloads or say why not, and malformed
files (a hypothesis sample of ``benchmarks/fuzz/fuzz_graphs.py``'s dnn-partitioning mutants) give one
line naming the node or edge index and the field."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.place.devices import DeviceSet
from simulator.place.objectives import bind_objective
from tests.workloads.test_graph_fuzz import fuzz
from workloads.dnn_partitioning import parse_dnn_partitioning
from workloads.errors import WorkloadError
from workloads.graph import TrainingGraph
from workloads.json_format import (
    compute_graph_to_json,
    graph_to_json,
    load_json_graph,
    parse_compute_graph,
    write_json_graph,
)
from workloads.loaders import (
    DNN_PARTITIONING,
    PACML_JSON,
    PIPEDREAM,
    detect_graph_format,
    load_compute_graph,
    load_graph,
    shipped_placement_graphs,
)

DNN_GRAPHS = [name for name, path in shipped_placement_graphs().items() if path.suffix == ".json"]
#: A dnn-partitioning graph of four nodes: two forward, two backward, colour classes pairing them.
TINY_DNN = {
    "maxSizePerFPGA": 100.0, "maxFPGAs": 2, "maxCPUs": 1,
    "nodes": [
        {"id": 1, "supportedOnFpga": 1, "cpuLatency": 10.0, "fpgaLatency": 1.0, "isBackwardNode": 0,
         "colorClass": 7, "size": 30.0, "name": "a"},
        {"id": 2, "supportedOnFpga": 0, "cpuLatency": 20.0, "fpgaLatency": 2.0, "isBackwardNode": 0,
         "colorClass": 8, "size": 40.0, "name": "b"},
        {"id": 3, "supportedOnFpga": 1, "cpuLatency": 30.0, "fpgaLatency": 3.0, "isBackwardNode": 1,
         "colorClass": 8, "size": 40.0, "name": "b_grad"},
        {"id": 4, "supportedOnFpga": 1, "cpuLatency": 40.0, "fpgaLatency": 4.0, "isBackwardNode": 1,
         "colorClass": 7, "size": 30.0, "name": "a_grad"},
    ],
    "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5, "size": 8.0},
              {"sourceId": 3, "destId": 4, "cost": 0.25}],
}


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc, indent=1))
    return path


# ---------------------------------------------------------------- detection by content
def test_the_format_comes_from_the_content_not_the_suffix(tmp_path: Path) -> None:
    pipedream = shutil.copy(shipped_placement_graphs()["alexnet"], tmp_path / "alexnet.json")
    pacml = tmp_path / "alexnet_json.txt"
    pacml.write_text(graph_to_json(load_graph(pipedream)))
    dnn = _write(tmp_path / "tiny.graph", TINY_DNN)
    assert detect_graph_format(pipedream).format == PIPEDREAM
    assert detect_graph_format(pacml).format == PACML_JSON and detect_graph_format(pacml).version == 1
    assert detect_graph_format(dnn).format == DNN_PARTITIONING
    # The same graph whatever the file is called.
    assert load_graph(pipedream).fingerprint == load_graph(shipped_placement_graphs()["alexnet"]).fingerprint
    assert load_graph(pacml).fingerprint == load_graph(pipedream).fingerprint
    assert load_compute_graph(str(dnn)).num_nodes == 4


@pytest.mark.parametrize(("data", "what"), [
    (b"hello world\n", "text that is neither JSON nor a PipeDream profile"),
    (b'{"graph": {"nodes": []}}', "a JSON object with keys graph"),
    (b"[1, 2]", "a JSON list"),
    (b"   \n", "empty graph file"),
])
def test_a_file_in_no_known_format_lists_the_formats_tried(tmp_path: Path, data: bytes, what: str) -> None:
    path = tmp_path / "g.json"
    path.write_bytes(data)
    for load in (load_graph, load_compute_graph):
        with pytest.raises(WorkloadError) as info:
            load(path) if load is load_graph else load(str(path))
        text = str(info.value)
        assert text.startswith(f"{path}:1: {what}") and "\n" not in text
        assert "PipeDream graph.txt" in text and "pacml JSON" in text and "dnn-partitioning JSON" in text


def test_a_dnn_partitioning_split_is_named_as_such(tmp_path: Path) -> None:
    path = _write(tmp_path / "split.json", {"cpus": [], "fpgas": [{"nodes": [1]}], "maxLoad": 1.0})
    with pytest.raises(WorkloadError, match="a dnn-partitioning split"):
        load_compute_graph(str(path))


# ---------------------------------------------------------------- version 2: the round trip
@pytest.mark.parametrize("name", DNN_GRAPHS)
def test_version_2_round_trip_keeps_the_graph_and_its_objective_values(tmp_path: Path, name: str) -> None:
    graph = load_compute_graph(name)
    path = tmp_path / f"{name}.json"
    path.write_text(compute_graph_to_json(graph))
    back = load_compute_graph(str(path))
    assert back.fingerprint == graph.fingerprint
    assert back.node_names == graph.node_names and dict(back.meta) == dict(graph.meta)
    assert back.reference_kind == graph.reference_kind
    for kind in graph.kind_time_s:  # inf (not on an accelerator) included
        assert np.array_equal(back.kind_time_s[kind], graph.kind_time_s[kind])
    np.testing.assert_array_equal(back.edge_cost_s, graph.edge_cost_s)
    devices = DeviceSet.for_dnn_partitioning(graph.meta)
    rng = np.random.default_rng(0)
    placements = [np.zeros(graph.num_nodes, dtype=np.int64), np.ones(graph.num_nodes, dtype=np.int64)]
    placements += [rng.integers(0, devices.num_devices, graph.num_groups)[graph.group] for _ in range(3)]
    for objective in ("pipeline", "step", "latency"):
        a, b = bind_objective(objective, graph, devices), bind_objective(objective, back, devices)
        for p in placements:
            va, vb = a.value(p), b.value(p)
            assert va == vb or (math.isinf(va) and math.isinf(vb)), (objective, va, vb)


def test_one_accelerator_figure_survives_conversion(tmp_path: Path) -> None:
    # reference_maxload.md: bert24_training all on one accelerator, 217.813 ms per sample.
    path = tmp_path / "b.json"
    path.write_text(compute_graph_to_json(load_compute_graph("bert24_training")))
    graph = load_compute_graph(str(path))
    objective = bind_objective("pipeline", graph, DeviceSet.for_dnn_partitioning(graph.meta))
    assert objective.value(np.ones(graph.num_nodes, dtype=np.int64)) == pytest.approx(0.217813, rel=1e-9)


def test_tiny_graph_fields_by_hand(tmp_path: Path) -> None:
    graph = load_compute_graph(str(_write(tmp_path / "tiny", TINY_DNN)))
    assert graph.kind_time_s["accelerator"][1] == math.inf  # not supportedOnFpga
    assert graph.kind_time_s["cpu"].tolist() == [0.01, 0.02, 0.03, 0.04]
    assert graph.group.tolist() == [0, 1, 1, 0] and graph.is_backward.tolist() == [False, False, True, True]
    assert graph.edge_cost_s.tolist() == [0.0005, 0.00025]
    assert graph.edge_bytes[0] == 8.0 and math.isnan(graph.edge_bytes[1])
    text = compute_graph_to_json(graph)
    doc = json.loads(text)
    assert doc["version"] == 2 and doc["nodes"][1]["time"]["accelerator"] is None
    assert "bytes" not in doc["edges"][1] and doc["edges"][1]["cost"] == 0.00025
    assert parse_compute_graph(text).fingerprint == graph.fingerprint


def test_pipedream_graph_round_trips_through_version_2(tmp_path: Path) -> None:
    graph = load_compute_graph("resnet18")
    back = parse_compute_graph(compute_graph_to_json(graph), path=tmp_path / "r.json")
    assert back.fingerprint == graph.fingerprint


def test_version_1_files_load_unchanged(tmp_path: Path) -> None:
    graph = load_graph("workloads/data/pipedream/vgg16/graph.txt")
    path = write_json_graph(graph, tmp_path / "vgg16.json")
    assert load_json_graph(path).fingerprint == load_graph(path).fingerprint
    assert load_compute_graph(str(path)).fingerprint == load_compute_graph("vgg16").fingerprint


# ---------------------------------------------------------------- version 2: strict validation
def _v2_doc() -> dict:
    """The tiny graph as a version-2 document."""
    return json.loads(compute_graph_to_json(parse_dnn_partitioning(TINY_DNN, path="tiny")))


@pytest.mark.parametrize(("edit", "field", "words"), [
    (lambda d: d["nodes"][2]["time"].update(cpu=-1), "time", "nodes[2]: kind 'cpu': negative value"),
    (lambda d: d["nodes"][1]["time"].pop("cpu"), "time", "nodes[1]: must map exactly the kinds"),
    (lambda d: d["nodes"][3].update(group=9), "group", "nodes[3]: must be an integer in 0..3"),
    (lambda d: d["nodes"][0].update(backward=1), "backward", "nodes[0]: must be true or false"),
    (lambda d: d["nodes"][0].update(colour="x"), "colour", "nodes[0]: unknown key (did you mean 'colour_class'?)"),
    (lambda d: d["nodes"][2].update(id="a"), "id", "duplicate node id 'a'"),
    (lambda d: d["nodes"][0].pop("memory_bytes"), "memory_bytes", "nodes[0]: missing field"),
    (lambda d: d["nodes"][1].pop("node_id"), "node_id", "every node or none"),
    (lambda d: [n.update(group=2 * n["group"]) for n in d["nodes"]], "group", "group 1 has no node"),
    (lambda d: d["edges"][1].update(cost=float("nan")), "cost", "edges[1]: value is nan"),
    (lambda d: d["edges"][0].update(dst="zz"), "dst", "edges[0]: unknown node 'zz'"),
    (lambda d: d["edges"].append({"src": "b", "dst": "a"}), "edges", "graph has a cycle"),
    (lambda d: d.update(kinds=["cpu", "GPU!"]), "kinds", "distinct device kinds"),
    (lambda d: d.update(reference_kind="tpu"), "reference_kind", "must be one of the kinds"),
    (lambda d: d["devices"].update(max_accelerators=0), "devices.max_accelerators", "integer in 1..4096"),
    (lambda d: d["devices"].pop("max_cpus"), "devices", "exactly the keys"),
    (lambda d: d.update(backward_after_forward="yes"), "backward_after_forward", "true or false"),
    (lambda d: d.update(version=3), "version", "unsupported version 3"),
    (lambda d: d.update(nodez=[]), "nodez", "unknown key"),
])
def test_version_2_errors_name_the_node_and_field(tmp_path: Path, edit, field: str, words: str) -> None:
    doc = _v2_doc()
    edit(doc)
    path = _write(tmp_path / "g.json", doc)
    with pytest.raises(WorkloadError) as info:
        load_compute_graph(str(path))
    text = str(info.value)
    assert text.startswith(f"{path}:") and f"field '{field}'" in text and words in text and "\n" not in text
    assert info.value.line is not None and info.value.line > 0


def test_version_2_file_refused_by_the_version_1_reader_with_a_pointer(tmp_path: Path) -> None:
    path = _write(tmp_path / "g.json", _v2_doc())
    with pytest.raises(WorkloadError, match="version 2 is a computation graph"):
        load_json_graph(path)


# ---------------------------------------------------------------- dnn-partitioning as a simulator workload
def test_dnn_partitioning_training_graph_as_a_cluster_workload() -> None:
    graph = load_graph(shipped_placement_graphs()["bert24_training"])
    assert graph.num_ops == 32 and graph.time_unit_s == 1.0
    # One step on one device: forward and backward accelerator times, 217.813 ms as in the reference.
    assert TrainingGraph(graph).step_time_s == pytest.approx(0.217813, rel=1e-9)


def test_tiny_dnn_graph_maps_forward_nodes_and_class_backward_times(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(TINY_DNN))
    doc["nodes"][1]["supportedOnFpga"] = 1
    graph = load_graph(_write(tmp_path / "tiny.json", doc), time_unit_s=1e-3)
    assert graph.op_ids == ("a", "b") and graph.edges.tolist() == [[0, 1]]
    assert graph.forward_time_s.tolist() == [0.001, 0.002]
    assert graph.backward_time_s.tolist() == [0.004, 0.003]  # a_grad is in a's class, b_grad in b's
    assert graph.parameter_bytes.tolist() == [30.0, 40.0] and graph.activation_bytes.tolist() == [8.0, 0.0]


def test_unmappable_dnn_graphs_say_why(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="cannot run on the 'accelerator' kind"):
        load_graph(_write(tmp_path / "tiny.json", TINY_DNN))
    with pytest.raises(WorkloadError, match=r"24 backward node\(s\).*belong to no forward node's group"):
        load_graph(shipped_placement_graphs()["bert_l-3_training"])


# ---------------------------------------------------------------- pacml-graph
def test_pacml_graph_validate_says_the_format_and_convert_keeps_everything(tmp_path: Path, capsys) -> None:
    from workloads.graph_cli import main

    out = tmp_path / "b24.json"
    with pytest.raises(SystemExit) as code:
        main(["convert", "bert24_training", str(out)])
    assert code.value.code == 0
    assert load_compute_graph(str(out)).fingerprint == load_compute_graph("bert24_training").fingerprint
    bad = tmp_path / "bad.dat"
    bad.write_text('{"maxFPGAs": 2, "maxSizePerFPGA": 1, "nodes": [{"id": 1}], "edges": []}')
    capsys.readouterr()
    with pytest.raises(SystemExit) as code:
        main(["validate", str(out), "bert24_training", "alexnet", str(bad)])
    assert code.value.code == 2
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith(f"ok {out} (pacml JSON version 2): bert24_training, 64 nodes (32 forward")
    assert "(dnn-partitioning JSON)" in lines[1] and "(PipeDream graph.txt)" in lines[2]
    assert lines[3] == f"bad {bad} (read as dnn-partitioning JSON)"
    assert captured.err == f"pacml graph: error: {bad}:1: field 'nodes[0].cpuLatency': missing\n"
    with pytest.raises(SystemExit) as code:
        main(["convert", "--version", "1", "bert24_training", str(tmp_path / "x.json")])
    assert code.value.code == 2 and "version 1 would lose them" in capsys.readouterr().err


# ---------------------------------------------------------------- fuzz sample
FUZZ_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                         suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ_SETTINGS
@given(seed=st.integers(0, 2**32 - 1), model=st.sampled_from(["bert24_inference", "bert24_training"]))
def test_mutated_dnn_partitioning_files_meet_the_oracle(tmp_path: Path, seed: int, model: str) -> None:
    mutant = fuzz.make_mutant("dnn", random.Random(seed), model)
    path = fuzz.mutant_path(tmp_path, "dnn", seed % 1000)
    path.write_bytes(mutant.data)
    outcome = fuzz.check_file(path, mutant, "dnn")
    assert outcome.problems == (), (mutant.mutation, outcome.message)


def test_the_dnn_oracle_catches_an_accepted_invalid_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "g.dat"
    path.write_text(json.dumps({**TINY_DNN, "maxFPGAs": 0}))
    bad = fuzz.Mutant(path.read_bytes(), "bad_device_count", fuzz.INVALID)
    assert fuzz.check_file(path, bad, "dnn").status == "rejected"
    monkeypatch.setattr(fuzz, "load_compute_graph", lambda _path: None)
    assert "invalid file accepted" in fuzz.check_file(path, bad, "dnn").problems

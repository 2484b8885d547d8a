"""Graph loaders: the shipped PipeDream profiles, the JSON format, and their error messages."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import make_graph, roundtrip
from workloads.errors import WorkloadError
from workloads.graph import TrainingGraph
from workloads.json_format import load_json_graph, write_json_graph
from workloads.loaders import (
    PAPER_MODELS,
    load_graph,
    load_graph_set,
    resolve_graph_paths,
    shipped_models,
)
from workloads.pipedream import load_pipedream

# spec §2.3: (#ops fwd+bwd, #deps, JCT_seq for 50 steps, total op memory, total dep size, depth)
SPEC_GRAPHS = {
    "resnet18": (142, 159, 36668.35, 1.7259e10, 1.8733e10, 60),
    "vgg16": (82, 83, 34525.35, 3.0625e10, 2.9467e10, 80),
    "gnmt": (96, 117, 4470.80, 2.3684e9, 1.0278e9, 30),
    "squeezenet1_0": (136, 153, 38000.15, 2.4963e10, 2.7910e10, 102),
    "alexnet": (46, 47, 36061.15, 3.0462e9, 2.4222e9, 44),
}


def test_ten_graphs_are_shipped() -> None:
    assert len(shipped_models()) == 10
    assert set(PAPER_MODELS) <= set(shipped_models())
    assert (Path(resolve_graph_paths("resnet18")[0]).parents[1] / "LICENSE.txt").is_file()


@pytest.mark.parametrize("model", sorted(SPEC_GRAPHS))
def test_paper_graphs_match_spec_characterisation(model: str) -> None:
    ops, deps, jct_seq, mem, dep_bytes, depth = SPEC_GRAPHS[model]
    (graph,) = load_graph_set(model, time_unit_s=1.0)
    tg = TrainingGraph(graph)
    assert tg.num_ops == ops
    assert tg.num_edges == deps
    assert 50 * tg.step_time_s == pytest.approx(jct_seq, abs=0.005)
    assert tg.total_memory_bytes == pytest.approx(mem, rel=1e-4)
    assert tg.total_edge_bytes == pytest.approx(dep_bytes, rel=1e-4)
    assert tg.depth.max() == depth


def test_time_unit_converts_milliseconds_to_seconds() -> None:
    path = resolve_graph_paths("alexnet")[0]
    ms = load_pipedream(path)  # default: PipeDream times are milliseconds
    raw = load_pipedream(path, time_unit_s=1.0)
    assert np.allclose(ms.forward_time_s * 1e3, raw.forward_time_s)
    assert TrainingGraph(ms).step_time_s == pytest.approx(0.7212, abs=1e-3)  # 721.2 ms per step


def test_gnmt_list_activation_sizes_are_summed() -> None:
    (gnmt,) = load_graph_set("gnmt")
    i = gnmt.op_ids.index("node7")
    assert gnmt.activation_bytes[i] == 6291456.0 + 131072.0 + 131072.0


def test_mirrored_graph_structure(chain_graph: TrainingGraph) -> None:
    # forward a->b, backward b'->a', join b->b'  (spec §2.3)
    assert chain_graph.edges.tolist() == [[0, 1], [3, 2], [1, 3]]
    assert chain_graph.compute_time_s.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert chain_graph.critical_path_s == 10.0


def test_json_round_trip_preserves_everything() -> None:
    (graph,) = load_graph_set("gnmt")
    back = roundtrip(graph)
    assert back.op_ids == graph.op_ids
    assert back.edges.tolist() == graph.edges.tolist()
    assert back.loss_index == graph.loss_index
    assert np.array_equal(back.forward_time_s, graph.forward_time_s)
    assert back.fingerprint == graph.fingerprint


def test_graph_set_from_a_directory_of_mixed_formats(tmp_path: Path) -> None:
    write_json_graph(make_graph("tiny", [(1, 1, 1, 1), (2, 2, 2, 2)], [(0, 1)]), tmp_path / "a" / "tiny.json")
    src = resolve_graph_paths("alexnet")[0]
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "graph.txt").write_text(src.read_text())
    graphs = load_graph_set(tmp_path)
    assert sorted(g.name for g in graphs) == ["b", "tiny"]


def test_duplicate_graph_names_are_rejected(tmp_path: Path) -> None:
    g = make_graph("same", [(1, 1, 1, 1)], [])
    write_json_graph(g, tmp_path / "x.json")
    write_json_graph(g, tmp_path / "y.json")
    with pytest.raises(WorkloadError, match="two graphs are named 'same'"):
        load_graph_set(tmp_path)


def test_unknown_graph_name_lists_the_shipped_ones() -> None:
    with pytest.raises(WorkloadError, match="shipped: alexnet"):
        load_graph_set("resnet9000")


# ---------------------------------------------------------------- PipeDream format errors
GOOD_NODE = ("node{i} -- Conv -- forward_compute_time=1.000, backward_compute_time=2.000, "
             "activation_size=10.0, parameter_size=5.000")


def _pipedream(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "graph.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("lines", "line", "field", "message"), [
    ([GOOD_NODE.format(i=1), "node2 -- Conv -- forward_compute_time=1.0"], 2, "backward_compute_time", "missing"),
    ([GOOD_NODE.format(i=1).replace("=1.000", "=-1.000", 1)], 1, "forward_compute_time", "negative"),
    ([GOOD_NODE.format(i=1).replace("=2.000", "=nan")], 1, "backward_compute_time", "nan"),
    ([GOOD_NODE.format(i=1).replace("=10.0", "=abc")], 1, "activation_size", "not a number"),
    ([GOOD_NODE.format(i=1), "\tnode1 -- node9"], 2, "dst", "unknown node 'node9'"),
    ([GOOD_NODE.format(i=1), "this is not a graph line"], 2, None, "malformed"),
    ([GOOD_NODE.format(i=1), GOOD_NODE.format(i=1)], 2, "id", "duplicate node id"),
])
def test_pipedream_errors_name_file_line_and_field(tmp_path: Path, lines: list[str], line: int,
                                                   field: str | None, message: str) -> None:
    path = _pipedream(tmp_path, lines)
    with pytest.raises(WorkloadError) as info:
        load_pipedream(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == line
    assert err.field == field
    assert message in str(err)
    assert str(err).startswith(f"{path}:{line}: ")
    assert "\n" not in str(err)


def test_pipedream_cycle_is_reported_with_its_nodes(tmp_path: Path) -> None:
    lines = [GOOD_NODE.format(i=i) for i in (1, 2, 3)] + ["\tnode1 -- node2", "\tnode2 -- node3", "\tnode3 -- node2"]
    with pytest.raises(WorkloadError, match=r"cycle: node2 -> node3 -> node2|cycle: node3 -> node2 -> node3"):
        load_pipedream(_pipedream(tmp_path, lines))


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="cannot read"):
        load_graph(tmp_path / "nope.txt")


# ---------------------------------------------------------------- JSON format errors
def _doc() -> dict:
    return {
        "format": "pacml-graph", "version": 1, "name": "t",
        "ops": [
            {"id": "a", "forward_time_s": 1.0, "backward_time_s": 1.0, "activation_bytes": 4, "parameter_bytes": 0},
            {"id": "b", "forward_time_s": 1.0, "backward_time_s": 1.0, "activation_bytes": 4, "parameter_bytes": 0},
        ],
        "edges": [["a", "b"]],
    }


def test_minimal_json_graph_loads(write_json_graph_file) -> None:
    g = load_json_graph(write_json_graph_file(_doc()))
    assert g.num_ops == 2 and g.loss_index == 1


def _mutate(doc: dict, how: str) -> dict:
    if how == "missing_field":
        del doc["ops"][1]["forward_time_s"]
    elif how == "negative":
        doc["ops"][1]["backward_time_s"] = -2.0
    elif how == "nan":
        doc["ops"][0]["forward_time_s"] = float("nan")
    elif how == "unknown_node":
        doc["edges"].append(["b", "zz"])
    elif how == "cycle":
        doc["edges"].append(["b", "a"])
    elif how == "duplicate_id":
        doc["ops"][1]["id"] = "a"
    elif how == "version":
        doc["version"] = 7
    elif how == "no_ops":
        del doc["ops"]
    return doc


@pytest.mark.parametrize(("how", "field", "message", "marker"), [
    ("missing_field", "forward_time_s", "op 'b': missing field", '"id": "b"'),
    ("negative", "backward_time_s", "negative value -2.0", '"id": "b"'),
    ("nan", "forward_time_s", "value is nan", '"id": "a"'),
    ("unknown_node", "dst", "unknown op 'zz'", '"b"'),
    ("cycle", "edges", "cycle", '"b"'),
    ("duplicate_id", "id", "duplicate op id 'a'", '"id": "a"'),
    ("version", "version", "unsupported version 7", '"version"'),
    ("no_ops", "ops", "missing required field", "{"),
])
def test_json_errors_name_file_line_op_and_field(write_json_graph_file, how: str, field: str,
                                                 message: str, marker: str) -> None:
    text = json.dumps(_mutate(_doc(), how), indent=2)
    path = write_json_graph_file(text)
    with pytest.raises(WorkloadError) as info:
        load_json_graph(path)
    err = info.value
    assert err.path == str(path)
    assert err.field == field
    assert message in str(err)
    # The reported line is the one holding the offending op, edge or key.
    assert err.line is not None and marker in text.splitlines()[err.line - 1], str(err)
    assert str(err).startswith(f"{path}:{err.line}: field '{field}': ")
    assert "\n" not in str(err)


def test_json_duplicate_id_points_at_the_second_op(write_json_graph_file) -> None:
    text = json.dumps(_mutate(_doc(), "duplicate_id"), indent=2)
    with pytest.raises(WorkloadError) as info:
        load_json_graph(write_json_graph_file(text))
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if '"id": "a"' in line]
    assert info.value.line == lines[1]


def test_json_syntax_error_gives_line(write_json_graph_file) -> None:
    path = write_json_graph_file('{\n  "format": "pacml-graph",\n  "version": 1,,\n}')
    with pytest.raises(WorkloadError) as info:
        load_json_graph(path)
    assert info.value.line == 3
    assert "invalid JSON" in str(info.value)


def test_written_json_is_valid_and_one_op_per_line(tmp_path: Path) -> None:
    (graph,) = load_graph_set("squeezenet1_0")
    path = write_json_graph(graph, tmp_path / "sq.json")
    text = path.read_text()
    assert text.count('"id":') == graph.num_ops
    assert math.isclose(TrainingGraph(load_json_graph(path)).step_time_s, TrainingGraph(graph).step_time_s)


def test_pacml_graph_cli_converts_validates_and_reports(tmp_path: Path, capsys) -> None:
    from workloads.graph_cli import main

    out = tmp_path / "r18.json"
    with pytest.raises(SystemExit) as code:
        main(["convert", "resnet18", str(out)])
    assert code.value.code == 0 and load_json_graph(out).num_ops == 71
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "pacml-graph", "version": 1, "name": "x", "ops": [], "edges": []}')
    with pytest.raises(SystemExit) as code:
        main(["validate", str(out), str(bad)])
    assert code.value.code == 2
    captured = capsys.readouterr()
    assert f"ok {out}" in captured.out
    assert captured.err.strip() == f"pacml graph: error: {bad}:1: field 'ops': must be a non-empty list of ops"

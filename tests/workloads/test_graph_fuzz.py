"""Malformed graph files: one-line errors naming file and line, no traceback, nothing bad accepted.

A small hypothesis sample of the generators of ``benchmarks/fuzz/fuzz_graphs.py`` (which runs 2,000
files per format), the cases issue 14 found one by one, the time units of JSON graphs in the
paper scenario, and loading speed (linear, not quadratic, in the number of ops).
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import make_graph
from workloads.errors import WorkloadError
from workloads.graph import MAX_OP_TIME_S, TrainingGraph
from workloads.json_format import graph_to_json, load_json_graph, write_json_graph
from workloads.loaders import load_graph, load_graph_set, resolve_graph_paths
from workloads.pipedream import load_pipedream

ROOT = Path(__file__).resolve().parents[2]


def _load_script(name: str):
    """Import a benchmarks/ script by path, e.g. ``fuzz/fuzz_graphs`` (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{Path(name).name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses need the module registered
    spec.loader.exec_module(module)
    return module


fuzz = _load_script("fuzz/fuzz_graphs")
FUZZ_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                         suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("fmt", ["pipedream", "json"])
@FUZZ_SETTINGS
@given(seed=st.integers(0, 2**32 - 1), model=st.sampled_from(["alexnet", "gnmt", "vgg16"]))
def test_mutated_graph_files_meet_the_oracle(tmp_path: Path, fmt: str, seed: int, model: str) -> None:
    mutant = fuzz.make_mutant(fmt, random.Random(seed), model)
    path = fuzz.mutant_path(tmp_path, fmt, seed % 1000)
    path.write_bytes(mutant.data)
    outcome = fuzz.check_file(path, mutant)
    assert outcome.problems == (), (mutant.mutation, outcome.message)


def test_the_oracle_catches_a_traceback_and_an_accepted_invalid_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "g.json"
    path.write_bytes(b"\xff")
    bad = fuzz.Mutant(b"\xff", "binary_junk", fuzz.INVALID)

    def explode(_path):
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    monkeypatch.setattr(fuzz, "load_graph", explode)
    assert fuzz.check_file(path, bad).status == "traceback"
    monkeypatch.setattr(fuzz, "load_graph", lambda _path: None)
    assert "invalid file accepted" in fuzz.check_file(path, bad).problems


# ---------------------------------------------------------------- the cases of issue 14, one by one
GOOD = ("node{i} -- Conv -- forward_compute_time=1.5, backward_compute_time=2.0, "
        "activation_size=[4.0; 4.0], parameter_size=8.0")


def _pd(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "graph.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("line2", "message", "field"), [
    (GOOD.format(i=2).replace("=1.5", "=1,5"), "not a number: '1,5'", "forward_compute_time"),
    (GOOD.format(i=2).replace("[4.0; 4.0]", "[1; 2"), "unclosed list", "activation_size"),
    (GOOD.format(i=2).replace("=1.5", "=1e308"), "above the limit", "forward_compute_time"),
    (GOOD.format(i=2).replace("=1.5", "=1_5"), "not a number", "forward_compute_time"),
    (GOOD.format(i=2).replace("=8.0", "=nan"), "not a number", "parameter_size"),
    (GOOD.format(i=2) + ", parameter_size=1", "field given twice", "parameter_size"),
    (GOOD.format(i=2) + ", flops=1", "unknown field", "flops"),
    ("node" + "9" * 5000 + GOOD[7:], "bad node id", "id"),
])
def test_pipedream_bad_values_name_line_and_field(tmp_path: Path, line2: str, message: str, field: str) -> None:
    path = _pd(tmp_path, [GOOD.format(i=1), line2, "\tnode1 -- node2"])
    with pytest.raises(WorkloadError) as info:
        load_pipedream(path)
    assert str(info.value).startswith(f"{path}:2: field '{field}': "), str(info.value)
    assert message in str(info.value)


@pytest.mark.parametrize(("edges", "message", "line"), [
    (["\tnode1 -- node1"], "self-loop on node1", 3),
    (["\tnode1 -- node2", "\tnode1 -- node2"], "duplicate edge node1 -> node2 (first on line 3)", 4),
    (["\tnode1 -- node2", "\tnode2 -- node1"], "graph has a cycle: node", 4),
])
def test_pipedream_structure_errors_name_their_line(tmp_path: Path, edges: list[str], message: str,
                                                    line: int) -> None:
    path = _pd(tmp_path, [GOOD.format(i=1), GOOD.format(i=2), *edges])
    with pytest.raises(WorkloadError) as info:
        load_pipedream(path)
    assert str(info.value).startswith(f"{path}:{line}: ") and message in str(info.value), str(info.value)


@pytest.mark.parametrize(("data", "message", "line"), [
    (b"", "empty graph file", 1),
    (b"node1 -- a\n\xff\xfe", "not a UTF-8 text file", 2),
    (b"\n\x00\n", "control character U+0000", 2),
])
def test_binary_and_empty_files_are_one_line_errors(tmp_path: Path, data: bytes, message: str, line: int) -> None:
    for name in ("graph.txt", "g.json"):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(WorkloadError) as info:
            load_graph(path)
        text = str(info.value)
        assert text.startswith(f"{path}:") and "\n" not in text
        if name == "graph.txt":
            assert text.startswith(f"{path}:{line}: ") and message in text, text


def _doc() -> dict:
    return json.loads(graph_to_json(make_graph("t", [(1.0, 1.0, 4, 0), (1.0, 1.0, 4, 0)], [(0, 1)])))


def _json_error(tmp_path: Path, text: str) -> WorkloadError:
    path = tmp_path / "g.json"
    path.write_text(text)
    with pytest.raises(WorkloadError) as info:
        load_json_graph(path)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(f"{path}:"), str(info.value)
    return info.value


@pytest.mark.parametrize(("mutate", "field", "message"), [
    (lambda d: d["edges"][0].__setitem__(1, ["n1"]), "dst", "unknown op ['n1']"),
    (lambda d: d["edges"][0].__setitem__(0, {"id": "n0"}), "src", "unknown op {'id': 'n0'}"),
    (lambda d: d.__setitem__("loss_op", ["n1"]), "loss_op", "unknown op ['n1']"),
    (lambda d: d["ops"][0].__setitem__("forward_time_s", 10**400), "forward_time_s", "above the limit"),
    (lambda d: d["ops"][1].__setitem__("activation_bytes", 1e308), "activation_bytes", "above the limit"),
    (lambda d: d.__setitem__("version", True), "version", "unsupported version True"),
    (lambda d: d.__setitem__("loss", "n1"), "loss", "did you mean 'loss_op'?"),
    (lambda d: d["ops"][0].__setitem__("label", [1]), "label", "label must be a string"),
    (lambda d: d.__setitem__("time_unit_s", 0), "time_unit_s", "must be a number of seconds"),
    (lambda d: d["edges"].append(["n1", "n1"]), "edges", "self-loop"),
    (lambda d: d["edges"].append(["n0", "n1"]), "edges", "duplicate edge 'n0' -> 'n1' (also edges[0])"),
])
def test_json_bad_values_name_line_and_key(tmp_path: Path, mutate, field: str, message: str) -> None:
    doc = _doc()
    mutate(doc)
    err = _json_error(tmp_path, json.dumps(doc, indent=2))
    assert err.field == field and err.line is not None and message in str(err), str(err)


def test_json_deep_nesting_huge_literals_and_duplicate_keys(tmp_path: Path) -> None:
    text = json.dumps(_doc())
    err = _json_error(tmp_path, text.replace('"name": ', '"notes": ' + "[" * 100000 + "]" * 100000 + ', "name": '))
    assert "nested more than" in str(err) and err.line == 1
    err = _json_error(tmp_path, text.replace('"forward_time_s": 1.0', '"forward_time_s": ' + "9" * 5000, 1))
    assert "invalid JSON" in str(err) and err.line == 1
    err = _json_error(tmp_path, text.replace('{"format": ', '{"name": "x", "format": ', 1))
    assert err.field == "name" and "given twice" in str(err)


def test_cycle_points_at_the_edge_that_closes_it(tmp_path: Path) -> None:
    doc = _doc()
    doc["edges"].append(["n1", "n0"])
    text = json.dumps(doc, indent=1)
    err = _json_error(tmp_path, text)
    assert "cycle" in str(err) and '"n1"' in text.splitlines()[err.line - 1]
    assert err.line > text.splitlines().index(' "edges": [') + 3  # the second edge, not the first


def test_pacml_graph_and_pacml_sim_print_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    import subprocess

    from workloads.graph_cli import main

    bad = tmp_path / "graph.txt"
    bad.write_text(GOOD.format(i=1).replace("=1.5", "=1,5") + "\n")
    with pytest.raises(SystemExit) as code:
        main(["validate", str(bad)])
    assert code.value.code == 2
    assert capsys.readouterr().err == (f"pacml graph: error: {bad}:1: field 'forward_compute_time': "
                                       "not a number: '1,5' (fields are separated by ', ' and decimals use '.')\n")
    with pytest.raises(SystemExit) as code:
        main(["--time-unit-s", "-1", "validate", str(bad)])
    assert code.value.code == 2 and len(capsys.readouterr().err.splitlines()) == 1
    out = subprocess.run([sys.executable, "-c", "from simulator.run import main; main()", f"workload.graphs={bad}",
                          "progress=false", f"out_dir={tmp_path / 'out'}"], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"pacml sim: error: {bad}:1: field 'forward_compute_time': not a number: '1,5' "
        "(fields are separated by ', ' and decimals use '.')"]


def test_a_huge_time_over_a_tiny_quantum_does_not_overflow_the_split_rule() -> None:
    from simulator.partition import split_counts

    graph = TrainingGraph(make_graph("big", [(MAX_OP_TIME_S, 1.0, 0, 0), (0.0, 0.0, 0, 0)], [(0, 1)]))
    assert split_counts(graph, 8, 1e-310).tolist() == [8, 1]


# ---------------------------------------------------------------- time units (issue 14 item 6)
def test_json_graphs_record_their_time_unit_and_old_files_are_seconds(tmp_path: Path) -> None:
    (paper_clock,) = load_graph_set("alexnet", time_unit_s=1.0)  # profile numbers as the unit
    assert paper_clock.time_unit_s == 1e-3
    path = write_json_graph(paper_clock, tmp_path / "a.json")
    assert json.loads(path.read_text())["time_unit_s"] == 1e-3
    back = load_json_graph(path)
    assert back.time_unit_s == 1e-3 and back.fingerprint == paper_clock.fingerprint
    old = _doc()
    del old["time_unit_s"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert load_json_graph(tmp_path / "old.json").time_unit_s == 1.0


@pytest.mark.parametrize("model", ["alexnet", "gnmt", "resnet18", "squeezenet1_0", "vgg16"])
def test_a_converted_graph_is_the_same_job_as_its_profile_on_either_clock(tmp_path: Path, model: str) -> None:
    from workloads.graph_cli import main

    out = tmp_path / f"{model}.json"
    with pytest.raises(SystemExit):
        main(["convert", model, str(out)])  # seconds
    for profile_unit_s in (1e-3, 1.0):  # physical scenario, paper scenario
        (profile,) = load_graph_set(model, time_unit_s=profile_unit_s)
        converted = load_graph(out, time_unit_s=profile_unit_s)
        assert converted.fingerprint == profile.fingerprint
        assert converted.time_unit_s == profile.time_unit_s


def test_a_json_graph_in_seconds_runs_like_its_profile_in_the_paper_scenario(tmp_path: Path) -> None:
    """The units trap: a graph in seconds used to run ~1000x too short in scenario=paper."""
    from hydra import compose, initialize_config_dir

    from simulator.build import build_simulation
    from simulator.policies.heuristics import ParaMax
    from workloads.graph_cli import main

    with pytest.raises(SystemExit):
        main(["convert", "alexnet", str(tmp_path / "alexnet.json")])
    summaries = []
    for graphs in ("alexnet", str(tmp_path / "alexnet.json")):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
            cfg = compose(config_name="sim", overrides=["scenario=paper", "horizon_s=1e5", f"workload.graphs={graphs}"])
        summaries.append(build_simulation(cfg, seed=0).run(ParaMax()).summary)
    assert summaries[0]["num_jobs_arrived"] > 50
    assert summaries[0]["blocking_rate"] == summaries[1]["blocking_rate"]
    assert summaries[0]["num_jobs_completed"] == summaries[1]["num_jobs_completed"]


# ---------------------------------------------------------------- speed (issue 14 item 9)
def test_a_50000_op_json_graph_loads_in_linear_time(tmp_path: Path) -> None:
    bench = _load_script("sim/bench_graph_load")
    path = bench.write_json(tmp_path / "big.json", 50_000)
    start = time.perf_counter()
    graph = load_graph(path)
    seconds = time.perf_counter() - start
    assert graph.num_ops == 50_000 and graph.num_edges == 50_000 - 1 + len(range(0, 50_000 - 3, 4))
    # 0.3 s on an idle 2-core machine (the quadratic loader took 31 s for 4,000 ops); the
    # margin covers a busy CI box.
    assert seconds < 5.0
    assert np.all(np.diff(TrainingGraph(graph).topological_order[:10]) > 0)


def test_resolve_graph_paths_rejects_what_is_not_a_graph_set() -> None:
    with pytest.raises(WorkloadError, match="not a file, a directory or a shipped model"):
        resolve_graph_paths("no_such_model")

"""pacml-place's edges: the DP and MIP refuse objectives they do not optimise and nothing claims an
optimum that is not proven; local search and annealing never end worse than the best simple
placement; a graph folder is read as pacml-sim reads it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulator.cli import preflight
from simulator.place.cli import COMMAND, run_place
from simulator.place.coarsen import CoarsenedPlacer
from simulator.place.devices import DeviceSet
from simulator.place.dp import DPPlacer
from simulator.place.local_search import AnnealPlacer, LocalSearchPlacer, best_simple_start
from simulator.place.mip import _status
from simulator.place.objectives import bind_objective
from simulator.place.placer import SingleDevicePlacer
from workloads.dnn_partitioning import parse_dnn_partitioning
from workloads.loaders import PIPEDREAM_DIR, load_compute_graph, resolve_graph_paths


def rejected(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one stderr line of a refused pacml-place command line (exit status 2)."""
    with pytest.raises(SystemExit) as exc:
        preflight(COMMAND, list(args))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pacml place: error: ") and "Traceback" not in err, err
    return err


def chain_document(n: int = 12, *, transfer_ms: float = 3.0) -> dict[str, Any]:
    """A chain of ``n`` 1-ms layers on four accelerators and a CPU, each transfer ``transfer_ms``.

    One device takes ``n`` ms per step. A single-group move never lowers the number of cut edges
    of a split whose segments all have two or more layers, so a climb from a random split stops
    with cuts that cost more than they save: local optima worse than one device.
    """
    nodes = [{"id": i, "fpgaLatency": 1.0, "cpuLatency": 50.0, "size": 1.0, "isBackwardNode": False}
             for i in range(n)]
    edges = [{"sourceId": i, "destId": i + 1, "cost": transfer_ms} for i in range(n - 1)]
    return {"maxSizePerFPGA": 100.0, "maxFPGAs": 4, "maxCPUs": 1, "nodes": nodes, "edges": edges}


def chain(objective: str):
    graph = parse_dnn_partitioning(chain_document(), name="chain")
    return bind_objective(objective, graph, DeviceSet.for_dnn_partitioning(graph.meta))


def keys_named(node: Any, name: str) -> list[Any]:
    """Values of every key ``name`` anywhere in a JSON-like tree."""
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == name] + [x for v in node.values() for x in keys_named(v, name)]
    if isinstance(node, list):
        return [x for v in node for x in keys_named(v, name)]
    return []


# ---------------------------------------------------------------------- item 1: no optimum claimed unproven
@pytest.mark.parametrize("objective", ["step", "latency"])
@pytest.mark.parametrize("method", [["method=dp"], ["method=mip"], ["method=coarse", "method.inner=dp"]])
def test_exact_methods_refuse_objectives_they_do_not_optimise(capsys, objective: str, method: list[str]) -> None:
    err = rejected(capsys, "graph=bert24_training", f"objective={objective}", *method, "gantt=false")
    assert "field 'objective'" in err and f"not '{objective}'" in err and "pipeline" in err


def test_dp_refuses_in_the_api_too() -> None:
    graph = load_compute_graph("bert24_inference")
    objective = bind_objective("step", graph, DeviceSet.for_dnn_partitioning(graph.meta))
    with pytest.raises(Exception, match="pipeline objective only"):
        DPPlacer().place(objective)


def test_dp_says_what_its_optimum_is_of(tmp_path: Path) -> None:
    cfg = preflight(COMMAND, ["graph=bert24_inference", "objective=pipeline", "method=dp", "gantt=false"])
    info = run_place(cfg, tmp_path, {"method": "dp"})["info"]
    assert info["optimal"] is True and info["optimal_for"] == "pipeline objective, among contiguous splits"


def test_dp_without_a_proof_claims_no_optimum() -> None:
    """A PipeDream training graph's backward nodes send different gradients: no proof, no label."""
    from simulator.place.cli import _preset
    from simulator.place.devices import device_set_from_config

    objective = bind_objective("pipeline", load_compute_graph("alexnet"), device_set_from_config(_preset("gpu4")))
    info = DPPlacer().place(objective).info
    assert info["optimal"] is False and "optimal_for" not in info


@pytest.mark.parametrize("graph_name", ["bert_l-3_inference", "bert24_training"])
def test_coarse_keeps_an_inner_optimum_to_the_coarse_graph(graph_name: str) -> None:
    """Also the fuzzer's find: on bert24_training's 16 clusters, nodes send outputs of different
    sizes, so the DP's table only bounds the objective (it stopped with an AssertionError)."""
    graph = load_compute_graph(graph_name)
    objective = bind_objective("pipeline", graph, DeviceSet.for_dnn_partitioning(graph.meta))
    result = CoarsenedPlacer(inner="dp", max_groups=16).place(objective)
    info = result.info
    assert "coarse_graph_optimal" in info["inner_info"] and "coarse_graph_dp_states" not in info["inner_info"]
    assert not keys_named(info, "optimal") and not keys_named(info, "optimal_for")
    if graph_name == "bert24_training":
        assert info["inner_info"]["coarse_graph_optimal"] is False
        assert objective.value(result.placement) <= info["inner_info"]["dp_value_s"]


def test_mip_status_says_optimal_only_when_proven() -> None:
    assert _status("Optimal", True, 0.0) == "Optimal"
    assert "Optimal" not in _status("Optimal", True, 5e-4) and "not proven" in _status("Optimal", True, 5e-4)
    assert "Optimal" not in _status("Optimal", False, 0.0) and "relaxed" in _status("Optimal", False, 0.0)
    assert _status("Time limit reached", True, 0.2) == "Time limit reached"


# ---------------------------------------------------------------------- item 2: never worse than simple
@pytest.mark.parametrize("objective", ["step", "latency"])
def test_local_search_never_ends_worse_than_one_device(objective: str) -> None:
    obj = chain(objective)
    single = obj.value(SingleDevicePlacer().place(obj).placement)
    assert single == pytest.approx(12e-3)
    result = LocalSearchPlacer().place(obj, seed=0)
    info = result.info
    # Every climb from a random start stops worse than one device (what the search ended on before).
    assert len(info["restart_values_s"]) == 10 and min(info["restart_values_s"]) > single * 1.4
    assert info["start_value_s"] == pytest.approx(single) and info["start"] == "single:acc0"
    assert obj.value(result.placement) == info["value_s"] <= info["start_value_s"]
    assert info["result_from"].startswith("climb from the best simple placement")


def test_local_search_starts_from_the_best_heuristic_on_pipeline() -> None:
    """On the max-load objective PipeDream's split (8 ms: three layers and a transfer per stage)
    beats one device (12 ms) and every random climb; the search keeps it."""
    obj = chain("pipeline")
    start = best_simple_start(obj)
    assert start.name == "pipedream" and start.value_s == pytest.approx(8e-3)
    assert set(start.values_s) == {"single:cpu", "single:acc0", "single:acc1", "single:acc2", "single:acc3",
                                   "heft", "m_etf", "pipedream"}
    result = LocalSearchPlacer().place(obj, seed=0)
    assert min(result.info["restart_values_s"]) > start.value_s
    assert obj.value(result.placement) <= start.value_s


def test_local_search_budget_counts_the_start() -> None:
    obj = chain("step")
    result = LocalSearchPlacer(max_evaluations=6).place(obj, seed=0)
    assert result.evaluations <= 6 + 1  # the budget plus the final pricing
    assert result.info["value_s"] <= 12e-3 + 1e-12


@pytest.mark.parametrize("objective", ["step", "pipeline"])
def test_anneal_starts_from_the_best_simple_placement(objective: str) -> None:
    obj = chain(objective)
    start = best_simple_start(obj)
    result = AnnealPlacer(max_evaluations=200).place(obj, seed=0)
    assert result.info["start"] == start.name
    assert obj.value(result.placement) <= start.value_s


def test_pacml_place_local_search_is_no_slower_than_single(tmp_path: Path) -> None:
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(chain_document()))
    cfg = preflight(COMMAND, [f"graph={path}", "objective=step", "method=local_search", "gantt=false"])
    s = run_place(cfg, tmp_path / "run", {"method": "local_search"})
    assert s["speedup_vs_single"] >= 1.0


# ---------------------------------------------------------------------- item 3: graph folders
def test_a_pipedream_folder_is_placed_like_its_graph_txt(tmp_path: Path) -> None:
    folder = tmp_path / "resnet18"
    folder.mkdir()
    shutil.copy(PIPEDREAM_DIR / "resnet18" / "graph.txt", folder / "graph.txt")
    assert resolve_graph_paths(str(folder)) == [folder / "graph.txt"]  # pacml-sim's reading of it
    runs = {}
    for spec in (folder, folder / "graph.txt"):
        cfg = preflight(COMMAND, [f"graph={spec}", "method=round_robin", "gantt=false"])
        runs[spec] = run_place(cfg, tmp_path / spec.name, {})
    a, b = runs.values()
    assert a["graph_name"] == b["graph_name"] == "resnet18" and a["num_ops"] == b["num_ops"]
    assert a["value_s"] == b["value_s"]


def test_a_folder_of_several_graphs_is_refused_in_one_line(capsys, tmp_path: Path) -> None:
    for name in ("resnet18", "alexnet"):
        (tmp_path / name).mkdir()
        shutil.copy(PIPEDREAM_DIR / name / "graph.txt", tmp_path / name / "graph.txt")
    err = rejected(capsys, f"graph={tmp_path}", "gantt=false")
    assert "field 'graph'" in err and "2 graph files" in err and "name one" in err
    (tmp_path / "empty").mkdir()
    err = rejected(capsys, f"graph={tmp_path / 'empty'}", "gantt=false")
    assert str(tmp_path / "empty") in err and "no graph files" in err


def test_placement_keeps_groups_whole_from_any_start() -> None:
    obj = chain("step")
    p = LocalSearchPlacer(restarts=2).place(obj, seed=1).placement
    g = obj.graph
    assert all(len(np.unique(p[m])) == 1 for m in g.group_members)


# ---------------------------------------------------------------------- what the config fuzzer found
def test_a_bad_override_is_named_not_the_good_one_before_it(capsys) -> None:
    """Alone, devices.cluster=ramp32 fails (it needs devices=ramp_block), so "first override that
    fails alone" blamed it for the unparsable '=1'."""
    err = rejected(capsys, "devices=ramp_block", "devices.cluster=ramp32", "devices.servers=2", "=1")
    assert "override '=1'" in err


@pytest.mark.parametrize(("args", "field"), [
    (["objective=pipeline", "method=dp", "devices=hetero"], "field 'devices'"),
    (["method=learned", "method.checkpoint=/nonexistent/placer.pt"], "field 'method.checkpoint'"),
])
def test_methods_refuse_in_the_config_check_not_after_the_run_starts(capsys, args: list[str], field: str) -> None:
    """``pacml-place ... --cfg job`` (the config check only) accepted these; the run then refused them."""
    assert field in rejected(capsys, *args, "gantt=false")


def test_train_placer_refusals_name_the_key(capsys, tmp_path: Path) -> None:
    from pacml.placer.cli import COMMAND as PLACER
    from pacml.placer.cli import build_trainer
    from simulator.errors import ConfigError

    def refused(*args: str) -> str:
        with pytest.raises(SystemExit) as exc:
            preflight(PLACER, list(args))
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("pacml train-placer: error: "), err
        return err

    # The oneshot decoder's slots against every preset, before training (a 64-server block of
    # blocks:ramp512 would stop the run at the first task drawn on it, naming 'devices').
    for args in (["net.max_devices=2", "presets=[gpu4]"], ["presets=[blocks:ramp512]"]):
        assert "field 'net.max_devices'" in refused("net.decoder=oneshot", *args)
    assert "a list of values among 'step', 'latency', 'pipeline'" in refused("objectives=step")
    cfg = preflight(PLACER, ["presets=[file]", "corpus.real=false", "corpus.synthetic=1"])
    with pytest.raises(ConfigError, match="no task") as exc:
        build_trainer(cfg, tmp_path)
    assert exc.value.field == "presets"


def test_a_rerun_skips_a_finished_run_and_clears_a_killed_runs_temporaries(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "run"
    args = [sys.executable, "-c", "from simulator.place.cli import main; main()", "graph=alexnet", "method=heft",
            f"out_dir={out}"]
    first = subprocess.run([*args, "gantt=false"], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    written = (out / "summary.json").stat().st_mtime_ns
    for name in (".summary.json.abc.tmp", ".gantt.png.abc.tmp"):  # what a killed run leaves
        (out / name).write_bytes(b"")
    again = subprocess.run([*args, "gantt=false"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "skipping" in again.stdout + again.stderr, again.stderr
    assert (out / "summary.json").stat().st_mtime_ns == written and not (out / ".summary.json.abc.tmp").exists()
    # Another config in the same folder runs (here: the chart asked for), and its chart clears its temporary.
    chart = subprocess.run([*args, "gantt=true"], capture_output=True, text=True, timeout=300)
    assert chart.returncode == 0 and "skipping" not in chart.stdout + chart.stderr, chart.stderr
    assert (out / "gantt.png").is_file() and not list(out.glob(".*.tmp"))

"""benchmarks/pipeline/stage_placers.py (issue 45's learned-stage-placer check): the pre-registered
blocks, the pass rule, and the held-out guard."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from pacml.agent.env import compose_sim_config
from simulator.build import build_topology, build_workload

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("_stage_placers", ROOT / "benchmarks" / "pipeline" / "stage_placers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("cluster", "mixed", "per_degree"), [
    ("ramp32", False, [1, 1, 1]), ("ramp32_hetero", True, [1, 2, 2]), ("ramp32_3gen", True, [2, 3, 4])])
def test_the_blocks_are_the_pre_registered_ones(bench, cluster, mixed, per_degree) -> None:
    blocks = bench.blocks(build_topology(compose_sim_config([f"cluster={cluster}"])), mixed)
    assert [sum(k == d for k, _, _ in blocks) for d in bench.DEGREES] == per_degree
    assert all((len(set(kinds)) > 1) == mixed and len(servers) == k for k, servers, kinds in blocks)


def test_a_pair_passes_only_with_a_feasible_cut_near_the_reference(bench) -> None:
    def row(value, feasible, ref=1.0):
        cut = {"value": ref, "feasible": True, "iteration_s": 1.0}
        return {"learned": {"value": value, "feasible": feasible, "iteration_s": 1.0}, "dp": cut,
                "pipedream": cut, "dp_mixed": {**cut, "value": 2.0}, "single": {**cut, "feasible": False}}
    assert bench.score(row(1.019, True), False)["passes"]
    assert not bench.score(row(1.021, True), False)["passes"]
    assert not bench.score(row(0.9, False), False)["passes"]  # not a pipeline: fails however good
    assert bench.score(row(0.9, False), False)["passes_value_only"]
    mixed = bench.score(row(1.0 + 1e-6, True), True)
    assert mixed["reference"] == "pipedream" and not mixed["passes"] and math.isclose(mixed["ratio"], 1 + 1e-6)


def test_a_training_graph_is_refused(bench) -> None:
    graphs = build_workload(compose_sim_config(["scenario=pipeline", "workload.graphs=[alexnet]"])).training_graphs
    with pytest.raises(SystemExit, match="not held out"):
        bench.check_held_out(graphs)
